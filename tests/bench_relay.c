/* bench_relay.c - the Kafka floor of `make bench`: consume each message of
 * the jobs topic and produce it again to another topic, with the worker's
 * client settings (consumer group, manual offset store after delivery,
 * idempotent lz4 producer with linger 5 ms, the 7 CloudEvents headers, the
 * outcome topics' partitioner: sticky with a 5 ms window, or by key, as
 * topics.outcome_partitioning) and nothing else: no LLM call, no Redis,
 * no JSON, no validation.
 *
 * Usage:
 *   bench-relay --brokers LIST --count N [--in TOPIC] [--out TOPIC]
 *               [--group ID] [--timeout-s S]
 *   bench-relay --brokers LIST --produce FILE [--out TOPIC] [--rate R]
 *   relay mode options emulating the worker's flow control:
 *               [--max-inflight M] [--hold-ms T] [--flow pause|nopoll]
 *               [--fetch-wait-ms MS] [--partitioning sticky|key]
 *
 * Relay mode runs until N messages were consumed and their copies delivered
 * (or the timeout passes) and prints one JSON line: messages, elapsed_s
 * (first message consumed to last delivery), jobs_per_s, cpu_us_per_msg
 * (this process, all threads, from getrusage over the same span).
 *
 * With --hold-ms each message is held T ms before its copy is produced (a
 * stand-in for the LLM call) and at most M messages are in flight (consumed,
 * copy not yet delivered).  --flow pause does what worker/kafka_io.c does at
 * the cap: seek the partition back to the message, pause every assigned
 * partition, resume them when M*3/4 are left; --flow nopoll just stops
 * calling rd_kafka_consumer_poll at the cap and leaves the messages in
 * librdkafka's local queue.  Comparing both shows what the flow control
 * itself costs, without the worker.
 *
 * Produce mode is the benchmark's job feeder: FILE holds records
 * KEY 0x1f VALUE 0x1e (kcat -K/-D style); each is produced to --out at R
 * messages per second (0: as fast as possible).  kcat -P buffers its stdin,
 * so it cannot pace; here each message's timestamp is taken when it is
 * handed to the producer, which is the job's submission time.  Prints one
 * JSON line: produced, failed, elapsed_s.
 */
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sticky.h"

typedef struct relay {
    rd_kafka_t *consumer, *producer;
    const char *in, *out;
    long consumed, delivered, failed;
    long inflight;
} relay;

/* A consumed message waiting for its hold time to pass. */
typedef struct held {
    rd_kafka_message_t *m;
    double due;
} held;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Delivery report: the copy is on the broker, so the input offset may be
 * stored (as the worker does once an outcome is delivered). */
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    relay *r = opaque;
    rd_kafka_topic_partition_list_t *l = msg->_private;
    (void)rk;
    if (msg->err) {
        r->failed++;
    } else {
        r->delivered++;
        if (l) rd_kafka_offsets_store(r->consumer, l);
    }
    r->inflight--;
    if (l) rd_kafka_topic_partition_list_destroy(l);
}

static int set(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char errstr[256];
    if (rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "bench-relay: %s=%s: %s\n", k, v, errstr);
        return -1;
    }
    return 0;
}

static int relay_one(relay *r, const rd_kafka_message_t *m) {
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(7);
    char id[64], subject[64];
    snprintf(id, sizeof(id), "relay-%d-%lld:1:final", m->partition, (long long)m->offset);
    snprintf(subject, sizeof(subject), "relay-%d-%lld", m->partition, (long long)m->offset);
    rd_kafka_header_add(hdrs, "ce_specversion", -1, "1.0", -1);
    rd_kafka_header_add(hdrs, "ce_id", -1, id, -1);
    rd_kafka_header_add(hdrs, "ce_type", -1, "retort.job.final", -1);
    rd_kafka_header_add(hdrs, "ce_source", -1, "/retort/bench-relay", -1);
    rd_kafka_header_add(hdrs, "ce_time", -1, "2026-01-01T00:00:00.000Z", -1);
    rd_kafka_header_add(hdrs, "ce_subject", -1, subject, -1);
    rd_kafka_header_add(hdrs, "content-type", -1, "application/json", -1);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, r->in, m->partition)->offset = m->offset + 1;
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            r->producer, RD_KAFKA_V_TOPIC(r->out), RD_KAFKA_V_KEY(m->key, m->key_len),
            RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END);
        if (!e) return 0;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "bench-relay: produce: %s\n", rd_kafka_err2str(e));
            rd_kafka_headers_destroy(hdrs);
            rd_kafka_topic_partition_list_destroy(l);
            return -1;
        }
        rd_kafka_poll(r->producer, 10);
    }
}

static void produce_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    relay *r = opaque;
    (void)rk;
    if (msg->err) r->failed++;
    else r->delivered++;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    if (!f) return NULL;
    do {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* Produce mode: paced submission of the records of a file. */
static int produce_file(const char *brokers, const char *topic, const char *path, double rate) {
    relay r = {0};
    char errstr[512];
    size_t len = 0;
    int rc = 1;
    char *data = read_file(path, &len);
    if (!data) {
        fprintf(stderr, "bench-relay: cannot read %s\n", path);
        return 1;
    }
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    if (set(pc, "bootstrap.servers", brokers) || set(pc, "linger.ms", rate > 0 ? "0" : "5") ||
        set(pc, "queue.buffering.max.messages", "1000000")) {
        rd_kafka_conf_destroy(pc);
        free(data);
        return 1;
    }
    rd_kafka_conf_set_dr_msg_cb(pc, produce_dr_cb);
    rd_kafka_conf_set_opaque(pc, &r);
    r.producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr));
    if (!r.producer) {
        fprintf(stderr, "bench-relay: producer: %s\n", errstr);
        rd_kafka_conf_destroy(pc);
        free(data);
        return 1;
    }
    double t0 = now_s();
    long n = 0;
    size_t pos = 0;
    while (pos < len && !g_stop) {
        char *end = memchr(data + pos, 0x1e, len - pos);
        size_t rec_len = end ? (size_t)(end - (data + pos)) : len - pos;
        char *rec = data + pos;
        pos += rec_len + 1;
        char *sep = memchr(rec, 0x1f, rec_len);
        if (!rec_len || !sep) continue;
        size_t key_len = (size_t)(sep - rec);
        if (rate > 0) {
            /* Sleep until the message is due rather than spin: at a few
             * thousand a second a spin took most of a core from the
             * stack being measured (2 cores here). */
            double due = t0 + (double)n / rate;
            for (;;) {
                double wait = due - now_s();
                if (wait <= 0) break;
                if (wait >= 0.001) {
                    rd_kafka_poll(r.producer, 1);
                } else {
                    struct timespec ts = {0, (long)(wait * 1e9)};
                    nanosleep(&ts, NULL);
                }
            }
        }
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                r.producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(rec, key_len),
                RD_KAFKA_V_VALUE(sep + 1, rec_len - key_len - 1),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
            if (!e) break;
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "bench-relay: produce: %s\n", rd_kafka_err2str(e));
                goto out;
            }
            rd_kafka_poll(r.producer, 10);
        }
        n++;
        rd_kafka_poll(r.producer, 0);
    }
    rd_kafka_flush(r.producer, 60000);
    rc = r.failed || r.delivered != n ? 1 : 0;
out:
    printf("{\"produced\": %ld, \"delivered\": %ld, \"failed\": %ld, \"elapsed_s\": %.3f}\n",
           n, r.delivered, r.failed, now_s() - t0);
    fflush(stdout);
    rd_kafka_destroy(r.producer);
    free(data);
    return rc;
}

int main(int argc, char **argv) {
    relay r = {0};
    const char *produce = NULL, *flow = "pause";
    double rate = 0, hold_ms = 0;
    long max_inflight = 0, pauses = 0;
    held *ring = NULL;
    size_t ring_cap = 0, ring_head = 0, ring_n = 0;
    int paused = 0;
    const char *brokers = NULL, *group = "bench-relay", *fetch_wait = "100", *partitioning = "sticky";
    long count = 0, timeout_s = 300;
    char errstr[512];
    int rc = 1;
    r.in = "retort.jobs";
    r.out = "retort.final";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--brokers") && has) brokers = argv[++i];
        else if (!strcmp(a, "--count") && has) count = atol(argv[++i]);
        else if (!strcmp(a, "--in") && has) r.in = argv[++i];
        else if (!strcmp(a, "--out") && has) r.out = argv[++i];
        else if (!strcmp(a, "--group") && has) group = argv[++i];
        else if (!strcmp(a, "--timeout-s") && has) timeout_s = atol(argv[++i]);
        else if (!strcmp(a, "--produce") && has) produce = argv[++i];
        else if (!strcmp(a, "--rate") && has) rate = atof(argv[++i]);
        else if (!strcmp(a, "--max-inflight") && has) max_inflight = atol(argv[++i]);
        else if (!strcmp(a, "--hold-ms") && has) hold_ms = atof(argv[++i]);
        else if (!strcmp(a, "--flow") && has) flow = argv[++i];
        else if (!strcmp(a, "--fetch-wait-ms") && has) fetch_wait = argv[++i];
        else if (!strcmp(a, "--partitioning") && has) partitioning = argv[++i];
        else {
            fprintf(stderr, "usage: bench-relay --brokers LIST --count N [--in TOPIC] [--out TOPIC] "
                            "[--group ID] [--timeout-s S]\n"
                            "                   [--max-inflight M] [--hold-ms T] [--flow pause|nopoll]\n"
                            "                   [--fetch-wait-ms MS] [--partitioning sticky|key]\n"
                            "       bench-relay --brokers LIST --produce FILE [--out TOPIC] [--rate R]\n");
            return 2;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (brokers && produce) return produce_file(brokers, r.out, produce, rate);
    if (!brokers || count <= 0) {
        fprintf(stderr, "bench-relay: --brokers and --count are required\n");
        return 2;
    }
    int nopoll = !strcmp(flow, "nopoll");
    if (!nopoll && strcmp(flow, "pause")) {
        fprintf(stderr, "bench-relay: --flow is pause or nopoll\n");
        return 2;
    }
    ring_cap = (size_t)(max_inflight > 0 ? max_inflight : count) + 1;
    ring = calloc(ring_cap, sizeof(*ring));
    if (!ring) return 1;

    /* The worker's consumer settings (kafka_io.c). */
    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    if (set(cc, "bootstrap.servers", brokers) || set(cc, "group.id", group) ||
        set(cc, "enable.auto.offset.store", "false") || set(cc, "enable.auto.commit", "true") ||
        set(cc, "auto.commit.interval.ms", "1000") || set(cc, "auto.offset.reset", "earliest") ||
        set(cc, "session.timeout.ms", "10000") || set(cc, "heartbeat.interval.ms", "1000") ||
        set(cc, "queued.max.messages.kbytes", "16384") || set(cc, "fetch.wait.max.ms", fetch_wait)) {
        rd_kafka_conf_destroy(cc);
        return 1;
    }
    /* The worker's producer settings. */
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    if (set(pc, "bootstrap.servers", brokers) || set(pc, "enable.idempotence", "true") ||
        set(pc, "linger.ms", "5") || set(pc, "compression.type", "lz4") ||
        set(pc, "message.max.bytes", "1000000")) {
        rd_kafka_conf_destroy(cc);
        rd_kafka_conf_destroy(pc);
        return 1;
    }
    rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
    rd_kafka_conf_set_opaque(pc, &r);
    static sticky outcome_sticky;
    if (!strcmp(partitioning, "sticky")) {
        sticky_init(&outcome_sticky, 5000); /* the linger */
        rd_kafka_topic_conf_t *tc = rd_kafka_conf_get_default_topic_conf(pc);
        if (!tc) {
            tc = rd_kafka_topic_conf_new();
            rd_kafka_conf_set_default_topic_conf(pc, tc);
        }
        rd_kafka_topic_conf_set_partitioner_cb(tc, sticky_partitioner);
        rd_kafka_topic_conf_set_opaque(tc, &outcome_sticky);
    }

    r.consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr));
    if (!r.consumer) {
        fprintf(stderr, "bench-relay: consumer: %s\n", errstr);
        rd_kafka_conf_destroy(cc);
        rd_kafka_conf_destroy(pc);
        return 1;
    }
    r.producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr));
    if (!r.producer) {
        fprintf(stderr, "bench-relay: producer: %s\n", errstr);
        rd_kafka_conf_destroy(pc);
        goto out;
    }
    rd_kafka_poll_set_consumer(r.consumer);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, r.in, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(r.consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) {
        fprintf(stderr, "bench-relay: subscribe: %s\n", rd_kafka_err2str(e));
        goto out;
    }

    double t0 = 0, c0 = 0, deadline = now_s() + (double)timeout_s;
    while (!g_stop && r.delivered + r.failed < count && now_s() < deadline) {
        double now = now_s();
        /* Held messages whose time has come are relayed. */
        while (ring_n && ring[ring_head].due <= now) {
            rd_kafka_message_t *hm = ring[ring_head].m;
            if (relay_one(&r, hm)) r.inflight--;
            rd_kafka_message_destroy(hm);
            ring_head = (ring_head + 1) % ring_cap;
            ring_n--;
        }
        if (paused && r.inflight <= max_inflight * 3 / 4) {
            rd_kafka_topic_partition_list_t *as = NULL;
            if (!rd_kafka_assignment(r.consumer, &as) && as) {
                rd_kafka_resume_partitions(r.consumer, as);
                rd_kafka_topic_partition_list_destroy(as);
            }
            paused = 0;
        }
        int full = max_inflight > 0 && r.inflight >= max_inflight;
        rd_kafka_message_t *m = NULL;
        if (r.consumed < count && !(nopoll && full))
            m = rd_kafka_consumer_poll(r.consumer, paused || ring_n ? 0 : 1);
        if (m) {
            if (!m->err && r.consumed < count) {
                if (!r.consumed) {
                    t0 = now_s();
                    c0 = cpu_s();
                }
                if (full) {
                    /* worker/kafka_io.c at the cap: rewind to this
                     * message and pause everything until M*3/4. */
                    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
                    rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(m->rkt), m->partition)->offset =
                        m->offset;
                    rd_kafka_topic_partition_list_t *as = NULL;
                    if (!paused && !rd_kafka_assignment(r.consumer, &as) && as) {
                        rd_kafka_pause_partitions(r.consumer, as);
                        rd_kafka_topic_partition_list_destroy(as);
                        paused = 1;
                        pauses++;
                    }
                    rd_kafka_seek_partitions(r.consumer, l, -1);
                    rd_kafka_topic_partition_list_destroy(l);
                } else if (hold_ms > 0) {
                    size_t slot = (ring_head + ring_n) % ring_cap;
                    ring[slot].m = m;
                    ring[slot].due = now_s() + hold_ms / 1000.0;
                    ring_n++;
                    r.inflight++;
                    r.consumed++;
                    m = NULL;   /* owned by the ring now */
                } else {
                    r.inflight++;
                    if (relay_one(&r, m) == 0) r.consumed++;
                    else r.inflight--;
                }
                if (max_inflight > 0 && r.inflight >= max_inflight && !nopoll && !paused) {
                    rd_kafka_topic_partition_list_t *as = NULL;
                    if (!rd_kafka_assignment(r.consumer, &as) && as) {
                        rd_kafka_pause_partitions(r.consumer, as);
                        rd_kafka_topic_partition_list_destroy(as);
                        paused = 1;
                        pauses++;
                    }
                }
            }
            if (m) rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(r.producer, (full || paused || r.consumed >= count) ? 1 : 0);
    }
    while (rd_kafka_outq_len(r.producer) > 0 && now_s() < deadline) rd_kafka_poll(r.producer, 5);
    double el = now_s() - t0, cpu = cpu_s() - c0;
    printf("{\"messages\": %ld, \"delivered\": %ld, \"failed\": %ld, \"elapsed_s\": %.3f, "
           "\"jobs_per_s\": %.1f, \"cpu_us_per_msg\": %.1f, \"flow\": \"%s\", \"max_inflight\": %ld, "
           "\"hold_ms\": %.0f, \"pauses\": %ld}\n",
           r.consumed, r.delivered, r.failed, el, el > 0 ? (double)r.delivered / el : 0.0,
           r.delivered ? cpu * 1e6 / (double)r.delivered : 0.0, flow, max_inflight, hold_ms, pauses);
    fflush(stdout);
    rc = r.delivered == count ? 0 : 1;
out:
    while (ring_n) {
        rd_kafka_message_destroy(ring[ring_head].m);
        ring_head = (ring_head + 1) % ring_cap;
        ring_n--;
    }
    free(ring);
    if (r.consumer) {
        rd_kafka_consumer_close(r.consumer);
        rd_kafka_destroy(r.consumer);
    }
    if (r.producer) {
        rd_kafka_flush(r.producer, 5000);
        rd_kafka_destroy(r.producer);
    }
    return rc;
}
