/* batch_producer.h - the producer of retort submit and resubmit: every
 * kafka.* and kafka.producer.* key, idempotent, and a flush that waits for
 * the delivery report of every message, so the commands can say exactly
 * what reached the broker. */
#ifndef RETORT_BATCH_PRODUCER_H
#define RETORT_BATCH_PRODUCER_H

#include <signal.h>
#include <stddef.h>

#include "config.h"

/* message.timeout.ms is 30 s unless configured. */
typedef struct batch_producer batch_producer;

batch_producer *batch_producer_new(const config *cfg, char *err, size_t errlen);
void batch_producer_free(batch_producer *p); /* accepts NULL */
/* librdkafka counts a message's framing (at most a few dozen bytes, by
 * the message format's worst case) with its key and value against
 * message.max.bytes. */
#define BATCH_PRODUCER_MSG_OVERHEAD 64

/* The largest key + value a message of this configuration may hold: the
 * producer's message.max.bytes less the framing.  0 = ok; -1 with err
 * when the configuration is refused. */
int batch_producer_max_bytes(const config *cfg, size_t *max, char *err, size_t errlen);
/* Asks the cluster for the topic's metadata: fails fast when no broker
 * answers within timeout_ms.  0 = ok. */
int batch_producer_check(batch_producer *p, const char *topic, int timeout_ms, char *err, size_t errlen);
/* stop (may be NULL; the caller's, set by a signal handler): once it is
 * non-zero, batch_producer_send queues nothing more, and stops waiting
 * for room in the queue. */
void batch_producer_set_stop(batch_producer *p, volatile sig_atomic_t *stop);
/* Queues value (copied) with key; index identifies the message in the
 * delivery results.  Waits while the local queue is full.  0 = ok; -1
 * with err (when stopped: "interrupted"). */
int batch_producer_send(batch_producer *p, const char *topic, const char *key, const char *value,
                        size_t len, size_t index, char *err, size_t errlen);
/* A message whose delivery report was an error. */
typedef struct batch_producer_failure {
    size_t index;         /* as given to batch_producer_send */
    /* 0 when librdkafka says the message was certainly not written to
     * the topic (never sent, or refused by the broker:
     * RD_KAFKA_MSG_STATUS_NOT_PERSISTED); 1 when it may have been (sent,
     * no answer: it may reach a consumer yet). */
    int maybe_persisted;
} batch_producer_failure;

/* Waits until every queued message has a delivery report (or the
 * delivery timeout and a margin passed).  Returns the number of messages
 * not delivered (failed, or no report in time) with the first error in
 * err.  failed / nfailed (may be NULL) receive the messages whose report
 * was an error, in the order of their reports (owned by p, valid until it
 * is freed).  A message not delivered and not among them (no report in
 * time, or no memory to list it) may be in the topic. */
size_t batch_producer_flush(batch_producer *p, const batch_producer_failure **failed, size_t *nfailed,
                            char *err, size_t errlen);

#endif
