#include "batch_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch_report.h"
#include "batch_submit.h"
#include "batch_util.h"
#include "jsonin.h"
#include "jsonout.h"
#include "util.h"

/* ---- watch ---------------------------------------------------------------- */

static const char watch_usage[] =
    "usage: retort watch BATCH [--interval S] [--once] [-c FILE] [--set KEY=VALUE]\n"
    "Progress of a batch from its Redis counters (never scans its jobs): on a terminal a bar\n"
    "redrawn in place, otherwise one line per interval (default 0.5 s on a terminal, 5 s\n"
    "otherwise).  Exits 0 once every job is final or escalated.  --once prints the progress\n"
    "once and exits 0 when the batch is complete, 1 when it is not.\n";

/* Rate over the last RATE_WINDOW_S seconds of samples. */
#define RATE_WINDOW_S 10.0
#define MAX_SAMPLES 256

typedef struct progress {
    int known;       /* the batch hash has a total (written by submit) */
    long long total, final, escalated, retrying, attempts, created, updated;
    long long not_sent;  /* jobs a failed submit cut from the batch (not in total) */
} progress;

typedef struct sample {
    double t;        /* monotonic seconds */
    long long done;
} sample;

typedef struct rate_window {
    sample s[MAX_SAMPLES];
    size_t n;
} rate_window;

static volatile sig_atomic_t watch_stop;

static void on_stop_signal(int sig) { watch_stop = sig; }

static double now_s(void) { return (double)util_mono_us() / 1e6; }

static int read_progress(redisContext *c, const char *key, progress *p, char *err, size_t errlen) {
    redisReply *r =
        redisCommand(c, "HMGET %s total final escalated retrying attempts created updated not_sent", key);
    int rc = -1;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 8) {
        snprintf(err, errlen, "redis: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        goto done;
    }
    p->known = r->element[0]->type == REDIS_REPLY_STRING;
    p->total = batch_util_reply_ll(r->element[0], 0);
    p->final = batch_util_reply_ll(r->element[1], 0);
    p->escalated = batch_util_reply_ll(r->element[2], 0);
    p->retrying = batch_util_reply_ll(r->element[3], 0);
    p->attempts = batch_util_reply_ll(r->element[4], 0);
    p->created = batch_util_reply_ll(r->element[5], 0);
    p->updated = batch_util_reply_ll(r->element[6], 0);
    p->not_sent = batch_util_reply_ll(r->element[7], 0);
    rc = 0;
done:
    freeReplyObject(r);
    return rc;
}

/* Jobs per second over the recent window; before the window has a second
 * of samples, the average since the batch was created.  -1: unknown. */
static double rate_update(rate_window *w, const progress *p, long long done) {
    double t = now_s();
    if (w->n == MAX_SAMPLES) {
        memmove(w->s, w->s + 1, (MAX_SAMPLES - 1) * sizeof(w->s[0]));
        w->n--;
    }
    w->s[w->n++] = (sample){t, done};
    /* keep one sample at least as old as the window, so the window is full */
    size_t drop = 0;
    while (w->n - drop >= 2 && t - w->s[drop + 1].t >= RATE_WINDOW_S) drop++;
    if (drop) {
        memmove(w->s, w->s + drop, (w->n - drop) * sizeof(w->s[0]));
        w->n -= drop;
    }
    double dt = t - w->s[0].t;
    if (dt >= 1.0) {
        double r = (double)(done - w->s[0].done) / dt;
        return r > 0 ? r : 0;
    }
    double age = (double)(util_wall_ms() - p->created) / 1000.0;
    if (p->created > 0 && age >= 1.0 && done > 0) return (double)done / age;
    return -1;
}

static void fmt_duration(double s, char *buf, size_t len) {
    long long n = (long long)(s + 0.5);
    if (n >= 3600) snprintf(buf, len, "%lldh%02lldm", n / 3600, n % 3600 / 60);
    else if (n >= 60) snprintf(buf, len, "%lldm%02llds", n / 60, n % 60);
    else snprintf(buf, len, "%llds", n);
}

/* Rounded down, so 100.0% means complete. */
static double percent(long long done, long long total) {
    if (total <= 0) return 0;
    return floor((double)done * 1000.0 / (double)total) / 10.0;
}

static int term_cols(void) {
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

static void render(int tty, const char *batch, const progress *p, double rate) {
    long long done = p->final + p->escalated;
    int complete = done >= p->total;
    char rate_s[32], eta[64];
    if (rate >= 0) snprintf(rate_s, sizeof(rate_s), "%.1f jobs/s", rate);
    else snprintf(rate_s, sizeof(rate_s), "-- jobs/s");
    if (complete) {
        /* the batch's own duration: submit to its last recorded attempt */
        char d[32];
        fmt_duration(p->updated > p->created && p->created > 0 ? (double)(p->updated - p->created) / 1000.0 : 0,
                     d, sizeof(d));
        snprintf(eta, sizeof(eta), "complete in %s", d);
    } else if (rate > 0) {
        char d[32];
        fmt_duration((double)(p->total - done) / rate, d, sizeof(d));
        snprintf(eta, sizeof(eta), "ETA %s", d);
    } else {
        snprintf(eta, sizeof(eta), "ETA --");
    }
    double pct = percent(done, p->total);
    /* a batch cut by a failed submit says so: its total is not the input's */
    char cut[48] = "";
    if (p->not_sent > 0) snprintf(cut, sizeof(cut), "%snot sent %lld", tty ? " | " : ", ", p->not_sent);
    if (!tty) {
        char ts[40];
        util_rfc3339(util_wall_ms(), ts, sizeof(ts));
        printf("%s batch %s: %lld/%lld done (%.1f%%), final %lld, escalated %lld, retries %lld%s, %s, %s\n", ts,
               batch, done, p->total, pct, p->final, p->escalated, p->retrying, cut, rate_s, eta);
        fflush(stdout);
        return;
    }
    /* One terminal line, never wrapped (a wrapped line cannot be redrawn
     * with \r): the long labels when a bar of 10 fits beside them, else
     * short ones, else the text cut to the width. */
    int cols = term_cols();
    char stats[256];
    snprintf(stats, sizeof(stats), "%lld/%lld %5.1f%% | final %lld | retries %lld | escalated %lld%s | %s | %s",
             done, p->total, pct, p->final, p->retrying, p->escalated, cut, rate_s, eta);
    if (cols - (int)strlen(stats) - 4 < 10)
        snprintf(stats, sizeof(stats), "%lld/%lld %.1f%% f%lld r%lld e%lld %s %s", done, p->total, pct, p->final,
                 p->retrying, p->escalated, rate_s, eta);
    int width = cols - (int)strlen(stats) - 4;
    if (width > 40) width = 40;
    if (width >= 10) {
        /* '#' final, 'x' escalated, '.' still to do */
        char bar[48];
        long long t = p->total > 0 ? p->total : 1;
        int nf = (int)((double)p->final * width / (double)t);
        int ne = (int)((double)done * width / (double)t) - nf;
        if (nf > width) nf = width;
        if (ne < 0) ne = 0;
        if (nf + ne > width) ne = width - nf;
        memset(bar, '#', (size_t)nf);
        memset(bar + nf, 'x', (size_t)ne);
        memset(bar + nf + ne, '.', (size_t)(width - nf - ne));
        bar[width] = '\0';
        printf("\r[%s] %s\033[K", bar, stats);
    } else {
        printf("\r%.*s\033[K", cols - 1, stats);
    }
    if (complete) printf("\n");
    fflush(stdout);
}

static int cmd_watch(int argc, char **argv) {
    batch_opt opts[] = {{"--interval", NULL, 1, NULL, 0}, {"--once", NULL, 0, NULL, 0},
                        {"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    redisContext *c = NULL;
    rate_window *w = NULL;
    char err[1024], key[BATCH_KEY_MAX];
    int rc = batch_util_args("watch", watch_usage, argc, argv, opts, 3, pos, 1, &npos, &cfg);
    if (rc) return rc;
    rc = BATCH_EXIT_USAGE;
    if (opts[2].set) {
        fputs(watch_usage, stdout);
        rc = BATCH_EXIT_OK;
        goto done;
    }
    if (npos != 1) {
        fprintf(stderr, "retort watch: which batch?\n%s", watch_usage);
        goto done;
    }
    int tty = isatty(STDOUT_FILENO);
    double interval = tty ? 0.5 : 5.0;
    if (opts[0].value) {
        char *end;
        interval = strtod(opts[0].value, &end);
        if (end == opts[0].value || *end || !(interval >= 0.05 && interval <= 3600)) {
            fprintf(stderr, "retort watch: --interval: seconds from 0.05 to 3600\n");
            goto done;
        }
    }
    const char *batch = pos[0];
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort watch: %s\n", err);
        goto done;
    }
    if (!(w = calloc(1, sizeof(*w)))) goto done;
    batch_util_key_batch(cfg, batch, key, sizeof(key));
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);  /* no SA_RESTART: the sleep ends at once */
    sigaction(SIGTERM, &sa, NULL);
    int frames = 0;
    for (;;) {
        progress p = {0};
        if (read_progress(c, key, &p, err, sizeof(err))) {
            if (tty && frames) printf("\n");
            fprintf(stderr, "retort watch: %s\n", err);
            goto done;
        }
        if (!p.known) {
            if (tty && frames) printf("\n");
            fprintf(stderr, "retort watch: %s batch %s (not submitted with retort submit, or expired)\n",
                    frames ? "no more" : "unknown", batch);
            rc = BATCH_EXIT_NO;
            goto done;
        }
        long long done_n = p.final + p.escalated;
        double rate = rate_update(w, &p, done_n);
        int complete = done_n >= p.total;
        render(tty, batch, &p, rate);
        frames++;
        if (complete) {
            rc = BATCH_EXIT_OK;
            goto done;
        }
        if (opts[1].set) {
            if (tty) printf("\n");
            rc = BATCH_EXIT_NO;
            goto done;
        }
        struct timespec ts = {(time_t)interval, (long)((interval - floor(interval)) * 1e9)};
        while (!watch_stop && nanosleep(&ts, &ts) && errno == EINTR) {
        }
        if (watch_stop) {
            if (tty) printf("\n");
            rc = 128 + watch_stop;
            goto done;
        }
    }
done:
    fflush(stdout);
    free(w);
    if (c) redisFree(c);
    config_free(cfg);
    if (watch_stop) {
        /* end by the signal itself, so the shell sees how we ended */
        signal(watch_stop, SIG_DFL);
        raise(watch_stop);
    }
    return rc;
}

/* ---- results -------------------------------------------------------------- */

static const char results_usage[] =
    "usage: retort results BATCH -o OUT.jsonl [--errors ERRORS.jsonl] [-c FILE] [--set KEY=VALUE]\n"
    "Writes the batch's outputs in input order: one line {\"job_id\", \"output\", \"attempts\"} per\n"
    "final job to OUT, one line {\"job_id\", \"reason\", \"category\", \"attempts\", \"violations\"}\n"
    "per escalated job to ERRORS (default: OUT with the suffix .errors.jsonl).  Jobs not finished\n"
    "yet are counted on stderr and make the exit code 1.  \"-\" for OUT or ERRORS is standard\n"
    "output; with -o - and no --errors, escalated jobs are only counted (on stderr).\n";

typedef struct results_ctx {
    const config *cfg;
    const batch_ids *ids;
    FILE *out, *errs;
    const char *batch;
    size_t finals, escalations, running, missing;
    size_t other_batch;  /* the job's state is another batch's (job_id reused) */
} results_ctx;

static int results_build(redisContext *c, size_t i, void *ud) {
    results_ctx *rc = ud;
    char jkey[BATCH_KEY_MAX], hkey[BATCH_KEY_MAX];
    batch_util_key_job(rc->cfg, rc->ids->ids[i], jkey, sizeof(jkey));
    batch_util_key_history(rc->cfg, rc->ids->ids[i], hkey, sizeof(hkey));
    if (redisAppendCommand(c, "HMGET %s status attempt batch_id", jkey) != REDIS_OK) return -1;
    return redisAppendCommand(c, "LINDEX %s -1", hkey) == REDIS_OK ? 0 : -1;
}

/* jsonout, not cJSON's printer: the record was read with jsonin, so the
 * output's numbers go out as the model wrote them. */
static int write_line(FILE *f, cJSON *obj) {
    char *s = jsonout_print(obj);
    int rc = s && fputs(s, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
    free(s);
    return rc;
}

static int results_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    results_ctx *rc = ud;
    if (batch_util_stop) {
        snprintf(err, errlen, "interrupted");
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        if (r[k]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r[k]->str);
            return -1;
        }
    }
    const redisReply *st = r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 3 ? r[0]->element[0] : NULL;
    if (st && batch_util_other_batch(r[0]->element[2], rc->batch)) {
        /* not this batch's outcome: its job never ran for this batch */
        rc->other_batch++;
        return 0;
    }
    const char *status = st && st->type == REDIS_REPLY_STRING ? st->str : NULL;
    int is_final = status && !strcmp(status, "final");
    int is_esc = status && !strcmp(status, "escalated");
    cJSON *rec = (is_final || is_esc) && r[1]->type == REDIS_REPLY_STRING
                     ? jsonin_parse_all(r[1]->str, r[1]->len, NULL) : NULL;
    if (!rec) {
        /* running, retrying, never started, expired, or no record */
        if (status) rc->running++;
        else rc->missing++;
        return 0;
    }
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(rec, "attempt");
    double attempts = cJSON_IsNumber(att) ? att->valuedouble
                                          : (double)batch_util_reply_ll(r[0]->element[1], 0);
    cJSON *line = cJSON_CreateObject();
    int failed = !line;
    if (!failed) {
        cJSON_AddStringToObject(line, "job_id", rc->ids->ids[i]);
        if (is_final) {
            cJSON *value = cJSON_GetObjectItemCaseSensitive(rec, "value");
            if (value) cJSON_AddItemReferenceToObject(line, "output", value);
            else cJSON_AddNullToObject(line, "output");
            cJSON_AddNumberToObject(line, "attempts", attempts);
            failed = write_line(rc->out, line);
            rc->finals++;
        } else {
            const char *names[] = {"reason", "category"};
            for (int k = 0; k < 2; k++) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, names[k]);
                if (cJSON_IsString(v)) cJSON_AddItemReferenceToObject(line, names[k], v);
                else cJSON_AddNullToObject(line, names[k]);
            }
            cJSON_AddNumberToObject(line, "attempts", attempts);
            cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, "violations");
            if (cJSON_IsArray(v)) cJSON_AddItemReferenceToObject(line, "violations", v);
            else cJSON_AddItemToObject(line, "violations", cJSON_CreateArray());
            failed = rc->errs ? write_line(rc->errs, line) : 0;
            rc->escalations++;
        }
    }
    cJSON_Delete(line); /* references into rec only */
    jsonin_free(rec);
    if (failed) {
        snprintf(err, errlen, "writing the results: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* One of results' two files.  "-" is standard output, written as it goes;
 * any other path is written beside its target (PATH.tmpPID) and renamed
 * over it at the end, so a reader never sees half a file. */
typedef struct results_file {
    const char *path; /* borrowed; NULL: not written */
    char *tmp;        /* the file beside the target, while it exists */
    FILE *f;
} results_file;

static int results_file_open(results_file *rf, char *err, size_t errlen) {
    struct stat sb;
    if (!rf->path) return 0;
    if (!strcmp(rf->path, "-")) {
        rf->f = stdout;
        return 0;
    }
    /* found now, not by the rename once everything is written */
    if (!stat(rf->path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s is a directory", rf->path);
        return -1;
    }
    if (asprintf(&rf->tmp, "%s.tmp%d", rf->path, (int)getpid()) < 0) {
        rf->tmp = NULL;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (!(rf->f = fopen(rf->tmp, "w"))) {
        snprintf(err, errlen, "cannot write %s: %s", rf->path, strerror(errno));
        free(rf->tmp);
        rf->tmp = NULL;
        return -1;
    }
    return 0;
}

/* Flushes and closes (standard output stays open).  0 = ok. */
static int results_file_close(results_file *rf) {
    FILE *f = rf->f;
    rf->f = NULL;
    if (!f) return 0;
    if (f == stdout) return fflush(f) || ferror(f) ? -1 : 0;
    return fclose(f) ? -1 : 0;
}

/* Leaves nothing beside the target (after a failure). */
static void results_file_drop(results_file *rf) {
    if (rf->f && rf->f != stdout) fclose(rf->f);
    rf->f = NULL;
    if (rf->tmp) unlink(rf->tmp);
    free(rf->tmp);
    rf->tmp = NULL;
}

static const char *results_file_name(const results_file *rf) {
    return !strcmp(rf->path, "-") ? "standard output" : rf->path;
}

static int cmd_results(int argc, char **argv) {
    batch_opt opts[] = {{"--output", "-o", 1, NULL, 0}, {"--errors", NULL, 1, NULL, 0},
                        {"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    redisContext *c = NULL;
    batch_ids ids = {0};
    results_ctx ctx = {0};
    results_file out = {0}, errs = {0};
    char err[1024], key[BATCH_KEY_MAX];
    char *errs_default = NULL;
    batch_signals sigs = {0};
    int rc = batch_util_args("results", results_usage, argc, argv, opts, 3, pos, 1, &npos, &cfg);
    if (rc) return rc;
    rc = BATCH_EXIT_USAGE;
    if (opts[2].set) {
        fputs(results_usage, stdout);
        rc = BATCH_EXIT_OK;
        goto done;
    }
    if (npos != 1 || !opts[0].value) {
        fprintf(stderr, "retort results: %s\n%s", npos != 1 ? "which batch?" : "where to? -o OUT.jsonl",
                results_usage);
        goto done;
    }
    const char *batch = pos[0];
    out.path = opts[0].value;
    if (opts[1].value) {
        errs.path = opts[1].value;
    } else if (strcmp(out.path, "-")) {
        size_t n = strlen(out.path);
        size_t stem = n > 6 && !strcmp(out.path + n - 6, ".jsonl") ? n - 6 : n;
        if (!(errs_default = malloc(stem + 16))) goto done;
        snprintf(errs_default, stem + 16, "%.*s.errors.jsonl", (int)stem, out.path);
        errs.path = errs_default;
    }
    /* with -o - and no --errors, escalated jobs are counted, not written:
     * their lines mixed into the outputs would be read as outputs */
    if (errs.path && !strcmp(errs.path, out.path)) {
        fprintf(stderr, "retort results: the errors file must differ from the output file\n");
        goto done;
    }
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort results: %s\n", err);
        goto done;
    }
    if (batch_util_read_list(c, batch_util_key_jobs(cfg, batch, key, sizeof(key)), &ids, err, sizeof(err))) {
        fprintf(stderr, "retort results: %s\n", err);
        goto done;
    }
    if (!ids.count) {
        fprintf(stderr, "retort results: unknown batch %s (not submitted with retort submit, or expired)\n", batch);
        rc = BATCH_EXIT_NO;
        goto done;
    }
    /* From here on a SIGINT or SIGTERM stops results at its next reply,
     * and it removes its temporary files (the default action left them
     * behind); before, there is nothing to remove. */
    batch_util_catch_signals(&sigs);
    if (results_file_open(&out, err, sizeof(err)) || results_file_open(&errs, err, sizeof(err))) {
        fprintf(stderr, "retort results: %s\n", err);
        goto done;
    }
    ctx.cfg = cfg;
    ctx.ids = &ids;
    ctx.batch = batch;
    ctx.out = out.f;
    ctx.errs = errs.f;
    if (batch_util_pipeline(c, ids.count, 2, results_build, results_reply, &ctx, err, sizeof(err)) ||
        batch_util_stop) {
        if (batch_util_stop)
            fprintf(stderr, "retort results: interrupted (%s): %s not written\n",
                    batch_util_signal_name(batch_util_stop), out.tmp ? out.path : "the output");
        else
            fprintf(stderr, "retort results: %s\n", err);
        goto done;
    }
    int werr = results_file_close(&out);
    werr |= results_file_close(&errs);
    if (werr) {
        fprintf(stderr, "retort results: writing the results: %s\n", strerror(errno));
        goto done;
    }
    if (out.tmp && rename(out.tmp, out.path)) {
        fprintf(stderr, "retort results: writing %s: %s\n", out.path, strerror(errno));
        goto done;
    }
    free(out.tmp);
    out.tmp = NULL;
    if (errs.tmp && rename(errs.tmp, errs.path)) {
        /* The outputs are in place; the old errors file beside them would
         * be read as this run's.  Its lines are kept where they are. */
        fprintf(stderr, "retort results: %s written, but %s not replaced (%s): this run's escalated jobs are "
                        "in %s\n", results_file_name(&out), errs.path, strerror(errno), errs.tmp);
        free(errs.tmp);
        errs.tmp = NULL;
        goto done;
    }
    free(errs.tmp);
    errs.tmp = NULL;
    /* the summary never goes into the outputs */
    fprintf(!strcmp(out.path, "-") || (errs.path && !strcmp(errs.path, "-")) ? stderr : stdout,
            "batch %s: %zu final -> %s, %zu escalated -> %s\n", batch, ctx.finals, results_file_name(&out),
            ctx.escalations, errs.path ? results_file_name(&errs) : "not written (give --errors FILE)");
    size_t unfinished = ctx.running + ctx.missing + ctx.other_batch;
    if (ctx.running + ctx.missing) {
        fprintf(stderr, "retort results: %zu of %zu job(s) not finished yet (%zu running or retrying, %zu not "
                        "started or expired)\n",
                ctx.running + ctx.missing, ids.count, ctx.running, ctx.missing);
    }
    if (ctx.other_batch)
        fprintf(stderr, "retort results: %zu of %zu job(s) hold another batch's state (job_id reused): skipped\n",
                ctx.other_batch, ids.count);
    /* not this batch's jobs any more, but lines of its input all the same */
    redisReply *ns = redisCommand(c, "HGET %s not_sent", batch_util_key_batch(cfg, batch, key, sizeof(key)));
    long long not_sent = batch_util_reply_ll(ns, 0);
    freeReplyObject(ns);
    if (not_sent > 0)
        fprintf(stderr, "retort results: %lld job(s) of the input not sent by retort submit (not_sent): not in the "
                        "batch, no line\n", not_sent);
    rc = unfinished ? BATCH_EXIT_NO : BATCH_EXIT_OK;
done:
    results_file_drop(&out);
    results_file_drop(&errs);
    free(errs_default);
    batch_util_ids_clear(&ids);
    if (c) redisFree(c);
    config_free(cfg);
    /* stopped before its files were whole: end by the signal (one after
     * them changed nothing) */
    batch_util_release_signals(&sigs, rc == BATCH_EXIT_USAGE);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------- */

int batch_cli_main(int argc, char **argv) {
    const char *cmd = argv[0];
    if (!strcmp(cmd, "submit")) return batch_submit_main(argc, argv);
    if (!strcmp(cmd, "watch")) return cmd_watch(argc, argv);
    if (!strcmp(cmd, "results")) return cmd_results(argc, argv);
    if (!strcmp(cmd, "resubmit")) return batch_resubmit_main(argc, argv);
    if (!strcmp(cmd, "report")) return batch_report_main(argc, argv);
    fprintf(stderr, "retort: unknown batch command '%s'\n", cmd);
    return BATCH_EXIT_USAGE;
}
