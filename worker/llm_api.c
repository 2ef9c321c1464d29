#include "llm_api.h"

#include <ctype.h>
#include <stddef.h>
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

static int anthropic_param_later(const cJSON *params, const cJSON *p, const char *name);

/* A job's own response_format (OpenAI) or output_config / output_format
 * (Anthropic) param replaces Retort's whole: the schema then goes in the
 * prompt, or the model would be told to follow a schema it never sees. */
int llm_api_sends_schema(llm_provider provider, llm_response_format rf, const cJSON *params) {
    if (rf == LLM_RF_OFF) return 0;
    if (provider == LLM_PROVIDER_ANTHROPIC)
        return rf == LLM_RF_ON && !anthropic_param_later(params, NULL, "output_config") &&
               !anthropic_param_later(params, NULL, "output_format");
    return !cJSON_GetObjectItemCaseSensitive(params, "response_format");
}

/* Keywords OpenAI's strict mode refuses (the request fails, 400: "'oneOf'
 * is not permitted"): a schema that uses one goes with strict false. */
static const char *const strict_refused[] = {
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedItems", "contains", "minContains",
    "maxContains", "uniqueItems", "allOf", "oneOf", "not", "if", "then", "else"};

static int is_object_schema(const cJSON *s) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "object");
    const cJSON *t;
    cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && !strcmp(t->valuestring, "object")) return 1;
    return cJSON_GetObjectItemCaseSensitive(s, "properties") != NULL;
}

static int strict_walk(const cJSON *s, int depth) {
    if (!cJSON_IsObject(s) || depth > 32) return cJSON_IsBool(s) ? 1 : depth <= 32;
    for (size_t i = 0; i < sizeof(strict_refused) / sizeof(strict_refused[0]); i++)
        if (cJSON_GetObjectItemCaseSensitive(s, strict_refused[i])) return 0;
    if (is_object_schema(s)) {
        /* every object closed, with or without properties of its own */
        if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"))) return 0;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
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
    static const char *const subs[] = {"items", "$defs", "definitions", "anyOf", "prefixItems"};
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

/* The root must be an object, not a union of them. */
int llm_api_schema_is_strict(const cJSON *schema) {
    return cJSON_IsObject(schema) && is_object_schema(schema) && strict_walk(schema, 0);
}

/* Members Retort writes itself, or that would change the answer's form:
 * the answer is read whole, so no stream, nor its options (without stream
 * OpenAI refuses stream_options: 400). */
static int param_skipped(const char *name) {
    return !name || !strcmp(name, "model") || !strcmp(name, "messages") || !strcmp(name, "stream") ||
           !strcmp(name, "stream_options");
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

/* Appends m's content's parts, escaped as one JSON string's inside. */
static int append_parts(sbuf *b, const llm_api_message *m) {
    for (int i = 0; i < LLM_API_PARTS && m->parts[i]; i++)
        if (sbuf_json_escape(b, m->parts[i], strlen(m->parts[i]))) return -1;
    return 0;
}

/* Appends {"role":...,"content":...}. */
static int append_message(sbuf *b, const llm_api_message *m) {
    const char *role = m->role ? m->role : "";
    return sbuf_puts(b, "{\"role\":") || sbuf_json_string(b, role, strlen(role)) ||
           sbuf_puts(b, ",\"content\":\"") || append_parts(b, m) || sbuf_puts(b, "\"}");
}

static int is_system(const llm_api_message *m) { return m->role && !strcmp(m->role, "system"); }

static int content_empty(const llm_api_message *m) {
    for (int i = 0; i < LLM_API_PARTS && m->parts[i]; i++)
        if (m->parts[i][0]) return 0;
    return 1;
}

/* Appends ,"name":v (a param written at the top level). */
static int append_member(sbuf *b, const char *name, const cJSON *v) {
    return sbuf_puts(b, ",") || sbuf_json_string(b, name, strlen(name)) || sbuf_puts(b, ":") || append_json(b, v);
}

/* The body is written as text rather than built as a cJSON tree: the
 * schema (the largest part) is printed once per schema by the caller
 * (schema_json), not duplicated and printed again on every call. */
static char *build_openai(const llm_api_request *req, size_t *len) {
    sbuf b = {0};
    char *schema_owned = NULL;
    char *out = NULL;
    int with_rf = req->schema && llm_api_sends_schema(req->provider, req->response_format, req->params);
    if (sbuf_reserve(&b, 2048 + (with_rf && req->schema_json ? strlen(req->schema_json) : 0))) goto cleanup;
    if (sbuf_puts(&b, "{\"model\":") || sbuf_json_string(&b, req->model, strlen(req->model)) ||
        sbuf_puts(&b, ",\"messages\":["))
        goto cleanup;
    for (size_t i = 0; i < req->nmessages; i++)
        if ((i && sbuf_puts(&b, ",")) || append_message(&b, &req->messages[i])) goto cleanup;
    if (sbuf_puts(&b, "]")) goto cleanup;
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
    if (len) *len = b.len;
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
static char *build_anthropic(const llm_api_request *req, size_t *len) {
    sbuf b = {0};
    char *schema_owned = NULL;
    char *out = NULL;
    const cJSON *params = req->params;
    /* Structured outputs as Anthropic made them generally available:
     * output_config.format, no beta header (the beta's output_format,
     * sent without its header, is refused: 400).  A job's own
     * output_config (or output_format) param replaces it whole. */
    int with_of = req->schema && llm_api_sends_schema(req->provider, req->response_format, params);
    if (sbuf_reserve(&b, 2048 + (with_of && req->schema_json ? strlen(req->schema_json) : 0))) goto cleanup;
    if (sbuf_puts(&b, "{\"model\":") || sbuf_json_string(&b, req->model, strlen(req->model))) goto cleanup;
    if (!anthropic_param_later(params, NULL, "max_tokens") &&
        (sbuf_puts(&b, ",\"max_tokens\":") || jsonout_number(&b, req->default_max_tokens)))
        goto cleanup;
    /* Anthropic takes the system prompt at the top level: the system
     * messages' texts, joined by a blank line, written after the others. */
    if (sbuf_puts(&b, ",\"messages\":[")) goto cleanup;
    int first = 1, has_sys = 0;
    for (size_t i = 0; i < req->nmessages; i++) {
        const llm_api_message *m = &req->messages[i];
        if (is_system(m)) {
            has_sys |= !content_empty(m);
            continue;
        }
        if ((!first && sbuf_puts(&b, ",")) || append_message(&b, m)) goto cleanup;
        first = 0;
    }
    if (sbuf_puts(&b, "]")) goto cleanup;
    if (has_sys && !anthropic_param_later(params, NULL, "system")) {
        /* cached: a block whose prefix (the tools, then the system) a
         * later request of the same prefix reads at a tenth of the price;
         * shorter than the model's minimum (1,024 tokens and up) it is
         * not cached, and costs nothing more */
        if (sbuf_puts(&b, req->prompt_cache ? ",\"system\":[{\"type\":\"text\",\"text\":\"" : ",\"system\":\""))
            goto cleanup;
        int joined = 0;
        for (size_t i = 0; i < req->nmessages; i++) {
            const llm_api_message *m = &req->messages[i];
            if (!is_system(m) || content_empty(m)) continue;
            if ((joined++ && sbuf_puts(&b, "\\n\\n")) || append_parts(&b, m)) goto cleanup;
        }
        if (sbuf_puts(&b, req->prompt_cache ? "\",\"cache_control\":{\"type\":\"ephemeral\"}}]" : "\""))
            goto cleanup;
    }
    if (with_of) {
        const char *schema_json = req->schema_json;
        if (!schema_json && !(schema_json = schema_owned = jsonout_print(req->schema))) goto cleanup;
        if (sbuf_puts(&b, ",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":") ||
            sbuf_puts(&b, schema_json) || sbuf_puts(&b, "}}"))
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
    if (len) *len = b.len;
    out = sbuf_take(&b);
cleanup:
    sbuf_free(&b);
    free(schema_owned);
    return out;
}

char *llm_api_build_body(const llm_api_request *req, size_t *len) {
    return req->provider == LLM_PROVIDER_ANTHROPIC ? build_anthropic(req, len) : build_openai(req, len);
}

static const char *get_str(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A count of the answer's, capped (a server may send 4e19; the fuzzer
 * did), and no token count comes near 1e15; one below 0 (a faulty server)
 * is 0: taken as sent, it wrapped the metrics' token counters and gave
 * tokens back to the shared rate limiter. */
static long get_long(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) ? (long)util_clamp_ll(v->valuedouble, 0, 1000000000000000LL) : 0;
}

static int contains_ci(const char *hay, const char *needle) {
    if (!hay) return 0;
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return 0;
}

decide_category llm_api_status_category(long status, const char *code, const char *message) {
    /* OpenAI answers a spent quota (billing, not a rate) with a 429 of its
     * own code; Anthropic a spent credit with a 400.  Neither passes by
     * waiting: calling again only repeats it, and taken for a rate limit
     * it would halve the model's concurrency for every job. */
    if ((code && !strcmp(code, "insufficient_quota")) || contains_ci(message, "credit balance is too low"))
        return DECIDE_CAT_QUOTA;
    if (status == 429) return DECIDE_CAT_RATE_LIMITED;
    if (status == 408) return DECIDE_CAT_TIMEOUT;
    if (status == 409 || status >= 500) return DECIDE_CAT_SERVER_ERROR;
    if (status == 401 || status == 403) return DECIDE_CAT_AUTH;
    /* OpenAI, Anthropic, vLLM ("maximum context length"), llama.cpp
     * ("exceeds the available context size") */
    if ((code && (strstr(code, "context_length") || strstr(code, "context_size"))) ||
        contains_ci(message, "context length") || contains_ci(message, "context window") ||
        contains_ci(message, "context limit") || contains_ci(message, "context size") ||
        contains_ci(message, "prompt is too long"))
        return DECIDE_CAT_CONTEXT_LENGTH;
    return DECIDE_CAT_BAD_REQUEST;
}

/* The message of an error body that is no JSON, into buf ("" when none):
 * a proxy's HTML page by its <title> ("502 Bad Gateway"), a plain text
 * by its first line.  Control characters become spaces: the message goes
 * into one-line logs and events. */
static void text_error_message(const char *body, size_t len, char *buf, size_t buflen) {
    size_t i = 0, end = len, n = 0;
    buf[0] = '\0';
    if (!body) return;
    int html = 0;
    for (size_t k = 0; k + 7 <= len && k < 4096; k++) {
        if (!strncasecmp(body + k, "<title>", 7)) {
            html = 1;
            i = end = k + 7;
            while (end < len && body[end] != '<') end++;
            break;
        }
    }
    while (i < end && isspace((unsigned char)body[i])) i++;
    if (!html && i < end && body[i] == '<') return; /* markup without a title: nothing to say */
    size_t stop = i;
    while (stop < end && (html || (body[stop] != '\n' && body[stop] != '\r'))) stop++;
    while (stop > i && isspace((unsigned char)body[stop - 1])) stop--;
    for (; i < stop && n + 1 < buflen; i++) {
        unsigned char ch = (unsigned char)body[i];
        buf[n++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
    }
    buf[n] = '\0';
    util_utf8_cut_end(buf);
}

static void parse_error(long status, const cJSON *doc, const char *body, size_t len, llm_api_result *out) {
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(doc, "error");
    const char *code = NULL, *message = NULL;
    char text[200];
    if (cJSON_IsObject(err)) {
        /* OpenAI, Anthropic, llama.cpp (whose code is the status, a number) */
        code = get_str(err, "code");
        if (!code) code = get_str(err, "type");
        message = get_str(err, "message");
    } else if (cJSON_IsString(err)) {
        /* Ollama, text-generation-inference */
        message = err->valuestring;
        code = get_str(doc, "error_type");
    } else if (cJSON_IsObject(doc)) {
        /* vLLM and other OpenAI-compatible servers put the fields at the
         * top; FastAPI's own errors say it in "detail" (a string, or a
         * list of {loc, msg} for a request it could not read).  Left
         * unread, a prompt past vLLM's context length was a bad request
         * with no word of why. */
        message = get_str(doc, "message");
        if (message) {
            code = get_str(doc, "code");
            if (!code) code = get_str(doc, "type");
        } else {
            const cJSON *detail = cJSON_GetObjectItemCaseSensitive(doc, "detail");
            message = cJSON_IsString(detail) ? detail->valuestring
                    : cJSON_IsArray(detail) ? get_str(cJSON_GetArrayItem(detail, 0), "msg") : NULL;
        }
    } else if (cJSON_IsString(doc)) {
        message = doc->valuestring;
    } else if (!doc) {
        text_error_message(body, len, text, sizeof(text));
        if (text[0]) message = text;
    }
    snprintf(out->error, sizeof(out->error), "HTTP %ld%s%s%s%s", status, code ? " " : "",
             code ? code : "", message ? ": " : "", message ? message : "");
    util_utf8_cut_end(out->error);
    out->category = llm_api_status_category(status, code, message);
}

/* What parse_openai and llm_api_scan share once they have the fields:
 * fr, refusal, content are NULL when absent or not strings; out->text and
 * the token counts are set already. */
static void openai_classify(llm_api_result *out, const char *fr, const char *refusal, const char *content) {
    util_concat(out->finish_reason, sizeof(out->finish_reason), fr ? fr : "", (char *)NULL);
    /* "" is none (some OpenAI-compatible servers send it with the answer;
     * OpenAI's SDK reads it so): taken for a refusal, a valid answer
     * escalated at once */
    if (refusal && refusal[0]) {
        out->category = DECIDE_CAT_REFUSAL;
        util_concat(out->error, sizeof(out->error), "refusal: ", refusal, (char *)NULL);
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

static void openai_no_choices(llm_api_result *out) {
    out->category = DECIDE_CAT_SERVER_ERROR;
    snprintf(out->error, sizeof(out->error), "response has no choices");
}

/* The text of an array of content blocks ({"type": "text", "text": ...}),
 * joined; the others (thinking, images...) left out.  Taken; NULL on out
 * of memory.  Its length into *len. */
static char *text_blocks(const cJSON *content, size_t *len) {
    size_t total = 0;
    const cJSON *block;
    cJSON_ArrayForEach(block, content) {
        const char *type = get_str(block, "type"), *text = get_str(block, "text");
        if (type && !strcmp(type, "text") && text) total += strlen(text);
    }
    char *out = malloc(total + 1);
    if (out) {
        size_t off = 0;
        cJSON_ArrayForEach(block, content) {
            const char *type = get_str(block, "type"), *text = get_str(block, "text");
            if (type && !strcmp(type, "text") && text) {
                size_t n = strlen(text);
                memcpy(out + off, text, n);
                off += n;
            }
        }
        out[off] = '\0';
    }
    *len = total;
    return out;
}

/* A job may ask for its answer through a tool of its own (`tools` and a
 * `tool_choice` that forces it, in its params: the way to structured
 * output before response formats, and still common).  The model's JSON
 * then comes as the one call's arguments (OpenAI, a string; the older
 * function_call too) or input (Anthropic, an object), and is the answer:
 * read as text, it was empty or the model's words around the call.  More
 * than one call names no answer.  Taken; NULL when there is none (or out
 * of memory).  *calls: how many there were. */
static char *openai_tool_answer(const cJSON *msg, int *calls) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    const cJSON *fn = NULL;
    *calls = cJSON_IsArray(tc) ? cJSON_GetArraySize(tc) : 0;
    if (*calls == 1) {
        fn = cJSON_GetObjectItemCaseSensitive(tc->child, "function");
    } else if (!*calls) {
        fn = cJSON_GetObjectItemCaseSensitive(msg, "function_call");
        *calls = cJSON_IsObject(fn);
    }
    const char *args = *calls == 1 ? get_str(fn, "arguments") : NULL;
    return args ? strdup(args) : NULL;
}

/* Anthropic's: the one tool_use block's input, printed (its numbers as
 * doubles: an integer past 2^53 does not come back as sent). */
static char *anthropic_tool_answer(const cJSON *content, int *calls) {
    const cJSON *block, *input = NULL;
    *calls = 0;
    cJSON_ArrayForEach(block, content) {
        const char *type = get_str(block, "type");
        if (type && !strcmp(type, "tool_use") && ++*calls == 1)
            input = cJSON_GetObjectItemCaseSensitive(block, "input");
    }
    return *calls == 1 && input ? jsonout_print(input) : NULL;
}

/* What is said of an answer of several tool calls (EMPTY). */
static void tool_calls_error(llm_api_result *out, int calls) {
    if (calls > 1 && out->category == DECIDE_CAT_EMPTY)
        snprintf(out->error, sizeof(out->error), "the answer is %d tool calls, not one", calls);
}

static void parse_openai(const cJSON *doc, llm_api_result *out) {
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(doc, "choices");
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(doc, "usage");
    out->prompt_tokens = get_long(usage, "prompt_tokens");
    out->completion_tokens = get_long(usage, "completion_tokens");
    out->cache_read_tokens = get_long(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"),
                                      "cached_tokens");
    if (!cJSON_IsObject(choice)) {
        openai_no_choices(out);
        return;
    }
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const char *content = get_str(msg, "content");
    if (content) {
        out->text = strdup(content);
    } else {
        /* Some OpenAI-compatible servers answer with content parts, as
         * requests may send them: the text parts are the answer (read as
         * empty, it cost every attempt). */
        const cJSON *parts = cJSON_GetObjectItemCaseSensitive(msg, "content");
        size_t n;
        if (cJSON_IsArray(parts) && (out->text = text_blocks(parts, &n))) content = out->text;
    }
    int calls;
    char *tool = openai_tool_answer(msg, &calls);
    if (tool) {
        free(out->text);
        out->text = tool;
        content = tool;
    } else if (calls) {
        free(out->text);
        out->text = NULL;
        content = NULL;
    }
    openai_classify(out, get_str(choice, "finish_reason"), get_str(msg, "refusal"), content);
    tool_calls_error(out, calls);
}

/* ---- an answer without a DOM -------------------------------------------
 * Every answer passes here, and cJSON spends most of its parse on members
 * nobody reads (id, model, the usage details...): 64 allocations and
 * 1.5 us for the chat completion in ../shared/llm-api.  llm_api_scan reads
 * the body once, checking that it is JSON and keeping only what
 * parse_openai (or parse_anthropic, below it) reads, with the same rules
 * (the first of duplicate keys, a member of the wrong type counts as
 * absent).  What it does not handle (an escaped key, \u0000 or a lone
 * surrogate, a token count that is not a plain integer, a top-level value
 * that is not an object, text after it, nesting deeper than OA_MAX_DEPTH,
 * a raw control byte in a string) makes it give up, and the body goes to
 * cJSON: the result is always the one cJSON gives. */

#define OA_MAX_DEPTH 64

typedef struct oa_scan {
    const char *p, *end;
    int depth;
    char *refusal, *content;      /* malloc'd; NULL = absent or not a string */
    char *fr;                     /* into fr_buf; NULL = absent or not a string */
    char fr_buf[64];              /* the reasons are short words: no allocation */
    long ptoks, ctoks;
    long cache_w, cache_r;        /* prompt tokens written to / read from the provider's cache */
    int choice;                   /* OpenAI: choices[0] is an object */
    int blocks;                   /* Anthropic: content is an array */
    sbuf text;                    /* Anthropic: its text blocks, joined */
    int nul;                      /* a string escapes U+0000 (every string passes oa_string) */
} oa_scan;

static void oa_ws(oa_scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

/* Bytes that end a plain run inside a string: the quote, the backslash
 * and the control bytes (1 = stop). */
static const unsigned char oa_stop[256] = {
    [0 ... 0x1F] = 1, ['"'] = 1, ['\\'] = 1,
};

/* What an escape's letter stands for (0 = not a one-letter escape). */
static const char oa_unesc[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b', ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* The string at s->p (its opening quote): *raw and *len get the bytes
 * between the quotes, *esc whether they hold escapes; s->p moves past
 * the closing quote.  -1: not a string this scanner takes. */
static int oa_string(oa_scan *s, const char **raw, size_t *len, int *esc) {
    const char *p = s->p + 1, *end = s->end;
    int e = 0;
    for (;;) {
        while (p < end && !oa_stop[(unsigned char)*p]) p++;
        if (p >= end || (unsigned char)*p < 0x20) return -1;
        if (*p == '"') break;
        if (end - p < 2) return -1;
        unsigned cp;
        if (p[1] == 'u') {
            /* cJSON decodes every string, so a lone surrogate anywhere
             * fails its parse: give up on one here too */
            if (end - p < 6 || util_hex4(p + 2, &cp) || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
            if (!cp) s->nul = 1;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || util_hex4(p + 2, &cp) || cp < 0xDC00 || cp > 0xDFFF)
                    return -1;
                p += 6;
            }
        } else if (oa_unesc[(unsigned char)p[1]]) {
            p += 2;
        } else {
            return -1;
        }
        e = 1;
    }
    *raw = s->p + 1;
    *len = (size_t)(p - (s->p + 1));
    *esc = e;
    s->p = p + 1;
    return 0;
}

/* Decodes a string oa_string took (its escapes and surrogate pairs
 * checked there) into d, which has room for n + 1 bytes (decoding never
 * lengthens), NUL-terminated; returns the decoded length, or -1 for a
 * \u0000, which ends cJSON's copy of the string early. */
static ptrdiff_t oa_decode_to(char *d, const char *r, size_t n) {
    char *start = d;
    for (size_t i = 0; i < n;) {
        if (r[i] != '\\') {
            *d++ = r[i++];
            continue;
        }
        char c = r[i + 1];
        i += 2;
        if (c != 'u') {
            *d++ = oa_unesc[(unsigned char)c]; /* checked by oa_string */
            continue;
        }
        unsigned cp = 0, lo = 0xDC00; /* the digits were checked by oa_string */
        util_hex4(r + i, &cp);
        i += 4;
        if (cp == 0) return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low one follows */
            util_hex4(r + i + 2, &lo);
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        d += util_utf8_put(d, cp);
    }
    *d = '\0';
    return d - start;
}

/* A malloc'd copy of a string oa_string took, decoded.  NULL on out of
 * memory or a \u0000 (oa_decode_to). */
static char *oa_decode(const char *r, size_t n) {
    char *o = malloc(n + 1);
    if (o && oa_decode_to(o, r, n) < 0) {
        free(o);
        o = NULL;
    }
    return o;
}

/* A number in JSON's grammar.  *small: 1 when it is an integer of at most
 * 15 digits (exact as a double, so (long)valuedouble is *val). */
static int oa_number(oa_scan *s, long *val, int *small) {
    const char *p = s->p, *e = s->end;
    int neg = 0, digits = 0, integer = 1;
    long v = 0;
    if (p < e && *p == '-') neg = 1, p++;
    if (p >= e || *p < '0' || *p > '9') return -1;
    if (*p == '0') {
        p++;
        digits = 1;
    } else {
        for (; p < e && *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 15) v = v * 10 + (*p - '0');
    }
    if (p < e && *p == '.') {
        integer = 0;
        if (++p >= e || *p < '0' || *p > '9') return -1;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return -1;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    *small = integer && digits <= 15;
    *val = neg ? -v : v;
    return 0;
}

static int oa_value(oa_scan *s);

typedef int (*oa_member_fn)(oa_scan *s, const char *key, size_t klen, void *ctx);

/* Past the opening bracket at s->p: 1 when close follows at once (read
 * too), 0 when an element does, -1 when nesting is too deep. */
static int oa_open(oa_scan *s, char close) {
    if (++s->depth > OA_MAX_DEPTH) return -1;
    s->p++;
    oa_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    return 0;
}

/* After an element: 1 when a comma follows (read), 0 when close does (read:
 * the container ends), -1 otherwise. */
static int oa_next(oa_scan *s, char close) {
    oa_ws(s);
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        oa_ws(s);
        return 1;
    }
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    return -1;
}

/* The object at s->p: fn (NULL = skip every value) is called with s->p at
 * each member's value and must read past it. */
static int oa_object(oa_scan *s, oa_member_fn fn, void *ctx) {
    int r = oa_open(s, '}');
    if (r != 0) return r < 0 ? -1 : 0;
    for (;;) {
        const char *k;
        size_t kl;
        int esc;
        if (s->p >= s->end || *s->p != '"' || oa_string(s, &k, &kl, &esc) || esc) return -1;
        oa_ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        oa_ws(s);
        if (fn ? fn(s, k, kl, ctx) : oa_value(s)) return -1;
        if ((r = oa_next(s, '}')) <= 0) return r;
    }
}

/* The array at s->p: fn (NULL = skip every element) is called with s->p
 * at each element and its index, and must read past it. */
static int oa_array(oa_scan *s, int (*fn)(oa_scan *s, size_t i)) {
    int r = oa_open(s, ']');
    if (r != 0) return r < 0 ? -1 : 0;
    for (size_t i = 0;; i++) {
        if (fn ? fn(s, i) : oa_value(s)) return -1;
        if ((r = oa_next(s, ']')) <= 0) return r;
    }
}

static int oa_literal(oa_scan *s, const char *lit, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n)) return -1;
    s->p += n;
    return 0;
}

/* Any value, read past and checked. */
static int oa_value(oa_scan *s) {
    if (s->p >= s->end) return -1;
    const char *r;
    size_t n;
    int esc;
    long v;
    switch (*s->p) {
    case '{': return oa_object(s, NULL, NULL);
    case '[': return oa_array(s, NULL);
    case '"': return oa_string(s, &r, &n, &esc);
    case 't': return oa_literal(s, "true", 4);
    case 'f': return oa_literal(s, "false", 5);
    case 'n': return oa_literal(s, "null", 4);
    default: return oa_number(s, &v, &esc);
    }
}

#define OA_KEY(k, kl, lit) ((kl) == sizeof(lit) - 1 && !memcmp((k), (lit), sizeof(lit) - 1))

/* A wanted member's value: 1 when it is a string met first (the first of
 * duplicate keys counts), read at *r (escaped when *esc); 0 when it is
 * skipped; -1 when it is not JSON.  seen: set on the first occurrence
 * whatever its type. */
static int oa_member_string(oa_scan *s, int *seen, const char **r, size_t *n, int *esc) {
    if (*seen || s->p >= s->end || *s->p != '"') {
        *seen = 1;
        return oa_value(s) ? -1 : 0;
    }
    *seen = 1;
    return oa_string(s, r, n, esc) ? -1 : 1;
}

/* A string member that is wanted: decoded into *dst (malloc'd) when it is
 * a string met first, else skipped. */
static int oa_take_string(oa_scan *s, char **dst, int *seen) {
    const char *r;
    size_t n;
    int esc, k = oa_member_string(s, seen, &r, &n, &esc);
    if (k <= 0) return k;
    if (!esc) {
        *dst = malloc(n + 1);
        if (!*dst) return -1;
        memcpy(*dst, r, n);
        (*dst)[n] = '\0';
        return 0;
    }
    *dst = oa_decode(r, n);
    return *dst ? 0 : -1;
}

/* oa_take_string for a short string: into buf (cut to size - 1 bytes;
 * the finish and stop reasons compared and kept are all far shorter),
 * *dst pointing at it. */
static int oa_take_short(oa_scan *s, char *buf, size_t size, char **dst, int *seen) {
    const char *r;
    size_t n;
    int esc, k = oa_member_string(s, seen, &r, &n, &esc);
    if (k <= 0) return k;
    char *decoded = NULL;
    if (esc) {
        if (!(decoded = oa_decode(r, n))) return -1;
        r = decoded;
        n = strlen(decoded);
    }
    if (n >= size) n = size - 1;
    memcpy(buf, r, n);
    buf[n] = '\0';
    *dst = buf;
    free(decoded);
    return 0;
}

/* Which of a level's two wanted keys were met already (the first of
 * duplicate keys counts). */
typedef struct oa_seen {
    int a, b, c, d;
} oa_seen;

/* An object member that is wanted: its members go to fn when it is an
 * object met for the first time, else it is skipped. */
static int oa_take_object(oa_scan *s, int *seen, oa_member_fn fn) {
    if (*seen || s->p >= s->end || *s->p != '{') {
        *seen = 1;
        return oa_value(s);
    }
    *seen = 1;
    oa_seen q = {0};
    return oa_object(s, fn, &q);
}

static int oa_message_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    /* content parts (an array) are read by the DOM */
    if (OA_KEY(k, kl, "content")) return !q->a && s->p < s->end && *s->p == '[' ? -1 : oa_take_string(s, &s->content, &q->a);
    if (OA_KEY(k, kl, "refusal")) return oa_take_string(s, &s->refusal, &q->b);
    /* a tool call is read by the DOM (parse_openai); null and [] are
     * none (vLLM sends "tool_calls": [] with every answer) */
    if (OA_KEY(k, kl, "tool_calls") || OA_KEY(k, kl, "function_call")) {
        const char *v = s->p;
        if (v < s->end && *v == '{') return -1;
        if (v < s->end && *v == '[') {
            for (v++; v < s->end && (*v == ' ' || *v == '\n' || *v == '\r' || *v == '\t'); v++)
                ;
            if (v < s->end && *v != ']') return -1;
        }
    }
    return oa_value(s);
}

static int oa_choice_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    if (OA_KEY(k, kl, "finish_reason")) return oa_take_short(s, s->fr_buf, sizeof(s->fr_buf), &s->fr, &q->a);
    if (OA_KEY(k, kl, "message")) return oa_take_object(s, &q->b, oa_message_member);
    return oa_value(s);
}

static int oa_first_choice(oa_scan *s, size_t i) {
    if (i == 0 && s->p < s->end && *s->p == '{') {
        s->choice = 1;
        oa_seen q = {0};
        return oa_object(s, oa_choice_member, &q);
    }
    return oa_value(s);
}

/* A token count: a plain integer (below 0: 0), or anything but a number
 * (counted 0), as get_long reads them; other numbers are left to cJSON. */
static int oa_take_count(oa_scan *s, long *dst, int *seen) {
    if (*seen || s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        *seen = 1;
        return oa_value(s);
    }
    *seen = 1;
    int small;
    if (oa_number(s, dst, &small) || !small) return -1;
    if (*dst < 0) *dst = 0;
    return 0;
}

static int oa_details_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    if (OA_KEY(k, kl, "cached_tokens")) return oa_take_count(s, &s->cache_r, &q->a);
    return oa_value(s);
}

static int oa_usage_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    if (OA_KEY(k, kl, "prompt_tokens")) return oa_take_count(s, &s->ptoks, &q->a);
    if (OA_KEY(k, kl, "completion_tokens")) return oa_take_count(s, &s->ctoks, &q->b);
    if (OA_KEY(k, kl, "prompt_tokens_details")) return oa_take_object(s, &q->c, oa_details_member);
    return oa_value(s);
}

static int oa_top_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    if (OA_KEY(k, kl, "choices") && !q->a) {
        q->a = 1;
        /* cJSON_GetArrayItem also takes the first member of an object:
         * rare enough to leave to it */
        if (s->p < s->end && *s->p == '{') return -1;
        if (s->p < s->end && *s->p == '[') return oa_array(s, oa_first_choice);
        return oa_value(s);
    }
    if (OA_KEY(k, kl, "usage")) return oa_take_object(s, &q->b, oa_usage_member);
    return oa_value(s);
}

/* What parse_anthropic and the scanner share: sr is the stop reason (NULL
 * = absent or not a string), blocks whether "content" is an array, total
 * the length of its joined text blocks; out->text and the token counts
 * are set already. */
static void anthropic_classify(llm_api_result *out, const char *sr, int blocks, size_t total) {
    util_concat(out->finish_reason, sizeof(out->finish_reason), sr ? sr : "", (char *)NULL);
    if (!blocks) {
        out->category = DECIDE_CAT_SERVER_ERROR;
        snprintf(out->error, sizeof(out->error), "response has no content");
    } else if (sr && !strcmp(sr, "refusal")) {
        out->category = DECIDE_CAT_REFUSAL;
        snprintf(out->error, sizeof(out->error), "refusal (stop_reason refusal)");
    } else if (sr && !strcmp(sr, "max_tokens")) {
        out->category = DECIDE_CAT_TRUNCATED;
        snprintf(out->error, sizeof(out->error), "output cut at max_tokens (stop_reason max_tokens)");
    } else if (sr && !strcmp(sr, "model_context_window_exceeded")) {
        /* cut too, by the context window rather than max_tokens: read as
         * whole, the answer failed as "not JSON" with no word of why */
        out->category = DECIDE_CAT_TRUNCATED;
        snprintf(out->error, sizeof(out->error),
                 "output cut at the model's context window (stop_reason model_context_window_exceeded)");
    } else if (!total) {
        out->category = DECIDE_CAT_EMPTY;
        snprintf(out->error, sizeof(out->error), "empty answer");
    } else {
        out->category = DECIDE_CAT_OK;
    }
}

/* Anthropic's input_tokens leaves out the prompt tokens written to and
 * read from its prompt cache; OpenAI's prompt_tokens counts cached ones
 * too.  The whole prompt, as OpenAI counts it: a job's usage, its token
 * budget and the tokens-per-minute buckets see every prompt token. */
static long anthropic_prompt_tokens(long input, long cache_w, long cache_r) {
    return input + (cache_w > 0 ? cache_w : 0) + (cache_r > 0 ? cache_r : 0);
}

static void parse_anthropic(const cJSON *doc, llm_api_result *out) {
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(doc, "usage");
    out->prompt_tokens = anthropic_prompt_tokens(get_long(usage, "input_tokens"),
                                                 get_long(usage, "cache_creation_input_tokens"),
                                                 get_long(usage, "cache_read_input_tokens"));
    out->completion_tokens = get_long(usage, "output_tokens");
    out->cache_write_tokens = get_long(usage, "cache_creation_input_tokens");
    out->cache_read_tokens = get_long(usage, "cache_read_input_tokens");
    const char *sr = get_str(doc, "stop_reason");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(doc, "content");
    if (!cJSON_IsArray(content)) {
        anthropic_classify(out, sr, 0, 0);
        return;
    }
    size_t total = 0;
    int calls;
    out->text = anthropic_tool_answer(content, &calls);
    if (out->text) total = strlen(out->text);
    else if (!calls) out->text = text_blocks(content, &total);
    else out->text = strdup("");
    anthropic_classify(out, sr, 1, total);
    tool_calls_error(out, calls);
}

/* ---- the scanner for Anthropic's Messages answers ----------------------
 * The same reading as parse_anthropic: the first "content" member, when an
 * array, gives its blocks whose first "type" is "text" and whose first
 * "text" is a string, joined. */

typedef struct an_block {
    char type_buf[16];       /* cut to 15 bytes: only "text" is looked for */
    char *type;              /* into type_buf; NULL = absent or not a string */
    const char *text;        /* its raw bytes, in the body; NULL = absent or not a string */
    size_t text_len;
    int text_esc;
    oa_seen seen;
} an_block;

static int an_block_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    an_block *b = ctx;
    if (OA_KEY(k, kl, "type")) return oa_take_short(s, b->type_buf, sizeof(b->type_buf), &b->type, &b->seen.a);
    if (OA_KEY(k, kl, "text")) {
        int r = oa_member_string(s, &b->seen.b, &b->text, &b->text_len, &b->text_esc);
        return r < 0 ? -1 : 0;
    }
    return oa_value(s);
}

/* A text block's text goes straight from the body into the joined text,
 * decoded there: a block's type may come after its text, so the text is
 * only marked until the block's end. */
static int an_block_elem(oa_scan *s, size_t i) {
    (void)i;
    if (s->p >= s->end || *s->p != '{') return oa_value(s);
    an_block b = {.type = NULL, .text = NULL};
    if (oa_object(s, an_block_member, &b)) return -1;
    if (b.type && !strcmp(b.type, "tool_use")) return -1; /* read by the DOM (parse_anthropic) */
    if (!b.type || !b.text || strcmp(b.type, "text")) return 0;
    if (!b.text_esc) return sbuf_append(&s->text, b.text, b.text_len);
    if (sbuf_reserve(&s->text, b.text_len)) return -1;
    ptrdiff_t n = oa_decode_to(s->text.data + s->text.len, b.text, b.text_len);
    if (n < 0) {
        s->text.data[s->text.len] = '\0';
        return -1;
    }
    s->text.len += (size_t)n;
    return 0;
}

static int an_usage_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    oa_seen *q = ctx;
    if (OA_KEY(k, kl, "input_tokens")) return oa_take_count(s, &s->ptoks, &q->a);
    if (OA_KEY(k, kl, "output_tokens")) return oa_take_count(s, &s->ctoks, &q->b);
    if (OA_KEY(k, kl, "cache_creation_input_tokens")) return oa_take_count(s, &s->cache_w, &q->c);
    if (OA_KEY(k, kl, "cache_read_input_tokens")) return oa_take_count(s, &s->cache_r, &q->d);
    return oa_value(s);
}

typedef struct an_top_seen {
    int content, usage, stop;
} an_top_seen;

static int an_top_member(oa_scan *s, const char *k, size_t kl, void *ctx) {
    an_top_seen *q = ctx;
    if (OA_KEY(k, kl, "stop_reason")) return oa_take_short(s, s->fr_buf, sizeof(s->fr_buf), &s->fr, &q->stop);
    if (OA_KEY(k, kl, "content") && !q->content) {
        q->content = 1;
        if (s->p < s->end && *s->p == '[') {
            s->blocks = 1;
            return oa_array(s, an_block_elem);
        }
    }
    if (OA_KEY(k, kl, "usage")) return oa_take_object(s, &q->usage, an_usage_member);
    return oa_value(s);
}

/* llm_api_scan, and *nul: 1 when a string of the body escapes U+0000 (what
 * has_nul_escape finds, told by the one pass there is). */
static int scan(llm_provider provider, const char *body, size_t len, llm_api_result *out, int *nul) {
    oa_scan s = {0};
    s.p = body;
    s.end = body + len;
    oa_seen q = {0};
    an_top_seen aq = {0, 0, 0};
    int anthropic = provider == LLM_PROVIDER_ANTHROPIC;
    oa_ws(&s);
    int rc = -1;
    if (s.p >= s.end || *s.p != '{' ||
        (anthropic ? oa_object(&s, an_top_member, &aq) : oa_object(&s, oa_top_member, &q)))
        goto done;
    oa_ws(&s);
    if (s.p != s.end) goto done;
    memset(out, 0, sizeof(*out));
    out->prompt_tokens = s.ptoks;
    out->completion_tokens = s.ctoks;
    out->cache_read_tokens = s.cache_r;
    out->cache_write_tokens = s.cache_w;
    if (anthropic) {
        out->prompt_tokens = anthropic_prompt_tokens(s.ptoks, s.cache_w, s.cache_r);
        size_t total = s.text.len;
        if (s.blocks) out->text = sbuf_take(&s.text);
        anthropic_classify(out, s.fr, s.blocks, total);
    } else if (!s.choice) {
        openai_no_choices(out);
    } else {
        out->text = s.content;
        s.content = NULL;
        openai_classify(out, s.fr, s.refusal, out->text);
    }
    *nul = s.nul;
    rc = 0;
done:
    free(s.refusal);
    free(s.content);
    sbuf_free(&s.text);
    return rc;
}

int llm_api_scan(llm_provider provider, const char *body, size_t len, llm_api_result *out) {
    int nul;
    return scan(provider, body, len, out, &nul);
}

/* 1 when body[0..len) holds the JSON escape \u0000: a "\u0000" whose
 * backslash is not itself escaped (odd run of backslashes). */
static int has_nul_escape(const char *body, size_t len) {
    const char *p = body, *end = body + len;
    while ((p = memmem(p, (size_t)(end - p), "\\u0000", 6)) != NULL) {
        size_t run = 1;
        while (run <= (size_t)(p - body) && p[-(ptrdiff_t)run] == '\\') run++;
        if (run % 2) return 1;
        p += 6;
    }
    return 0;
}

void llm_api_parse(llm_provider provider, long status, const char *body, size_t len,
                   llm_api_result *out) {
    int nul = 0;
    if (!(status >= 200 && status < 300 && body && len && scan(provider, body, len, out, &nul) == 0)) {
        llm_api_parse_dom(provider, status, body, len, out);
        /* cJSON takes a raw NUL in a string (no JSON may have one) and
         * ends the string there: the text would be cut unseen */
        nul = body && (has_nul_escape(body, len) || memchr(body, '\0', len));
    }
    /* out of memory copying the text: an answer in hand but unread */
    if (out->category == DECIDE_CAT_OK && !out->text) {
        out->category = DECIDE_CAT_SERVER_ERROR;
        util_concat(out->error, sizeof(out->error), "out of memory reading the answer", (char *)NULL);
    }
    /* Anywhere in the body, as the scanner's pass tells it (after cJSON,
     * a memmem of the body): a NUL anywhere but in the text (an id?) only
     * costs a retry. */
    if (out->category == DECIDE_CAT_OK && nul) out->text_nul = 1;
    /* A refusal or an API's message goes into events and retry jobs as it
     * is: bad bytes in it are replaced (the readers do not check). */
    size_t elen = strlen(out->error);
    if (!util_utf8_valid(out->error, elen)) {
        char *scrubbed = util_utf8_scrub(out->error, elen, NULL);
        if (scrubbed) util_concat(out->error, sizeof(out->error), scrubbed, (char *)NULL);
        else util_concat(out->error, sizeof(out->error), "(an error message that is not UTF-8)", (char *)NULL);
        free(scrubbed);
    }
}

void llm_api_parse_dom(llm_provider provider, long status, const char *body, size_t len,
                       llm_api_result *out) {
    memset(out, 0, sizeof(*out));
    cJSON *doc = body && len ? cJSON_ParseWithLength(body, len) : NULL;
    if (status < 200 || status >= 300) {
        parse_error(status, doc, body, len, out);
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
