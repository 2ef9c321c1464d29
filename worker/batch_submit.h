/* batch_submit.h - `retort submit` (a JSONL file of jobs into a batch) and
 * `retort resubmit` (the batch's escalated jobs once more).  argv[0] is the
 * command name; the result is the process exit code (batch_util.h). */
#ifndef RETORT_BATCH_SUBMIT_H
#define RETORT_BATCH_SUBMIT_H

int batch_submit_main(int argc, char **argv);
int batch_resubmit_main(int argc, char **argv);

#endif
