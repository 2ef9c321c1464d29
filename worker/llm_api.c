#include "llm_api.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"
#include "util.h"

int llm_api_provider_parse(const char *s, llm_provider *out) {
    if (!strcmp(s, "openai")) *out = LLM_PROVIDER_OPENAI;
    else if (!strcmp(s, "anthropic")) *out = LLM_PROVIDER_ANTHROPIC;
    else return -1;
    return 0;
}

int llm_api_response_format_parse(const char *s, llm_response_format *out) {
    if (!strcmp(s, "auto")) *out = LLM_RF_AUTO;
    else if (!strcmp(s, "on")) *out = LLM_RF_ON;
    else if (!strcmp(s, "off")) *out = LLM_RF_OFF;
    else return -1;
    return 0;
}

int llm_api_sends_schema(llm_provider provider, llm_response_format rf) {
    if (rf == LLM_RF_OFF) return 0;
    if (provider == LLM_PROVIDER_ANTHROPIC) return rf == LLM_RF_ON;
    return 1;
}

static int strict_walk(const cJSON *s, int depth) {
    if (!cJSON_IsObject(s) || depth > 32) return cJSON_IsBool(s) ? 1 : depth <= 32;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    if (props) {
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if (!cJSON_IsFalse(ap)) return 0;
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            int found = 0;
            const cJSON *r;
            cJSON_ArrayForEach(r, req)
                if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string)) found = 1;
            if (!found || !strict_walk(p, depth + 1)) return 0;
        }
    }
    static const char *const subs[] = {"items", "$defs", "definitions", "anyOf", "allOf", "oneOf"};
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, subs[i]);
        if (!v) continue;
        if (cJSON_IsArray(v) || (cJSON_IsObject(v) && i >= 1 && i <= 2)) {
            const cJSON *c;
            cJSON_ArrayForEach(c, v) if (!strict_walk(c, depth + 1)) return 0;
        } else if (!strict_walk(v, depth + 1)) {
            return 0;
        }
    }
    return 1;
}

int llm_api_schema_is_strict(const cJSON *schema) { return strict_walk(schema, 0); }

static int param_skipped(const char *name) {
    return !name || !strcmp(name, "model") || !strcmp(name, "messages") || !strcmp(name, "stream");
}

static void schema_name_copy(char *dst, size_t len, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < len && i < 64; i++)
        dst[i] = (isalnum((unsigned char)src[i]) || src[i] == '-' || src[i] == '_') ? src[i] : '_';
    dst[i] = '\0';
    if (!i) snprintf(dst, len, "output");
}

/* Appends a printed cJSON value. */
static int append_json(sbuf *b, const cJSON *v) { return jsonout_value(b, v); }

/* Appends ,"name":v (a param written at the top level). */
static int append_member(sbuf *b, const char *name, const cJSON *v) {
    return sbuf_puts(b, ",") || sbuf_json_string(b, name, strlen(name)) || sbuf_puts(b, ":") || append_json(b, v);
}

/* The body is written as text rather than built as a cJSON tree: the
 * schema (the largest part) is printed once per schema by the caller
 * (schema_json), not duplicated and printed again on every call. */
static char *build_openai(const llm_api_request *req) {
    sbuf b = {0};
    char *schema_owned = NULL;
    char *out = NULL;
    int with_rf = req->schema && llm_api_sends_schema(req->provider, req->response_format) &&
                  !cJSON_GetObjectItemCaseSensitive(req->params, "response_format");
    if (sbuf_reserve(&b, 2048 + (with_rf && req->schema_json ? strlen(req->schema_json) : 0))) goto cleanup;
    if (sbuf_puts(&b, "{\"model\":") || sbuf_json_string(&b, req->model, strlen(req->model)) ||
        sbuf_puts(&b, ",\"messages\":") || append_json(&b, req->messages))
        goto cleanup;
    if (with_rf) {
        const char *schema_json = req->schema_json;
        int strict = req->schema_strict;
        if (!schema_json) {
            schema_json = schema_owned = jsonout_print(req->schema);
            strict = llm_api_schema_is_strict(req->schema);
            if (!schema_json) goto cleanup;
        }
        if (req->response_format == LLM_RF_ON) strict = 1;
        char name[72];
        schema_name_copy(name, sizeof(name), req->schema_name);
        if (sbuf_puts(&b, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"") ||
            sbuf_puts(&b, name) || sbuf_puts(&b, "\",\"schema\":") || sbuf_puts(&b, schema_json) ||
            sbuf_puts(&b, strict ? ",\"strict\":true}}" : ",\"strict\":false}}"))
            goto cleanup;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, req->params) {
        if (param_skipped(p->string)) continue;
        if (append_member(&b, p->string, p)) goto cleanup;
    }
    if (sbuf_puts(&b, "}")) goto cleanup;
    out = sbuf_take(&b);
cleanup:
    sbuf_free(&b);
    free(schema_owned);
    return out;
}

/* The top-level name a param is written under (Anthropic only knows
 * max_tokens for max_completion_tokens, OpenAI's newer spelling). */
static const char *anthropic_param_name(const char *name) {
    return !strcmp(name, "max_completion_tokens") ? "max_tokens" : name;
}

/* Whether a param after p is written under the same name: the last one
 * wins, in its place (as replacing a member of an object moves it to the
 * end).  p NULL: whether any param is written under name. */
static int anthropic_param_later(const cJSON *params, const cJSON *p, const char *name) {
    const cJSON *q = p ? p->next : params ? params->child : NULL;
    for (; q; q = q->next)
        if (!param_skipped(q->string) && !strcmp(anthropic_param_name(q->string), name)) return 1;
    return 0;
}

/* As build_openai, the body is written as text: Retort's members first
 * (those a param replaces are left out), then the params. */
static char *build_anthropic(const llm_api_request *req) {
    sbuf b = {0};
    sbuf sys = {0};
    char *schema_owned = NULL;
    char *out = NULL;
    const cJSON *params = req->params;
    int with_of = req->schema && llm_api_sends_schema(req->provider, req->response_format) &&
                  !anthropic_param_later(params, NULL, "output_format");
    if (sbuf_reserve(&b, 2048 + (with_of && req->schema_json ? strlen(req->schema_json) : 0))) goto cleanup;
    if (sbuf_puts(&b, "{\"model\":") || sbuf_json_string(&b, req->model, strlen(req->model))) goto cleanup;
    if (!anthropic_param_later(params, NULL, "max_tokens") &&
        (sbuf_puts(&b, ",\"max_tokens\":") || jsonout_number(&b, req->default_max_tokens)))
        goto cleanup;
    /* Anthropic takes the system prompt at the top level: the system
     * messages' texts, joined by a blank line. */
    if (sbuf_puts(&b, ",\"messages\":[")) goto cleanup;
    int first = 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, req->messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) {
            if (cJSON_IsString(content) &&
                ((sys.len && sbuf_puts(&sys, "\n\n")) || sbuf_puts(&sys, content->valuestring)))
                goto cleanup;
            continue;
        }
        if ((!first && sbuf_puts(&b, ",")) || jsonout_value(&b, m)) goto cleanup;
        first = 0;
    }
    if (sbuf_puts(&b, "]")) goto cleanup;
    if (sys.len && !anthropic_param_later(params, NULL, "system") &&
        (sbuf_puts(&b, ",\"system\":") || sbuf_json_string(&b, sys.data, sys.len)))
        goto cleanup;
    if (with_of) {
        const char *schema_json = req->schema_json;
        if (!schema_json && !(schema_json = schema_owned = jsonout_print(req->schema))) goto cleanup;
        if (sbuf_puts(&b, ",\"output_format\":{\"type\":\"json_schema\",\"schema\":") ||
            sbuf_puts(&b, schema_json) || sbuf_puts(&b, "}"))
            goto cleanup;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, params) {
        if (param_skipped(p->string)) continue;
        const char *name = anthropic_param_name(p->string);
        if (anthropic_param_later(params, p, name)) continue;
        if (append_member(&b, name, p)) goto cleanup;
    }
    if (sbuf_puts(&b, "}")) goto cleanup;
    out = sbuf_take(&b);
cleanup:
    sbuf_free(&b);
    sbuf_free(&sys);
    free(schema_owned);
    return out;
}

char *llm_api_build_body(const llm_api_request *req) {
    return req->provider == LLM_PROVIDER_ANTHROPIC ? build_anthropic(req) : build_openai(req);
}

static const char *get_str(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long get_long(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) ? (long)v->valuedouble : 0;
}

static int contains_ci(const char *hay, const char *needle) {
    if (!hay) return 0;
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return 0;
}

decide_category llm_api_status_category(long status, const char *code, const char *message) {
    if (status == 429) return DECIDE_CAT_RATE_LIMITED;
    if (status == 408) return DECIDE_CAT_TIMEOUT;
    if (status == 409 || status >= 500) return DECIDE_CAT_SERVER_ERROR;
    if (status == 401 || status == 403) return DECIDE_CAT_AUTH;
    if ((code && (!strcmp(code, "context_length_exceeded") || strstr(code, "context_length"))) ||
        contains_ci(message, "context length") || contains_ci(message, "context window") ||
        contains_ci(message, "prompt is too long"))
        return DECIDE_CAT_CONTEXT_LENGTH;
    return DECIDE_CAT_BAD_REQUEST;
}

static void parse_error(long status, const cJSON *doc, llm_api_result *out) {
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(doc, "error");
    const char *code = NULL, *message = NULL;
    if (cJSON_IsObject(err)) {
        code = get_str(err, "code");
        if (!code) code = get_str(err, "type");
        message = get_str(err, "message");
    } else if (cJSON_IsString(err)) {
        message = err->valuestring;
    }
    snprintf(out->error, sizeof(out->error), "HTTP %ld%s%s%s%s", status, code ? " " : "",
             code ? code : "", message ? ": " : "", message ? message : "");
    out->category = llm_api_status_category(status, code, message);
}

static void parse_openai(const cJSON *doc, llm_api_result *out) {
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(doc, "choices");
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(doc, "usage");
    out->prompt_tokens = get_long(usage, "prompt_tokens");
    out->completion_tokens = get_long(usage, "completion_tokens");
    if (!cJSON_IsObject(choice)) {
        out->category = DECIDE_CAT_SERVER_ERROR;
        snprintf(out->error, sizeof(out->error), "response has no choices");
        return;
    }
    const char *fr = get_str(choice, "finish_reason");
    snprintf(out->finish_reason, sizeof(out->finish_reason), "%s", fr ? fr : "");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const char *refusal = get_str(msg, "refusal");
    const char *content = get_str(msg, "content");
    if (content) out->text = strdup(content);
    if (refusal) {
        out->category = DECIDE_CAT_REFUSAL;
        snprintf(out->error, sizeof(out->error), "refusal: %s", refusal);
    } else if (fr && !strcmp(fr, "content_filter")) {
        out->category = DECIDE_CAT_CONTENT_FILTER;
        snprintf(out->error, sizeof(out->error), "output removed by the content filter");
    } else if (fr && !strcmp(fr, "length")) {
        out->category = DECIDE_CAT_TRUNCATED;
        snprintf(out->error, sizeof(out->error), "output cut at max_tokens (finish_reason length)");
    } else if (!content || !content[0]) {
        out->category = DECIDE_CAT_EMPTY;
        snprintf(out->error, sizeof(out->error), "empty answer");
    } else {
        out->category = DECIDE_CAT_OK;
    }
}

static void parse_anthropic(const cJSON *doc, llm_api_result *out) {
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(doc, "usage");
    out->prompt_tokens = get_long(usage, "input_tokens");
    out->completion_tokens = get_long(usage, "output_tokens");
    const char *sr = get_str(doc, "stop_reason");
    snprintf(out->finish_reason, sizeof(out->finish_reason), "%s", sr ? sr : "");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(doc, "content");
    if (!cJSON_IsArray(content)) {
        out->category = DECIDE_CAT_SERVER_ERROR;
        snprintf(out->error, sizeof(out->error), "response has no content");
        return;
    }
    size_t total = 0;
    const cJSON *block;
    cJSON_ArrayForEach(block, content) {
        const char *type = get_str(block, "type"), *text = get_str(block, "text");
        if (type && !strcmp(type, "text") && text) total += strlen(text);
    }
    out->text = malloc(total + 1);
    if (out->text) {
        size_t off = 0;
        cJSON_ArrayForEach(block, content) {
            const char *type = get_str(block, "type"), *text = get_str(block, "text");
            if (type && !strcmp(type, "text") && text) {
                size_t n = strlen(text);
                memcpy(out->text + off, text, n);
                off += n;
            }
        }
        out->text[off] = '\0';
    }
    if (sr && !strcmp(sr, "refusal")) {
        out->category = DECIDE_CAT_REFUSAL;
        snprintf(out->error, sizeof(out->error), "refusal (stop_reason refusal)");
    } else if (sr && !strcmp(sr, "max_tokens")) {
        out->category = DECIDE_CAT_TRUNCATED;
        snprintf(out->error, sizeof(out->error), "output cut at max_tokens (stop_reason max_tokens)");
    } else if (!total) {
        out->category = DECIDE_CAT_EMPTY;
        snprintf(out->error, sizeof(out->error), "empty answer");
    } else {
        out->category = DECIDE_CAT_OK;
    }
}

void llm_api_parse(llm_provider provider, long status, const char *body, size_t len,
                   llm_api_result *out) {
    memset(out, 0, sizeof(*out));
    cJSON *doc = body && len ? cJSON_ParseWithLength(body, len) : NULL;
    if (status < 200 || status >= 300) {
        parse_error(status, doc, out);
    } else if (!doc) {
        out->category = DECIDE_CAT_SERVER_ERROR;
        snprintf(out->error, sizeof(out->error), "HTTP %ld with a body that is not JSON", status);
    } else if (provider == LLM_PROVIDER_ANTHROPIC) {
        parse_anthropic(doc, out);
    } else {
        parse_openai(doc, out);
    }
    cJSON_Delete(doc);
}

void llm_api_result_clear(llm_api_result *r) {
    free(r->text);
    memset(r, 0, sizeof(*r));
}
