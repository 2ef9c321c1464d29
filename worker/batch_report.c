#include "batch_report.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_tally.h"
#include "batch_util.h"

static const char report_usage[] =
    "usage: retort report BATCH [--json] [--threshold F] [--top N] [-c FILE] [--set KEY=VALUE]\n"
    "Success rate, attempts per finished job, top violation codes and paths, escalation reasons\n"
    "and categories, failure patterns (the same violation repeated over a job's attempts, the\n"
    "longest run of consecutive escalated jobs), tokens and cost per model (pricing.MODEL.input\n"
    "and pricing.MODEL.output: USD per million tokens; prompt tokens read from or written to the\n"
    "provider's prompt cache at pricing.MODEL.cache_read and .cache_write, by default on\n"
    "Anthropic a tenth and 1.25 times the input price, elsewhere the input price).  A warning\n"
    "when the success rate is under --threshold (default 0.9).  --json prints one JSON object.\n";

/* The worker caps max_attempts at 100 (job.schema.json). */
#define HIST_MAX 100
/* Separates code and path in a tally key: neither contains it. */
#define SEP "\x1f"

typedef struct report {
    const config *cfg;
    const batch_ids *ids;
    const char *batch;
    size_t finals, escalated, running, missing;
    size_t other_batch;  /* the job's state is another batch's (job_id reused) */
    long long hist[HIST_MAX + 2][2];  /* [attempts][0 final, 1 escalated]; HIST_MAX+1: more */
    long long records;
    batch_tally *codes, *paths, *reasons, *categories, *repeated;
    batch_tally *prompt, *completion, *model_attempts;  /* by model */
    batch_tally *cache_read, *cache_write;              /* by model: of prompt, priced apart */
    batch_tally *job_keys, *attempt_keys;               /* scratch, per job / attempt */
    size_t repeat_jobs;
    size_t run_len, run_start, best_len, best_start;    /* escalated runs, 0-based starts */
    int oom;
} report;

static int tally_bad(report *rp, int rc) {
    if (rc) rp->oom = 1;
    return rc;
}

static int report_build(redisContext *c, size_t i, void *ud) {
    report *rp = ud;
    char jkey[BATCH_KEY_MAX], hkey[BATCH_KEY_MAX];
    batch_util_key_job(rp->cfg, rp->ids->ids[i], jkey, sizeof(jkey));
    batch_util_key_history(rp->cfg, rp->ids->ids[i], hkey, sizeof(hkey));
    if (redisAppendCommand(c, "HMGET %s status batch_id", jkey) != REDIS_OK) return -1;
    return redisAppendCommand(c, "LRANGE %s 0 -1", hkey) == REDIS_OK ? 0 : -1;
}

static const char *str_or(const cJSON *obj, const char *name, const char *def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : def;
}

static long long num_or(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
}

/* One attempt record: violations, tokens; its distinct code+path pairs
 * count once for the job. */
static void add_record(report *rp, const cJSON *rec) {
    rp->records++;
    const char *model = str_or(rec, "model", "unknown");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(rec, "usage");
    tally_bad(rp, batch_tally_add(rp->prompt, model, num_or(u, "prompt_tokens")));
    tally_bad(rp, batch_tally_add(rp->completion, model, num_or(u, "completion_tokens")));
    long long cr = num_or(u, "cache_read_tokens"), cw = num_or(u, "cache_write_tokens");
    if (cr > 0) tally_bad(rp, batch_tally_add(rp->cache_read, model, cr));
    if (cw > 0) tally_bad(rp, batch_tally_add(rp->cache_write, model, cw));
    tally_bad(rp, batch_tally_add(rp->model_attempts, model, 1));
    batch_tally_clear(rp->attempt_keys);
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(rec, "violations")) {
        const char *code = str_or(v, "code", "UNKNOWN");
        const char *path = str_or(v, "path", "");
        tally_bad(rp, batch_tally_add(rp->codes, code, 1));
        tally_bad(rp, batch_tally_add(rp->paths, path, 1));
        size_t n = strlen(code) + strlen(path) + 2;
        char *k = malloc(n);
        if (!k) {
            rp->oom = 1;
            continue;
        }
        snprintf(k, n, "%s" SEP "%s", code, path);
        if (!batch_tally_get(rp->attempt_keys, k)) {
            tally_bad(rp, batch_tally_add(rp->attempt_keys, k, 1));
            tally_bad(rp, batch_tally_add(rp->job_keys, k, 1));
        }
        free(k);
    }
}

static void end_run(report *rp) {
    if (rp->run_len > rp->best_len) {
        rp->best_len = rp->run_len;
        rp->best_start = rp->run_start;
    }
    rp->run_len = 0;
}

static int report_reply(size_t i, redisReply **r, void *ud, char *err, size_t errlen) {
    report *rp = ud;
    for (int k = 0; k < 2; k++) {
        if (r[k]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r[k]->str);
            return -1;
        }
    }
    const redisReply *st = r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 2 ? r[0]->element[0] : NULL;
    if (st && batch_util_other_batch(r[0]->element[1], rp->batch)) {
        /* another batch's attempts: not this batch's job, which never ran */
        rp->other_batch++;
        end_run(rp);
        return 0;
    }
    const char *status = st && st->type == REDIS_REPLY_STRING ? st->str : NULL;
    int is_final = status && !strcmp(status, "final");
    int is_esc = status && !strcmp(status, "escalated");
    batch_tally_clear(rp->job_keys);
    cJSON *last = NULL;
    long long attempts = 0;
    for (size_t k = 0; r[1]->type == REDIS_REPLY_ARRAY && k < r[1]->elements; k++) {
        const redisReply *e = r[1]->element[k];
        cJSON *rec = e->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(e->str, e->len) : NULL;
        if (!rec) continue;
        add_record(rp, rec);
        attempts++;
        cJSON_Delete(last);
        last = rec;
    }
    if (is_esc) {
        if (!rp->run_len) rp->run_start = i;
        rp->run_len++;
    } else {
        end_run(rp);
    }
    if (is_final || is_esc) {
        size_t b = attempts > HIST_MAX ? HIST_MAX + 1 : (size_t)attempts;
        rp->hist[b][is_esc]++;
        if (is_final) rp->finals++;
        else rp->escalated++;
    } else if (status) {
        rp->running++;
    } else {
        rp->missing++;
    }
    if (is_esc) {
        tally_bad(rp, batch_tally_add(rp->reasons, str_or(last, "reason", "(no record)"), 1));
        tally_bad(rp, batch_tally_add(rp->categories, str_or(last, "category", "(no record)"), 1));
    }
    /* the same code at the same path in two attempts or more of this job */
    size_t n;
    batch_tally_entry *keys = batch_tally_sorted(rp->job_keys, &n);
    int repeated = 0;
    for (size_t k = 0; k < n && keys[k].count >= 2; k++) {
        tally_bad(rp, batch_tally_add(rp->repeated, keys[k].key, 1));
        repeated = 1;
    }
    rp->repeat_jobs += (size_t)repeated;
    free(keys);
    cJSON_Delete(last);
    if (rp->oom) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* [{"<name>": key, "count": n}, ...] of the top entries. */
static cJSON *top_list(const batch_tally *t, const char *name, size_t top) {
    cJSON *a = cJSON_CreateArray();
    size_t n;
    batch_tally_entry *e = batch_tally_sorted(t, &n);
    for (size_t i = 0; i < n && i < top; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, name, e[i].key);
        cJSON_AddNumberToObject(o, "count", (double)e[i].count);
        cJSON_AddItemToArray(a, o);
    }
    free(e);
    return a;
}

/* Tokens of attempts whose records resubmit removed: still paid for. */
static void add_replaced(report *rp, const redisReply *h, long long *replaced_attempts,
                         long long *replaced_prompt, long long *replaced_completion) {
    static const char pp[] = "replaced_prompt_tokens.", cp[] = "replaced_completion_tokens.",
                      ap[] = "replaced_attempts.", rp_[] = "replaced_cache_read_tokens.",
                      wp[] = "replaced_cache_write_tokens.";
    for (size_t i = 0; h && h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        const char *k = h->element[i]->str;
        long long v = batch_util_reply_ll(h->element[i + 1], 0);
        if (!k) continue;
        if (!strcmp(k, "replaced_attempts")) {
            *replaced_attempts = v;
        } else if (!strncmp(k, pp, sizeof(pp) - 1)) {
            tally_bad(rp, batch_tally_add(rp->prompt, k + sizeof(pp) - 1, v));
            *replaced_prompt += v;
        } else if (!strncmp(k, ap, sizeof(ap) - 1)) {
            tally_bad(rp, batch_tally_add(rp->model_attempts, k + sizeof(ap) - 1, v));
            tally_bad(rp, batch_tally_add(rp->prompt, k + sizeof(ap) - 1, 0));
        } else if (!strncmp(k, cp, sizeof(cp) - 1)) {
            tally_bad(rp, batch_tally_add(rp->completion, k + sizeof(cp) - 1, v));
            *replaced_completion += v;
        } else if (!strncmp(k, rp_, sizeof(rp_) - 1)) {
            tally_bad(rp, batch_tally_add(rp->cache_read, k + sizeof(rp_) - 1, v));
        } else if (!strncmp(k, wp, sizeof(wp) - 1)) {
            tally_bad(rp, batch_tally_add(rp->cache_write, k + sizeof(wp) - 1, v));
        }
    }
}

static int price_of(const config *cfg, const char *model, const char *dir, double *out) {
    char key[512];
    snprintf(key, sizeof(key), "pricing.%s.%s", model, dir);
    const char *v = config_get(cfg, key);
    if (!v) return -1;
    *out = strtod(v, NULL);
    return 0;
}

/* USD per million of a model's prompt tokens read from (dir
 * "cache_read") or written to ("cache_write") the provider's prompt
 * cache: pricing.MODEL.<dir> when set; else, on Anthropic, its ratios to
 * the input price, the same for all its models (a read costs a tenth, a
 * write a quarter more); else the input price, and *as_input is set
 * (OpenAI's discount differs from model to model). */
static double cache_price(const config *cfg, const char *model, const char *dir, double pin, int *as_input) {
    double v;
    if (!price_of(cfg, model, dir, &v)) return v;
    if (!strcmp(config_get(cfg, "llm.provider"), "anthropic")) return pin * (!strcmp(dir, "cache_read") ? 0.1 : 1.25);
    *as_input = 1;
    return pin;
}

/* A field of the batch hash as HGETALL gave it; def when absent. */
static long long batch_field(const redisReply *h, const char *name, long long def) {
    for (size_t i = 0; h && h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2)
        if (h->element[i]->str && !strcmp(h->element[i]->str, name))
            return batch_util_reply_ll(h->element[i + 1], def);
    return def;
}

static cJSON *build_json(report *rp, const char *batch, const redisReply *bh, double threshold, size_t top) {
    cJSON *j = cJSON_CreateObject();
    size_t finished = rp->finals + rp->escalated;
    long long not_sent = batch_field(bh, "not_sent", 0);
    cJSON_AddStringToObject(j, "batch_id", batch);
    cJSON_AddNumberToObject(j, "total", (double)rp->ids->count);
    /* jobs of the input a failed submit cut from the batch: not in total */
    cJSON_AddNumberToObject(j, "not_sent", (double)not_sent);
    cJSON_AddNumberToObject(j, "finished", (double)finished);
    cJSON_AddNumberToObject(j, "final", (double)rp->finals);
    cJSON_AddNumberToObject(j, "escalated", (double)rp->escalated);
    cJSON_AddNumberToObject(j, "unfinished", (double)(rp->running + rp->missing + rp->other_batch));
    double rate = finished ? (double)rp->finals / (double)finished : -1;
    if (finished) cJSON_AddNumberToObject(j, "success_rate", rate);
    else cJSON_AddNullToObject(j, "success_rate");
    cJSON_AddNumberToObject(j, "threshold", threshold);
    cJSON *warnings = cJSON_AddArrayToObject(j, "warnings");
    char msg[256];
    if (finished && rate < threshold) {
        snprintf(msg, sizeof(msg), "success rate %.1f%% is under the threshold of %.1f%%", rate * 100,
                 threshold * 100);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(msg));
    }
    if (rp->running + rp->missing) {
        snprintf(msg, sizeof(msg), "%zu job(s) not finished yet: the numbers are partial",
                 rp->running + rp->missing);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(msg));
    }
    if (rp->other_batch) {
        snprintf(msg, sizeof(msg), "%zu job(s) hold another batch's state (job_id reused): not counted",
                 rp->other_batch);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(msg));
    }
    if (not_sent > 0) {
        snprintf(msg, sizeof(msg), "%lld job(s) of the input not sent by retort submit (a failed produce): not in "
                 "the batch", not_sent);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(msg));
    }
    cJSON_AddBoolToObject(j, "below_threshold", finished && rate < threshold);

    cJSON *hist = cJSON_AddObjectToObject(j, "attempts_histogram");
    cJSON *by = cJSON_AddObjectToObject(j, "attempts_histogram_by_outcome");
    cJSON *hf = cJSON_AddObjectToObject(by, "final");
    cJSON *he = cJSON_AddObjectToObject(by, "escalated");
    long long attempts_finished = 0;
    for (size_t a = 0; a <= HIST_MAX + 1; a++) {
        long long f = rp->hist[a][0], e = rp->hist[a][1];
        if (!f && !e) continue;
        char k[16];
        if (a > HIST_MAX) snprintf(k, sizeof(k), ">%d", HIST_MAX);
        else snprintf(k, sizeof(k), "%zu", a);
        cJSON_AddNumberToObject(hist, k, (double)(f + e));
        if (f) cJSON_AddNumberToObject(hf, k, (double)f);
        if (e) cJSON_AddNumberToObject(he, k, (double)e);
        attempts_finished += (long long)a * (f + e);
    }
    if (finished) cJSON_AddNumberToObject(j, "mean_attempts", (double)attempts_finished / (double)finished);
    else cJSON_AddNullToObject(j, "mean_attempts");
    cJSON_AddNumberToObject(j, "attempts_recorded", (double)rp->records);

    cJSON_AddItemToObject(j, "top_violation_codes", top_list(rp->codes, "code", top));
    cJSON_AddItemToObject(j, "top_violation_paths", top_list(rp->paths, "path", top));
    cJSON_AddItemToObject(j, "escalation_reasons", top_list(rp->reasons, "reason", (size_t)-1));
    cJSON_AddItemToObject(j, "escalation_categories", top_list(rp->categories, "category", (size_t)-1));

    cJSON *pat = cJSON_AddObjectToObject(j, "failure_patterns");
    cJSON *rep = cJSON_AddObjectToObject(pat, "repeated_violation");
    cJSON_AddNumberToObject(rep, "jobs", (double)rp->repeat_jobs);
    cJSON *rtop = cJSON_AddArrayToObject(rep, "top");
    size_t n;
    batch_tally_entry *e = batch_tally_sorted(rp->repeated, &n);
    for (size_t i = 0; i < n && i < top; i++) {
        const char *sep = strchr(e[i].key, SEP[0]);
        cJSON *o = cJSON_CreateObject();
        char *code = strndup(e[i].key, (size_t)(sep - e[i].key));
        cJSON_AddStringToObject(o, "code", code ? code : "");
        free(code);
        cJSON_AddStringToObject(o, "path", sep + 1);
        cJSON_AddNumberToObject(o, "jobs", (double)e[i].count);
        cJSON_AddItemToArray(rtop, o);
    }
    free(e);
    cJSON *run = cJSON_AddObjectToObject(pat, "longest_escalated_run");
    cJSON_AddNumberToObject(run, "length", (double)rp->best_len);
    if (rp->best_len) {
        /* positions are 1-based, in input order */
        cJSON_AddNumberToObject(run, "start", (double)(rp->best_start + 1));
        cJSON_AddNumberToObject(run, "end", (double)(rp->best_start + rp->best_len));
        cJSON_AddStringToObject(run, "first_job_id", rp->ids->ids[rp->best_start]);
        cJSON_AddStringToObject(run, "last_job_id", rp->ids->ids[rp->best_start + rp->best_len - 1]);
    }

    long long ra = 0, rprompt = 0, rcompl = 0;
    add_replaced(rp, bh, &ra, &rprompt, &rcompl);
    cJSON *models = cJSON_AddArrayToObject(j, "models");
    cJSON *unpriced = cJSON_CreateArray();
    cJSON *as_input = cJSON_CreateArray();
    long long tp = 0, tc = 0, tr = 0, tw = 0;
    double cost = 0;
    e = batch_tally_sorted(rp->prompt, &n);
    for (size_t i = 0; i < n; i++) {
        const char *m = e[i].key;
        long long p = e[i].count, c = batch_tally_get(rp->completion, m);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", m);
        cJSON_AddNumberToObject(o, "attempts", (double)batch_tally_get(rp->model_attempts, m));
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)p);
        cJSON_AddNumberToObject(o, "completion_tokens", (double)c);
        long long r = batch_tally_get(rp->cache_read, m), w = batch_tally_get(rp->cache_write, m);
        cJSON_AddNumberToObject(o, "cache_read_tokens", (double)r);
        cJSON_AddNumberToObject(o, "cache_write_tokens", (double)w);
        double pin, pout;
        if (!price_of(rp->cfg, m, "input", &pin) && !price_of(rp->cfg, m, "output", &pout)) {
            int assumed_r = 0, assumed_w = 0;
            double pr = cache_price(rp->cfg, m, "cache_read", pin, &assumed_r);
            double pw = cache_price(rp->cfg, m, "cache_write", pin, &assumed_w);
            if ((assumed_r && r) || (assumed_w && w)) cJSON_AddItemToArray(as_input, cJSON_CreateString(m));
            /* prompt_tokens holds the cached ones: the rest at the input price */
            long long plain = p - r - w > 0 ? p - r - w : 0;
            double mc = ((double)plain * pin + (double)r * pr + (double)w * pw + (double)c * pout) / 1e6;
            cJSON_AddNumberToObject(o, "cost_usd", mc);
            cost += mc;
        } else {
            cJSON_AddNullToObject(o, "cost_usd");
            if (p || c) cJSON_AddItemToArray(unpriced, cJSON_CreateString(m));
        }
        cJSON_AddItemToArray(models, o);
        tp += p;
        tc += c;
        tr += r;
        tw += w;
    }
    free(e);
    cJSON *tok = cJSON_AddObjectToObject(j, "tokens");
    cJSON_AddNumberToObject(tok, "prompt", (double)tp);
    cJSON_AddNumberToObject(tok, "completion", (double)tc);
    cJSON_AddNumberToObject(tok, "total", (double)(tp + tc));
    cJSON_AddNumberToObject(tok, "cache_read", (double)tr);
    cJSON_AddNumberToObject(tok, "cache_write", (double)tw);
    cJSON *repl = cJSON_AddObjectToObject(j, "replaced_by_resubmit");
    cJSON_AddNumberToObject(repl, "attempts", (double)ra);
    cJSON_AddNumberToObject(repl, "prompt_tokens", (double)rprompt);
    cJSON_AddNumberToObject(repl, "completion_tokens", (double)rcompl);
    /* a total only when every model with tokens has a price */
    if (cJSON_GetArraySize(unpriced) == 0) {
        cJSON_AddNumberToObject(j, "cost_usd", cost);
    } else {
        cJSON_AddNullToObject(j, "cost_usd");
        cJSON_AddNumberToObject(j, "cost_usd_priced_models", cost);
    }
    cJSON_AddItemToObject(j, "unpriced_models", unpriced);
    /* models whose cached tokens went at the input price, for want of theirs */
    cJSON_AddItemToObject(j, "cache_priced_as_input", as_input);
    return j;
}

/* ---- human output --------------------------------------------------------- */

static double jnum(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *jstr(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *show_path(const char *p) { return p[0] ? p : "(root)"; }

static void print_counts(FILE *f, const char *title, const cJSON *list, const char *name, int is_path) {
    fprintf(f, "\n%s:\n", title);
    if (!cJSON_GetArraySize(list)) {
        fprintf(f, "  none\n");
        return;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, list) {
        const char *k = jstr(o, name);
        fprintf(f, "  %6.0f  %s\n", jnum(o, "count"), is_path ? show_path(k) : k);
    }
}

static void print_human(FILE *f, const cJSON *j) {
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(j, "success_rate");
    fprintf(f, "batch %s: %.0f job(s): %.0f final, %.0f escalated, %.0f not finished\n", jstr(j, "batch_id"),
            jnum(j, "total"), jnum(j, "final"), jnum(j, "escalated"), jnum(j, "unfinished"));
    if (cJSON_IsNumber(sr))
        fprintf(f, "success rate: %.1f%% (%.0f of %.0f finished jobs)\n", sr->valuedouble * 100, jnum(j, "final"),
                jnum(j, "finished"));
    else
        fprintf(f, "success rate: n/a (no job finished yet)\n");
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "warnings")) fprintf(f, "WARNING: %s\n", w->valuestring);

    fprintf(f, "\nattempts per finished job:\n  attempts   jobs  final  escalated\n");
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(j, "attempts_histogram");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "attempts_histogram_by_outcome");
    const cJSON *h;
    cJSON_ArrayForEach(h, hist) {
        fprintf(f, "  %8s %6.0f %6.0f %10.0f\n", h->string, h->valuedouble,
                jnum(cJSON_GetObjectItemCaseSensitive(by, "final"), h->string),
                jnum(cJSON_GetObjectItemCaseSensitive(by, "escalated"), h->string));
    }
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(j, "mean_attempts");
    if (cJSON_IsNumber(mean))
        fprintf(f, "  mean %.2f attempts per finished job; %.0f attempt record(s)\n", mean->valuedouble,
                jnum(j, "attempts_recorded"));

    print_counts(f, "top violation codes (occurrences over all attempts)",
                 cJSON_GetObjectItemCaseSensitive(j, "top_violation_codes"), "code", 0);
    print_counts(f, "top violation paths", cJSON_GetObjectItemCaseSensitive(j, "top_violation_paths"), "path", 1);
    print_counts(f, "escalations by reason", cJSON_GetObjectItemCaseSensitive(j, "escalation_reasons"), "reason",
                 0);
    print_counts(f, "escalations by category", cJSON_GetObjectItemCaseSensitive(j, "escalation_categories"),
                 "category", 0);

    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "failure_patterns");
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(pat, "repeated_violation");
    fprintf(f, "\nfailure patterns:\n  same violation (code at path) repeated over a job's attempts: %.0f job(s)\n",
            jnum(rep, "jobs"));
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(rep, "top"))
        fprintf(f, "  %6.0f  %s at %s\n", jnum(o, "jobs"), jstr(o, "code"), show_path(jstr(o, "path")));
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(pat, "longest_escalated_run");
    if (jnum(run, "length") > 0)
        fprintf(f, "  longest run of consecutive escalated jobs (input order): %.0f, positions %.0f-%.0f (%s .. %s)\n",
                jnum(run, "length"), jnum(run, "start"), jnum(run, "end"), jstr(run, "first_job_id"),
                jstr(run, "last_job_id"));
    else
        fprintf(f, "  longest run of consecutive escalated jobs (input order): 0\n");

    fprintf(f, "\ntokens and cost:\n  %-24s %8s %12s %12s %12s\n", "model", "attempts", "prompt", "completion",
            "cost USD");
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(j, "models")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "cost_usd");
        char cs[32];
        if (cJSON_IsNumber(c)) snprintf(cs, sizeof(cs), "%.4f", c->valuedouble);
        else snprintf(cs, sizeof(cs), "no pricing");
        fprintf(f, "  %-24s %8.0f %12.0f %12.0f %12s\n", jstr(o, "model"), jnum(o, "attempts"),
                jnum(o, "prompt_tokens"), jnum(o, "completion_tokens"), cs);
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *cost = cJSON_GetObjectItemCaseSensitive(j, "cost_usd");
    char cs[48];
    int any_priced = 0;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(j, "models"))
        any_priced |= cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "cost_usd"));
    if (cJSON_IsNumber(cost)) snprintf(cs, sizeof(cs), "%.4f", cost->valuedouble);
    else if (any_priced) snprintf(cs, sizeof(cs), ">= %.4f", jnum(j, "cost_usd_priced_models"));
    else snprintf(cs, sizeof(cs), "no pricing");
    fprintf(f, "  %-24s %8s %12.0f %12.0f %12s\n", "total", "", jnum(tok, "prompt"), jnum(tok, "completion"), cs);
    if (jnum(tok, "cache_read") > 0 || jnum(tok, "cache_write") > 0)
        fprintf(f, "  (of the prompt tokens, %.0f read from the provider's prompt cache and %.0f written to it, "
                   "priced apart)\n", jnum(tok, "cache_read"), jnum(tok, "cache_write"));
    const cJSON *as_input = cJSON_GetObjectItemCaseSensitive(j, "cache_priced_as_input");
    if (cJSON_GetArraySize(as_input)) {
        fprintf(f, "  cached tokens priced as input for:");
        cJSON_ArrayForEach(o, as_input) fprintf(f, " %s", o->valuestring);
        fprintf(f, " (set pricing.MODEL.cache_read and pricing.MODEL.cache_write, USD per million tokens)\n");
    }
    const cJSON *repl = cJSON_GetObjectItemCaseSensitive(j, "replaced_by_resubmit");
    if (jnum(repl, "attempts") > 0)
        fprintf(f, "  (the tokens include %.0f attempt(s) of runs replaced by retort resubmit)\n", jnum(repl, "attempts"));
    const cJSON *unpriced = cJSON_GetObjectItemCaseSensitive(j, "unpriced_models");
    if (cJSON_GetArraySize(unpriced)) {
        fprintf(f, "  no pricing for:");
        cJSON_ArrayForEach(o, unpriced) fprintf(f, " %s", o->valuestring);
        fprintf(f, " (set pricing.MODEL.input and pricing.MODEL.output, USD per million tokens)\n");
    }
}

int batch_report_main(int argc, char **argv) {
    batch_opt opts[] = {{"--json", NULL, 0, NULL, 0},
                        {"--threshold", NULL, 1, NULL, 0},
                        {"--top", NULL, 1, NULL, 0},
                        {"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    redisContext *c = NULL;
    redisReply *bh = NULL;
    batch_ids ids = {0};
    report rp = {0};
    cJSON *doc = NULL;
    char err[1024], key[BATCH_KEY_MAX];
    int rc = batch_util_args("report", report_usage, argc, argv, opts, 4, pos, 1, &npos, &cfg);
    if (rc) return rc;
    rc = BATCH_EXIT_USAGE;
    if (opts[3].set) {
        fputs(report_usage, stdout);
        rc = BATCH_EXIT_OK;
        goto done;
    }
    if (npos != 1) {
        fprintf(stderr, "retort report: which batch?\n%s", report_usage);
        goto done;
    }
    double threshold = 0.9;
    long top = 10;
    if (opts[1].value) {
        char *end;
        threshold = strtod(opts[1].value, &end);
        if (end == opts[1].value || *end || !(threshold >= 0 && threshold <= 1)) {
            fprintf(stderr, "retort report: --threshold: a fraction from 0 to 1 (0.9 = 90%%)\n");
            goto done;
        }
    }
    if (opts[2].value) {
        char *end;
        top = strtol(opts[2].value, &end, 10);
        if (end == opts[2].value || *end || top < 1 || top > 1000) {
            fprintf(stderr, "retort report: --top: an integer from 1 to 1000\n");
            goto done;
        }
    }
    const char *batch = pos[0];
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort report: %s\n", err);
        goto done;
    }
    if (batch_util_read_list(c, batch_util_key_jobs(cfg, batch, key, sizeof(key)), &ids, err, sizeof(err))) {
        fprintf(stderr, "retort report: %s\n", err);
        goto done;
    }
    if (!ids.count) {
        fprintf(stderr, "retort report: unknown batch %s (not submitted with retort submit, or expired)\n", batch);
        rc = BATCH_EXIT_NO;
        goto done;
    }
    bh = redisCommand(c, "HGETALL %s", batch_util_key_batch(cfg, batch, key, sizeof(key)));
    if (!bh || bh->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "retort report: redis: %s\n", bh && bh->type == REDIS_REPLY_ERROR ? bh->str : c->errstr);
        goto done;
    }
    rp.cfg = cfg;
    rp.ids = &ids;
    rp.batch = batch;
    batch_tally **tallies[] = {&rp.codes,  &rp.paths,      &rp.reasons,        &rp.categories, &rp.repeated,
                               &rp.prompt, &rp.completion, &rp.model_attempts, &rp.job_keys,   &rp.attempt_keys,
                               &rp.cache_read, &rp.cache_write};
    for (size_t i = 0; i < sizeof(tallies) / sizeof(tallies[0]); i++) {
        if (!(*tallies[i] = batch_tally_new())) {
            fprintf(stderr, "retort report: out of memory\n");
            goto done;
        }
    }
    if (batch_util_pipeline(c, ids.count, 2, report_build, report_reply, &rp, err, sizeof(err))) {
        fprintf(stderr, "retort report: %s\n", err);
        goto done;
    }
    end_run(&rp);
    doc = build_json(&rp, batch, bh, threshold, (size_t)top);
    if (rp.oom || !doc) {
        fprintf(stderr, "retort report: out of memory\n");
        goto done;
    }
    if (opts[0].set) {
        char *s = cJSON_Print(doc);
        if (!s) goto done;
        printf("%s\n", s);
        free(s);
    } else {
        print_human(stdout, doc);
    }
    rc = BATCH_EXIT_OK;
done:
    cJSON_Delete(doc);
    batch_tally_free(rp.codes);
    batch_tally_free(rp.paths);
    batch_tally_free(rp.reasons);
    batch_tally_free(rp.categories);
    batch_tally_free(rp.repeated);
    batch_tally_free(rp.prompt);
    batch_tally_free(rp.completion);
    batch_tally_free(rp.cache_read);
    batch_tally_free(rp.cache_write);
    batch_tally_free(rp.model_attempts);
    batch_tally_free(rp.job_keys);
    batch_tally_free(rp.attempt_keys);
    freeReplyObject(bh);
    batch_util_ids_clear(&ids);
    if (c) redisFree(c);
    config_free(cfg);
    return rc;
}
