/* recent.h - a bounded memory of the attempts this worker ran itself after
 * delivering their retry jobs (retry.local): when such a retry job comes
 * back from Kafka, the worker knows it done without asking Redis.  The
 * oldest entries go first once it is full; forgetting one only costs that
 * retry job a Redis round trip, which says the same.  Single-threaded
 * (the worker's loop). */
#ifndef RETORT_RECENT_H
#define RETORT_RECENT_H

#include <stddef.h>

typedef struct recent recent;

/* A memory of at most cap entries (cap >= 1).  NULL on out of memory. */
recent *recent_new(size_t cap);
/* Accepts NULL. */
void recent_free(recent *r);

/* Remembers that attempts first..last of run `run` of job_id ran here to
 * their outcome.  job_id: borrowed, copied.  0 = ok, -1 on out of memory
 * (nothing is remembered). */
int recent_add(recent *r, const char *job_id, int run, int first, int last);

/* 1 when attempt of run `run` of job_id lies in a remembered range, else 0. */
int recent_covers(const recent *r, const char *job_id, int run, int attempt);

/* Entries held now. */
size_t recent_count(const recent *r);

#endif
