#include "batch_submit.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batch_producer.h"
#include "batch_tally.h"
#include "batch_util.h"
#include "job.h"
#include "jsonin.h"
#include "jsonout.h"
#include "schema.h"
#include "util.h"

/* The job id of a generated job is BATCH-NNNNNN (7+ characters) and a
 * job id has at most 200 (job.schema.json). */
#define BATCH_ID_MAX 190
#define MAX_REPORTED_ERRORS 20

static const char submit_usage[] =
    "usage: retort submit FILE.jsonl [--batch ID] [-c FILE] [--set KEY=VALUE] [-b BROKERS]\n"
    "Produces one job per line of FILE ('-' for standard input) to topics.jobs, as batch ID\n"
    "(generated and printed when not given).  A line without job_id gets BATCH-NNNNNN (its line\n"
    "number); batch_id is set on every job.  Nothing is produced when a line is not a valid job.\n";

static const char resubmit_usage[] =
    "usage: retort resubmit BATCH --escalated [--max-attempts N] [-c FILE] [--set KEY=VALUE]\n"
    "Runs the batch's escalated jobs again: their state is reset (the batch's tokens and\n"
    "attempts keep what they cost) and the original jobs are produced again, as the job's\n"
    "next run, with max_attempts N when given.  Jobs reset by an earlier resubmit whose\n"
    "run has not begun are produced again too.  Nothing is reset when a job, as it would be\n"
    "produced, is larger than the producer's message.max.bytes allows.\n";

/* ---- shared ------------------------------------------------------------- */

/* A job id or batch id also names Redis keys hash-tagged by it: no white
 * space or braces (job.schema.json says the same), and at most max
 * characters, as the schema counts them (200 of é took 400 bytes, and
 * were refused as too long). */
static int id_ok(const char *s, size_t max, size_t max_bytes) {
    size_t n = 0;
    for (const char *p = s; *p; p++) n += ((unsigned char)*p & 0xC0) != 0x80;
    if (n == 0 || n > max || strlen(s) > max_bytes) return 0;
    for (; *s; s++)
        if (isspace((unsigned char)*s) || *s == '{' || *s == '}') return 0;
    return 1;
}

static char *read_whole(const char *path, char *err, size_t errlen) {
    char *text = util_read_file(path, NULL);
    if (!text) snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return text;
}

/* The job envelope of the worker, so a bad job is refused here instead of
 * going to the dead-letter topic.  NULL (err says why) when the schemas
 * cannot be read from schemas.envelopes. */
static schema *load_envelope(const config *cfg, schema_registry **reg_out, char *err, size_t errlen) {
    const char *dir = config_get(cfg, "schemas.envelopes");
    char path[1024], inner[512];
    schema *s = NULL;
    cJSON *doc = NULL;
    char *text = NULL;
    schema_registry *reg = schema_registry_new();
    if (!reg) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (schema_registry_load_dir(reg, dir, "https://retort.dev/schemas/", inner, sizeof(inner))) {
        snprintf(err, errlen, "schemas.envelopes %s: %s", dir, inner);
        goto done;
    }
    snprintf(path, sizeof(path), "%s/job.schema.json", dir);
    if (!(text = read_whole(path, err, errlen))) goto done;
    if (!(doc = cJSON_Parse(text))) {
        snprintf(err, errlen, "%s is not JSON", path);
        goto done;
    }
    s = schema_compile(reg, doc, NULL, inner, sizeof(inner));
    if (!s) snprintf(err, errlen, "%s: %s", path, inner);
done:
    free(text);
    cJSON_Delete(doc);
    if (!s) {
        schema_registry_free(reg);
        reg = NULL;
    }
    *reg_out = reg;
    return s;
}

typedef struct sub_job {
    char *id;
    char *json;   /* the job as produced */
    long line;    /* in the input file (1-based); 0 for a resubmitted job */
} sub_job;

typedef struct sub_jobs {
    sub_job *items;
    size_t count, cap;
} sub_jobs;

static int sub_jobs_push(sub_jobs *js, char *id, char *json, long line) {
    if (js->count == js->cap) {
        size_t cap = js->cap ? js->cap * 2 : 256;
        sub_job *p = realloc(js->items, cap * sizeof(*p));
        if (!p) return -1;
        js->items = p;
        js->cap = cap;
    }
    js->items[js->count++] = (sub_job){id, json, line};
    return 0;
}

static void sub_jobs_clear(sub_jobs *js) {
    for (size_t i = 0; i < js->count; i++) {
        free(js->items[i].id);
        free(js->items[i].json);
    }
    free(js->items);
    js->items = NULL;
    js->count = js->cap = 0;
}

/* out gets a view of the jobs i of js whose flags[i] is want (0 or 1), in
 * order: its array is its own (free it), the jobs stay js's.  0 = ok, -1
 * out of memory (out empty). */
static int sub_jobs_pick(const sub_jobs *js, const unsigned char *flags, unsigned char want, sub_jobs *out) {
    *out = (sub_jobs){0};
    for (size_t i = 0; i < js->count; i++) out->cap += flags[i] == want;
    if (!out->cap) return 0;
    if (!(out->items = malloc(out->cap * sizeof(*out->items)))) {
        out->cap = 0;
        return -1;
    }
    for (size_t i = 0; i < js->count; i++)
        if (flags[i] == want) out->items[out->count++] = js->items[i];
    return 0;
}

/* The producer refuses a message whose key and value exceed max (what
 * batch_producer_max_bytes allows), after the jobs before it went out: a
 * batch would be half produced.  Submit and resubmit both check every job
 * this way before producing any.  0 when the job (its id as the key, len
 * bytes of JSON as produced) fits; -1 with msg saying by how much not. */
static int job_fits(const char *id, size_t len, size_t max, char *msg, size_t msglen) {
    size_t bytes = len + strlen(id);
    if (bytes <= max) return 0;
    snprintf(msg, msglen, "%zu bytes with its key, over the %zu a message may hold (kafka.message.max.bytes less %d)",
             bytes, max, BATCH_PRODUCER_MSG_OVERHEAD);
    return -1;
}

/* Produces every job (key = job id) and waits for all delivery reports.
 * Returns the number not delivered, naming the first MAX_REPORTED_ERRORS
 * not queued and as many failed deliveries on stderr (each as in the
 * topic or not), and how many more (submit writes the jobs not sent to
 * a file: write_not_sent).  unsent (may be NULL; else js->count
 * bytes, zeroed) gets 1 for each job certainly not in the topic: not
 * queued (the producer refused it, and so every job after it: they never
 * left this process), or a failed delivery librdkafka says was not
 * written.  Any other job not delivered may be in the topic yet (its
 * request sent, the answer lost or never come). */
static size_t produce_all(const char *cmd, batch_producer *p, const char *topic, const sub_jobs *js,
                          unsigned char *unsent, char *err, size_t errlen) {
    size_t sent = 0;
    for (; sent < js->count; sent++) {
        const sub_job *j = &js->items[sent];
        if (batch_producer_send(p, topic, j->id, j->json, strlen(j->json), sent, err, errlen)) break;
    }
    char ferr[1024] = "";
    const batch_producer_failure *failed = NULL;
    size_t nfailed = 0;
    size_t bad = batch_producer_flush(p, &failed, &nfailed, ferr, sizeof(ferr));
    if (sent < js->count) {
        fprintf(stderr, "retort %s: %s; %zu job(s) not queued\n", cmd, err, js->count - sent);
        for (size_t i = sent; i < js->count && i - sent < MAX_REPORTED_ERRORS; i++)
            fprintf(stderr, "retort %s: job %s not queued\n", cmd, js->items[i].id);
        if (js->count - sent > MAX_REPORTED_ERRORS)
            fprintf(stderr, "retort %s: ... %zu more not queued\n", cmd, js->count - sent - MAX_REPORTED_ERRORS);
        bad += js->count - sent;
    } else if (bad) {
        snprintf(err, errlen, "%s", ferr);
    }
    for (size_t i = sent; unsent && i < js->count; i++) unsent[i] = 1;
    for (size_t i = 0; i < nfailed; i++) {
        if (unsent && !failed[i].maybe_persisted) unsent[failed[i].index] = 1;
        if (i < MAX_REPORTED_ERRORS)
            fprintf(stderr, "retort %s: job %s not delivered (%s)\n", cmd, js->items[failed[i].index].id,
                    failed[i].maybe_persisted ? "may be in the topic" : "not written to the topic");
    }
    if (nfailed > MAX_REPORTED_ERRORS)
        fprintf(stderr, "retort %s: ... %zu more not delivered\n", cmd, nfailed - MAX_REPORTED_ERRORS);
    return bad;
}

/* ---- submit --------------------------------------------------------------- */

static void make_batch_id(char *buf, size_t len) {
    unsigned char rnd[3] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
        uint64_t x = util_mono_us() ^ ((uint64_t)getpid() << 16);
        memcpy(rnd, &x, sizeof(rnd));
    }
    if (fd >= 0) close(fd);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char ts[32];
    strftime(ts, sizeof(ts), "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, len, "b%s-%02x%02x%02x", ts, rnd[0], rnd[1], rnd[2]);
}

typedef struct submit_ctx {
    const char *cmd;
    const config *cfg;
    const char *batch;
    const char *file;
    sub_jobs jobs;
    batch_tally *seen;      /* job id -> line of its first occurrence */
    schema *envelope;
    size_t max_bytes;       /* key + job, as the producer's message.max.bytes allows */
    int errors;
} submit_ctx;

static void line_error(submit_ctx *sc, long line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line_error(submit_ctx *sc, long line, const char *fmt, ...) {
    if (sc->errors++ >= MAX_REPORTED_ERRORS) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "retort %s: %s:%ld: %s\n", sc->cmd, sc->file, line, msg);
}

/* A job's JSON read as the worker reads it (jsonin: strict, numbers kept
 * as written, a NUL refused), copied into a tree cJSON may edit, whose
 * numbers jsonout still prints as written.  NULL when not JSON (at, may
 * be NULL: where reading stopped) or out of memory. */
static cJSON *parse_editable(const char *text, size_t len, size_t *at) {
    cJSON *in = jsonin_parse_all(text, len, at);
    cJSON *doc = in ? cJSON_Duplicate(in, 1) : NULL;
    jsonin_free(in);
    return doc;
}

/* Turns one input line into a job; errors are reported by line. */
static int submit_line(submit_ctx *sc, char *text, size_t len, long line) {
    while (len && isspace((unsigned char)text[len - 1])) text[--len] = '\0';
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0; /* blank lines are allowed */
    if (!util_utf8_valid(text, len)) {
        line_error(sc, line, "not UTF-8");
        return 0;
    }
    /* a NUL is refused with its reason, as the worker refuses it (job.c) */
    size_t at = 0;
    cJSON *doc = parse_editable(text, len, &at);
    if (!doc && jsonin_nul_at(text, len, at)) {
        line_error(sc, line, "a string holds \\u0000 (the NUL character), which is not accepted (column %zu)",
                   at + 1);
        return 0;
    }
    char idbuf[BATCH_KEY_MAX];
    if (!doc || !cJSON_IsObject(doc)) {
        line_error(sc, line, "not a JSON object%s", doc ? "" : " (not JSON)");
        cJSON_Delete(doc);
        return 0;
    }
    /* refused as the worker refuses it (job.c): a second batch_id or
     * job_id had taken the job out of its batch */
    const char *dup = job_duplicate_member(doc);
    if (dup) {
        line_error(sc, line, "member \"%s\" appears more than once", dup);
        cJSON_Delete(doc);
        return 0;
    }
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(doc, "job_id");
    if (!jid || cJSON_IsNull(jid)) {
        snprintf(idbuf, sizeof(idbuf), "%s-%06ld", sc->batch, line);
        cJSON_DeleteItemFromObjectCaseSensitive(doc, "job_id");
        cJSON_AddStringToObject(doc, "job_id", idbuf);
    } else if (!cJSON_IsString(jid) || !id_ok(jid->valuestring, 200, 800)) {
        line_error(sc, line, "job_id must be a string of 1 to 200 characters without white space or braces");
        cJSON_Delete(doc);
        return 0;
    } else {
        snprintf(idbuf, sizeof(idbuf), "%s", jid->valuestring);
    }
    long first = (long)batch_tally_get(sc->seen, idbuf);
    if (first) {
        line_error(sc, line, "job_id %s repeats line %ld", idbuf, first);
        cJSON_Delete(doc);
        return 0;
    }
    if (batch_tally_add(sc->seen, idbuf, line)) goto oom;
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "batch_id");
    cJSON_AddStringToObject(doc, "batch_id", sc->batch);
    schema_violations v = {0};
    if (schema_validate(sc->envelope, doc, &v) != 0) {
        const schema_violation *x = v.count ? &v.items[0] : NULL;
        line_error(sc, line, "job %s is not a valid job: %s%s%s", idbuf, x && x->path[0] ? x->path : "",
                   x && x->path[0] ? ": " : "", x ? x->message : "invalid");
        schema_violations_clear(&v);
        cJSON_Delete(doc);
        return 0;
    }
    schema_violations_clear(&v);
    /* The envelope's pattern lets 2026-02-30 by; the worker's reading
     * does not (job.c), and a dead letter never completes its batch. */
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(doc, "deadline");
    int64_t dl_ms;
    char why[256];
    if (cJSON_IsString(dl) && util_parse_rfc3339(dl->valuestring, &dl_ms, why, sizeof(why))) {
        line_error(sc, line, "job %s is not a valid job: /deadline: '%s' is not an RFC 3339 date-time: %s", idbuf,
                   dl->valuestring, why);
        cJSON_Delete(doc);
        return 0;
    }
    char *json = jsonout_print(doc);
    cJSON_Delete(doc);
    if (!json) goto oom;
    /* The producer would refuse it (after the jobs before it went out),
     * and the batch could never complete. */
    if (job_fits(idbuf, strlen(json), sc->max_bytes, why, sizeof(why))) {
        line_error(sc, line, "job %s is %s", idbuf, why);
        free(json);
        return 0;
    }
    char *id = strdup(idbuf);
    if (!id || sub_jobs_push(&sc->jobs, id, json, line)) {
        free(json);
        free(id);
        goto oom;
    }
    return 0;
oom:
    fprintf(stderr, "retort %s: out of memory\n", sc->cmd);
    return -1;
}

static int read_jobs(submit_ctx *sc) {
    FILE *f = strcmp(sc->file, "-") ? fopen(sc->file, "r") : stdin;
    if (!f) {
        fprintf(stderr, "retort %s: cannot open %s: %s\n", sc->cmd, sc->file, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, '\0', (size_t)n)) {
            line_error(sc, lineno, "contains a NUL byte");
            continue;
        }
        if (submit_line(sc, line, (size_t)n, lineno)) {
            rc = -1;
            break;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "retort %s: reading %s: %s\n", sc->cmd, sc->file, strerror(errno));
        rc = -1;
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

/* Claims a job id for the batch, atomically: the job's hash gets the
 * batch_id (which the worker writes there too) with the state's TTL, so a
 * second batch with the same id is refused while the first one's job
 * still waits in the topic (it has no status until a worker begins it).
 * KEYS: the job's hash; ARGV: batch, ttl (s).  Returns {0, ''} when
 * claimed, {1, status} when the job has state (a worker would not run it
 * again), {2, batch} when another batch holds it. */
static const char script_claim[] =
    "local f = redis.call('HMGET', KEYS[1], 'status', 'batch_id')\n"
    "if f[1] then return {1, f[1]} end\n"
    "if f[2] and f[2] ~= ARGV[1] then return {2, f[2]} end\n"
    "redis.call('HSET', KEYS[1], 'batch_id', ARGV[1])\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[2])\n"
    "return {0, ''}\n";

/* Lets a claim go when nothing was produced: only a hash that is still
 * nothing but this batch's claim.  KEYS: the job's hash; ARGV: batch. */
static const char script_unclaim[] =
    "if redis.call('HGET', KEYS[1], 'batch_id') == ARGV[1] and redis.call('HLEN', KEYS[1]) == 1 then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

typedef struct claim_ctx {
    const config *cfg;
    const sub_jobs *jobs;
    const char *batch;
    const char *script;
    size_t refused;
    const char *cmd;
    size_t sent;        /* claims sent (the first jobs): the most that may be held */
} claim_ctx;

static int claim_build(redisContext *c, size_t i, void *ud) {
    claim_ctx *cc = ud;
    char key[BATCH_KEY_MAX];
    cc->sent = i + 1;
    batch_util_key_job(cc->cfg, cc->jobs->items[i].id, key, sizeof(key));
    return redisAppendCommand(c, "EVAL %s 1 %s %s %lld", cc->script, key, cc->batch,
                              config_get_int(cc->cfg, "redis.ttl_s")) == REDIS_OK
               ? 0
               : -1;
}

/* "interrupted" in err when a signal asked the submit to stop
 * (batch_util_stop): a pipeline's callback stops it there (its chunk's
 * replies read, so the connection goes on for the cleanup). */
static int stopped(char *err, size_t errlen) {
    if (!batch_util_stop) return 0;
    snprintf(err, errlen, "interrupted");
    return 1;
}

static int claim_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    claim_ctx *cc = ud;
    if (stopped(err, errlen)) return -1;
    if (r[0]->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r[0]->str);
        return -1;
    }
    if (r[0]->type != REDIS_REPLY_ARRAY || r[0]->elements != 2 || r[0]->element[0]->type != REDIS_REPLY_INTEGER ||
        r[0]->element[1]->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "redis: unexpected reply to the claim of job %s", cc->jobs->items[i].id);
        return -1;
    }
    long long verdict = r[0]->element[0]->integer;
    const char *what = r[0]->element[1]->str;
    const sub_job *j = &cc->jobs->items[i];
    if (verdict && cc->refused++ < MAX_REPORTED_ERRORS) {
        if (verdict == 1)
            fprintf(stderr,
                    "retort %s: job %s (line %ld) has state in Redis already (status %s): a worker "
                    "would not run it again; give it another job_id\n",
                    cc->cmd, j->id, j->line, what);
        else
            fprintf(stderr,
                    "retort %s: job %s (line %ld) belongs to batch %s, submitted and not finished yet; "
                    "give it another job_id\n",
                    cc->cmd, j->id, j->line, what);
    }
    return 0;
}

static int unclaim_build(redisContext *c, size_t i, void *ud) {
    claim_ctx *cc = ud;
    char key[BATCH_KEY_MAX];
    batch_util_key_job(cc->cfg, cc->jobs->items[i].id, key, sizeof(key));
    return redisAppendCommand(c, "EVAL %s 1 %s %s", script_unclaim, key, cc->batch) == REDIS_OK ? 0 : -1;
}

/* The reply of one command per item that only must not be an error. */
static int no_error_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    if (r[0]->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r[0]->str);
        return -1;
    }
    return 0;
}

typedef struct store_ctx {
    const char *jobs_key, *input_key;
    const sub_jobs *jobs;
} store_ctx;

static int store_build(redisContext *c, size_t i, void *ud) {
    store_ctx *s = ud;
    const sub_job *j = &s->jobs->items[i];
    if (redisAppendCommand(c, "RPUSH %s %s", s->jobs_key, j->id) != REDIS_OK) return -1;
    return redisAppendCommand(c, "HSET %s %s %s", s->input_key, j->id, j->json) == REDIS_OK ? 0 : -1;
}

static int store_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    if (stopped(err, errlen)) return -1;
    for (int k = 0; k < 2; k++) {
        if (r[k]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r[k]->str);
            return -1;
        }
    }
    return 0;
}

/* Creates the batch with its TTL in one step, so that a submit that dies
 * on the way (a signal, a crash, a lost connection) never leaves a batch
 * for ever (its cleanup may not run).  KEYS: the batch's hash, list and
 * inputs; ARGV: total, created, submitted_by, input, ttl (s).  0 when a
 * key of the batch exists already, 1 when created. */
static const char script_new_batch[] =
    "if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'total', ARGV[1], 'created', ARGV[2], 'submitted_by', ARGV[3], 'input', ARGV[4])\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[5])\n"
    "return 1\n";

/* Claims the batch: fails when any of its keys exists. */
static int claim_batch(redisContext *c, const config *cfg, const char *batch, const char *file,
                       size_t total, char *err, size_t errlen) {
    char bkey[BATCH_KEY_MAX], jkey[BATCH_KEY_MAX], ikey[BATCH_KEY_MAX], host[128] = "", by[256];
    batch_util_key_batch(cfg, batch, bkey, sizeof(bkey));
    batch_util_key_jobs(cfg, batch, jkey, sizeof(jkey));
    batch_util_key_input(cfg, batch, ikey, sizeof(ikey));
    const char *user = getenv("USER");
    gethostname(host, sizeof(host) - 1);
    snprintf(by, sizeof(by), "%s@%s", user && user[0] ? user : "unknown", host);
    int rc = -1;
    redisReply *r = redisCommand(c, "EVAL %s 3 %s %s %s %lld %lld %s %s %lld", script_new_batch, bkey, jkey, ikey,
                                 (long long)total, (long long)util_wall_ms(), by, file,
                                 config_get_int(cfg, "redis.ttl_s"));
    if (r && r->type == REDIS_REPLY_INTEGER && !r->integer)
        snprintf(err, errlen, "batch %s exists already; choose another --batch", batch);
    else if (r && r->type == REDIS_REPLY_INTEGER)
        rc = 0;
    else
        snprintf(err, errlen, "redis: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    freeReplyObject(r);
    return rc;
}

/* The first job of the batch's list and inputs, with their TTL in the
 * same step, as the batch's hash got its own: the later ones are only
 * pushed (expire_batch sets the three TTLs anew once all are in).
 * KEYS: the list, the inputs; ARGV: job id, job, ttl (s). */
static const char script_store_first[] =
    "redis.call('RPUSH', KEYS[1], ARGV[1])\n"
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[3])\n"
    "redis.call('EXPIRE', KEYS[2], ARGV[3])\n"
    "return 0\n";

/* Stores the job list and the inputs of the batch.  0 = ok; -1 with err. */
static int store_jobs(redisContext *c, const config *cfg, const char *batch, const sub_jobs *js, char *err,
                      size_t errlen) {
    char jkey[BATCH_KEY_MAX], ikey[BATCH_KEY_MAX];
    batch_util_key_jobs(cfg, batch, jkey, sizeof(jkey));
    batch_util_key_input(cfg, batch, ikey, sizeof(ikey));
    /* js has a job (a file of none is refused before) */
    redisReply *r = redisCommand(c, "EVAL %s 2 %s %s %s %s %lld", script_store_first, jkey, ikey, js->items[0].id,
                                 js->items[0].json, config_get_int(cfg, "redis.ttl_s"));
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc) snprintf(err, errlen, "redis: %s", r ? r->str : c->errstr);
    freeReplyObject(r);
    sub_jobs tail = {js->items + 1, js->count - 1, 0};
    store_ctx st = {jkey, ikey, &tail};
    if (!rc) rc = batch_util_pipeline(c, tail.count, 2, store_build, store_reply, &st, err, errlen);
    return rc;
}

/* The batch's three keys get redis.ttl_s anew.  The answers are not
 * read: outside a transaction a TTL not set is set again by the next
 * refresh; inside one (cut_batch) they are QUEUED, and EXEC's answer
 * holds the real ones. */
static void expire_batch(redisContext *c, const config *cfg, const char *batch) {
    char key[BATCH_KEY_MAX], ttl[32];
    snprintf(ttl, sizeof(ttl), "%lld", config_get_int(cfg, "redis.ttl_s"));
    freeReplyObject(redisCommand(c, "EXPIRE %s %s", batch_util_key_batch(cfg, batch, key, sizeof(key)), ttl));
    freeReplyObject(redisCommand(c, "EXPIRE %s %s", batch_util_key_jobs(cfg, batch, key, sizeof(key)), ttl));
    freeReplyObject(redisCommand(c, "EXPIRE %s %s", batch_util_key_input(cfg, batch, key, sizeof(key)), ttl));
}

/* One command per job: CMD KEY job_id. */
typedef struct job_cmd_ctx {
    const char *cmd, *key;
    const sub_jobs *jobs;
} job_cmd_ctx;

static int job_cmd_build(redisContext *c, size_t i, void *ud) {
    job_cmd_ctx *jc = ud;
    return redisAppendCommand(c, "%s %s %s", jc->cmd, jc->key, jc->jobs->items[i].id) == REDIS_OK ? 0 : -1;
}

/* Takes r (frees it): 0 when it is a reply and not an error, else -1
 * with err. */
static int reply_ok(redisContext *c, redisReply *r, const char *what, char *err, size_t errlen) {
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc) snprintf(err, errlen, "redis %s: %s", what, r ? r->str : c->errstr);
    freeReplyObject(r);
    return rc;
}

/* Cuts the batch to the jobs of kept (input order) after a failed
 * produce: the jobs of cut are certainly not in the topic, and counted,
 * the batch would wait for them for ever (watch by total, results and
 * report by the job list).  total becomes kept's count and not_sent
 * cut's; the cut jobs leave the list and the inputs.  The list is
 * written anew beside the batch's and renamed over it in one transaction
 * with the rest, so a reader sees the batch whole or cut, and Redis never
 * scans the list once per cut job (LREM would).  0 = ok; -1 with err:
 * the batch as it was (the list written beside it deleted, as far as
 * the connection allows), unless a command failed inside the
 * transaction (a key of another type), which Redis does not undo. */
static int cut_batch(redisContext *c, const config *cfg, const char *batch, const sub_jobs *kept,
                     const sub_jobs *cut, char *err, size_t errlen) {
    char bkey[BATCH_KEY_MAX], jkey[BATCH_KEY_MAX], ikey[BATCH_KEY_MAX], tmp[BATCH_KEY_MAX + 8];
    batch_util_key_batch(cfg, batch, bkey, sizeof(bkey));
    batch_util_key_jobs(cfg, batch, jkey, sizeof(jkey));
    batch_util_key_input(cfg, batch, ikey, sizeof(ikey));
    snprintf(tmp, sizeof(tmp), "%s:cut", jkey); /* the batch's hash tag: the same slot */
    /* kept has a job (a batch of none is not cut but forgotten) */
    sub_jobs tail = {kept->items + 1, kept->count - 1, 0};
    job_cmd_ctx push = {"RPUSH", tmp, &tail}, del = {"HDEL", ikey, cut};
    int rc = -1, in_multi = 0;
    redisReply *r = NULL;
    if (reply_ok(c, redisCommand(c, "DEL %s", tmp), "DEL", err, errlen) ||
        reply_ok(c, redisCommand(c, "RPUSH %s %s", tmp, kept->items[0].id), "RPUSH", err, errlen) ||
        /* the TTL as soon as the key exists: a submit that dies before
         * the rename leaves nothing for ever */
        reply_ok(c, redisCommand(c, "EXPIRE %s %lld", tmp, config_get_int(cfg, "redis.ttl_s")), "EXPIRE", err,
                 errlen) ||
        batch_util_pipeline(c, tail.count, 1, job_cmd_build, no_error_reply, &push, err, errlen) ||
        reply_ok(c, redisCommand(c, "MULTI"), "MULTI", err, errlen))
        goto cleanup;
    in_multi = 1;
    if (batch_util_pipeline(c, cut->count, 1, job_cmd_build, no_error_reply, &del, err, errlen) ||
        reply_ok(c, redisCommand(c, "RENAME %s %s", tmp, jkey), "RENAME", err, errlen) ||
        reply_ok(c, redisCommand(c, "HSET %s total %lld not_sent %lld", bkey, (long long)kept->count,
                                 (long long)cut->count), "HSET", err, errlen))
        goto cleanup;
    /* the three keys' TTL from one moment again: a worker's finish sets
     * it anew only when the batch's hash has drifted a second, and the
     * list renamed here brings the TTL it got before its pushes (queued
     * here, their answers come in EXEC's, checked below) */
    expire_batch(c, cfg, batch);
    r = redisCommand(c, "EXEC");
    in_multi = !r; /* an answer, even an error, ends the transaction */
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis EXEC: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        goto cleanup;
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r->element[i]->str);
            goto cleanup;
        }
    }
    rc = 0;
cleanup:
    if (in_multi) freeReplyObject(redisCommand(c, "DISCARD")); /* the connection goes on */
    freeReplyObject(r);
    /* not cut: the list written beside the batch would only wait for its
     * TTL */
    if (rc) freeReplyObject(redisCommand(c, "DEL %s", tmp));
    return rc;
}

static int forget_batch(redisContext *c, const config *cfg, const char *batch, char *err, size_t errlen) {
    char k1[BATCH_KEY_MAX], k2[BATCH_KEY_MAX], k3[BATCH_KEY_MAX];
    return reply_ok(c,
                    redisCommand(c, "DEL %s %s %s", batch_util_key_batch(cfg, batch, k1, sizeof(k1)),
                                 batch_util_key_jobs(cfg, batch, k2, sizeof(k2)),
                                 batch_util_key_input(cfg, batch, k3, sizeof(k3))),
                    "DEL", err, errlen);
}

/* One step of a cleanup on connection c: 0 = done; -1 with err.  It may
 * run again whole after a lost connection, so it must redo nothing it
 * did (the scripts and commands of the cleanups are idempotent). */
typedef int (*cleanup_step)(redisContext *c, void *ud, char *err, size_t errlen);

/* Runs step on *c, or on a new connection when *c has failed: the
 * failure that calls for the cleanup is often the connection's own (a
 * restart, a failover, a CLIENT KILL), and a cleanup on the broken one
 * did nothing.  Tries again a few times, over about 3 s, while the
 * connection is what fails; not when Redis answered with a refusal.
 * 0 = done; -1 with err (*c may be NULL then). */
static int with_redis(redisContext **c, const config *cfg, cleanup_step step, void *ud, char *err,
                      size_t errlen) {
    static const long retry_ms[] = {0, 250, 750, 2000};
    for (size_t t = 0; t < sizeof(retry_ms) / sizeof(retry_ms[0]); t++) {
        struct timespec ts = {retry_ms[t] / 1000, retry_ms[t] % 1000 * 1000000};
        if (retry_ms[t]) nanosleep(&ts, NULL);
        if (!*c || (*c)->err) {
            if (*c) redisFree(*c);
            if (!(*c = batch_util_redis(cfg, err, errlen))) continue;
        }
        if (!step(*c, ud, err, errlen)) return 0;
        if (!(*c)->err) return -1;
    }
    return -1;
}

/* Where submit writes a file about batch: next to the input, named after
 * it (without .jsonl) and the batch (products.jsonl, batch b1:
 * products.b1.WHAT), in the current directory for standard input
 * (b1.WHAT).  A '/' of the batch id becomes '_'.  NULL: out of memory. */
static char *side_path(const char *file, const char *batch, const char *what) {
    size_t n = strlen(file);
    int stdin_ = !strcmp(file, "-");
    int stem = (int)(n > 6 && !strcmp(file + n - 6, ".jsonl") ? n - 6 : n);
    char *path = NULL;
    if (stdin_ ? asprintf(&path, "%s.%s", batch, what) < 0
               : asprintf(&path, "%.*s.%s.%s", stem, file, batch, what) < 0)
        return NULL;
    /* the batch id names a file, not a directory */
    size_t at = stdin_ ? 0 : (size_t)stem + 1;
    for (size_t i = at; i < at + strlen(batch); i++)
        if (path[i] == '/') path[i] = '_';
    return path;
}

/* Writes what put writes (0 = ok, else errno says why) to path, whole
 * or not at all: to a file beside it, renamed over it at the end.  0 =
 * ok; -1 with err. */
typedef int (*file_put)(FILE *f, void *ud);

static int write_whole(const char *path, file_put put, void *ud, char *err, size_t errlen) {
    char *tmp = NULL;
    FILE *f = NULL;
    int rc = -1;
    if (asprintf(&tmp, "%s.tmp%d", path, (int)getpid()) < 0) {
        tmp = NULL;
        snprintf(err, errlen, "out of memory");
        goto cleanup;
    }
    if (!(f = fopen(tmp, "w"))) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        goto cleanup;
    }
    errno = 0;
    int werr = put(f, ud);
    werr |= fclose(f);
    f = NULL;
    if (werr || rename(tmp, path)) {
        snprintf(err, errlen, "writing %s: %s", path, strerror(errno ? errno : EIO));
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (f) fclose(f);
    if (rc && tmp) unlink(tmp);
    free(tmp);
    return rc;
}

/* The jobs of a sub_jobs, one per line, as produced but for their
 * batch_id: the file is the input of a new batch, whose submit sets its
 * own (the old one would only mislead a reader).  Their job_id stays,
 * a generated one too, so that their results join the old input. */
static int put_jobs(FILE *f, void *ud) {
    const sub_jobs *js = ud;
    for (size_t i = 0; i < js->count; i++) {
        cJSON *doc = parse_editable(js->items[i].json, strlen(js->items[i].json), NULL);
        if (doc) cJSON_DeleteItemFromObjectCaseSensitive(doc, "batch_id");
        char *line = doc ? jsonout_print(doc) : NULL;
        cJSON_Delete(doc);
        int rc = line && fputs(line, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
        if (!line) errno = ENOMEM;
        free(line);
        if (rc) return -1;
    }
    return 0;
}

/* s as an argument of a redis-cli command line, in double quotes (its
 * escapes: \" \\ \n \xHH). */
static void put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\x%02x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

typedef struct release_ctx {
    const config *cfg;
    const char *batch;
    claim_ctx claims;   /* jobs: those whose claims were sent */
} release_ctx;

/* What release_step does, as redis-cli commands, one per line. */
static int put_release(FILE *f, void *ud) {
    const release_ctx *rx = ud;
    char key[BATCH_KEY_MAX];
    for (size_t i = 0; i < rx->claims.jobs->count; i++) {
        fputs("EVAL ", f);
        put_quoted(f, script_unclaim);
        fputs(" 1 ", f);
        put_quoted(f, batch_util_key_job(rx->cfg, rx->claims.jobs->items[i].id, key, sizeof(key)));
        fputc(' ', f);
        put_quoted(f, rx->batch);
        fputc('\n', f);
    }
    fputs("DEL ", f);
    put_quoted(f, batch_util_key_batch(rx->cfg, rx->batch, key, sizeof(key)));
    fputc(' ', f);
    put_quoted(f, batch_util_key_jobs(rx->cfg, rx->batch, key, sizeof(key)));
    fputc(' ', f);
    put_quoted(f, batch_util_key_input(rx->cfg, rx->batch, key, sizeof(key)));
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

/* The batch first would free its id while claims of it remain: the ids
 * first (only the claims still nothing but this batch's go). */
static int release_step(redisContext *c, void *ud, char *err, size_t errlen) {
    release_ctx *rx = ud;
    if (batch_util_pipeline(c, rx->claims.jobs->count, 1, unclaim_build, no_error_reply, &rx->claims, err, errlen))
        return -1;
    return forget_batch(c, rx->cfg, rx->batch, err, errlen);
}

/* Lets go what a submit that produced nothing claimed: the batch, and
 * the ids of cl (its claims sent: cl->sent) that are still nothing but
 * this batch's claim.  When even a new connection cannot, says what is
 * left, for how long, and how to clear it: a file of redis-cli commands
 * that do what this would have done. */
static void release_batch(redisContext **c, const config *cfg, const char *batch, const char *file,
                          const claim_ctx *cl) {
    sub_jobs sent = {cl->jobs ? cl->jobs->items : NULL, cl->sent, 0};
    release_ctx rx = {cfg, batch, *cl};
    char err[1024], ferr[1024], key[BATCH_KEY_MAX];
    rx.claims.jobs = &sent;
    if (!with_redis(c, cfg, release_step, &rx, err, sizeof(err))) return;
    fprintf(stderr, "retort submit: could not let go of what this submit claimed: %s\n", err);
    fprintf(stderr,
            "retort submit: left in Redis until their TTL (redis.ttl_s, %lld s) runs out: batch %s (%s, with its "
            ":jobs and :input if stored), and the claims of up to %zu job id(s), those of the first %zu job(s) "
            "of %s; until then submit refuses batch %s and those job ids\n",
            config_get_int(cfg, "redis.ttl_s"), batch, batch_util_key_batch(cfg, batch, key, sizeof(key)),
            sent.count, sent.count, file, batch);
    char *path = side_path(file, batch, "release.redis");
    if (path && !write_whole(path, put_release, &rx, ferr, sizeof(ferr))) {
        char db[32] = "";
        if (config_get_int(cfg, "redis.db")) snprintf(db, sizeof(db), " -n %lld", config_get_int(cfg, "redis.db"));
        const char *pw = config_get(cfg, "redis.password");
        fprintf(stderr, "retort submit: to clear them once Redis answers: redis-cli -h %s -p %lld%s%s < %s\n",
                config_get(cfg, "redis.host"), config_get_int(cfg, "redis.port"), db,
                pw && pw[0] ? " --askpass" : "", path);
    } else {
        fprintf(stderr,
                "retort submit: to clear them once Redis answers: DEL the batch's three keys, and the key %s of "
                "each of those job ids that holds only batch_id %s (%s)\n",
                batch_util_key_job(cfg, "ID", key, sizeof(key)), batch, path ? ferr : "out of memory");
    }
    free(path);
}

typedef struct cut_ctx {
    const config *cfg;
    const char *batch;
    const sub_jobs *kept, *rest;
    claim_ctx un;   /* the claims of rest */
    int cut;        /* the batch is cut */
} cut_ctx;

/* The batch first: its list never names a job whose id is free. */
static int cut_step(redisContext *c, void *ud, char *err, size_t errlen) {
    cut_ctx *cx = ud;
    if (!cx->cut && cut_batch(c, cx->cfg, cx->batch, cx->kept, cx->rest, err, errlen)) return -1;
    cx->cut = 1;
    return batch_util_pipeline(c, cx->rest->count, 1, unclaim_build, no_error_reply, &cx->un, err, errlen);
}

/* After a failed or interrupted produce: the jobs of js flagged in
 * unsent (some) are certainly not in the topic and cannot reach a
 * worker.  The batch no longer counts them, so that it completes when the
 * others end, their ids are let go (cl: the claims), so that they can be
 * submitted as a new batch (claimed, they were refused for the state's
 * TTL), and they are written to a file beside the input, every one (the
 * output names only the first few), to submit as they are.  When the
 * batch cannot be cut, they keep their ids: a batch that still lists a
 * job must not see its id taken by another batch.  On a new connection
 * when *c failed.  Says what it did, or what it could not, on stderr. */
static void cut_unsent(redisContext **c, const config *cfg, const char *batch, const char *file,
                       const sub_jobs *js, const unsigned char *unsent, const claim_ctx *cl) {
    sub_jobs kept = {0}, rest = {0};
    cut_ctx cx = {cfg, batch, &kept, &rest, *cl, 0};
    char err[512] = "out of memory", ferr[1024] = "out of memory";
    char *path = NULL;
    cx.un.jobs = &rest;
    int oom = sub_jobs_pick(js, unsent, 0, &kept) | sub_jobs_pick(js, unsent, 1, &rest);
    int freed = !oom && !with_redis(c, cfg, cut_step, &cx, err, sizeof(err));
    if (!cx.cut) {
        fprintf(stderr, "retort submit: batch %s still counts the job(s) not sent, and cannot complete: %s\n",
                batch, err);
        fprintf(stderr, "retort submit: the jobs not sent keep their job_id: the batch still counts them\n");
        goto cleanup;
    }
    if ((path = side_path(file, batch, "not_sent.jsonl")) && !write_whole(path, put_jobs, &rest, ferr, sizeof(ferr))) {
        fprintf(stderr,
                "retort submit: batch %s now counts the %zu job(s) delivered or possibly in the topic; the %zu "
                "not sent are out of it (not_sent), written to %s: submit them as a new batch (retort submit %s)\n",
                batch, kept.count, rest.count, path, path);
    } else {
        /* every one named, then: the user needs them all */
        fprintf(stderr,
                "retort submit: batch %s now counts the %zu job(s) delivered or possibly in the topic; the %zu "
                "not sent are out of it (not_sent): submit them as a new batch; not written to a file (%s), "
                "they are:\n",
                batch, kept.count, rest.count, ferr);
        for (size_t i = 0; i < rest.count; i++)
            fprintf(stderr, "retort submit: job %s (line %ld) not sent\n", rest.items[i].id, rest.items[i].line);
    }
    if (!freed) fprintf(stderr, "retort submit: the jobs not sent keep their job_id: %s\n", err);
cleanup:
    free(path);
    /* views: the jobs stay js's */
    free(kept.items);
    free(rest.items);
}

/* The first line of what a submit stopped by a signal says: what it was
 * doing; then comes what it undid or cut. */
static void say_interrupted(const char *what) {
    fprintf(stderr, "retort submit: interrupted (%s) %s\n", batch_util_signal_name(batch_util_stop), what);
}

int batch_submit_main(int argc, char **argv) {
    batch_opt opts[] = {{"--batch", NULL, 1, NULL, 0}, {"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    submit_ctx sc = {.cmd = "submit"};
    schema_registry *reg = NULL;
    redisContext *c = NULL;
    batch_producer *prod = NULL;
    char batch[256], err[2048];
    int claimed = 0;
    claim_ctx cl = {0};
    unsigned char *unsent = NULL; /* per job: certainly not in the topic */
    batch_signals sigs = {0};
    int rc = batch_util_args("submit", submit_usage, argc, argv, opts, 2, pos, 1, &npos, &cfg);
    if (rc) return rc;
    rc = BATCH_EXIT_USAGE;
    if (opts[1].set) {
        fputs(submit_usage, stdout);
        rc = BATCH_EXIT_OK;
        goto done;
    }
    if (npos != 1) {
        fprintf(stderr, "retort submit: which file?\n%s", submit_usage);
        goto done;
    }
    sc.cfg = cfg;
    sc.file = pos[0];
    if (opts[0].value) {
        /* bytes: it names the batch's keys and the ids made of it */
        if (!id_ok(opts[0].value, BATCH_ID_MAX, BATCH_ID_MAX)) {
            fprintf(stderr, "retort submit: --batch: 1 to %d bytes without white space or braces\n",
                    BATCH_ID_MAX);
            goto done;
        }
        snprintf(batch, sizeof(batch), "%s", opts[0].value);
    } else {
        make_batch_id(batch, sizeof(batch));
    }
    sc.batch = batch;
    sc.seen = batch_tally_new();
    if (!sc.seen) goto done;
    /* Every line is checked before anything is produced: unchecked, a bad
     * job would go to the dead-letter topic with its batch never done. */
    sc.envelope = load_envelope(cfg, &reg, err, sizeof(err));
    if (!sc.envelope) {
        fprintf(stderr, "retort submit: cannot check the jobs against the job envelope: %s: nothing submitted\n",
                err);
        goto done;
    }
    if (batch_producer_max_bytes(cfg, &sc.max_bytes, err, sizeof(err))) {
        fprintf(stderr, "retort submit: %s\n", err);
        goto done;
    }
    if (read_jobs(&sc)) goto done;
    if (sc.errors) {
        if (sc.errors > MAX_REPORTED_ERRORS)
            fprintf(stderr, "retort submit: ... %d more\n", sc.errors - MAX_REPORTED_ERRORS);
        fprintf(stderr, "retort submit: %d bad line(s) in %s: nothing submitted\n", sc.errors, sc.file);
        goto done;
    }
    if (!sc.jobs.count) {
        fprintf(stderr, "retort submit: %s has no jobs: nothing submitted\n", sc.file);
        goto done;
    }
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort submit: %s\n", err);
        goto done;
    }
    if (!(prod = batch_producer_new(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort submit: %s\n", err);
        goto done;
    }
    batch_producer_set_stop(prod, &batch_util_stop);
    cl = (claim_ctx){cfg, &sc.jobs, batch, script_claim, 0, "submit", 0};
    const char *topic = config_get(cfg, "topics.jobs");
    if (batch_producer_check(prod, topic, 10000, err, sizeof(err))) {
        fprintf(stderr, "retort submit: %s (kafka.bootstrap.servers=%s): nothing submitted\n", err,
                config_get(cfg, "kafka.bootstrap.servers"));
        goto done;
    }
    /* From here on, SIGINT or SIGTERM stops the submit at its next check
     * (between chunks of Redis commands, before each job produced), which
     * then undoes or cuts what it did, and ends by the signal; until here
     * there is nothing to undo, and the default action is as good. */
    batch_util_catch_signals(&sigs);
    /* Redis first: results and watch need the batch before its first
     * job can finish. */
    if (claim_batch(c, cfg, batch, sc.file, sc.jobs.count, err, sizeof(err))) {
        fprintf(stderr, "retort submit: %s\n", err);
        goto done;
    }
    claimed = 1;
    /* A job id that has state already would be acknowledged by the worker
     * without running (it is final, or an attempt ahead), and one that
     * another batch holds would run once, for that batch: refuse both.
     * The ids are claimed as they are checked, so two submits at once
     * cannot both have one. */
    if (batch_util_pipeline(c, sc.jobs.count, 1, claim_build, claim_reply, &cl, err, sizeof(err))) {
        if (batch_util_stop) say_interrupted("while claiming the job ids: nothing submitted");
        else fprintf(stderr, "retort submit: %s: nothing submitted\n", err);
        goto done;
    }
    if (cl.refused) {
        if (cl.refused > MAX_REPORTED_ERRORS)
            fprintf(stderr, "retort submit: ... %zu more\n", cl.refused - MAX_REPORTED_ERRORS);
        fprintf(stderr, "retort submit: %zu job_id(s) taken already: nothing submitted\n", cl.refused);
        goto done;
    }
    if (store_jobs(c, cfg, batch, &sc.jobs, err, sizeof(err))) {
        if (batch_util_stop) say_interrupted("while storing the jobs: nothing submitted");
        else fprintf(stderr, "retort submit: %s: nothing submitted\n", err);
        goto done;
    }
    expire_batch(c, cfg, batch);
    if (!(unsent = calloc(sc.jobs.count, 1))) {
        fprintf(stderr, "retort submit: out of memory: nothing submitted\n");
        goto done;
    }
    size_t bad = produce_all("submit", prod, topic, &sc.jobs, unsent, err, sizeof(err));
    size_t nunsent = 0;
    for (size_t i = 0; i < sc.jobs.count; i++) nunsent += unsent[i];
    if (nunsent == sc.jobs.count) {
        if (batch_util_stop) say_interrupted("before any job was delivered: nothing submitted");
        else fprintf(stderr, "retort submit: no job delivered to %s: %s: nothing submitted\n", topic, err);
        goto done;
    }
    /* the batch stays, even partly delivered, or only possibly: a job
     * that may be in the topic may reach a worker, which counts it */
    claimed = 0;
    if (bad) {
        /* The jobs certainly not in the topic (never queued, or refused
         * by the broker) leave the batch and let their ids go; a job
         * whose delivery failed otherwise stays in the batch with its
         * claim: it may be in the topic all the same. */
        size_t maybe = bad - nunsent;
        if (batch_util_stop) say_interrupted("while producing the jobs");
        fprintf(stderr, "retort submit: %zu of %zu job(s) of batch %s not delivered to %s: %s\n", bad,
                sc.jobs.count, batch, topic, err);
        if (nunsent) cut_unsent(&c, cfg, batch, sc.file, &sc.jobs, unsent, &cl);
        if (maybe)
            fprintf(stderr,
                    "retort submit: %zu job(s) not delivered may be in the topic yet: they stay this batch's "
                    "(job_id kept; give one another to submit it again), and the batch completes only if they "
                    "reach a worker\n",
                    maybe);
        goto done;
    }
    /* every job delivered: a signal during the last flush changed nothing */
    batch_util_stop = 0;
    printf("batch %s: submitted %zu job(s) to %s\n", batch, sc.jobs.count, topic);
    rc = BATCH_EXIT_OK;
done:
    /* nothing went out: the ids are free again (only the claims this
     * submit made go), and the batch is forgotten */
    if (claimed) release_batch(&c, cfg, batch, sc.file, &cl);
    free(unsent);
    batch_producer_free(prod);
    if (c) redisFree(c);
    sub_jobs_clear(&sc.jobs);
    batch_tally_free(sc.seen);
    schema_free(sc.envelope);
    schema_registry_free(reg);
    config_free(cfg);
    batch_util_release_signals(&sigs, 1);
    return rc;
}

/* ---- resubmit ------------------------------------------------------------- */

/* Resets one escalated job, atomically with the batch's counters, and only
 * if it is still escalated.  What its attempts cost is kept on the batch
 * (replaced_*: tokens by model, the prompt's cached ones apart), since its
 * history goes.  The job's hash keeps only the
 * next run's number, which the job is produced with: its events get ids
 * of their own, and the worker takes a late message of the earlier run
 * for stale.  A job reset before whose run has not begun (status
 * 'resubmitted': its message may never have been delivered) is reset
 * again to a later run, the batch's counters as they are.  A job whose
 * batch_id is another batch's is left alone.  KEYS: job, history, batch;
 * ARGV: now (ms), ttl (s), batch id.  Returns the new run, or 0
 * when the job was neither. */
static const char script_reset[] =
    "local f = redis.call('HMGET', KEYS[1], 'status', 'run', 'batch_id')\n"
    "if f[1] ~= 'escalated' and f[1] ~= 'resubmitted' then return 0 end\n"
    "-- another batch's job under the same id: not ours to run again\n"
    "if f[3] and f[3] ~= ARGV[3] then return 0 end\n"
    "local run = (tonumber(f[2]) or 1) + 1\n"
    "local batch = f[1] == 'escalated' and redis.call('EXISTS', KEYS[3]) == 1\n"
    "if batch then\n"
    "  for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do\n"
    "    local ok, rec = pcall(cjson.decode, v)\n"
    "    local m = 'unknown'\n"
    "    if ok and type(rec) == 'table' then\n"
    "      if type(rec['model']) == 'string' then m = rec['model'] end\n"
    "      local u = rec['usage']\n"
    "      if type(u) == 'table' then\n"
    "        local p = tonumber(u['prompt_tokens']) or 0\n"
    "        local c = tonumber(u['completion_tokens']) or 0\n"
    "        redis.call('HINCRBY', KEYS[3], 'replaced_prompt_tokens.' .. m, string.format('%d', p))\n"
    "        redis.call('HINCRBY', KEYS[3], 'replaced_completion_tokens.' .. m, string.format('%d', c))\n"
    "        -- of the prompt, what the provider's cache priced apart\n"
    "        for _, k in ipairs({'cache_read_tokens', 'cache_write_tokens'}) do\n"
    "          local n = tonumber(u[k]) or 0\n"
    "          if n > 0 then redis.call('HINCRBY', KEYS[3], 'replaced_' .. k .. '.' .. m, string.format('%d', n)) end\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "    redis.call('HINCRBY', KEYS[3], 'replaced_attempts', 1)\n"
    "    redis.call('HINCRBY', KEYS[3], 'replaced_attempts.' .. m, 1)\n"
    "  end\n"
    "  redis.call('HINCRBY', KEYS[3], 'escalated', -1)\n"
    "  redis.call('HINCRBY', KEYS[3], 'resubmitted', 1)\n"
    "end\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "-- the batch keeps its claim on the id\n"
    "redis.call('HSET', KEYS[1], 'run', run, 'status', 'resubmitted', 'updated', ARGV[1], 'batch_id', ARGV[3])\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[2])\n"
    "return run\n";

typedef struct resub_ctx {
    const config *cfg;
    const char *batch;
    const batch_ids *ids;
    const char *input_key;
    const char *batch_key;
    const char *sha;
    int max_attempts;        /* 0: as in the input */
    int *reset;                /* per job: its new run, 0 when not reset */
    sub_jobs jobs;             /* the jobs to produce */
    size_t candidates;
    size_t missing_input;
    size_t other_batch;        /* escalated under another batch (job_id reused): skipped */
    size_t max_bytes;          /* key + job, as the producer's message.max.bytes allows */
    size_t too_big;            /* jobs that would not fit a message with their run */
} resub_ctx;

/* The member a job produced again gets, before its closing brace: its run
 * (the reset's answer). */
#define RESUB_RUN_MEMBER ",\"run\":%d"

static int scan_build(redisContext *c, size_t i, void *ud) {
    resub_ctx *rc = ud;
    char key[BATCH_KEY_MAX];
    batch_util_key_job(rc->cfg, rc->ids->ids[i], key, sizeof(key));
    if (redisAppendCommand(c, "HMGET %s status batch_id run", key) != REDIS_OK) return -1;
    return redisAppendCommand(c, "HGET %s %s", rc->input_key, rc->ids->ids[i]) == REDIS_OK ? 0 : -1;
}

/* The job to produce again: the original, without what a retry adds,
 * with the new max_attempts; checked against the message size with the
 * run it will carry (the one the reset script gives: the hash's run + 1;
 * a resubmit at the same time may take it a run further, a digit more at
 * worst, which the framing's margin in max_bytes covers). */
static int scan_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    resub_ctx *rc = ud;
    for (int k = 0; k < 2; k++) {
        if (r[k]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r[k]->str);
            return -1;
        }
    }
    const redisReply *st = r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 3 ? r[0]->element[0] : NULL;
    if (!st || st->type != REDIS_REPLY_STRING || (strcmp(st->str, "escalated") && strcmp(st->str, "resubmitted")))
        return 0;
    if (batch_util_other_batch(r[0]->element[1], rc->batch)) {
        rc->other_batch++;
        return 0;
    }
    rc->candidates++;
    cJSON *doc = r[1]->type == REDIS_REPLY_STRING ? parse_editable(r[1]->str, r[1]->len, NULL) : NULL;
    if (!cJSON_IsObject(doc)) {
        rc->missing_input++;
        fprintf(stderr, "retort resubmit: job %s: its input is missing from the batch; skipped\n",
                rc->ids->ids[i]);
        cJSON_Delete(doc);
        return 0;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "attempt");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "reflection");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "run"); /* the reset says which */
    if (rc->max_attempts) {
        cJSON_DeleteItemFromObjectCaseSensitive(doc, "max_attempts");
        cJSON_AddNumberToObject(doc, "max_attempts", rc->max_attempts);
    }
    char *json = jsonout_print(doc);
    cJSON_Delete(doc);
    if (json) {
        int run = (int)batch_util_reply_ll(r[0]->element[2], 1) + 1;
        char why[256];
        if (job_fits(rc->ids->ids[i], strlen(json) + (size_t)snprintf(NULL, 0, RESUB_RUN_MEMBER, run),
                     rc->max_bytes, why, sizeof(why))) {
            if (rc->too_big++ < MAX_REPORTED_ERRORS)
                fprintf(stderr, "retort resubmit: job %s, as run %d, would be %s\n", rc->ids->ids[i], run, why);
            free(json);
            return 0;
        }
    }
    char *id = json ? strdup(rc->ids->ids[i]) : NULL;
    if (!json || !id || sub_jobs_push(&rc->jobs, id, json, (long)i + 1)) {
        free(json);
        free(id);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int reset_build(redisContext *c, size_t i, void *ud) {
    resub_ctx *rc = ud;
    char jkey[BATCH_KEY_MAX], hkey[BATCH_KEY_MAX];
    const char *id = rc->jobs.items[i].id;
    batch_util_key_job(rc->cfg, id, jkey, sizeof(jkey));
    batch_util_key_history(rc->cfg, id, hkey, sizeof(hkey));
    return redisAppendCommand(c, "EVALSHA %s 3 %s %s %s %lld %lld %s", rc->sha, jkey, hkey, rc->batch_key,
                              (long long)util_wall_ms(), config_get_int(rc->cfg, "redis.ttl_s"),
                              rc->batch) == REDIS_OK
               ? 0
               : -1;
}

static int reset_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    resub_ctx *rc = ud;
    if (r[0]->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r[0]->str);
        return -1;
    }
    rc->reset[i] = r[0]->type == REDIS_REPLY_INTEGER && r[0]->integer > 1 && r[0]->integer <= 1000000
                       ? (int)r[0]->integer
                       : 0;
    if (!rc->reset[i]) return 0;
    /* The job as scanned is cJSON's print of an object with members
     * (job_id at least) and no "run": the run goes in before its '}'. */
    sub_job *sj = &rc->jobs.items[i];
    size_t len = strlen(sj->json);
    char *json = malloc(len + 32);
    if (!json) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(json, sj->json, len - 1);
    snprintf(json + len - 1, 33, RESUB_RUN_MEMBER "}", rc->reset[i]);
    free(sj->json);
    sj->json = json;
    return 0;
}

int batch_resubmit_main(int argc, char **argv) {
    batch_opt opts[] = {{"--escalated", NULL, 0, NULL, 0},
                        {"--max-attempts", NULL, 1, NULL, 0},
                        {"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    redisContext *c = NULL;
    redisReply *r = NULL;
    batch_producer *prod = NULL;
    batch_ids ids = {0};
    resub_ctx rc_ = {0};
    char err[2048], jkey[BATCH_KEY_MAX], ikey[BATCH_KEY_MAX], bkey[BATCH_KEY_MAX], sha[41];
    int rc = batch_util_args("resubmit", resubmit_usage, argc, argv, opts, 3, pos, 1, &npos, &cfg);
    if (rc) return rc;
    rc = BATCH_EXIT_USAGE;
    if (opts[2].set) {
        fputs(resubmit_usage, stdout);
        rc = BATCH_EXIT_OK;
        goto done;
    }
    if (npos != 1 || !opts[0].set) {
        fprintf(stderr, "retort resubmit: %s\n%s", npos != 1 ? "which batch?" : "say which jobs: --escalated",
                resubmit_usage);
        goto done;
    }
    if (opts[1].value) {
        char *end;
        long n = strtol(opts[1].value, &end, 10);
        long ceiling = (long)config_get_int(cfg, "retry.max_attempts_ceiling");
        if (end == opts[1].value || *end || n < 1 || n > ceiling) {
            fprintf(stderr, "retort resubmit: --max-attempts: an integer from 1 to %ld (retry.max_attempts_ceiling)\n",
                    ceiling);
            goto done;
        }
        rc_.max_attempts = (int)n;
    }
    const char *batch = pos[0];
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    if (batch_util_read_list(c, batch_util_key_jobs(cfg, batch, jkey, sizeof(jkey)), &ids, err, sizeof(err))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    if (!ids.count) {
        fprintf(stderr, "retort resubmit: unknown batch %s (not submitted with retort submit, or expired)\n", batch);
        rc = BATCH_EXIT_NO;
        goto done;
    }
    rc_.cfg = cfg;
    rc_.batch = batch;
    rc_.ids = &ids;
    rc_.input_key = batch_util_key_input(cfg, batch, ikey, sizeof(ikey));
    rc_.batch_key = batch_util_key_batch(cfg, batch, bkey, sizeof(bkey));
    if (batch_producer_max_bytes(cfg, &rc_.max_bytes, err, sizeof(err))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    if (batch_util_pipeline(c, ids.count, 2, scan_build, scan_reply, &rc_, err, sizeof(err))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    if (rc_.other_batch)
        fprintf(stderr, "retort resubmit: %zu job(s) hold another batch's state (job_id reused): skipped\n",
                rc_.other_batch);
    /* As submit: all or nothing, decided before any state is reset.  The
     * producer would refuse such a job after the ones before it went out,
     * and it would stay reset, never to run. */
    if (rc_.too_big) {
        if (rc_.too_big > MAX_REPORTED_ERRORS)
            fprintf(stderr, "retort resubmit: ... %zu more\n", rc_.too_big - MAX_REPORTED_ERRORS);
        fprintf(stderr, "retort resubmit: %zu job(s) too large for a message: nothing resubmitted\n",
                rc_.too_big);
        goto done;
    }
    if (!rc_.jobs.count) {
        printf("batch %s: no escalated job to resubmit\n", batch);
        rc = rc_.missing_input ? BATCH_EXIT_NO : BATCH_EXIT_OK;
        goto done;
    }
    /* The broker must answer before any state is reset: a reset job
     * that is never produced again would stay unfinished. */
    if (!(prod = batch_producer_new(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    const char *topic = config_get(cfg, "topics.jobs");
    if (batch_producer_check(prod, topic, 10000, err, sizeof(err))) {
        fprintf(stderr, "retort resubmit: %s (kafka.bootstrap.servers=%s): nothing resubmitted\n", err,
                config_get(cfg, "kafka.bootstrap.servers"));
        goto done;
    }
    r = redisCommand(c, "SCRIPT LOAD %s", script_reset);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "retort resubmit: redis SCRIPT LOAD: %s\n",
                r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        goto done;
    }
    memcpy(sha, r->str, 41);
    rc_.sha = sha;
    rc_.reset = calloc(rc_.jobs.count, sizeof(*rc_.reset));
    if (!rc_.reset) goto done;
    if (batch_util_pipeline(c, rc_.jobs.count, 1, reset_build, reset_reply, &rc_, err, sizeof(err))) {
        fprintf(stderr, "retort resubmit: %s\n", err);
        goto done;
    }
    /* Only the jobs reset now are produced (another resubmit may have
     * taken some in between). */
    size_t keep = 0;
    for (size_t i = 0; i < rc_.jobs.count; i++) {
        if (rc_.reset[i]) {
            rc_.jobs.items[keep++] = rc_.jobs.items[i];
        } else {
            free(rc_.jobs.items[i].id);
            free(rc_.jobs.items[i].json);
        }
    }
    rc_.jobs.count = keep;
    /* The batch runs again: its keys live a TTL from now, as a worker's
     * finish gives them (not from the submit, which may be a TTL ago). */
    if (keep) expire_batch(c, cfg, batch);
    size_t bad = keep ? produce_all("resubmit", prod, topic, &rc_.jobs, NULL, err, sizeof(err)) : 0;
    if (bad) {
        fprintf(stderr,
                "retort resubmit: %zu of %zu job(s) reset but not delivered to %s: %s\n"
                "retort resubmit: they stay unfinished (status resubmitted); run this command again\n",
                bad, keep, topic, err);
        goto done;
    }
    printf("batch %s: resubmitted %zu escalated job(s)", batch, keep);
    if (rc_.max_attempts) printf(" with max_attempts %d", rc_.max_attempts);
    printf("\n");
    rc = rc_.missing_input ? BATCH_EXIT_NO : BATCH_EXIT_OK;
done:
    freeReplyObject(r);
    batch_producer_free(prod);
    if (c) redisFree(c);
    batch_util_ids_clear(&ids);
    sub_jobs_clear(&rc_.jobs);
    free(rc_.reset);
    config_free(cfg);
    return rc;
}
