#include "kafka_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "sticky.h"

/* librdkafka doubles its reconnect backoff from 100 ms up to 10 s by
 * default, so a worker could come back to a restarted broker up to 10 s
 * after it was up, and as long again after a short outage as the outage
 * itself: past the group's session timeout (10 s here), a rebalance that
 * abandons every job in flight.  1 s, the Java client's default, keeps
 * the lag under a heartbeat or so; a down broker costs a refused connect
 * a second.  kafka.reconnect.backoff.max.ms overrides it. */
#define KAFKA_IO_RECONNECT_MAX_MS "1000"

struct kafka_io {
    uv_loop_t *loop;
    rd_kafka_t *consumer;
    rd_kafka_t *producer;
    rd_kafka_queue_t *cq;       /* consumer queue (main queue forwarded) */
    rd_kafka_queue_t *pq;       /* producer main queue (delivery reports) */
    rd_kafka_topic_t *jobs_topic;
    char *jobs;
    int cpipe[2], ppipe[2];
    uv_poll_t cpoll, ppoll;
    kafka_io_callbacks cbs;
    rd_kafka_topic_partition_list_t *assignment;
    int paused;
    int stopped;
    int draining;
    int handles_open;
    int brokers_down;
    /* Messages taken from the queue but not accepted yet, oldest first:
     * the one the worker refused when full, and any a keepalive poll
     * returned meanwhile. */
    rd_kafka_message_t **held;
    size_t held_n, held_cap;
    /* A consumer that does not poll for max.poll.interval.ms leaves the
     * group, and the loop polls only when the queue wakes it.  A timer
     * polls when nothing else did for a third of the interval: an idle
     * worker just drains; one that holds a message (full for long: an LLM
     * outage) or is paused (Redis down) first pauses the partitions, so
     * the poll keeps the membership and fetches nothing.  Until then, the
     * timer serves the queue once a second (serve_once): rebalances. */
    uv_timer_t keepalive;
    uint64_t last_poll_ms;
    uint64_t keepalive_ms;
    size_t max_message; /* the producer's message.max.bytes */
    int hold_paused;            /* partitions paused by the keepalive */
    /* The group's rebalance protocol, as learnt at the last assignment:
     * while the consumer closes, asking librdkafka (an op request to the
     * group thread, like rd_kafka_assignment()) from the revoke callback
     * can block for good (librdkafka #4041), or return NULL. */
    int cooperative;
    int closing;
    /* The outcome topics' handles, each with its sticky partitioner's
     * state as opaque (topics.outcome_partitioning = sticky); unused
     * entries have no handle. */
    struct {
        rd_kafka_topic_t *rkt;
        sticky sticky;
    } outcome[3];
};

static void drop_held(kafka_io *k, const rd_kafka_topic_partition_list_t *parts);

/* Topic handles for the outcome topics, with the sticky partitioner;
 * the producer's other topics (the jobs topic) keep its partitioner. */
static int open_outcome_topics(kafka_io *k, const config *cfg, char *err, size_t errlen) {
    if (strcmp(config_get(cfg, "topics.outcome_partitioning"), "sticky")) return 0;
    const char *names[3] = {config_get(cfg, "topics.final"), config_get(cfg, "topics.escalations"),
                            config_get(cfg, "topics.dlq")};
    /* One window per linger: each partition gets one batch, then the
     * next one fills.  (librdkafka's own sticky partitioner, for messages
     * without a key, defaults to twice the linger; with 24 partitions at
     * a worker's pace that measured slower than one: 155-164 against
     * 120-122 us of CPU a job in d_retry30's latency phases.) */
    int own_window = config_get(cfg, "kafka.producer.sticky.partitioning.linger.ms") ||
                     config_get(cfg, "kafka.sticky.partitioning.linger.ms");
    char val[32];
    size_t val_len = sizeof(val);
    double window_ms = 5;
    if (rd_kafka_conf_get(rd_kafka_conf(k->producer),
                          own_window ? "sticky.partitioning.linger.ms" : "linger.ms", val,
                          &val_len) == RD_KAFKA_CONF_OK)
        window_ms = atof(val);
    for (int i = 0; i < 3; i++) {
        int dup = !strcmp(names[i], k->jobs);
        for (int j = 0; j < i; j++) dup |= !strcmp(names[i], names[j]);
        if (dup) continue;
        sticky *s = &k->outcome[i].sticky;
        sticky_init(s, (int64_t)(window_ms * 1000));
        rd_kafka_topic_conf_t *tconf = rd_kafka_default_topic_conf_dup(k->producer);
        if (tconf) {
            rd_kafka_topic_conf_set_partitioner_cb(tconf, sticky_partitioner);
            rd_kafka_topic_conf_set_opaque(tconf, s);
            k->outcome[i].rkt = rd_kafka_topic_new(k->producer, names[i], tconf); /* takes tconf */
        }
        if (!k->outcome[i].rkt) {
            snprintf(err, errlen, "kafka topic %s: %s", names[i],
                     tconf ? rd_kafka_err2str(rd_kafka_last_error()) : "out of memory");
            return -1;
        }
    }
    return 0;
}

typedef struct conf_ctx {
    rd_kafka_conf_t *conf;
    const char *only;   /* "consumer." or "producer." sub-prefix to accept */
    const char *skip;   /* the other one */
    const char *const *foreign; /* properties of the other client type */
    char *err;
    size_t errlen;
    int failed;
} conf_ctx;

/* Properties of one client type only: a shared kafka.KEY of the other
 * type is not passed on, or librdkafka would warn at every start that it
 * ignores it (kafka.group.id on the producer, say). */
static const char *const consumer_only[] = {
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "auto.offset.reset", "enable.auto.commit",
    "auto.commit.interval.ms", "enable.auto.offset.store", "isolation.level", "fetch.wait.max.ms",
    "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "queued.min.messages",
    "queued.max.messages.kbytes", "check.crcs", "enable.partition.eof", NULL};
static const char *const producer_only[] = {
    "linger.ms", "queue.buffering.max.ms", "batch.num.messages", "batch.size", "compression.type",
    "compression.codec", "acks", "request.required.acks", "enable.idempotence", "message.timeout.ms",
    "delivery.timeout.ms", "queue.buffering.max.messages", "queue.buffering.max.kbytes", "retries",
    "message.send.max.retries", "retry.backoff.ms", "transactional.id", "partitioner",
    "sticky.partitioning.linger.ms", NULL};

static int listed(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return 1;
    return 0;
}

/* Properties the worker's guarantees rest on.  The consumer's: offsets
 * are stored only when every message below is done, and commits carry just
 * those; automatic storing would commit messages still in flight (lost at
 * a crash), and no commits brought every message again at each restart.
 * The producer's: an outcome counts as delivered at its delivery report,
 * and its message's offset is stored then; with acks below all the report
 * comes before the brokers hold the outcome (with 0, before any has it),
 * and a broker lost then lost the outcome of a committed job. */
#define WHY_OFFSETS "the worker stores each offset once every message below it is done, and commits only those"
#define WHY_ACKS "an outcome counts as delivered, and its job's offset is committed, at its delivery report"
static const struct {
    const char *client, *key, *must, *alt, *why;
} conf_fixed[] = {{"consumer.", "enable.auto.offset.store", "false", NULL, WHY_OFFSETS},
                  {"consumer.", "enable.auto.commit", "true", NULL, WHY_OFFSETS},
                  {"producer.", "acks", "all", "-1", WHY_ACKS},
                  {"producer.", "request.required.acks", "all", "-1", WHY_ACKS}};

static void conf_apply(const char *key, const char *value, void *ud) {
    conf_ctx *cc = ud;
    if (cc->failed) return;
    if (!strncmp(key, cc->skip, strlen(cc->skip))) return;
    if (!strncmp(key, cc->only, strlen(cc->only))) key += strlen(cc->only);
    else if (listed(cc->foreign, key)) return;
    for (size_t i = 0; i < sizeof(conf_fixed) / sizeof(conf_fixed[0]); i++) {
        if (strcmp(cc->only, conf_fixed[i].client) || strcmp(key, conf_fixed[i].key) ||
            !strcasecmp(value, conf_fixed[i].must) || (conf_fixed[i].alt && !strcasecmp(value, conf_fixed[i].alt)))
            continue;
        snprintf(cc->err, cc->errlen, "config key 'kafka.%s': must stay %s (%s)", key, conf_fixed[i].must,
                 conf_fixed[i].why);
        cc->failed = 1;
        return;
    }
    char errstr[512];
    if (rd_kafka_conf_set(cc->conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        snprintf(cc->err, cc->errlen, "config key 'kafka.%s': %s", key, errstr);
        cc->failed = 1;
    }
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    if (level <= 3) log_error(NULL, 0, "kafka %s: %s", fac, buf);
    else if (level <= 5) log_warn(NULL, 0, "kafka %s: %s", fac, buf);
    else log_debug(NULL, 0, "kafka %s: %s", fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    kafka_io *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) k->brokers_down = 1;
    /* librdkafka retries by itself; only fatal errors end the process. */
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof(buf));
        log_error(NULL, 0, "kafka fatal error: %s", buf);
        exit(3);
    }
    log_warn(NULL, 0, "kafka: %s", reason);
}

/* The consumer's statistics (every few seconds): while "all brokers
 * down" stands, a broker that is up again ends it.  Nothing else says so
 * when no message is produced and no rebalance comes (a short outage of
 * an idle worker), and /readyz stayed "kafka down" for good.  Read only
 * then; the internal and logical brokers (source "internal", "logical")
 * say nothing of the cluster. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque) {
    kafka_io *k = opaque;
    if (!k->brokers_down) return 0;
    cJSON *doc = cJSON_ParseWithLength(json, json_len);
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(doc, "brokers")) {
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
        const cJSON *source = cJSON_GetObjectItemCaseSensitive(b, "source");
        if (cJSON_IsString(state) && !strcmp(state->valuestring, "UP") && cJSON_IsString(source) &&
            (!strcmp(source->valuestring, "learned") || !strcmp(source->valuestring, "configured"))) {
            k->brokers_down = 0;
            log_info(NULL, 0, "kafka: broker %s is up again", b->string);
            break;
        }
    }
    cJSON_Delete(doc);
    return 0;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    kafka_io *k = opaque;
    if (!msg->err) k->brokers_down = 0;
    k->cbs.on_delivery(k->cbs.ud, msg->_private, msg->err);
}

/* An assignment librdkafka refused (its state, a conflict) leaves
 * partitions unfetched or fetched twice: said, never silent.  Takes error. */
static void assign_result(rd_kafka_error_t *error, rd_kafka_resp_err_t err, const char *what) {
    if (error) {
        log_error(NULL, 0, "kafka %s failed: %s", what, rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else if (err) {
        log_error(NULL, 0, "kafka %s failed: %s", what, rd_kafka_err2str(err));
    }
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
    kafka_io *k = opaque;
    k->brokers_down = 0;
    if (!k->closing) {
        const char *proto = rd_kafka_rebalance_protocol(rk);
        if (proto) k->cooperative = !strcmp(proto, "COOPERATIVE");
    }
    int cooperative = k->cooperative;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_info(NULL, 0, "assigned %d partition(s)", parts->cnt);
        if (cooperative) assign_result(rd_kafka_incremental_assign(rk, parts), 0, "incremental assign");
        else assign_result(NULL, rd_kafka_assign(rk, parts), "assign");
        /* Both ways, explicitly: librdkafka (2.0) keeps a partition's
         * pause across a revoke and a later assign, and kafka_io_resume
         * resumes only what is assigned then.  A partition revoked while
         * paused (Redis down) and assigned back after the resume would
         * otherwise never be fetched again. */
        if (k->paused || k->hold_paused) rd_kafka_pause_partitions(rk, parts);
        else rd_kafka_resume_partitions(rk, parts);
    } else {
        log_info(NULL, 0, "revoked %d partition(s)%s", parts->cnt,
                 rd_kafka_assignment_lost(rk) ? " (lost)" : "");
        drop_held(k, parts);
        if (k->cbs.on_revoke) k->cbs.on_revoke(k->cbs.ud, parts);
        if (cooperative) assign_result(rd_kafka_incremental_unassign(rk, parts), 0, "incremental unassign");
        else assign_result(NULL, rd_kafka_assign(rk, NULL), "unassign");
    }
    if (k->assignment) rd_kafka_topic_partition_list_destroy(k->assignment);
    k->assignment = NULL;
    if (!k->closing) rd_kafka_assignment(rk, &k->assignment);
}

static void drain_pipe(int fd) {
    char buf[256];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

static int in_list(const rd_kafka_topic_partition_list_t *parts, const rd_kafka_message_t *msg) {
    for (int i = 0; i < parts->cnt; i++)
        if (parts->elems[i].partition == msg->partition &&
            !strcmp(parts->elems[i].topic, rd_kafka_topic_name(msg->rkt)))
            return 1;
    return 0;
}

/* Forgets the held messages of parts (revoked), or all of them (parts
 * NULL: the consumer closes): their offsets were never stored, so
 * whoever owns the partition next receives them again. */
static void drop_held(kafka_io *k, const rd_kafka_topic_partition_list_t *parts) {
    size_t kept = 0;
    for (size_t i = 0; i < k->held_n; i++) {
        if (!parts || in_list(parts, k->held[i])) rd_kafka_message_destroy(k->held[i]);
        else k->held[kept++] = k->held[i];
    }
    k->held_n = kept;
}

/* Appends (front = 0) or prepends (front = 1) a held message.  0 = ok. */
static int hold(kafka_io *k, rd_kafka_message_t *msg, int front) {
    if (k->held_n == k->held_cap) {
        size_t cap = k->held_cap ? k->held_cap * 2 : 4;
        rd_kafka_message_t **p = realloc(k->held, cap * sizeof(*p));
        if (!p) return -1;
        k->held = p;
        k->held_cap = cap;
    }
    if (front) {
        memmove(k->held + 1, k->held, k->held_n * sizeof(*k->held));
        k->held[0] = msg;
    } else {
        k->held[k->held_n] = msg;
    }
    k->held_n++;
    return 0;
}

/* Out of memory holding msg.  Dropped, it would be lost for good: the
 * consumer's position is past it, and the later messages of its partition,
 * done, would commit past it.  A restart fetches it again from the last
 * commit, which is below it. */
static void hold_failed(kafka_io *k, rd_kafka_message_t *msg) {
    log_error(NULL, 0, "out of memory holding a message of %s[%d]@%lld; exiting", k->jobs, msg->partition,
              (long long)msg->offset);
    exit(3);
}

static rd_kafka_message_t *unhold(kafka_io *k) {
    if (!k->held_n) return NULL;
    rd_kafka_message_t *msg = k->held[0];
    memmove(k->held, k->held + 1, (k->held_n - 1) * sizeof(*k->held));
    k->held_n--;
    return msg;
}

/* A consumer error from the queue.  A fatal one (a static member fenced
 * by another with its group.instance.id) comes to a group member this
 * way, not to error_cb: logged as a warning and dropped, it left a
 * process that never fetched again and still answered /readyz "ok". */
static void consumer_error(kafka_io *k, rd_kafka_message_t *msg) {
    char buf[512];
    rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(k->consumer, buf, sizeof(buf));
    if (fatal || msg->err == RD_KAFKA_RESP_ERR__FATAL) {
        log_error(NULL, 0, "kafka fatal error: %s", fatal ? buf : rd_kafka_message_errstr(msg));
        exit(3);
    }
    if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
        log_warn(NULL, 0, "consumer: %s", rd_kafka_message_errstr(msg));
}

static rd_kafka_message_t *consumer_poll(kafka_io *k) {
    k->last_poll_ms = uv_now(k->loop);
    return rd_kafka_consumer_poll(k->consumer, 0);
}

void kafka_io_poll(kafka_io *k) {
    if (k->draining) return; /* no re-entry from a callback */
    k->draining = 1;
    for (;;) {
        rd_kafka_message_t *msg = unhold(k);
        if (!msg) msg = consumer_poll(k);
        if (!msg) break;
        if (msg->err) {
            consumer_error(k, msg);
            rd_kafka_message_destroy(msg);
            continue;
        }
        if (k->stopped) {
            rd_kafka_message_destroy(msg);
            continue;
        }
        if (k->cbs.on_message(k->cbs.ud, msg)) {
            /* Full: keep this message and stop draining.  Pausing the
             * partitions instead would throw away librdkafka's prefetched
             * messages and cost a fetch round trip on every resume; the
             * queue stays bounded by queued.max.messages.kbytes. */
            if (hold(k, msg, 1)) hold_failed(k, msg);
            break;
        }
        rd_kafka_message_destroy(msg);
    }
    if (!k->held_n && k->hold_paused) {
        /* Room again after a long hold: fetch again. */
        k->hold_paused = 0;
        if (!k->paused && !k->stopped && k->assignment && k->assignment->cnt)
            rd_kafka_resume_partitions(k->consumer, k->assignment);
    }
    k->draining = 0;
}

int kafka_io_holding(const kafka_io *k) { return k->held_n > 0; }

/* While full (or paused), the queue is served once a second all the same.
 * librdkafka queues a rebalance (and a consumer error) behind the messages
 * the worker does not take, and wakes the loop only when the queue was
 * empty: a rebalance waited for a job slot to free, which in an LLM outage
 * or with slow calls and few slots took as long as the keepalive, and the
 * whole group stood still meanwhile.  One poll serves what is ahead of
 * the first message (librdkafka drops the messages of the partitions it
 * pauses for a rebalance) and holds that message: one a second at most. */
#define KAFKA_IO_SERVE_MS 1000

/* A message polled while full: held behind the others, or dropped (an
 * error, or the worker stopped). */
static void hold_polled(kafka_io *k, rd_kafka_message_t *msg) {
    if (msg->err || k->stopped) {
        if (msg->err) consumer_error(k, msg);
        rd_kafka_message_destroy(msg);
    } else if (hold(k, msg, 0)) {
        hold_failed(k, msg);
    }
}

static void serve_once(kafka_io *k) {
    k->draining = 1;
    /* not a poll for last_poll_ms: full that long, the keepalive still
     * pauses the fetch, or the held messages would grow by one a second
     * for as long as the worker stays full */
    rd_kafka_message_t *msg = rd_kafka_consumer_poll(k->consumer, 0);
    if (msg) hold_polled(k, msg);
    k->draining = 0;
}

static void keepalive_cb(uv_timer_t *t) {
    kafka_io *k = t->data;
    if (k->draining) return;
    uint64_t idle = uv_now(k->loop) - k->last_poll_ms;
    if (idle < k->keepalive_ms) {
        if ((k->held_n || k->paused) && idle >= KAFKA_IO_SERVE_MS) serve_once(k);
        return;
    }
    if (!k->held_n && !k->paused) {
        /* Idle: nothing arrived, so nothing woke the loop to poll. */
        kafka_io_poll(k);
        return;
    }
    if (!k->paused && !k->hold_paused) {
        log_info(NULL, 0, "full for %llu ms: pausing fetch while waiting",
                 (unsigned long long)(uv_now(k->loop) - k->last_poll_ms));
        k->hold_paused = 1;
        if (k->assignment && k->assignment->cnt) rd_kafka_pause_partitions(k->consumer, k->assignment);
    }
    /* Paused partitions deliver nothing; whatever still comes (a message
     * that was already on its way) waits behind the held ones. */
    k->draining = 1;
    rd_kafka_message_t *msg;
    while ((msg = consumer_poll(k))) hold_polled(k, msg);
    k->draining = 0;
}

static void consumer_wakeup(uv_poll_t *h, int status, int events) {
    kafka_io *k = h->data;
    drain_pipe(k->cpipe[0]);
    kafka_io_poll(k);
}

static void producer_wakeup(uv_poll_t *h, int status, int events) {
    kafka_io *k = h->data;
    drain_pipe(k->ppipe[0]);
    while (rd_kafka_poll(k->producer, 0) > 0) {
    }
}

static int make_pipe(int fds[2]) {
    if (pipe(fds)) return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

kafka_io *kafka_io_new(uv_loop_t *loop, const config *cfg, int slot, const kafka_io_callbacks *cbs,
                       char *err, size_t errlen) {
    kafka_io *k = calloc(1, sizeof(*k));
    rd_kafka_conf_t *cconf = NULL, *pconf = NULL;
    char errstr[512];
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    k->loop = loop;
    k->cbs = *cbs;
    k->cpipe[0] = k->cpipe[1] = k->ppipe[0] = k->ppipe[1] = -1;
    if (!(k->jobs = strdup(config_get(cfg, "topics.jobs")))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }

    /* Consumer: offsets are stored by the worker only when every message
     * below is done, and auto-commit commits what is stored. */
    cconf = rd_kafka_conf_new();
    rd_kafka_conf_set(cconf, "enable.auto.offset.store", "false", NULL, 0);
    rd_kafka_conf_set(cconf, "enable.auto.commit", "true", NULL, 0);
    rd_kafka_conf_set(cconf, "auto.commit.interval.ms", "1000", NULL, 0);
    rd_kafka_conf_set(cconf, "auto.offset.reset", "earliest", NULL, 0);
    rd_kafka_conf_set(cconf, "session.timeout.ms", "10000", NULL, 0);
    rd_kafka_conf_set(cconf, "heartbeat.interval.ms", "1000", NULL, 0);
    rd_kafka_conf_set(cconf, "queued.max.messages.kbytes", "16384", NULL, 0);
    /* Retry jobs loop back through the topic: a long fetch wait would add
     * to every retry's latency. */
    rd_kafka_conf_set(cconf, "fetch.wait.max.ms", "100", NULL, 0);
    rd_kafka_conf_set(cconf, "reconnect.backoff.max.ms", KAFKA_IO_RECONNECT_MAX_MS, NULL, 0);
    conf_ctx cc = {cconf, "consumer.", "producer.", producer_only, err, errlen, 0};
    config_foreach_prefix(cfg, "kafka.", conf_apply, &cc);
    if (cc.failed) goto fail;
    /* Static membership: one instance id per process.  The processes of
     * a supervisor share their config, and members of one id fence each
     * other (the fenced one's fatal error ends it, the supervisor starts
     * it again, and it fences the other: no job done). */
    char gid[256];
    size_t gid_len = sizeof(gid);
    rd_kafka_conf_res_t gres = slot >= 0 ? rd_kafka_conf_get(cconf, "group.instance.id", gid, &gid_len)
                                         : RD_KAFKA_CONF_UNKNOWN;
    if (gres == RD_KAFKA_CONF_INVALID || (gres == RD_KAFKA_CONF_OK && (gid_len > sizeof(gid) || strlen(gid) > 249))) {
        /* longer than the buffer: cut to it, ids that differ past it were
         * one (Kafka takes 249 characters at most anyway) */
        snprintf(err, errlen, "config key 'kafka.group.instance.id': longer than 249 characters");
        goto fail;
    }
    if (gres == RD_KAFKA_CONF_OK && gid[0]) {
        char slotted[300];
        snprintf(slotted, sizeof(slotted), "%s-%d", gid, slot);
        if (rd_kafka_conf_set(cconf, "group.instance.id", slotted, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "config key 'kafka.group.instance.id': %s", errstr);
            goto fail;
        }
        log_info(NULL, 0, "static group membership as %s", slotted);
    }
    char si[32];
    size_t si_len = sizeof(si);
    if (rd_kafka_conf_get(cconf, "statistics.interval.ms", si, &si_len) == RD_KAFKA_CONF_OK && !strcmp(si, "0"))
        rd_kafka_conf_set(cconf, "statistics.interval.ms", "3000", NULL, 0);
    rd_kafka_conf_set_stats_cb(cconf, stats_cb);
    rd_kafka_conf_set_log_cb(cconf, log_cb);
    rd_kafka_conf_set_error_cb(cconf, error_cb);
    rd_kafka_conf_set_rebalance_cb(cconf, rebalance_cb);
    rd_kafka_conf_set_opaque(cconf, k);
    char mpi[32];
    size_t mpi_len = sizeof(mpi);
    long max_poll_ms = 300000;
    if (rd_kafka_conf_get(cconf, "max.poll.interval.ms", mpi, &mpi_len) == RD_KAFKA_CONF_OK)
        max_poll_ms = atol(mpi);
    /* A third of the interval: the keepalive poll comes well before it. */
    k->keepalive_ms = max_poll_ms / 3 > 500 ? (uint64_t)max_poll_ms / 3 : 500;

    pconf = rd_kafka_conf_new();
    rd_kafka_conf_set(pconf, "enable.idempotence", "true", NULL, 0);
    rd_kafka_conf_set(pconf, "linger.ms", "5", NULL, 0);
    rd_kafka_conf_set(pconf, "compression.type", "lz4", NULL, 0);
    rd_kafka_conf_set(pconf, "message.max.bytes", "1000000", NULL, 0);
    rd_kafka_conf_set(pconf, "reconnect.backoff.max.ms", KAFKA_IO_RECONNECT_MAX_MS, NULL, 0);
    conf_ctx pc = {pconf, "producer.", "consumer.", consumer_only, err, errlen, 0};
    config_foreach_prefix(cfg, "kafka.", conf_apply, &pc);
    if (pc.failed) goto fail;
    rd_kafka_conf_set_log_cb(pconf, log_cb);
    rd_kafka_conf_set_error_cb(pconf, error_cb);
    rd_kafka_conf_set_dr_msg_cb(pconf, dr_cb);
    rd_kafka_conf_set_opaque(pconf, k);
    char mmb[32];
    size_t mmb_len = sizeof(mmb);
    k->max_message = 1000000;
    if (rd_kafka_conf_get(pconf, "message.max.bytes", mmb, &mmb_len) == RD_KAFKA_CONF_OK && atol(mmb) > 0)
        k->max_message = (size_t)atol(mmb);

    k->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cconf, errstr, sizeof(errstr));
    if (!k->consumer) {
        snprintf(err, errlen, "kafka consumer: %s", errstr);
        goto fail;
    }
    cconf = NULL;
    k->producer = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, errstr, sizeof(errstr));
    if (!k->producer) {
        snprintf(err, errlen, "kafka producer: %s", errstr);
        goto fail;
    }
    pconf = NULL;
    if (open_outcome_topics(k, cfg, err, errlen)) goto fail;
    rd_kafka_poll_set_consumer(k->consumer);
    k->cq = rd_kafka_queue_get_consumer(k->consumer);
    k->pq = rd_kafka_queue_get_main(k->producer);
    if (make_pipe(k->cpipe) || make_pipe(k->ppipe)) {
        snprintf(err, errlen, "pipe: out of descriptors");
        goto fail;
    }
    rd_kafka_queue_io_event_enable(k->cq, k->cpipe[1], "1", 1);
    rd_kafka_queue_io_event_enable(k->pq, k->ppipe[1], "1", 1);
    uv_poll_init(loop, &k->cpoll, k->cpipe[0]);
    uv_poll_init(loop, &k->ppoll, k->ppipe[0]);
    uv_timer_init(loop, &k->keepalive);
    k->handles_open = 3;
    k->cpoll.data = k->ppoll.data = k->keepalive.data = k;
    uv_poll_start(&k->cpoll, UV_READABLE, consumer_wakeup);
    uv_poll_start(&k->ppoll, UV_READABLE, producer_wakeup);
    k->last_poll_ms = uv_now(loop);
    uint64_t tick = k->keepalive_ms / 4 > 250 ? k->keepalive_ms / 4 : 250;
    if (tick > KAFKA_IO_SERVE_MS) tick = KAFKA_IO_SERVE_MS;
    uv_timer_start(&k->keepalive, keepalive_cb, tick, tick);

    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, k->jobs, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) {
        snprintf(err, errlen, "subscribe %s: %s", k->jobs, rd_kafka_err2str(e));
        goto fail;
    }
    return k;
fail:
    if (cconf) rd_kafka_conf_destroy(cconf);
    if (pconf) rd_kafka_conf_destroy(pconf);
    kafka_io_free(k, 0);
    return NULL;
}

static void poll_close_cb(uv_handle_t *h) {
    kafka_io *k = h->data;
    if (--k->handles_open == 0) {
        free(k->held);
        free(k);
    }
}

void kafka_io_free(kafka_io *k, int timeout_ms) {
    if (!k) return;
    /* The producer first: the delivery reports that come in its flush
     * (after a drain that timed out) store their jobs' offsets, which the
     * consumer's close then commits.  Closed before, it committed without
     * them, and the next worker produced those events again. */
    if (k->producer) {
        rd_kafka_flush(k->producer, timeout_ms);
        while (rd_kafka_poll(k->producer, 0) > 0) {
        }
    }
    if (k->consumer) {
        drop_held(k, NULL);
        /* Close commits the stored offsets and leaves the group; it serves
         * the rebalance callback itself. */
        k->closing = 1;
        rd_kafka_consumer_close(k->consumer);
    }
    if (k->cq) {
        rd_kafka_queue_io_event_enable(k->cq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->cq);
    }
    if (k->pq) {
        rd_kafka_queue_io_event_enable(k->pq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->pq);
    }
    if (k->assignment) rd_kafka_topic_partition_list_destroy(k->assignment);
    if (k->consumer) rd_kafka_destroy(k->consumer);
    for (int i = 0; i < 3; i++)
        if (k->outcome[i].rkt) rd_kafka_topic_destroy(k->outcome[i].rkt);
    if (k->producer) rd_kafka_destroy(k->producer);
    for (int i = 0; i < 2; i++) {
        if (k->cpipe[i] >= 0) close(k->cpipe[i]);
        if (k->ppipe[i] >= 0) close(k->ppipe[i]);
    }
    free(k->jobs);
    k->consumer = k->producer = NULL;
    /* The struct goes when the loop has closed both poll handles. */
    if (k->handles_open) {
        uv_poll_stop(&k->cpoll);
        uv_close((uv_handle_t *)&k->cpoll, poll_close_cb);
        uv_poll_stop(&k->ppoll);
        uv_close((uv_handle_t *)&k->ppoll, poll_close_cb);
        uv_timer_stop(&k->keepalive);
        uv_close((uv_handle_t *)&k->keepalive, poll_close_cb);
    } else {
        free(k->held);
        free(k);
    }
}

int kafka_io_produce(kafka_io *k, const char *topic, const char *key, size_t key_len,
                     const char *value, size_t len, const kafka_io_header *headers, int nheaders, void *opaque,
                     char *err, size_t errlen) {
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new((size_t)nheaders);
    for (int i = 0; i < nheaders; i++)
        rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value, -1);
    rd_kafka_vu_t vu[6] = {
        {.vtype = RD_KAFKA_VTYPE_TOPIC, .u.cstr = topic},
        {.vtype = RD_KAFKA_VTYPE_KEY, .u.mem = {(void *)key, key ? key_len : 0}},
        {.vtype = RD_KAFKA_VTYPE_VALUE, .u.mem = {(void *)value, len}},
        {.vtype = RD_KAFKA_VTYPE_MSGFLAGS, .u.i = RD_KAFKA_MSG_F_COPY},
        {.vtype = RD_KAFKA_VTYPE_HEADERS, .u.headers = hdrs},
        {.vtype = RD_KAFKA_VTYPE_OPAQUE, .u.ptr = opaque}};
    for (int i = 0; i < 3; i++) {
        /* An outcome topic: its handle brings the sticky partitioner. */
        if (k->outcome[i].rkt && !strcmp(rd_kafka_topic_name(k->outcome[i].rkt), topic)) {
            vu[0].vtype = RD_KAFKA_VTYPE_RKT;
            vu[0].u.rkt = k->outcome[i].rkt;
            break;
        }
    }
    rd_kafka_error_t *error = rd_kafka_produceva(k->producer, vu, 6);
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (error) {
        e = rd_kafka_error_code(error);
        rd_kafka_error_destroy(error);
    }
    if (e) {
        rd_kafka_headers_destroy(hdrs); /* not taken on failure */
        snprintf(err, errlen, "produce to %s: %s", topic, rd_kafka_err2str(e));
        return e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? 1 : e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? 2 : -1;
    }
    return 0;
}

void kafka_io_store(kafka_io *k, int32_t partition, int64_t offset) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, k->jobs, partition)->offset = offset;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(k->consumer, l);
    if (e && e != RD_KAFKA_RESP_ERR__STATE)
        log_warn(NULL, 0, "offset store %s[%d]@%lld: %s", k->jobs, partition, (long long)offset,
                 rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

void kafka_io_pause(kafka_io *k) {
    if (k->paused) return;
    k->paused = 1;
    /* A held message stays held: the partition resumes from the position
     * after it, and kafka_io_poll offers it first. */
    if (k->assignment && k->assignment->cnt) rd_kafka_pause_partitions(k->consumer, k->assignment);
}

void kafka_io_resume(kafka_io *k) {
    if (!k->paused || k->stopped) return;
    k->paused = 0;
    /* Still full after a long hold (keepalive_cb): fetching resumes when
     * the held messages are taken (kafka_io_poll), or every keepalive
     * would move another queue's worth of messages into the held array. */
    if (!k->hold_paused && k->assignment && k->assignment->cnt)
        rd_kafka_resume_partitions(k->consumer, k->assignment);
}

int kafka_io_paused(const kafka_io *k) { return k->paused; }

size_t kafka_io_max_message(const kafka_io *k) { return k->max_message; }

void kafka_io_stop_consuming(kafka_io *k) {
    kafka_io_pause(k);
    k->stopped = 1;
}

int kafka_io_out_queue(const kafka_io *k) { return rd_kafka_outq_len(k->producer); }

int kafka_io_assigned(const kafka_io *k) { return k->assignment ? k->assignment->cnt : 0; }

int kafka_io_ready(const kafka_io *k) { return !k->brokers_down; }

int64_t kafka_io_lag(const kafka_io *k) {
    if (!k->assignment || !k->assignment->cnt) return 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(k->assignment);
    int64_t lag = 0;
    if (rd_kafka_position(k->consumer, l) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < l->cnt; i++) {
            int64_t lo, hi;
            if (rd_kafka_get_watermark_offsets(k->consumer, l->elems[i].topic, l->elems[i].partition, &lo, &hi))
                continue;
            int64_t pos = l->elems[i].offset >= 0 ? l->elems[i].offset : lo;
            if (hi > pos) lag += hi - pos;
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
    return lag;
}
