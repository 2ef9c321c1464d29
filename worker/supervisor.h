/* supervisor.h - forks N worker processes (each a consumer-group member),
 * restarts one that dies, and forwards SIGTERM/SIGINT so that every worker
 * drains before the supervisor exits. */
#ifndef RETORT_SUPERVISOR_H
#define RETORT_SUPERVISOR_H

#include "config.h"

/* Runs worker_run in n children; returns 0 when all stopped on a signal. */
int supervisor_run(const config *cfg, int n, const char *base_id);

#endif
