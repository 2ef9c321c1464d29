/* kafka_io.h - the worker's Kafka clients on its libuv loop: a consumer in
 * the group (manual offset store, auto commit of stored offsets) and an
 * idempotent producer.  Both librdkafka queues wake the loop through
 * rd_kafka_queue_io_event_enable; every wakeup drains the queue. */
#ifndef RETORT_KAFKA_IO_H
#define RETORT_KAFKA_IO_H

#include <librdkafka/rdkafka.h>
#include <uv.h>

#include "config.h"

typedef struct kafka_io kafka_io;

typedef struct kafka_io_callbacks {
    /* A message of the jobs topic.  Return 0 to take it, nonzero to stop
     * draining (at capacity): kafka_io holds the message and offers it
     * again on the next kafka_io_poll.  msg is valid until the callback
     * returns. */
    int (*on_message)(void *ud, const rd_kafka_message_t *msg);
    /* A produced message's delivery report; opaque is produce's. */
    void (*on_delivery)(void *ud, void *opaque, rd_kafka_resp_err_t err);
    /* Partitions are about to be revoked (or lost). */
    void (*on_revoke)(void *ud, const rd_kafka_topic_partition_list_t *parts);
    void *ud;
} kafka_io_callbacks;

typedef struct kafka_io_header {
    const char *name;
    const char *value;
} kafka_io_header;

/* slot: this process's number under a supervisor (worker.processes > 1),
 * appended to kafka.group.instance.id when set; -1: the only process. */
kafka_io *kafka_io_new(uv_loop_t *loop, const config *cfg, int slot, const kafka_io_callbacks *cbs,
                       char *err, size_t errlen);
/* Closes the consumer (commits stored offsets, leaves the group) and the
 * producer after a flush of at most timeout_ms.  Accepts NULL. */
void kafka_io_free(kafka_io *k, int timeout_ms);

/* Produces value (borrowed, copied) to topic with key (key_len bytes,
 * borrowed, copied; NULL: no key) and headers.  0 =
 * queued, the delivery report calls on_delivery(opaque); 1 = the queue
 * is full (try again soon); 2 = the message is larger than the
 * producer's message.max.bytes (it never will go: make it smaller);
 * -1 = another error (err says which). */
int kafka_io_produce(kafka_io *k, const char *topic, const char *key, size_t key_len,
                     const char *value, size_t len, const kafka_io_header *headers, int nheaders, void *opaque,
                     char *err, size_t errlen);

/* Stores offset (the next to consume) for commit. */
void kafka_io_store(kafka_io *k, int32_t partition, int64_t offset);

/* Stop / restart fetching (long stops: Redis down, shutdown); a held
 * message stays held.  Idempotent. */
void kafka_io_pause(kafka_io *k);
void kafka_io_resume(kafka_io *k);
int kafka_io_paused(const kafka_io *k);
/* The producer's message.max.bytes: what a message (value, key and
 * headers) may take at most. */
size_t kafka_io_max_message(const kafka_io *k);
/* Drains the consumer queue now (after resume, or when the worker has room
 * again for a held message). */
void kafka_io_poll(kafka_io *k);
/* 1 while a message refused by on_message waits to be offered again. */
int kafka_io_holding(const kafka_io *k);
/* Stops taking messages for good (shutdown): pauses every partition and
 * never resumes; the partitions stay this worker's until the consumer is
 * closed (the group's other members get them then). */
void kafka_io_stop_consuming(kafka_io *k);
int kafka_io_out_queue(const kafka_io *k);
int kafka_io_assigned(const kafka_io *k);
/* 0 after librdkafka reported every broker down, until traffic flows again. */
int kafka_io_ready(const kafka_io *k);
/* Messages of the assigned partitions beyond the consumer's position, from
 * the watermarks librdkafka caches (no request is made). */
int64_t kafka_io_lag(const kafka_io *k);

#endif
