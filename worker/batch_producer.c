#include "batch_producer.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct batch_producer {
    rd_kafka_t *rk;
    size_t queued, reported;
    size_t nerr;           /* reports with an error */
    batch_producer_failure *failed;  /* those reports, as far as memory allowed */
    size_t nfailed, capfailed;
    char first_error[512];
    char last_error[512];  /* from the error callback: why brokers are down */
    long long timeout_ms;  /* message.timeout.ms in force */
    volatile sig_atomic_t *stop;  /* see batch_producer_set_stop */
};

typedef struct conf_walk {
    rd_kafka_conf_t *conf;
    char *err;
    size_t errlen;
    int failed;
} conf_walk;

/* kafka.X and kafka.producer.X go to the producer; kafka.consumer.X does not. */
static void conf_walk_key(const char *key, const char *value, void *ud) {
    conf_walk *w = ud;
    char errstr[512];
    if (w->failed || !strncmp(key, "consumer.", 9)) return;
    if (!strncmp(key, "producer.", 9)) key += 9;
    /* consumer-only properties shared through kafka.*: not for a producer */
    if (!strcmp(key, "group.id")) return;
    if (rd_kafka_conf_set(w->conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        snprintf(w->err, w->errlen, "config key 'kafka.%s': %s", key, errstr);
        w->failed = 1;
    }
}

int batch_producer_max_bytes(const config *cfg, size_t *max, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char value[64];
    size_t vlen = sizeof(value);
    if (!conf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    conf_walk w = {conf, err, errlen, 0};
    config_foreach_prefix(cfg, "kafka.", conf_walk_key, &w);
    long long n = 1000000; /* librdkafka's default */
    if (!w.failed && rd_kafka_conf_get(conf, "message.max.bytes", value, &vlen) == RD_KAFKA_CONF_OK)
        n = strtoll(value, NULL, 10);
    rd_kafka_conf_destroy(conf);
    if (w.failed) return -1;
    *max = n > BATCH_PRODUCER_MSG_OVERHEAD ? (size_t)(n - BATCH_PRODUCER_MSG_OVERHEAD) : 0;
    return 0;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    batch_producer *p = opaque;
    p->reported++;
    if (!msg->err) return;
    p->nerr++;
    if (!p->first_error[0]) snprintf(p->first_error, sizeof(p->first_error), "%s", rd_kafka_err2str(msg->err));
    if (p->nfailed == p->capfailed) {
        size_t cap = p->capfailed ? p->capfailed * 2 : 64;
        batch_producer_failure *f = realloc(p->failed, cap * sizeof(*f));
        if (!f) return; /* still counted in nerr; unlisted, it may be in the topic */
        p->failed = f;
        p->capfailed = cap;
    }
    /* Only the status tells a message the broker never wrote from one
     * that may be in the topic (a request sent, its answer lost): the
     * error code alone does not (a timeout is either). */
    p->failed[p->nfailed++] = (batch_producer_failure){
        (size_t)(uintptr_t)msg->_private - 1, rd_kafka_message_status(msg) != RD_KAFKA_MSG_STATUS_NOT_PERSISTED};
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    batch_producer *p = opaque;
    snprintf(p->last_error, sizeof(p->last_error), "%s", reason);
}

/* librdkafka's own log lines would repeat every broker reconnect on the
 * terminal; the error callback keeps the last reason for our message. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {}

batch_producer *batch_producer_new(const config *cfg, char *err, size_t errlen) {
    batch_producer *p = calloc(1, sizeof(*p));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char errstr[512], value[64];
    size_t vlen = sizeof(value);
    if (!p || !conf) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    rd_kafka_conf_set(conf, "enable.idempotence", "true", NULL, 0);
    rd_kafka_conf_set(conf, "linger.ms", "20", NULL, 0);
    /* A command line tool should not wait librdkafka's default 5 minutes
     * for a broker that is down; a configured value wins. */
    rd_kafka_conf_set(conf, "message.timeout.ms", "30000", NULL, 0);
    conf_walk w = {conf, err, errlen, 0};
    config_foreach_prefix(cfg, "kafka.", conf_walk_key, &w);
    if (w.failed) goto fail;
    p->timeout_ms = 30000;
    if (rd_kafka_conf_get(conf, "message.timeout.ms", value, &vlen) == RD_KAFKA_CONF_OK)
        p->timeout_ms = strtoll(value, NULL, 10);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, p);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!p->rk) {
        snprintf(err, errlen, "kafka producer: %s", errstr);
        goto fail;
    }
    return p;
fail:
    if (conf) rd_kafka_conf_destroy(conf);
    free(p);
    return NULL;
}

void batch_producer_free(batch_producer *p) {
    if (!p) return;
    if (p->rk) rd_kafka_destroy(p->rk);
    free(p->failed);
    free(p);
}

int batch_producer_check(batch_producer *p, const char *topic, int timeout_ms, char *err, size_t errlen) {
    rd_kafka_topic_t *t = rd_kafka_topic_new(p->rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, t, &md, timeout_ms);
    int rc = 0;
    if (e) {
        rd_kafka_poll(p->rk, 0); /* serves the error callback: why */
        snprintf(err, errlen, "kafka: no answer from the brokers: %s%s%s", rd_kafka_err2str(e),
                 p->last_error[0] ? "; " : "", p->last_error);
        rc = -1;
    }
    if (md) rd_kafka_metadata_destroy(md);
    if (t) rd_kafka_topic_destroy(t);
    return rc;
}

void batch_producer_set_stop(batch_producer *p, volatile sig_atomic_t *stop) { p->stop = stop; }

int batch_producer_send(batch_producer *p, const char *topic, const char *key, const char *value,
                        size_t len, size_t index, char *err, size_t errlen) {
    for (;;) {
        /* checked while waiting too: with a slow broker the queue stays
         * full, and a Ctrl-C must not wait for the whole input to go */
        if (p->stop && *p->stop) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
            RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)(index + 1)), RD_KAFKA_V_END);
        if (!e) {
            p->queued++;
            rd_kafka_poll(p->rk, 0);
            return 0;
        }
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            snprintf(err, errlen, "produce to %s: %s", topic, rd_kafka_err2str(e));
            return -1;
        }
        rd_kafka_poll(p->rk, 100); /* serve delivery reports: room frees up */
    }
}

size_t batch_producer_flush(batch_producer *p, const batch_producer_failure **failed, size_t *nfailed,
                            char *err, size_t errlen) {
    /* Every message gets its report by message.timeout.ms; the margin
     * covers the last in-flight request. */
    long long left = p->timeout_ms + 10000;
    while (p->reported < p->queued && left > 0) {
        rd_kafka_flush(p->rk, 500);
        rd_kafka_poll(p->rk, 0);
        left -= 500;
    }
    size_t missing = p->queued - p->reported;
    size_t bad = p->nerr + missing;
    if (failed) *failed = p->failed;
    if (nfailed) *nfailed = p->nfailed;
    if (bad) {
        snprintf(err, errlen, "%s%s%s", p->first_error[0] ? p->first_error : "no delivery report in time",
                 p->last_error[0] ? "; last broker error: " : "", p->last_error);
    }
    return bad;
}
