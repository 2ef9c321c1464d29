/* webhook.h - POSTs escalation events to an HTTP endpoint, retried with
 * backoff, on the worker's loop.  The Kafka topic stays the source of truth:
 * a webhook that keeps failing is logged and given up, never blocks a job. */
#ifndef RETORT_WEBHOOK_H
#define RETORT_WEBHOOK_H

#include <uv.h>

typedef struct webhook webhook;

typedef struct webhook_options {
    const char *url;      /* borrowed, copied */
    const char *ca_file;  /* borrowed, copied: PEM CA bundle to verify the endpoint; NULL or "": the system's */
    long timeout_ms;      /* one call */
    int retries;          /* of a failed call */
    size_t max_pending;   /* deliveries held at once (posting or waiting to post again), at least 1 */
} webhook_options;

/* NULL on error (err filled). */
webhook *webhook_new(uv_loop_t *loop, const webhook_options *opts, char *err, size_t errlen);
/* Accepts NULL; drops deliveries still pending, and says how many. */
void webhook_free(webhook *wh);
/* A stop: deliveries waiting to post again are dropped (said, with how
 * many), and from now on a call that fails is not retried, so that a
 * drain waits at most a call's timeout for the webhook.  Accepts NULL. */
void webhook_stop(webhook *wh);

/* body: borrowed, copied.  0 = held for delivery (or, after webhook_stop,
 * tried once and given up at once); -1 = not: max_pending deliveries are
 * held already (an endpoint down or slow: each is held through its
 * retries), or no memory.  Said at the 1st, 2nd, 4th... such post since a
 * call was last answered 2xx. */
int webhook_post(webhook *wh, const char *job_id, const char *body);
size_t webhook_pending(const webhook *wh);
/* Posts not held (webhook_post -1), and deliveries given up after their
 * retries, so far. */
void webhook_counts(const webhook *wh, uint64_t *not_held, uint64_t *given_up);

#endif
