/* worker.h - one worker process: a libuv loop that consumes jobs from Kafka,
 * calls the LLM, validates, decides and produces the outcome, with the job's
 * state in Redis.  See README.md for the life of a job. */
#ifndef RETORT_WORKER_H
#define RETORT_WORKER_H

#include "config.h"

/* Runs until SIGTERM/SIGINT (then drains in-flight jobs, flushes, commits)
 * or a fatal error.  cfg: borrowed.  slot: the process's index under the
 * supervisor (0 alone); the metrics port is metrics.port + slot.  Returns
 * the process exit code. */
int worker_run(const config *cfg, const char *worker_id, int slot);

#endif
