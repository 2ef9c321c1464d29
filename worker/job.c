#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonin.h"
#include "jsonout.h"
#include "util.h"

static const char *get_str(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A number of the message for an integer field, within [-bound, bound]:
 * the envelope schema bounds each field, but the schema is the operator's
 * file.  def when absent or not a number. */
#define INT_BOUND 1000000000LL
static long long num_in(const cJSON *v, long long bound, long long def) {
    return cJSON_IsNumber(v) ? util_clamp_ll(v->valuedouble, -bound, bound) : def;
}

const char *job_duplicate_member(const cJSON *doc) {
    if (!cJSON_IsObject(doc)) return NULL;
    for (const cJSON *a = doc->child; a; a = a->next)
        for (const cJSON *b = a->next; a->string && b; b = b->next)
            if (b->string && !strcmp(a->string, b->string)) return a->string;
    return NULL;
}

int job_parse(const char *value, size_t len, const schema *envelope, int default_max_attempts,
              int max_attempts_ceiling, job *out, cJSON **violations, char *job_id_out,
              size_t job_id_len, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    *violations = NULL;
    if (job_id_len) job_id_out[0] = '\0';
    if (!value || !len) {
        snprintf(err, errlen, "empty message");
        return -1;
    }
    if (!util_utf8_valid(value, len)) {
        snprintf(err, errlen, "message is not valid UTF-8");
        return -1;
    }
    size_t at = 0;
    cJSON *doc = jsonin_parse_all(value, len, &at);
    if (!doc) {
        if (jsonin_nul_at(value, len, at))
            snprintf(err, errlen, "message has \\u0000 (the NUL character) in a string at byte %zu, which "
                     "is not accepted", at);
        else
            snprintf(err, errlen, "message is not JSON (error near byte %zu)", at);
        return -1;
    }
    const char *id = get_str(doc, "job_id");
    if (id && job_id_len) util_concat(job_id_out, job_id_len, id, (char *)NULL);
    schema_violations sv = {0};
    int rc = schema_validate(envelope, doc, &sv);
    if (rc != 0) {
        if (sv.count)
            snprintf(err, errlen, "not a valid job: %s%s%s", sv.items[0].path[0] ? sv.items[0].path : "/",
                     ": ", sv.items[0].message);
        else
            snprintf(err, errlen, "not a valid job");
        util_utf8_cut_end(err); /* a long member name may be cut in a character */
        *violations = schema_violations_to_json(&sv);
        schema_violations_clear(&sv);
        jsonin_free(doc);
        return -1;
    }
    const char *dup = job_duplicate_member(doc);
    if (dup) {
        snprintf(err, errlen, "not a valid job: member \"%s\" appears more than once", dup);
        util_utf8_cut_end(err);
        jsonin_free(doc);
        return -1;
    }
    out->doc = doc;
    /* The members in one pass, not a lookup by name each (twelve walks of
     * the list, a strcmp a member): the first of a name counts, as a
     * lookup would find it. */
    const cJSON *jid = NULL, *model = NULL, *batch = NULL, *rn = NULL, *a = NULL, *m = NULL, *tb = NULL, *dl = NULL;
    for (const cJSON *c = doc->child; c; c = c->next) {
        const char *k = c->string;
        const cJSON **slot = NULL;
        if (!k) continue;
        switch (k[0]) {
        case 'a': if (!strcmp(k, "attempt")) slot = &a; break;
        case 'b': if (!strcmp(k, "batch_id")) slot = &batch; break;
        case 'd': if (!strcmp(k, "deadline")) slot = &dl; break;
        case 'j': if (!strcmp(k, "job_id")) slot = &jid; break;
        case 'm':
            if (!strcmp(k, "model")) slot = &model;
            else if (!strcmp(k, "max_attempts")) slot = &m;
            else if (!strcmp(k, "metadata")) slot = &out->metadata;
            break;
        case 'p': if (!strcmp(k, "params")) slot = &out->params; break;
        case 'r':
            if (!strcmp(k, "run")) slot = &rn;
            else if (!strcmp(k, "reflection")) slot = &out->reflection;
            break;
        case 's': if (!strcmp(k, "schema")) slot = &out->schema; break;
        case 't': if (!strcmp(k, "token_budget")) slot = &tb; break;
        default: break;
        }
        if (slot && !*slot) *slot = c;
    }
    out->job_id = cJSON_IsString(jid) ? jid->valuestring : NULL;
    out->model = cJSON_IsString(model) ? model->valuestring : NULL;
    out->batch_id = cJSON_IsString(batch) ? batch->valuestring : NULL;
    out->run = (int)num_in(rn, INT_BOUND, 1);
    out->attempt = (int)num_in(a, INT_BOUND, 1);
    int max = (int)num_in(m, INT_BOUND, default_max_attempts);
    if (max > max_attempts_ceiling) max = max_attempts_ceiling;
    out->max_attempts = max;
    out->max_attempts_set = cJSON_IsNumber(m);
    out->token_budget = (long)num_in(tb, 1000000000000000LL, 0);
    const char *deadline = cJSON_IsString(dl) ? dl->valuestring : NULL;
    char why[128];
    if (deadline && util_parse_rfc3339(deadline, &out->deadline_ms, why, sizeof(why))) {
        snprintf(err, errlen, "not a valid job: /deadline: '%s' is not an RFC 3339 date-time: %s", deadline, why);
        util_utf8_cut_end(err);
        memset(out, 0, sizeof(*out));
        jsonin_free(doc);
        return -1;
    }
    return 0;
}

void job_clear(job *j) {
    jsonin_free(j->doc);
    memset(j, 0, sizeof(*j));
}

/* Puts message n of the conversation into out when there is room. */
static void put_message(llm_api_message *out, size_t cap, size_t n, const char *role, const char *content) {
    if (n >= cap) return;
    out[n] = (llm_api_message){role ? role : "", {content ? content : "", NULL, NULL}};
}

size_t job_messages(const job *j, const char *schema_text, llm_api_message *out, size_t cap) {
    static const char intro[] = "Respond with only one JSON value that conforms to the JSON Schema of this task, "
                                "with no text or code fence around it.";
    size_t n = 0;
    if (cap) out[0] = (llm_api_message){"system", {intro, schema_text ? "\nJSON Schema:\n" : NULL, schema_text}};
    n++;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j->doc, "messages");
    if (cJSON_IsArray(msgs)) {
        const cJSON *msg;
        cJSON_ArrayForEach(msg, msgs) put_message(out, cap, n++, get_str(msg, "role"), get_str(msg, "content"));
    } else {
        put_message(out, cap, n++, "user", get_str(j->doc, "prompt"));
    }
    if (cJSON_IsObject(j->reflection)) {
        /* Bounded growth: the original conversation, the last output and
         * one repair message; never every past attempt. */
        const char *prev = get_str(j->reflection, "previous_output");
        const char *prompt = get_str(j->reflection, "prompt");
        put_message(out, cap, n++, "assistant", prev && prev[0] ? prev : "(no output)");
        put_message(out, cap, n++, "user", prompt ? prompt : "Fix the previous answer.");
    }
    return n;
}

char *job_retry_value(const job *j, const cJSON *reflection) {
    cJSON *doc = cJSON_Duplicate(j->doc, 1);
    if (!doc) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "attempt");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "reflection");
    cJSON_AddNumberToObject(doc, "attempt", j->attempt + 1);
    /* The resolved budget travels with the job so every worker agrees. */
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "max_attempts");
    cJSON_AddNumberToObject(doc, "max_attempts", j->max_attempts);
    if (reflection) cJSON_AddItemToObject(doc, "reflection", cJSON_Duplicate(reflection, 1));
    char *s = jsonout_print(doc);
    cJSON_Delete(doc);
    return s;
}
