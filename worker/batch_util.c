#include "batch_util.h"

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

void batch_util_ids_clear(batch_ids *ids) {
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
            batch_util_ids_clear(out);
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
                /* the replies of what was appended stay unread: the
                 * caller drops the connection after an error */
                snprintf(err, errlen, "redis: cannot queue a command: %s", c->err ? c->errstr : "out of memory");
                goto done;
            }
        }
        /* After a failed callback the rest of the chunk's replies are
         * still read (and dropped): the caller may go on with the
         * connection, whose next reply is then its own. */
        int failed = 0;
        for (size_t i = start; i < end; i++) {
            for (got = 0; got < per_item; got++) {
                void *r = NULL;
                if (redisGetReply(c, &r) != REDIS_OK || !r) {
                    snprintf(err, errlen, "redis: %s", c->errstr[0] ? c->errstr : "connection lost");
                    goto done;
                }
                replies[got] = r;
            }
            if (!failed && reply(i, replies, ud, err, errlen)) failed = 1;
            for (size_t k = 0; k < got; k++) freeReplyObject(replies[k]);
            got = 0;
        }
        if (failed) goto done;
    }
    rc = 0;
done:
    for (size_t k = 0; k < got; k++) freeReplyObject(replies[k]);
    free(replies);
    return rc;
}

/* ---- signals ---------------------------------------------------------------- */

volatile sig_atomic_t batch_util_stop;

static void on_stop_signal(int sig) { batch_util_stop = sig; }

void batch_util_catch_signals(batch_signals *s) {
    struct sigaction sa = {0};
    batch_util_stop = 0;
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &s->old_int);
    sigaction(SIGTERM, &sa, &s->old_term);
    s->caught = 1;
}

void batch_util_release_signals(batch_signals *s, int end) {
    if (s->caught) {
        sigaction(SIGINT, &s->old_int, NULL);
        sigaction(SIGTERM, &s->old_term, NULL);
        s->caught = 0;
    }
    if (end && batch_util_stop) {
        fflush(NULL);
        signal(batch_util_stop, SIG_DFL);
        raise(batch_util_stop);
    }
}

const char *batch_util_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

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

int batch_util_other_batch(const redisReply *r, const char *batch) {
    return r && r->type == REDIS_REPLY_STRING && strcmp(r->str, batch) != 0;
}
