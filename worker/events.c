#include "events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonin.h"
#include "jsonout.h"
#include "util.h"

const char *events_ce_type(event_type type) {
    switch (type) {
    case EVENT_FINAL: return "retort.job.final";
    case EVENT_RETRY: return "retort.job.retry";
    case EVENT_ESCALATED: return "retort.job.escalated";
    case EVENT_DEAD_LETTER: return "retort.job.dead_letter";
    }
    return "retort.job.unknown";
}

static const char *kind(event_type type) {
    switch (type) {
    case EVENT_FINAL: return "final";
    case EVENT_RETRY: return "retry";
    case EVENT_ESCALATED: return "escalated";
    case EVENT_DEAD_LETTER: return "dead_letter";
    }
    return "unknown";
}

void events_headers_init(events_headers *h, event_type type, const char *subject, int run, int attempt,
                         const char *source, int64_t wall_ms) {
    char att[24], rn[24];
    util_ltoa(attempt, att);
    util_ltoa(run, rn);
    util_concat(h->id, sizeof(h->id), subject, ":", att, ":", kind(type), run > 1 ? ":r" : "",
                run > 1 ? rn : "", (char *)NULL);
    util_concat(h->subject, sizeof(h->subject), subject, (char *)NULL);
    util_rfc3339(wall_ms, h->time, sizeof(h->time));
    h->type = events_ce_type(type);
    h->source = source;
}

static double num(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The usage of history's records, summed: prompt, completion, cache
 * read, cache write. */
static void usage_sum(const cJSON *history, double sum[4]) {
    static const char *const names[4] = {"prompt_tokens", "completion_tokens", "cache_read_tokens",
                                         "cache_write_tokens"};
    const cJSON *rec;
    cJSON_ArrayForEach(rec, history) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(rec, "usage");
        for (int k = 0; k < 4; k++) sum[k] += num(u, names[k]);
    }
}

cJSON *events_usage_total(const cJSON *history) {
    double sum[4] = {0};
    usage_sum(history, sum);
    cJSON *usage = cJSON_CreateObject();
    cJSON_AddNumberToObject(usage, "prompt_tokens", sum[0]);
    cJSON_AddNumberToObject(usage, "completion_tokens", sum[1]);
    cJSON_AddNumberToObject(usage, "total_tokens", sum[0] + sum[1]);
    if (sum[2] || sum[3]) {
        cJSON_AddNumberToObject(usage, "cache_read_tokens", sum[2]);
        cJSON_AddNumberToObject(usage, "cache_write_tokens", sum[3]);
    }
    return usage;
}

static void add_common(cJSON *ev, const job *j, const char *schema_name, const char *model,
                       const cJSON *history, int64_t wall_ms) {
    const cJSON *last = cJSON_GetArrayItem(history, cJSON_GetArraySize(history) - 1);
    cJSON_AddStringToObject(ev, "job_id", j->job_id);
    cJSON_AddNumberToObject(ev, "attempt", last ? num(last, "attempt") : j->attempt);
    cJSON_AddNumberToObject(ev, "attempts", cJSON_GetArraySize(history));
    cJSON_AddItemToObject(ev, "usage", events_usage_total(history));
    if (j->metadata) cJSON_AddItemReferenceToObject(ev, "metadata", (cJSON *)j->metadata);
    else cJSON_AddNullToObject(ev, "metadata");
    if (j->batch_id) cJSON_AddStringToObject(ev, "batch_id", j->batch_id);
    else cJSON_AddNullToObject(ev, "batch_id");
    cJSON_AddStringToObject(ev, "schema", schema_name);
    if (model) cJSON_AddStringToObject(ev, "model", model);
    char ts[40];
    util_rfc3339(wall_ms, ts, sizeof(ts));
    cJSON_AddStringToObject(ev, "finished_at", ts);
}

/* Appends ,"name": and a JSON string. */
static int put_str(sbuf *b, const char *name, const char *v) {
    return sbuf_puts(b, name) || sbuf_json_string(b, v, strlen(v));
}

/* Appends one attempt's entry of the final event's summary. */
static int put_summary(sbuf *b, int first, double attempt, const char *outcome, const cJSON *violations,
                       double latency_ms) {
    if ((!first && sbuf_puts(b, ",")) || sbuf_puts(b, "{\"attempt\":") || jsonout_number(b, attempt) ||
        put_str(b, ",\"outcome\":", outcome) || sbuf_puts(b, ",\"codes\":["))
        return -1;
    int first_code = 1;
    const cJSON *v;
    cJSON_ArrayForEach(v, violations) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(v, "code");
        if (!cJSON_IsString(code)) continue;
        if ((!first_code && sbuf_puts(b, ",")) || sbuf_json_string(b, code->valuestring, strlen(code->valuestring)))
            return -1;
        first_code = 0;
    }
    return sbuf_puts(b, "],\"latency_ms\":") || jsonout_number(b, latency_ms) || sbuf_puts(b, "}");
}

/* Written as text, not built as a tree: a final event is what almost every
 * job ends with.  Same members, same order and same bytes as the tree
 * (jsonout prints like cJSON). */
char *events_final(const job *j, const char *schema_name, const char *model, const cJSON *history,
                   const events_attempt *last, int64_t wall_ms) {
    sbuf b = {0};
    char *out = NULL;
    int n = cJSON_GetArraySize(history);
    const cJSON *last_rec = last ? NULL : cJSON_GetArrayItem(history, n - 1);
    double sum[4] = {0};
    const cJSON *rec;
    usage_sum(history, sum);
    if (last) {
        sum[0] += (double)last->prompt_tokens;
        sum[1] += (double)last->completion_tokens;
        sum[2] += (double)last->cache_read_tokens;
        sum[3] += (double)last->cache_write_tokens;
    }
    double p = sum[0], c = sum[1];
    double attempt = last ? last->attempt : last_rec ? num(last_rec, "attempt") : j->attempt;
    char ts[40];
    util_rfc3339(wall_ms, ts, sizeof(ts));
    const cJSON *value = last_rec ? cJSON_GetObjectItemCaseSensitive(last_rec, "value") : NULL;
    if (sbuf_reserve(&b, 1024) || put_str(&b, "{\"job_id\":", j->job_id) ||
        sbuf_puts(&b, ",\"attempt\":") || jsonout_number(&b, attempt) ||
        sbuf_puts(&b, ",\"attempts\":") || jsonout_number(&b, n + (last ? 1 : 0)) ||
        sbuf_puts(&b, ",\"usage\":{\"prompt_tokens\":") || jsonout_number(&b, p) ||
        sbuf_puts(&b, ",\"completion_tokens\":") || jsonout_number(&b, c) ||
        sbuf_puts(&b, ",\"total_tokens\":") || jsonout_number(&b, p + c) ||
        ((sum[2] || sum[3]) && (sbuf_puts(&b, ",\"cache_read_tokens\":") || jsonout_number(&b, sum[2]) ||
                                sbuf_puts(&b, ",\"cache_write_tokens\":") || jsonout_number(&b, sum[3]))) ||
        sbuf_puts(&b, "},\"metadata\":") || (j->metadata ? jsonout_value(&b, j->metadata) : sbuf_puts(&b, "null")) ||
        (j->batch_id ? put_str(&b, ",\"batch_id\":", j->batch_id) : sbuf_puts(&b, ",\"batch_id\":null")) ||
        put_str(&b, ",\"schema\":", schema_name) || (model && put_str(&b, ",\"model\":", model)) ||
        put_str(&b, ",\"finished_at\":", ts) || sbuf_puts(&b, ",\"output\":") ||
        (last && last->value ? sbuf_append(&b, last->value, last->value_len)
                             : value ? jsonout_value(&b, value) : sbuf_puts(&b, "null")) ||
        sbuf_puts(&b, ",\"summary\":["))
        goto cleanup;
    cJSON_ArrayForEach(rec, history) {
        const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(rec, "outcome");
        if (put_summary(&b, rec == history->child, num(rec, "attempt"),
                        cJSON_IsString(outcome) ? outcome->valuestring : "error",
                        cJSON_GetObjectItemCaseSensitive(rec, "violations"), num(rec, "latency_ms")))
            goto cleanup;
    }
    if (last && put_summary(&b, n == 0, last->attempt, last->outcome, last->violations, last->latency_ms))
        goto cleanup;
    if (sbuf_puts(&b, "]}")) goto cleanup;
    out = sbuf_take(&b);
cleanup:
    sbuf_free(&b);
    return out;
}

cJSON *events_escalation(const job *j, const char *schema_name, const char *model,
                         const cJSON *history, int64_t wall_ms) {
    cJSON *ev = cJSON_CreateObject();
    add_common(ev, j, schema_name, model, history, wall_ms);
    const cJSON *last = cJSON_GetArrayItem(history, cJSON_GetArraySize(history) - 1);
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(last, "reason");
    const cJSON *category = cJSON_GetObjectItemCaseSensitive(last, "category");
    const cJSON *violations = cJSON_GetObjectItemCaseSensitive(last, "violations");
    cJSON_AddStringToObject(ev, "reason", cJSON_IsString(reason) ? reason->valuestring : "escalated");
    cJSON_AddStringToObject(ev, "category", cJSON_IsString(category) ? category->valuestring : "unknown");
    if (violations) cJSON_AddItemReferenceToObject(ev, "violations", (cJSON *)violations);
    else cJSON_AddItemToObject(ev, "violations", cJSON_CreateArray());
    cJSON_AddItemReferenceToObject(ev, "history", (cJSON *)history);
    return ev;
}

cJSON *events_dead_letter(const char *reason, const cJSON *violations, const char *job_id,
                          const char *topic, int32_t partition, int64_t offset, const char *key,
                          size_t key_len, const char *value, size_t value_len, int64_t wall_ms) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "reason", reason);
    if (violations) cJSON_AddItemToObject(ev, "violations", cJSON_Duplicate(violations, 1));
    if (job_id && job_id[0]) cJSON_AddStringToObject(ev, "job_id", job_id);
    else cJSON_AddNullToObject(ev, "job_id");
    cJSON *src = cJSON_AddObjectToObject(ev, "source");
    cJSON_AddStringToObject(src, "topic", topic);
    cJSON_AddNumberToObject(src, "partition", partition);
    cJSON_AddNumberToObject(src, "offset", (double)offset);
    /* A key is any bytes: text as it is, anything else (a serialized
     * integer, say, holding zeros) in base64, as the value. */
    if (!key) {
        cJSON_AddNullToObject(ev, "key");
    } else if (util_utf8_valid(key, key_len) && !memchr(key, '\0', key_len)) {
        char *k = strndup(key, key_len);
        cJSON_AddStringToObject(ev, "key", k ? k : "");
        free(k);
    } else {
        char *b = util_base64((const unsigned char *)key, key_len);
        cJSON_AddStringToObject(ev, "key_base64", b ? b : "");
        free(b);
    }
    if (value && util_utf8_valid(value, value_len) && !memchr(value, '\0', value_len)) {
        char *v = strndup(value, value_len);
        cJSON_AddStringToObject(ev, "value", v ? v : "");
        free(v);
    } else {
        char *b = util_base64((const unsigned char *)(value ? value : ""), value ? value_len : 0);
        cJSON_AddStringToObject(ev, "value_base64", b ? b : "");
        free(b);
    }
    char ts[40];
    util_rfc3339(wall_ms, ts, sizeof(ts));
    cJSON_AddStringToObject(ev, "received_at", ts);
    return ev;
}

/* Members at most this long are always kept: ids, counts, reasons (at
 * most 256 bytes each), the usage. */
#define FIT_KEEP_BYTES 1024

int events_fit(char **text, size_t limit) {
    size_t len = strlen(*text);
    if (len <= limit) return 0;
    int rc = -1;
    cJSON *in = jsonin_parse_all(*text, len, NULL), *out = NULL, *omitted = NULL;
    size_t n = 0, *sizes = NULL;
    char *fitted = NULL;
    if (!cJSON_IsObject(in)) goto cleanup;
    const cJSON *m;
    cJSON_ArrayForEach(m, in) n++;
    if (!(sizes = calloc(n ? n : 1, sizeof(*sizes)))) goto cleanup;
    /* each member's printed size, then the largest ones out until the
     * rest (and the note of what went) fits */
    size_t i = 0, total = len, note = 16;
    cJSON_ArrayForEach(m, in) {
        sbuf b = {0};
        if (jsonout_value(&b, m)) {
            sbuf_free(&b);
            goto cleanup;
        }
        sizes[i++] = b.len + strlen(m->string) + 4;
        sbuf_free(&b);
    }
    unsigned char *gone = calloc(n ? n : 1, 1);
    if (!gone) goto cleanup;
    while (total + note > limit) {
        size_t best = n;
        for (i = 0; i < n; i++)
            if (!gone[i] && sizes[i] > FIT_KEEP_BYTES && (best == n || sizes[i] > sizes[best])) best = i;
        if (best == n) break;
        gone[best] = 1;
        total -= sizes[best];
        note += 40;
    }
    if (total + note <= limit && (out = cJSON_CreateObject()) && (omitted = cJSON_CreateObject())) {
        i = 0;
        cJSON_ArrayForEach(m, in) {
            if (gone[i]) {
                cJSON_AddNumberToObject(omitted, m->string, (double)(sizes[i] - strlen(m->string) - 4));
            } else if (!strcmp(m->string, "omitted") && cJSON_IsObject(m)) {
                /* fitted before (to a limit that proved too high): keep its note */
                const cJSON *o;
                cJSON_ArrayForEach(o, m) cJSON_AddItemReferenceToObject(omitted, o->string, (cJSON *)o);
            } else {
                cJSON_AddItemReferenceToObject(out, m->string, (cJSON *)m);
            }
            i++;
        }
        cJSON_AddItemToObject(out, "omitted", omitted);
        omitted = NULL;
        fitted = jsonout_print(out);
        if (fitted && strlen(fitted) <= limit) {
            free(*text);
            *text = fitted;
            fitted = NULL;
            rc = 0;
        }
    }
    free(gone);
cleanup:
    free(fitted);
    free(sizes);
    cJSON_Delete(omitted);
    cJSON_Delete(out);
    jsonin_free(in);
    return rc;
}
