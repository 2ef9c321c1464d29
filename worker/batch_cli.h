/* batch_cli.h - batch commands of `retort`: submit, watch, results,
 * resubmit, report (argv[0] is the command name). */
#ifndef RETORT_BATCH_CLI_H
#define RETORT_BATCH_CLI_H

int batch_cli_main(int argc, char **argv);

#endif
