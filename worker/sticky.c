#include "sticky.h"

#include <unistd.h>

#include "util.h"

void sticky_init(sticky *s, int64_t window_us) {
    s->until_us = 0;
    s->part = -1;
    s->seed = (uint32_t)getpid() * 2654435761u ^ (uint32_t)util_mono_us();
    s->window_us = window_us;
}

int32_t sticky_pick(sticky *s, int64_t now_us, int32_t cnt,
                    int (*available)(const void *ctx, int32_t p), const void *ctx) {
    if (cnt <= 0) return -1;
    int32_t part = __atomic_load_n(&s->part, __ATOMIC_RELAXED);
    if (part >= 0 && part < cnt && now_us < __atomic_load_n(&s->until_us, __ATOMIC_RELAXED) &&
        available(ctx, part))
        return part;
    uint32_t start = part >= 0 ? (uint32_t)part + 1 : s->seed;
    for (int32_t i = 0; i < cnt; i++) {
        int32_t p = (int32_t)((start + (uint32_t)i) % (uint32_t)cnt);
        if (!available(ctx, p)) continue;
        __atomic_store_n(&s->part, p, __ATOMIC_RELAXED);
        __atomic_store_n(&s->until_us, now_us + s->window_us, __ATOMIC_RELAXED);
        return p;
    }
    return -1;
}

static int partition_available(const void *ctx, int32_t p) {
    return rd_kafka_topic_partition_available(ctx, p);
}

int32_t sticky_partitioner(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                           int32_t cnt, void *rkt_opaque, void *msg_opaque) {
    int32_t p = sticky_pick(rkt_opaque, (int64_t)util_mono_us(), cnt, partition_available, rkt);
    return p >= 0 ? p
                  : rd_kafka_msg_partitioner_consistent_random(rkt, key, keylen, cnt, rkt_opaque,
                                                               msg_opaque);
}
