#include "batch_util.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "cli_config.h"

/* ---- arguments ------------------------------------------------------------ */

static const char *const config_flags[] = {"-c", "--config", "-s", "--set", "-b", "--brokers",
                                           "--log-level", "--log-format"};

static int is_config_flag(const char *a) {
    for (size_t i = 0; i < sizeof(config_flags) / sizeof(config_flags[0]); i++)
        if (!strcmp(a, config_flags[i])) return 1;
    return 0;
}

/* The option named by a ("--name", "--name=value" or the alias); *inline_value
 * points after '=' for the second form. */
static batch_opt *find_opt(batch_opt *opts, size_t nopts, const char *a, const char **inline_value) {
    *inline_value = NULL;
    for (size_t i = 0; i < nopts; i++) {
        size_t n = strlen(opts[i].name);
        if (!strcmp(a, opts[i].name) || (opts[i].alias && !strcmp(a, opts[i].alias))) return &opts[i];
        if (opts[i].takes_value && !strncmp(a, opts[i].name, n) && a[n] == '=') {
            *inline_value = a + n + 1;
            return &opts[i];
        }
    }
    return NULL;
}

int batch_util_args(const char *cmd, const char *usage, int argc, char **argv, batch_opt *opts,
                    size_t nopts, const char **pos, size_t maxpos, size_t *npos, config **cfg) {
    /* cli_config_load reads flags from index 1: keep argv[0] in front. */
    char **cargv = calloc((size_t)argc + 1, sizeof(*cargv));
    int cargc = 0, rc = BATCH_EXIT_USAGE;
    *npos = 0;
    *cfg = NULL;
    if (!cargv) {
        fprintf(stderr, "retort %s: out of memory\n", cmd);
        return BATCH_EXIT_USAGE;
    }
    cargv[cargc++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *iv;
        batch_opt *o;
        if (is_config_flag(a)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "retort %s: %s needs a value\n", cmd, a);
                goto done;
            }
            cargv[cargc++] = argv[i++];
            cargv[cargc++] = argv[i];
        } else if ((o = find_opt(opts, nopts, a, &iv))) {
            o->set = 1;
            if (!o->takes_value) continue;
            if (!iv) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "retort %s: %s needs a value\n", cmd, a);
                    goto done;
                }
                iv = argv[++i];
            }
            o->value = iv;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "retort %s: unknown option '%s'\n%s", cmd, a, usage);
            goto done;
        } else if (*npos < maxpos) {
            pos[(*npos)++] = a;
        } else {
            fprintf(stderr, "retort %s: unexpected argument '%s'\n%s", cmd, a, usage);
            goto done;
        }
    }
    rc = cli_config_load(cargc, cargv, cfg, NULL);
done:
    free(cargv);
    return rc;
}

/* ---- keys ----------------------------------------------------------------- */

const char *batch_util_key_batch(const config *cfg, const char *batch, char *buf, size_t len) {
    snprintf(buf, len, "%s:batch:{%s}", config_get(cfg, "redis.key_prefix"), batch);
    return buf;
}

const char *batch_util_key_jobs(const config *cfg, const char *batch, char *buf, size_t len) {
    snprintf(buf, len, "%s:batch:{%s}:jobs", config_get(cfg, "redis.key_prefix"), batch);
    return buf;
}

const char *batch_util_key_input(const config *cfg, const char *batch, char *buf, size_t len) {
    snprintf(buf, len, "%s:batch:{%s}:input", config_get(cfg, "redis.key_prefix"), batch);
    return buf;
}

const char *batch_util_key_job(const config *cfg, const char *job_id, char *buf, size_t len) {
    snprintf(buf, len, "%s:job:{%s}", config_get(cfg, "redis.key_prefix"), job_id);
    return buf;
}

const char *batch_util_key_history(const config *cfg, const char *job_id, char *buf, size_t len) {
    snprintf(buf, len, "%s:job:{%s}:history", config_get(cfg, "redis.key_prefix"), job_id);
    return buf;
}

/* ---- Redis ------------------------------------------------------------------ */

static int simple_command(redisContext *c, char *err, size_t errlen, const char *what,
                          const char *fmt, const char *arg) {
    redisReply *r = redisCommand(c, fmt, arg);
    int rc = 0;
    if (!r || r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s: %s", what, r ? r->str : c->errstr);
        rc = -1;
    }
    freeReplyObject(r);
    return rc;
}

redisContext *batch_util_redis(const config *cfg, char *err, size_t errlen) {
    const char *host = config_get(cfg, "redis.host");
    long long port = config_get_int(cfg, "redis.port");
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, (int)port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "redis %s:%lld: %s", host, port, c ? c->errstr : "out of memory");
        goto fail;
    }
    /* A stuck server must not hang a command forever. */
    struct timeval rw = {30, 0};
    redisSetTimeout(c, rw);
    const char *pw = config_get(cfg, "redis.password");
    if (pw && pw[0] && simple_command(c, err, errlen, "redis AUTH", "AUTH %s", pw)) goto fail;
    char db[32];
    snprintf(db, sizeof(db), "%lld", config_get_int(cfg, "redis.db"));
    if (strcmp(db, "0") && simple_command(c, err, errlen, "redis SELECT", "SELECT %s", db)) goto fail;
    return c;
fail:
    if (c) redisFree(c);
    return NULL;
}

void batch_ids_clear(batch_ids *ids) {
    for (size_t i = 0; i < ids->count; i++) free(ids->ids[i]);
    free(ids->ids);
    ids->ids = NULL;
    ids->count = 0;
}

int batch_util_read_list(redisContext *c, const char *key, batch_ids *out, char *err, size_t errlen) {
    redisReply *r = redisCommand(c, "LRANGE %s 0 -1", key);
    int rc = -1;
    out->ids = NULL;
    out->count = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis LRANGE %s: %s", key,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : r ? "unexpected reply" : c->errstr);
        goto done;
    }
    if (r->elements) {
        out->ids = calloc(r->elements, sizeof(*out->ids));
        if (!out->ids) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        out->ids[out->count] = strndup(e->type == REDIS_REPLY_STRING ? e->str : "",
                                       e->type == REDIS_REPLY_STRING ? e->len : 0);
        if (!out->ids[out->count]) {
            snprintf(err, errlen, "out of memory");
            batch_ids_clear(out);
            goto done;
        }
        out->count++;
    }
    rc = 0;
done:
    freeReplyObject(r);
    return rc;
}

/* Items per round trip: large enough to hide the latency, small enough
 * that the replies of one chunk stay a few MB. */
#define PIPE_CHUNK 512

int batch_util_pipeline(redisContext *c, size_t n, size_t per_item, batch_pipe_build build,
                        batch_pipe_reply reply, void *ud, char *err, size_t errlen) {
    redisReply **replies = calloc(per_item ? per_item : 1, sizeof(*replies));
    int rc = -1;
    size_t got = 0;
    if (!replies) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t start = 0; start < n; start += PIPE_CHUNK) {
        size_t end = start + PIPE_CHUNK < n ? start + PIPE_CHUNK : n;
        for (size_t i = start; i < end; i++) {
            if (build(c, i, ud)) {
                /* the commands appended so far are still read below, so
                 * the connection stays in step; simpler to give up. */
                snprintf(err, errlen, "redis: cannot queue a command: %s", c->err ? c->errstr : "out of memory");
                goto done;
            }
        }
        for (size_t i = start; i < end; i++) {
            for (got = 0; got < per_item; got++) {
                void *r = NULL;
                if (redisGetReply(c, &r) != REDIS_OK || !r) {
                    snprintf(err, errlen, "redis: %s", c->errstr[0] ? c->errstr : "connection lost");
                    goto done;
                }
                replies[got] = r;
            }
            if (reply(i, replies, ud, err, errlen)) goto done;
            for (size_t k = 0; k < got; k++) freeReplyObject(replies[k]);
            got = 0;
        }
    }
    rc = 0;
done:
    for (size_t k = 0; k < got; k++) freeReplyObject(replies[k]);
    free(replies);
    return rc;
}

long long batch_util_reply_ll(const redisReply *r, long long def) {
    if (!r) return def;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        long long v = strtoll(r->str, &end, 10);
        return end != r->str ? v : def;
    }
    return def;
}

/* ---- Kafka producer ------------------------------------------------------- */

struct batch_producer {
    rd_kafka_t *rk;
    size_t queued, reported;
    size_t nerr;           /* reports with an error */
    size_t *failed;        /* their indexes, as far as memory allowed */
    size_t nfailed, capfailed;
    char first_error[512];
    char last_error[512];  /* from the error callback: why brokers are down */
    long long timeout_ms;  /* message.timeout.ms in force */
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

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    batch_producer *p = opaque;
    p->reported++;
    if (!msg->err) return;
    p->nerr++;
    if (!p->first_error[0]) snprintf(p->first_error, sizeof(p->first_error), "%s", rd_kafka_err2str(msg->err));
    if (p->nfailed == p->capfailed) {
        size_t cap = p->capfailed ? p->capfailed * 2 : 64;
        size_t *f = realloc(p->failed, cap * sizeof(*f));
        if (!f) return; /* still counted through reported vs queued below */
        p->failed = f;
        p->capfailed = cap;
    }
    p->failed[p->nfailed++] = (size_t)(uintptr_t)msg->_private - 1;
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    batch_producer *p = opaque;
    snprintf(p->last_error, sizeof(p->last_error), "%s", reason);
}

/* librdkafka's own log lines would repeat every broker reconnect on the
 * terminal; the error callback keeps the last reason for the message. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    if (level <= 3) fprintf(stderr, "retort: kafka %s: %s\n", fac, buf);
}

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
        snprintf(err, errlen, "kafka: no answer from %s: %s%s%s", "the brokers", rd_kafka_err2str(e),
                 p->last_error[0] ? "; " : "", p->last_error);
        rc = -1;
    }
    if (md) rd_kafka_metadata_destroy(md);
    if (t) rd_kafka_topic_destroy(t);
    return rc;
}

int batch_producer_send(batch_producer *p, const char *topic, const char *key, const char *value,
                        size_t len, size_t index, char *err, size_t errlen) {
    for (;;) {
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

size_t batch_producer_flush(batch_producer *p, const size_t **failed, size_t *nfailed, char *err,
                            size_t errlen) {
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
