/* webhook.h - POSTs escalation events to an HTTP endpoint, retried with
 * backoff, on the worker's loop.  The Kafka topic stays the source of truth:
 * a webhook that keeps failing is logged and given up, never blocks a job. */
#ifndef RETORT_WEBHOOK_H
#define RETORT_WEBHOOK_H

#include <uv.h>

typedef struct webhook webhook;

/* url: borrowed, copied.  NULL on error (err filled). */
webhook *webhook_new(uv_loop_t *loop, const char *url, long timeout_ms, int retries, char *err,
                     size_t errlen);
void webhook_free(webhook *wh); /* accepts NULL; drops deliveries still pending */

/* body: borrowed, copied. */
void webhook_post(webhook *wh, const char *job_id, const char *body);
size_t webhook_pending(const webhook *wh);

#endif
