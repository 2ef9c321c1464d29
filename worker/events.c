#include "events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void events_headers_init(events_headers *h, event_type type, const char *subject, int attempt,
                         const char *source, int64_t wall_ms) {
    snprintf(h->id, sizeof(h->id), "%s:%d:%s", subject, attempt, kind(type));
    snprintf(h->subject, sizeof(h->subject), "%s", subject);
    util_rfc3339(wall_ms, h->time, sizeof(h->time));
    h->type = events_ce_type(type);
    h->source = source;
}

static double num(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

cJSON *events_usage_total(const cJSON *history) {
    double p = 0, c = 0;
    const cJSON *rec;
    cJSON_ArrayForEach(rec, history) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(rec, "usage");
        p += num(u, "prompt_tokens");
        c += num(u, "completion_tokens");
    }
    cJSON *usage = cJSON_CreateObject();
    cJSON_AddNumberToObject(usage, "prompt_tokens", p);
    cJSON_AddNumberToObject(usage, "completion_tokens", c);
    cJSON_AddNumberToObject(usage, "total_tokens", p + c);
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

cJSON *events_final(const job *j, const char *schema_name, const char *model,
                    const cJSON *history, int64_t wall_ms) {
    cJSON *ev = cJSON_CreateObject();
    add_common(ev, j, schema_name, model, history, wall_ms);
    const cJSON *last = cJSON_GetArrayItem(history, cJSON_GetArraySize(history) - 1);
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(last, "value");
    if (value) cJSON_AddItemReferenceToObject(ev, "output", (cJSON *)value);
    else cJSON_AddNullToObject(ev, "output");
    cJSON *summary = cJSON_AddArrayToObject(ev, "summary");
    const cJSON *rec;
    cJSON_ArrayForEach(rec, history) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "attempt", num(rec, "attempt"));
        const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(rec, "outcome");
        cJSON_AddStringToObject(s, "outcome", cJSON_IsString(outcome) ? outcome->valuestring : "error");
        cJSON *codes = cJSON_AddArrayToObject(s, "codes");
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(rec, "violations")) {
            const cJSON *code = cJSON_GetObjectItemCaseSensitive(v, "code");
            if (cJSON_IsString(code)) cJSON_AddItemToArray(codes, cJSON_CreateString(code->valuestring));
        }
        cJSON_AddNumberToObject(s, "latency_ms", num(rec, "latency_ms"));
        cJSON_AddItemToArray(summary, s);
    }
    return ev;
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
    if (key && util_utf8_valid(key, key_len)) {
        char *k = strndup(key, key_len);
        cJSON_AddStringToObject(ev, "key", k ? k : "");
        free(k);
    } else {
        cJSON_AddNullToObject(ev, "key");
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
