/* cli_config.h - the configuration of a command: defaults < properties file
 * (-c FILE or RETORT_CONFIG) < RETORT_* environment < flags. */
#ifndef RETORT_CLI_CONFIG_H
#define RETORT_CLI_CONFIG_H

#include "config.h"

/* argv[1..argc) are flags.  Returns 0 with *out (taken) set, or 2 after
 * printing a usage/config error.  print_config may be NULL. */
int cli_config_load(int argc, char **argv, config **out, int *print_config);

#endif
