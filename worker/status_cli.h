/* status_cli.h - `retort status JOB_ID [options]`: prints a job's state and
 * attempt history from Redis as JSON.  Exit 0 found, 1 unknown job, 2 error. */
#ifndef RETORT_STATUS_CLI_H
#define RETORT_STATUS_CLI_H

#include "config.h"

int status_cli_main(int argc, char **argv);

#endif
