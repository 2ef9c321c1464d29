/* sticky.h - sticky partitioning: messages go to one partition for a
 * window of time, then to the next one, round robin.  A Kafka producer
 * sends one produce request per partition, so messages spread over P
 * partitions cost up to P requests every linger window, each with a
 * message or two; sticky, they cost one.  The worker uses it for its
 * outcome events (worker/kafka_io.c), the bench's relay floor likewise. */
#ifndef RETORT_STICKY_H
#define RETORT_STICKY_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

typedef struct sticky {
    int64_t until_us;  /* end of the current window (monotonic us) */
    int32_t part;      /* the current partition; -1 before the first */
    uint32_t seed;     /* where the first window starts (per process) */
    int64_t window_us; /* the window's length */
} sticky;

/* A state for windows of window_us, starting at a partition that depends
 * on the process and the time, so that the processes of a pool do not all
 * fill the same partition at once. */
void sticky_init(sticky *s, int64_t window_us);

/* The partition for a message sent at now_us among cnt: the current one
 * while its window lasts and available(ctx, p) says it can take messages
 * (a Kafka partition: has a leader); otherwise the next available one
 * after it, which starts a new window.  -1 if none is available (s is
 * left as it was).  May run on several threads at once (librdkafka calls
 * a partitioner from its own threads too): s is read and written with
 * relaxed atomics, and a race costs one early switch, nothing more. */
int32_t sticky_pick(sticky *s, int64_t now_us, int32_t cnt,
                    int (*available)(const void *ctx, int32_t p), const void *ctx);

/* A librdkafka partitioner (rd_kafka_topic_conf_set_partitioner_cb) with
 * a sticky state as the topic's opaque (rd_kafka_topic_conf_set_opaque;
 * borrowed: it must outlive the topic handle):
 * sticky_pick over the partitions that have a leader, at the time of the
 * call; if none has, librdkafka's consistent_random, whose partition then
 * waits for one. */
int32_t sticky_partitioner(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                           int32_t cnt, void *rkt_opaque, void *msg_opaque);

#endif
