/* batch_report.h - `retort report BATCH`: success rate, attempts histogram,
 * violation codes and paths, escalation reasons, failure patterns, tokens
 * and cost, read from the batch's job histories in Redis.  argv[0] is the
 * command name; the result is the process exit code (batch_util.h). */
#ifndef RETORT_BATCH_REPORT_H
#define RETORT_BATCH_REPORT_H

int batch_report_main(int argc, char **argv);

#endif
