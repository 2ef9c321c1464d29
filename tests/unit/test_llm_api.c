/* Wire formats (against the shapes in ../shared/llm-api), repair prompts and
 * the conversation of a retry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>

#include "job.h"
#include "llm_api.h"
#include "reflect.h"
#include "util.h"

/* A wire shape from the shared test data.  With RETORT_SHARED set (make
 * sets it, and refuses to run without the data), from there only, and a
 * missing file fails the test; unset (a test run by hand), from ../shared
 * beside the checkout, and the test is skipped without it. */
static char *slurp(const char *name) {
    char path[512];
    const char *shared = getenv("RETORT_SHARED");
    FILE *f;
    if (shared) {
        snprintf(path, sizeof(path), "%s/llm-api/%s", shared, name);
        f = fopen(path, "rb");
        if (!f) fail_msg("%s: %s (RETORT_SHARED is set: the wire shapes must be there)", path, strerror(errno));
    } else {
        snprintf(path, sizeof(path), "../shared/llm-api/%s", name);
        f = fopen(path, "rb");
        if (!f) {
            snprintf(path, sizeof(path), "../../shared/llm-api/%s", name);
            f = fopen(path, "rb");
        }
        if (!f) skip();
    }
    sbuf b = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) sbuf_append(&b, buf, n);
    fclose(f);
    return sbuf_take(&b);
}

static void test_openai_shapes(void **s) {
    (void)s;
    char *body = slurp("openai-response.json");
    llm_api_result r;
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_non_null(r.text);
    assert_true(r.prompt_tokens > 0 && r.completion_tokens > 0);
    assert_string_equal(r.finish_reason, "stop");
    llm_api_result_clear(&r);
    free(body);

    body = slurp("openai-refusal.json");
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_REFUSAL);
    llm_api_result_clear(&r);
    free(body);

    body = slurp("openai-error-429.json");
    llm_api_parse(LLM_PROVIDER_OPENAI, 429, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_RATE_LIMITED);
    assert_non_null(strstr(r.error, "429"));
    llm_api_result_clear(&r);
    free(body);
}

/* An answer whose text holds U+0000 (escaped in the body) is flagged:
 * both readers would hand on the text cut at the NUL.  A NUL escaped
 * inside the answer's own JSON ("\\\\u0000" in the body: an escaped
 * backslash) is no NUL of the text, and is left to extract_json. */
static void test_nul_in_answer(void **s) {
    (void)s;
    static const struct {
        llm_provider provider;
        const char *body;
        int nul;
    } cases[] = {
        { LLM_PROVIDER_OPENAI,
          "{\"choices\":[{\"message\":{\"content\":\"{\\\"a\\\":1}\\u0000junk\"},\"finish_reason\":\"stop\"}]}", 1 },
        { LLM_PROVIDER_OPENAI,
          "{\"choices\":[{\"message\":{\"content\":\"{\\\"a\\\":\\\"x\\\\u0000\\\"}\"},\"finish_reason\":\"stop\"}]}", 0 },
        { LLM_PROVIDER_OPENAI,
          "{\"choices\":[{\"message\":{\"content\":\"{\\\"a\\\":\\\"\\\\\\u0000\\\"}\"},\"finish_reason\":\"stop\"}]}", 1 },
        { LLM_PROVIDER_OPENAI,
          "{\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\"}]}", 0 },
        { LLM_PROVIDER_ANTHROPIC,
          "{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":1}\\u0000\"}],\"stop_reason\":\"end_turn\"}", 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_api_result r;
        llm_api_parse(cases[i].provider, 200, cases[i].body, strlen(cases[i].body), &r);
        assert_int_equal(r.category, DECIDE_CAT_OK);
        if (r.text_nul != cases[i].nul)
            fail_msg("%s: text_nul %d, expected %d", cases[i].body, r.text_nul, cases[i].nul);
        llm_api_result_clear(&r);
    }
    /* A NUL in a member nobody reads: the scanner takes such a body (so
     * the flag is its pass's), and flags it as the search of the body did;
     * an escaped backslash before "u0000" is no NUL, there either. */
    static const struct {
        const char *body;
        int nul;
    } unread[] = {
        { "{\"id\":\"x\\u0000\",\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\"}]}", 1 },
        { "{\"id\":\"x\\\\u0000\",\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\"}]}", 0 },
        { "{\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\",\"x\":[\"\\u0000\"]}]}", 1 },
    };
    for (size_t i = 0; i < sizeof unread / sizeof unread[0]; i++) {
        llm_api_result r;
        assert_int_equal(llm_api_scan(LLM_PROVIDER_OPENAI, unread[i].body, strlen(unread[i].body), &r), 0);
        llm_api_result_clear(&r);
        llm_api_parse(LLM_PROVIDER_OPENAI, 200, unread[i].body, strlen(unread[i].body), &r);
        assert_int_equal(r.category, DECIDE_CAT_OK);
        if (r.text_nul != unread[i].nul)
            fail_msg("%s: text_nul %d, expected %d", unread[i].body, r.text_nul, unread[i].nul);
        llm_api_result_clear(&r);
    }
    /* A raw NUL in a string (no JSON may have one): cJSON takes it and
     * ends the string there, so the text was cut and not flagged. */
    static const char raw[] = "{\"choices\":[{\"message\":{\"content\":\"{\\\"a\\\":1}\0{\\\"a\\\":2}\"},"
                              "\"finish_reason\":\"stop\"}]}";
    llm_api_result rr;
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, raw, sizeof raw - 1, &rr);
    assert_true(rr.category != DECIDE_CAT_OK || rr.text_nul);
    llm_api_result_clear(&rr);
    /* an empty refusal beside the answer is none (it was a refusal, and
     * a valid answer escalated) */
    static const char empty_refusal[] = "{\"choices\":[{\"message\":{\"content\":\"{}\",\"refusal\":\"\"},"
                                        "\"finish_reason\":\"stop\"}]}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, empty_refusal, sizeof empty_refusal - 1, &rr);
    assert_int_equal(rr.category, DECIDE_CAT_OK);
    assert_string_equal(rr.text, "{}");
    llm_api_result_clear(&rr);
    /* not an answer: nothing to flag */
    const char *refusal = "{\"choices\":[{\"message\":{\"content\":null,\"refusal\":\"no\\u0000\"},"
                          "\"finish_reason\":\"stop\"}]}";
    llm_api_result r;
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, refusal, strlen(refusal), &r);
    assert_int_equal(r.category, DECIDE_CAT_REFUSAL);
    assert_int_equal(r.text_nul, 0);
    llm_api_result_clear(&r);
}

/* A long refusal or error message in another script is cut to the error
 * buffer on a character's boundary: cut inside one, it made the
 * escalation event (and a retry job) invalid UTF-8. */
static void test_long_messages_cut_as_utf8(void **s) {
    (void)s;
    sbuf text = {0};
    for (int i = 0; i < 150; i++) sbuf_puts(&text, "\xe6\x8a\xb1"); /* 450 bytes */
    char *openai = NULL, *err = NULL;
    sbuf b = {0};
    sbuf_puts(&b, "{\"choices\":[{\"message\":{\"content\":null,\"refusal\":\"x");
    sbuf_puts(&b, text.data);
    sbuf_puts(&b, "\"},\"finish_reason\":\"stop\"}]}");
    openai = sbuf_take(&b);
    sbuf_puts(&b, "{\"error\":{\"type\":\"invalid_request_error\",\"message\":\"");
    sbuf_puts(&b, text.data);
    sbuf_puts(&b, "\"}}");
    err = sbuf_take(&b);
    for (int k = 0; k < 2; k++) {
        llm_api_result r;
        const char *body = k ? err : openai;
        for (int scan = 0; scan < 2; scan++) {
            /* both readers: the DOM and the scanner llm_api_parse tries first */
            if (scan) llm_api_parse(LLM_PROVIDER_OPENAI, k ? 400 : 200, body, strlen(body), &r);
            else llm_api_parse_dom(LLM_PROVIDER_OPENAI, k ? 400 : 200, body, strlen(body), &r);
            assert_int_equal(r.category, k ? DECIDE_CAT_BAD_REQUEST : DECIDE_CAT_REFUSAL);
            size_t len = strlen(r.error);
            assert_true(len > 200 && len < sizeof(r.error));
            if (!util_utf8_valid(r.error, len)) fail_msg("not UTF-8 (%s): %s", k ? "error" : "refusal", r.error);
            llm_api_result_clear(&r);
        }
    }
    free(openai);
    free(err);
    sbuf_free(&text);
}

/* A refusal or an API's message with bytes that are not UTF-8 (cJSON
 * reads them as they are) has them replaced: it goes into events and
 * retry jobs. */
static void test_messages_not_utf8_are_mended(void **s) {
    (void)s;
    static const char refusal[] = "{\"choices\":[{\"message\":{\"content\":null,\"refusal\":\"non, d\xe9sol\xe9\"},"
                                  "\"finish_reason\":\"stop\"}]}";
    static const char err[] = "{\"error\":{\"type\":\"invalid_request_error\",\"message\":\"mauvaise requ\xeate\"}}";
    for (int k = 0; k < 2; k++) {
        llm_api_result r;
        const char *body = k ? err : refusal;
        llm_api_parse(LLM_PROVIDER_OPENAI, k ? 400 : 200, body, strlen(body), &r);
        assert_int_equal(r.category, k ? DECIDE_CAT_BAD_REQUEST : DECIDE_CAT_REFUSAL);
        assert_true(util_utf8_valid(r.error, strlen(r.error)));
        assert_non_null(strstr(r.error, k ? "mauvaise requ\xef\xbf\xbdte" : "non, d\xef\xbf\xbdsol\xef\xbf\xbd"));
        llm_api_result_clear(&r);
    }
}

static void test_anthropic_shapes(void **s) {
    (void)s;
    char *body = slurp("anthropic-response.json");
    llm_api_result r;
    llm_api_parse(LLM_PROVIDER_ANTHROPIC, 200, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_non_null(r.text);
    assert_true(r.prompt_tokens > 0);
    llm_api_result_clear(&r);
    free(body);
    body = slurp("anthropic-error-529.json");
    llm_api_parse(LLM_PROVIDER_ANTHROPIC, 529, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_SERVER_ERROR);
    llm_api_result_clear(&r);
    free(body);
}

#include "fail_strdup.h"

/* Out of memory copying the answer's text: the category said ok with no
 * text, and the worker's validation read it (strlen(NULL)). */
static void test_answer_copy_out_of_memory(void **s) {
    (void)s;
    /* an escaped key: the scanner leaves the body to cJSON, whose text the
     * answer copies */
    const char *body = "{\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\"}],\"\\u0061\":1}";
    llm_api_result r;
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, body, strlen(body), &r);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_string_equal(r.text, "{}");
    llm_api_result_clear(&r);
    fail_strdup = 1;
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, body, strlen(body), &r);
    fail_strdup = 0;
    assert_int_equal(r.category, DECIDE_CAT_SERVER_ERROR);
    assert_null(r.text);
    assert_non_null(strstr(r.error, "out of memory"));
    llm_api_result_clear(&r);
}

static void test_categories(void **s) {
    (void)s;
    llm_api_result r;
    const char *len = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"{\\\"a\\\":\"},"
                      "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, len, strlen(len), &r);
    assert_int_equal(r.category, DECIDE_CAT_TRUNCATED);
    assert_int_equal(r.completion_tokens, 7);
    llm_api_result_clear(&r);
    const char *empty = "{\"choices\":[{\"message\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, empty, strlen(empty), &r);
    assert_int_equal(r.category, DECIDE_CAT_EMPTY);
    llm_api_result_clear(&r);
    /* Anthropic's stop by the context window is a cut answer too */
    const char *window = "{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":[1,\"}],"
                         "\"stop_reason\":\"model_context_window_exceeded\"}";
    llm_api_parse(LLM_PROVIDER_ANTHROPIC, 200, window, strlen(window), &r);
    assert_int_equal(r.category, DECIDE_CAT_TRUNCATED);
    assert_non_null(strstr(r.error, "context window"));
    llm_api_result_clear(&r);
    /* and its 400 for a prompt past the window, in its own words */
    assert_int_equal(llm_api_status_category(400, "invalid_request_error",
                                             "input length and `max_tokens` exceed context limit: 199759 + 8192 > "
                                             "200000, decrease input length or `max_tokens` and try again"),
                     DECIDE_CAT_CONTEXT_LENGTH);
    const char *ctx = "{\"error\":{\"message\":\"too long\",\"code\":\"context_length_exceeded\"}}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 400, ctx, strlen(ctx), &r);
    assert_int_equal(r.category, DECIDE_CAT_CONTEXT_LENGTH);
    llm_api_result_clear(&r);
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, "<html>", 6, &r);
    assert_int_equal(r.category, DECIDE_CAT_SERVER_ERROR);
    llm_api_result_clear(&r);
    assert_int_equal(llm_api_status_category(401, NULL, NULL), DECIDE_CAT_AUTH);
    assert_int_equal(llm_api_status_category(503, NULL, NULL), DECIDE_CAT_SERVER_ERROR);
    assert_int_equal(llm_api_status_category(408, NULL, NULL), DECIDE_CAT_TIMEOUT);
    assert_int_equal(llm_api_status_category(404, "model_not_found", NULL), DECIDE_CAT_BAD_REQUEST);
    /* a spent quota or credit is no rate limit, nor a bad request */
    assert_int_equal(llm_api_status_category(429, "rate_limit_exceeded", NULL), DECIDE_CAT_RATE_LIMITED);
    assert_int_equal(llm_api_status_category(429, "insufficient_quota", NULL), DECIDE_CAT_QUOTA);
    assert_int_equal(llm_api_status_category(400, "invalid_request_error", "tools: not allowed"),
                     DECIDE_CAT_BAD_REQUEST);
    const char *quota = "{\"error\":{\"message\":\"You exceeded your current quota, please check your plan and "
                        "billing details.\",\"type\":\"insufficient_quota\",\"param\":null,"
                        "\"code\":\"insufficient_quota\"}}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 429, quota, strlen(quota), &r);
    assert_int_equal(r.category, DECIDE_CAT_QUOTA);
    assert_non_null(strstr(r.error, "HTTP 429 insufficient_quota: You exceeded your current quota"));
    llm_api_result_clear(&r);
    const char *credit = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
                         "\"Your credit balance is too low to access the Anthropic API. Please go to Plans & "
                         "Billing to upgrade or purchase credits.\"},\"request_id\":\"req_1\"}";
    llm_api_parse(LLM_PROVIDER_ANTHROPIC, 400, credit, strlen(credit), &r);
    assert_int_equal(r.category, DECIDE_CAT_QUOTA);
    llm_api_result_clear(&r);
    const char *refuse = "{\"content\":[],\"stop_reason\":\"refusal\",\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}";
    llm_api_parse(LLM_PROVIDER_ANTHROPIC, 200, refuse, strlen(refuse), &r);
    assert_int_equal(r.category, DECIDE_CAT_REFUSAL);
    llm_api_result_clear(&r);
}

/* Error bodies in the shapes other servers send: the message is read
 * (and so the category: vLLM's context length is no plain bad request). */
static void test_error_shapes(void **s) {
    (void)s;
    static const struct {
        long status;
        const char *body;
        const char *error;            /* the whole of r.error */
        decide_category cat;
    } cases[] = {
        /* vLLM: the fields at the top, code the status */
        {400, "{\"object\":\"error\",\"message\":\"This model's maximum context length is 4096 tokens. However, "
              "you requested 5000 tokens.\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}",
         "HTTP 400 BadRequestError: This model's maximum context length is 4096 tokens. However, you requested "
         "5000 tokens.", DECIDE_CAT_CONTEXT_LENGTH},
        {404, "{\"object\":\"error\",\"message\":\"The model `m2` does not exist.\",\"type\":\"NotFoundError\","
              "\"param\":null,\"code\":404}",
         "HTTP 404 NotFoundError: The model `m2` does not exist.", DECIDE_CAT_BAD_REQUEST},
        /* FastAPI: detail, a string or a list of {loc, msg} */
        {401, "{\"detail\":\"Invalid API key\"}", "HTTP 401: Invalid API key", DECIDE_CAT_AUTH},
        {422, "{\"detail\":[{\"loc\":[\"body\",\"messages\"],\"msg\":\"field required\",\"type\":\"value_error\"}]}",
         "HTTP 422: field required", DECIDE_CAT_BAD_REQUEST},
        /* Ollama, text-generation-inference: error a string */
        {404, "{\"error\":\"model 'llama9' not found, try pulling it first\"}",
         "HTTP 404: model 'llama9' not found, try pulling it first", DECIDE_CAT_BAD_REQUEST},
        {422, "{\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096\","
              "\"error_type\":\"validation\"}",
         "HTTP 422 validation: Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
         DECIDE_CAT_BAD_REQUEST},
        /* llama.cpp: OpenAI's shape with a number for code */
        {400, "{\"error\":{\"code\":400,\"message\":\"the request exceeds the available context size\","
              "\"type\":\"exceed_context_size_error\"}}",
         "HTTP 400 exceed_context_size_error: the request exceeds the available context size",
         DECIDE_CAT_CONTEXT_LENGTH},
        /* a bare JSON string */
        {403, "\"Forbidden\"", "HTTP 403: Forbidden", DECIDE_CAT_AUTH},
        /* a proxy's page: its title; plain text: its first line */
        {502, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway"
              "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
         "HTTP 502: 502 Bad Gateway", DECIDE_CAT_SERVER_ERROR},
        {503, "  upstream connect error or disconnect/reset before headers.\r\nreset reason: overflow",
         "HTTP 503: upstream connect error or disconnect/reset before headers.", DECIDE_CAT_SERVER_ERROR},
        {400, "<html><body><h1>400</h1></body></html>", "HTTP 400", DECIDE_CAT_BAD_REQUEST},
        {500, "", "HTTP 500", DECIDE_CAT_SERVER_ERROR},
        {429, "too\tmany\x01requests", "HTTP 429: too many requests", DECIDE_CAT_RATE_LIMITED},
        /* an object that says nothing readable */
        {500, "{\"object\":\"error\"}", "HTTP 500", DECIDE_CAT_SERVER_ERROR},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        llm_api_result r;
        llm_api_parse(LLM_PROVIDER_OPENAI, cases[i].status, cases[i].body, strlen(cases[i].body), &r);
        if (strcmp(r.error, cases[i].error) || r.category != cases[i].cat)
            fail_msg("case %zu: got \"%s\" (category %d), want \"%s\" (%d)", i, r.error, (int)r.category,
                     cases[i].error, (int)cases[i].cat);
        llm_api_result_clear(&r);
    }
    /* a title past the error buffer ends on a whole character */
    char page[600];
    size_t n = (size_t)snprintf(page, sizeof(page), "<title>");
    for (int k = 0; k < 150; k++) n += (size_t)snprintf(page + n, sizeof(page) - n, "\xc3\xa9");
    snprintf(page + n, sizeof(page) - n, "</title>");
    llm_api_result r;
    llm_api_parse(LLM_PROVIDER_OPENAI, 502, page, strlen(page), &r);
    assert_true(util_utf8_valid(r.error, strlen(r.error)));
    assert_true(strlen(r.error) > 150);
    llm_api_result_clear(&r);
}

/* The messages of a JSON array of {role, content}, into out (room for
 * 8), pointing into tree: one part each. */
static size_t messages_of(const cJSON *tree, llm_api_message *out) {
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, tree) {
        assert_true(n < 8);
        out[n++] = (llm_api_message){cJSON_GetObjectItem(m, "role")->valuestring,
                                     {cJSON_GetObjectItem(m, "content")->valuestring, NULL, NULL}};
    }
    return n;
}

static void test_build_bodies(void **s) {
    (void)s;
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
                                "\"required\":[\"a\"],\"additionalProperties\":false}");
    cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"}]");
    cJSON *params = cJSON_Parse("{\"temperature\":0.2,\"max_tokens\":50}");
    llm_api_message mv[8];
    size_t nm = messages_of(msgs, mv);
    llm_api_request req = {LLM_PROVIDER_OPENAI, "m1", mv, nm, params, sch, "product.v1", LLM_RF_AUTO, 1024,
                           NULL, 0, 0};
    char *body = llm_api_build_body(&req, NULL);
    cJSON *b = cJSON_Parse(body);
    assert_non_null(b);
    assert_string_equal(cJSON_GetObjectItem(b, "model")->valuestring, "m1");
    assert_true(cJSON_Compare(cJSON_GetObjectItem(b, "messages"), msgs, 1));
    assert_true(cJSON_Compare(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "response_format"),
                                                                      "json_schema"), "schema"), sch, 1));
    cJSON *js = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "response_format"), "json_schema");
    assert_non_null(js);
    assert_string_equal(cJSON_GetObjectItem(js, "name")->valuestring, "product_v1");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(js, "strict")));
    assert_int_equal(cJSON_GetObjectItem(b, "max_tokens")->valueint, 50);
    cJSON_Delete(b);
    free(body);
    /* The schema pre-printed by the caller goes in as given, with the
     * caller's strictness; the model name is escaped; stream never passes. */
    char *printed = cJSON_PrintUnformatted(sch);
    cJSON *params2 = cJSON_Parse("{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"seed\":7}");
    req.schema_json = printed;
    req.schema_strict = 0;
    req.model = "m\"1\\\n\x01";
    req.params = params2;
    body = llm_api_build_body(&req, NULL);
    b = cJSON_Parse(body);
    assert_non_null(b);
    assert_string_equal(cJSON_GetObjectItem(b, "model")->valuestring, "m\"1\\\n\x01");
    js = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "response_format"), "json_schema");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(js, "strict")));
    assert_true(cJSON_Compare(cJSON_GetObjectItem(js, "schema"), sch, 1));
    assert_null(cJSON_GetObjectItem(b, "stream"));
    assert_null(cJSON_GetObjectItem(b, "stream_options")); /* refused without stream: 400 */
    assert_int_equal(cJSON_GetObjectItem(b, "seed")->valueint, 7);
    cJSON_Delete(b);
    free(body);
    /* a response_format among the params replaces Retort's */
    cJSON *params3 = cJSON_Parse("{\"response_format\":{\"type\":\"json_object\"}}");
    req.params = params3;
    body = llm_api_build_body(&req, NULL);
    b = cJSON_Parse(body);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "response_format"), "type")->valuestring,
                        "json_object");
    assert_int_equal(cJSON_GetArraySize(b), 3);
    cJSON_Delete(b);
    free(body);
    cJSON_Delete(params2);
    cJSON_Delete(params3);
    free(printed);
    req.schema_json = NULL;
    req.model = "m1";
    req.params = params;
    /* off: no response_format */
    req.response_format = LLM_RF_OFF;
    body = llm_api_build_body(&req, NULL);
    assert_null(strstr(body, "response_format"));
    free(body);
    /* a schema that is not strict-compatible is sent with strict false in auto */
    cJSON *loose = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":{}}}");
    assert_false(llm_api_schema_is_strict(loose));
    assert_true(llm_api_schema_is_strict(sch));
    static const struct {
        const char *schema;
        int strict;
    } strict_cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
         "\"additionalProperties\":false}", 1},
        {"{\"type\":\"object\",\"additionalProperties\":false}", 1},       /* closed, no properties */
        {"{\"type\":\"object\"}", 0},                                      /* open */
        {"{\"type\":\"object\",\"properties\":{\"meta\":{\"type\":\"object\"}},\"required\":[\"meta\"],"
         "\"additionalProperties\":false}", 0},                              /* an open object inside */
        {"{\"type\":\"object\",\"properties\":{\"m\":{\"type\":[\"object\",\"null\"],\"additionalProperties\":{}}},"
         "\"required\":[\"m\"],\"additionalProperties\":false}", 0},     /* open through a type list */
        {"{\"type\":\"object\",\"additionalProperties\":false,\"patternProperties\":{\"^x\":{}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
         "\"uniqueItems\":true}},\"required\":[\"t\"],\"additionalProperties\":false}", 0},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
         "\"properties\":{\"k\":{\"type\":\"integer\"}},\"required\":[\"k\"],\"additionalProperties\":false}}},"
         "\"required\":[\"t\"],\"additionalProperties\":false}", 1},   /* closed objects in an array */
        {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false,\"allOf\":[{}]}", 0},
        {"{\"anyOf\":[{\"type\":\"object\",\"additionalProperties\":false}]}", 0}, /* root not an object */
        {"{\"type\":\"string\"}", 0},
        /* anyOf is taken, oneOf is not ("'oneOf' is not permitted") */
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},"
         "\"required\":[\"x\"],\"additionalProperties\":false}", 1},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},"
         "\"required\":[\"x\"],\"additionalProperties\":false}", 0},
        {"{\"type\":\"object\",\"$defs\":{\"o\":{\"type\":\"object\"}},\"additionalProperties\":false}", 0},
    };
    for (size_t i = 0; i < sizeof(strict_cases) / sizeof(strict_cases[0]); i++) {
        cJSON *c = cJSON_Parse(strict_cases[i].schema);
        assert_non_null(c);
        if (llm_api_schema_is_strict(c) != strict_cases[i].strict)
            fail_msg("strict %d expected for %s", strict_cases[i].strict, strict_cases[i].schema);
        cJSON_Delete(c);
    }
    req.schema = loose;
    req.response_format = LLM_RF_AUTO;
    body = llm_api_build_body(&req, NULL);
    assert_non_null(strstr(body, "\"strict\":false"));
    free(body);
    /* Anthropic: system at top level, max_tokens always there */
    req.provider = LLM_PROVIDER_ANTHROPIC;
    req.params = NULL;
    body = llm_api_build_body(&req, NULL);
    b = cJSON_Parse(body);
    assert_string_equal(cJSON_GetObjectItem(b, "system")->valuestring, "S");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(b, "messages")), 1);
    assert_int_equal(cJSON_GetObjectItem(b, "max_tokens")->valueint, 1024);
    assert_null(cJSON_GetObjectItem(b, "output_config")); /* auto: schema in the prompt */
    cJSON_Delete(b);
    free(body);
    cJSON_Delete(loose);
    cJSON_Delete(sch);
    cJSON_Delete(msgs);
    cJSON_Delete(params);
}

/* The Anthropic body, byte for byte: system messages joined at the top
 * level, max_completion_tokens written as max_tokens, a param replacing
 * Retort's member of the same name (the last one of a name wins, in its
 * place), model/messages/stream params ignored, the schema in
 * output_config.format only when sent (a job's own output_config or beta
 * output_format replaces it). */
static void anthropic_body_is(const char *msgs, const char *params, const char *schema_text, llm_response_format rf,
                              int max_tokens, const char *want) {
    cJSON *m = cJSON_Parse(msgs), *p = params ? cJSON_Parse(params) : NULL, *sch = schema_text ? cJSON_Parse(schema_text) : NULL;
    llm_api_message mv[8];
    size_t nm = messages_of(m, mv);
    llm_api_request r = {LLM_PROVIDER_ANTHROPIC, "claude-x", mv, nm, p, sch, "inv", rf, max_tokens, NULL, 0, 0};
    char *body = llm_api_build_body(&r, NULL);
    assert_string_equal(body, want);
    free(body);
    /* the schema printed once per schema by the caller gives the same body */
    if (sch) {
        char *printed = cJSON_PrintUnformatted(sch);
        r.schema_json = printed;
        body = llm_api_build_body(&r, NULL);
        assert_string_equal(body, want);
        free(body);
        free(printed);
    }
    cJSON_Delete(m);
    cJSON_Delete(p);
    cJSON_Delete(sch);
}

static void test_anthropic_body(void **s) {
    (void)s;
    /* an empty system text adds no blank line */
    const char *msgs = "[{\"role\":\"system\",\"content\":\"S1\"},{\"role\":\"system\",\"content\":\"\"},"
                       "{\"role\":\"user\",\"content\":\"U \\\"q\\\"\"},"
                       "{\"role\":\"system\",\"content\":\"S2\"},{\"role\":\"assistant\",\"content\":\"A\"},"
                       "{\"role\":\"system\",\"content\":[1]}]";
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1.5}}}";
    anthropic_body_is(msgs,
                      "{\"temperature\":0.5,\"max_completion_tokens\":77,\"system\":\"override\",\"top_k\":3,"
                      "\"max_tokens\":99,\"model\":\"no\",\"stream\":true}",
                      sch, LLM_RF_ON, 1024,
                      "{\"model\":\"claude-x\",\"messages\":[{\"role\":\"user\",\"content\":\"U \\\"q\\\"\"},{\"role\":\"assistant\",\"content\":\"A\"}],\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1.5}}}}},\"temperature\":0.5,\"system\":\"override\",\"top_k\":3,\"max_tokens\":99}");
    anthropic_body_is("[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, sch, LLM_RF_AUTO, 512,
                      "{\"model\":\"claude-x\",\"max_tokens\":512,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    anthropic_body_is(msgs, "{\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"temperature\":1}", sch,
                      LLM_RF_ON, 1024,
                      "{\"model\":\"claude-x\",\"max_tokens\":1024,\"messages\":[{\"role\":\"user\",\"content\":\"U \\\"q\\\"\"},{\"role\":\"assistant\",\"content\":\"A\"}],\"system\":\"S1\\n\\nS2\",\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"temperature\":1}");
    anthropic_body_is(msgs, "{\"max_tokens\":5,\"temperature\":1,\"max_completion_tokens\":7}", NULL, LLM_RF_ON, 1024,
                      "{\"model\":\"claude-x\",\"messages\":[{\"role\":\"user\",\"content\":\"U \\\"q\\\"\"},{\"role\":\"assistant\",\"content\":\"A\"}],\"system\":\"S1\\n\\nS2\",\"temperature\":1,\"max_tokens\":7}");
    anthropic_body_is("[]", "{}", sch, LLM_RF_ON, 0,
                      "{\"model\":\"claude-x\",\"max_tokens\":0,\"messages\":[],\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1.5}}}}}}");
    /* a job's own output_config wins whole (its effort, its format) */
    anthropic_body_is("[]", "{\"output_config\":{\"effort\":\"low\"}}", sch, LLM_RF_ON, 9,
                      "{\"model\":\"claude-x\",\"max_tokens\":9,\"messages\":[],\"output_config\":{\"effort\":\"low\"}}");

    /* llm.prompt_cache: the system prompt as one text block marked for the
     * cache; a job's own system param still wins whole; no system, no block */
    cJSON *m = cJSON_Parse(msgs), *p = cJSON_Parse("{\"system\":\"own\"}");
    llm_api_message mv[8];
    size_t nm = messages_of(m, mv);
    llm_api_request r = {LLM_PROVIDER_ANTHROPIC, "claude-x", mv, nm, NULL, NULL, "inv", LLM_RF_OFF, 8, NULL, 0, 1};
    char *body = llm_api_build_body(&r, NULL);
    assert_string_equal(body, "{\"model\":\"claude-x\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":"
                              "\"U \\\"q\\\"\"},{\"role\":\"assistant\",\"content\":\"A\"}],\"system\":[{\"type\":\"text\","
                              "\"text\":\"S1\\n\\nS2\",\"cache_control\":{\"type\":\"ephemeral\"}}]}");
    free(body);
    r.params = p;
    body = llm_api_build_body(&r, NULL);
    assert_non_null(strstr(body, "\"system\":\"own\""));
    assert_null(strstr(body, "cache_control"));
    free(body);
    r.params = NULL;
    r.nmessages = 1;
    r.messages = &mv[2]; /* the user message alone */
    body = llm_api_build_body(&r, NULL);
    assert_null(strstr(body, "system"));
    free(body);
    cJSON_Delete(m);
    cJSON_Delete(p);
}

/* Whether the schema goes in the API's member, so the prompt need not
 * carry it: a job's param that replaces that member takes the schema out
 * of the body, so the prompt must carry it (it was left out of both: the
 * model was told to follow a schema it never saw). */
static void test_sends_schema(void **s) {
    (void)s;
    static const struct {
        llm_provider provider;
        llm_response_format rf;
        const char *params;
        int sends;
    } cases[] = {
        {LLM_PROVIDER_OPENAI, LLM_RF_AUTO, NULL, 1},
        {LLM_PROVIDER_OPENAI, LLM_RF_ON, "{\"temperature\":0}", 1},
        {LLM_PROVIDER_OPENAI, LLM_RF_OFF, NULL, 0},
        {LLM_PROVIDER_OPENAI, LLM_RF_AUTO, "{\"response_format\":{\"type\":\"json_object\"}}", 0},
        {LLM_PROVIDER_OPENAI, LLM_RF_ON, "{\"response_format\":{\"type\":\"text\"}}", 0},
        {LLM_PROVIDER_ANTHROPIC, LLM_RF_ON, NULL, 1},
        {LLM_PROVIDER_ANTHROPIC, LLM_RF_AUTO, NULL, 0},
        {LLM_PROVIDER_ANTHROPIC, LLM_RF_ON, "{\"output_config\":{\"effort\":\"low\"}}", 0},
        {LLM_PROVIDER_ANTHROPIC, LLM_RF_ON, "{\"output_format\":{\"type\":\"json_schema\"}}", 0},
        {LLM_PROVIDER_ANTHROPIC, LLM_RF_ON, "{\"response_format\":{}}", 1},
    };
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"zz_field\":{\"type\":\"string\"}}}");
    llm_api_message m = {"user", {"hi"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *params = cases[i].params ? cJSON_Parse(cases[i].params) : NULL;
        int sends = llm_api_sends_schema(cases[i].provider, cases[i].rf, params);
        if (sends != cases[i].sends)
            fail_msg("case %zu: sends %d", i, sends);
        /* and the body agrees: the schema is in it exactly when sent */
        llm_api_request req = {cases[i].provider, "m", &m, 1, params, sch, "t", cases[i].rf, 64, NULL, 0, 0};
        char *body = llm_api_build_body(&req, NULL);
        assert_non_null(body);
        if (!strstr(body, "zz_field") != !sends)
            fail_msg("case %zu: body %s", i, body);
        free(body);
        cJSON_Delete(params);
    }
    cJSON_Delete(sch);
}

static void test_reflection_prompt(void **s) {
    (void)s;
    cJSON *v = cJSON_Parse("[{\"path\":\"/price\",\"code\":\"WRONG_TYPE\",\"message\":\"must be a number\","
                           "\"expected\":\"number\",\"actual\":\"\\\"cheap\\\"\"},"
                           "{\"path\":\"\",\"code\":\"MISSING_FIELD\",\"message\":\"sku is required\"}]");
    reflect_input in = {NULL, 1, 3, "validation failed", v, "{}", "{\"price\":\"cheap\"}", 0};
    char *p = reflect_render(&in);
    assert_non_null(strstr(p, "attempt 1 of 3"));
    assert_non_null(strstr(p, "- at /price: WRONG_TYPE: must be a number (expected: number; got: \"cheap\")"));
    assert_non_null(strstr(p, "MISSING_FIELD: sku is required"));
    free(p);
    in.tmpl = "{attempt}/{max} {unknown} {previous_output} {schema}";
    p = reflect_render(&in);
    assert_string_equal(p, "1/3 {unknown} {\"price\":\"cheap\"} {}");
    free(p);
    /* a placeholder inside braces of the template's own (a JSON example)
     * went out as written; an unclosed '{' stays as it is */
    in.tmpl = "Answer {\"fixed\": {reason}, \"n\": {attempt}} or {{max}} {open";
    p = reflect_render(&in);
    assert_string_equal(p, "Answer {\"fixed\": validation failed, \"n\": 1} or {3} {open");
    free(p);
    /* a list cut to fit Kafka says how many more there were; a total of
     * 0 or no more than listed adds nothing */
    static const struct {
        int total;
        const char *line; /* NULL: no such line */
    } totals[] = {
        {0, NULL},
        {2, NULL},
        {3, "MISSING_FIELD: sku is required\n- and 1 more problem not listed here"},
        {9, "\n- and 7 more problems not listed here"},
    };
    in.tmpl = "{violations}";
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        in.violations_total = totals[i].total;
        p = reflect_render(&in);
        if (totals[i].line)
            assert_non_null(strstr(p, totals[i].line));
        else
            assert_null(strstr(p, "not listed"));
        free(p);
    }
    cJSON_Delete(v);
}

static void test_retry_conversation(void **s) {
    (void)s;
    const char *msg = "{\"job_id\":\"j1\",\"schema\":\"x\",\"prompt\":\"P\",\"attempt\":2,"
                      "\"reflection\":{\"attempt\":1,\"max_attempts\":3,\"reason\":\"r\",\"violations\":[],"
                      "\"previous_output\":\"OLD\",\"prompt\":\"FIX /name\"}}";
    job j = {0};
    j.doc = cJSON_Parse(msg);
    j.job_id = "j1";
    j.attempt = 2;
    j.max_attempts = 3;
    j.reflection = cJSON_GetObjectItem(j.doc, "reflection");
    llm_api_message m[8];
    /* short of room, the count says how much is needed */
    assert_int_equal(job_messages(&j, "{\"type\":\"object\"}", m, 2), 4);
    assert_int_equal(job_messages(&j, "{\"type\":\"object\"}", m, 8), 4); /* system, user, assistant, user */
    assert_string_equal(m[0].role, "system");
    assert_string_equal(m[1].parts[0], "P");
    assert_null(m[1].parts[1]);
    assert_string_equal(m[2].role, "assistant");
    assert_string_equal(m[2].parts[0], "OLD");
    assert_string_equal(m[3].parts[0], "FIX /name");
    /* The system text goes in parts, joined in the body as one string,
     * escaped across them. */
    llm_api_request req = {LLM_PROVIDER_OPENAI, "m", m, 4, NULL, NULL, "x", LLM_RF_OFF, 16, NULL, 0, 0};
    char *body = llm_api_build_body(&req, NULL);
    cJSON *b = cJSON_Parse(body);
    assert_non_null(b);
    const char *sys = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "messages"), 0),
                                          "content")->valuestring;
    assert_non_null(strstr(sys, "Respond with only one JSON value"));
    assert_non_null(strstr(sys, "around it.\nJSON Schema:\n{\"type\":\"object\"}"));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "messages"), 3),
                                            "content")->valuestring, "FIX /name");
    cJSON_Delete(b);
    free(body);
    /* The API carries the schema: the instruction alone. */
    assert_int_equal(job_messages(&j, NULL, m, 8), 4);
    assert_non_null(strstr(m[0].parts[0], "Respond with only one JSON value"));
    assert_null(m[0].parts[1]);
    /* Anthropic: the parts joined at the top level too */
    req.provider = LLM_PROVIDER_ANTHROPIC;
    assert_int_equal(job_messages(&j, "{\"a\":\"\\\"\"}", m, 8), 4);
    body = llm_api_build_body(&req, NULL);
    b = cJSON_Parse(body);
    assert_non_null(b);
    sys = cJSON_GetObjectItem(b, "system")->valuestring;
    assert_non_null(strstr(sys, "around it.\nJSON Schema:\n{\"a\":\"\\\"\"}"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(b, "messages")), 3);
    cJSON_Delete(b);
    free(body);
    /* the next retry replaces the reflection: the conversation never grows */
    cJSON *refl = cJSON_Parse("{\"attempt\":2,\"prompt\":\"FIX AGAIN\",\"previous_output\":\"NEWER\"}");
    char *next = job_retry_value(&j, refl);
    cJSON *n = cJSON_Parse(next);
    assert_int_equal(cJSON_GetObjectItem(n, "attempt")->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(n, "reflection"), "prompt")->valuestring, "FIX AGAIN");
    assert_int_equal(cJSON_GetObjectItem(n, "max_attempts")->valueint, 3);
    cJSON_Delete(n);
    free(next);
    cJSON_Delete(refl);
    cJSON_Delete(j.doc);
}

/* llm_api_parse and the cJSON-only llm_api_parse_dom give the same result. */
static void assert_same_as_dom_of(llm_provider provider, const char *body, size_t len) {
    llm_api_result a, b;
    llm_api_parse(provider, 200, body, len, &a);
    llm_api_parse_dom(provider, 200, body, len, &b);
    assert_int_equal(a.category, b.category);
    if (!a.text || !b.text) assert_ptr_equal(a.text, b.text);
    else assert_string_equal(a.text, b.text);
    assert_string_equal(a.finish_reason, b.finish_reason);
    assert_int_equal(a.prompt_tokens, b.prompt_tokens);
    assert_int_equal(a.completion_tokens, b.completion_tokens);
    assert_int_equal(a.cache_read_tokens, b.cache_read_tokens);
    assert_int_equal(a.cache_write_tokens, b.cache_write_tokens);
    assert_string_equal(a.error, b.error);
    llm_api_result_clear(&a);
    llm_api_result_clear(&b);
}

static void assert_same_as_dom(const char *body, size_t len) {
    assert_same_as_dom_of(LLM_PROVIDER_OPENAI, body, len);
}

/* scanned: 1 when llm_api_scan must read the body itself, 0 when it must
 * leave it to cJSON. */
static void check_scan_of(llm_provider provider, const char *body, size_t len, int scanned) {
    llm_api_result r;
    memset(&r, 0x5a, sizeof(r));
    int rc = llm_api_scan(provider, body, len, &r);
    if (rc != (scanned ? 0 : -1)) fail_msg("scan returned %d for: %.*s", rc, (int)len, body);
    if (rc == 0) llm_api_result_clear(&r);
    assert_same_as_dom_of(provider, body, len);
}

static void check_scan(const char *body, size_t len, int scanned) {
    check_scan_of(LLM_PROVIDER_OPENAI, body, len, scanned);
}

#define CHECK_SCAN(body, scanned) check_scan((body), sizeof(body) - 1, (scanned))
#define CHECK_SCAN_ANTHROPIC(body, scanned) \
    check_scan_of(LLM_PROVIDER_ANTHROPIC, (body), sizeof(body) - 1, (scanned))

/* A job that asks for its answer through a tool of its own: the one
 * call's arguments (OpenAI) or input (Anthropic) are the answer; the
 * scanner hands such a body to the DOM, and reads on past an empty one. */
static void test_tool_answers(void **s) {
    (void)s;
    static const struct {
        llm_provider provider;
        const char *body;
        int scanned;
        decide_category cat;
        const char *text;   /* NULL: none */
        const char *error;  /* a part of r.error, or NULL */
    } cases[] = {
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
         "\"type\":\"function\",\"function\":{\"name\":\"emit\",\"arguments\":\"{\\\"name\\\":\\\"Lamp\\\","
         "\\\"price\\\":2}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":9,"
         "\"completion_tokens\":4}}",
         0, DECIDE_CAT_OK, "{\"name\":\"Lamp\",\"price\":2}", NULL},
        /* words around the call are not the answer */
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"content\":\"Calling emit.\",\"tool_calls\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"emit\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
         0, DECIDE_CAT_OK, "{}", NULL},
        /* the older function_call */
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"content\":null,\"function_call\":{\"name\":\"emit\",\"arguments\":"
         "\"[1]\"}},\"finish_reason\":\"function_call\"}]}",
         0, DECIDE_CAT_OK, "[1]", NULL},
        /* two calls name no answer */
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"a\",\"arguments\":\"{}\"}},{\"type\":\"function\",\"function\":{\"name\":\"b\","
         "\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
         0, DECIDE_CAT_EMPTY, NULL, "the answer is 2 tool calls, not one"},
        /* a call without its arguments */
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"content\":\"x\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"a\"}}]},\"finish_reason\":\"tool_calls\"}]}",
         0, DECIDE_CAT_EMPTY, NULL, "empty answer"},
        /* vLLM's [] and null with every answer: the content, scanned */
        {LLM_PROVIDER_OPENAI,
         "{\"choices\":[{\"message\":{\"content\":\"{\\\"a\\\":1}\",\"tool_calls\":[ ],\"function_call\":null},"
         "\"finish_reason\":\"stop\"}]}",
         1, DECIDE_CAT_OK, "{\"a\":1}", NULL},
        {LLM_PROVIDER_ANTHROPIC,
         "{\"content\":[{\"type\":\"text\",\"text\":\"Here it is.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\","
         "\"name\":\"emit\",\"input\":{\"name\":\"Lamp\",\"tags\":[\"a\"],\"price\":24.5}}],"
         "\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":9,\"output_tokens\":4}}",
         0, DECIDE_CAT_OK, "{\"name\":\"Lamp\",\"tags\":[\"a\"],\"price\":24.5}", NULL},
        {LLM_PROVIDER_ANTHROPIC,
         "{\"content\":[{\"type\":\"tool_use\",\"name\":\"a\",\"input\":{}},{\"type\":\"tool_use\",\"name\":\"b\","
         "\"input\":{}}],\"stop_reason\":\"tool_use\"}",
         0, DECIDE_CAT_EMPTY, NULL, "the answer is 2 tool calls, not one"},
        /* cut in the call: truncated still */
        {LLM_PROVIDER_ANTHROPIC,
         "{\"content\":[{\"type\":\"tool_use\",\"name\":\"a\",\"input\":{\"a\":1}}],\"stop_reason\":\"max_tokens\"}",
         0, DECIDE_CAT_TRUNCATED, "{\"a\":1}", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].body);
        check_scan_of(cases[i].provider, cases[i].body, len, cases[i].scanned);
        llm_api_result r;
        llm_api_parse(cases[i].provider, 200, cases[i].body, len, &r);
        if (r.category != cases[i].cat) fail_msg("case %zu: category %d, want %d", i, (int)r.category, (int)cases[i].cat);
        if (cases[i].text && (!r.text || strcmp(r.text, cases[i].text)))
            fail_msg("case %zu: text %s, want %s", i, r.text ? r.text : "(null)", cases[i].text);
        if (cases[i].error && !strstr(r.error, cases[i].error))
            fail_msg("case %zu: error \"%s\", want \"%s\"", i, r.error, cases[i].error);
        llm_api_result_clear(&r);
    }
}

/* The answer read without a DOM (the fast path of every OpenAI answer)
 * against cJSON's reading of the same body, on the shapes it reads and
 * on those it must hand over. */
static void test_openai_scan(void **s) {
    (void)s;
    char *body = slurp("openai-response.json");
    check_scan(body, strlen(body), 1);
    llm_api_result r;
    assert_int_equal(llm_api_scan(LLM_PROVIDER_OPENAI, body, strlen(body), &r), 0);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_string_equal(r.text, "{\"name\":\"Desk lamp\",\"price\":24.5}");
    assert_int_equal(r.prompt_tokens, 52);
    assert_int_equal(r.completion_tokens, 12);
    assert_string_equal(r.finish_reason, "stop");
    llm_api_result_clear(&r);
    free(body);
    body = slurp("openai-refusal.json");
    check_scan(body, strlen(body), 1);
    free(body);

    /* content parts (some OpenAI-compatible servers): handed to the DOM,
     * which joins the text parts */
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":\"},"
               "{\"type\":\"thinking\",\"thinking\":\"hm\"},{\"type\":\"text\",\"text\":\"1}\"}]},"
               "\"finish_reason\":\"stop\"}]}", 0);
    static const char parts[] = "{\"choices\":[{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":\"},"
                                "{\"type\":\"thinking\",\"thinking\":\"hm\"},{\"type\":\"text\",\"text\":\"1}\"}]},"
                                "\"finish_reason\":\"stop\"}]}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, parts, sizeof parts - 1, &r);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_string_equal(r.text, "{\"a\":1}");
    llm_api_result_clear(&r);
    static const char no_text[] = "{\"choices\":[{\"message\":{\"content\":[{\"type\":\"image\"}]},"
                                  "\"finish_reason\":\"stop\"}]}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, no_text, sizeof no_text - 1, &r);
    assert_int_equal(r.category, DECIDE_CAT_EMPTY);
    llm_api_result_clear(&r);
    /* a string first, an array after it: the first of duplicate keys counts */
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"x\",\"content\":[]},\"finish_reason\":\"stop\"}]}", 1);

    /* escapes, decoded as cJSON decodes them */
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20AC\\ud83d\\ude00\"},"
               "\"finish_reason\":\"st\\u006fp\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":-4}}", 1);
    const char *emoji = "{\"choices\":[{\"message\":{\"content\":\"\\u00e9\\ud83d\\ude00\"}}]}";
    assert_int_equal(llm_api_scan(LLM_PROVIDER_OPENAI, emoji, strlen(emoji), &r), 0);
    assert_string_equal(r.text, "\xc3\xa9\xf0\x9f\x98\x80");
    llm_api_result_clear(&r);
    /* the first of duplicate keys counts, whatever its type */
    CHECK_SCAN("{\"choices\":\"x\",\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":null,\"content\":\"A\"}}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\",\"content\":\"B\"},\"message\":{\"content\":\"C\"}}]}", 1);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens\":\"7\",\"prompt_tokens\":8},\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 1);
    /* a finish reason longer than the scanner's buffer (and the result's),
     * cut in a character: kept as the DOM keeps it; "length" past a long
     * escaped prefix is no "length" */
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\"},\"finish_reason\":\"x"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\"},\"finish_reason\":\"\\u0078xxxxxxxxxxxxxxxxxxxx"
               "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxlength\"}]}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"{}\"}],\"stop_reason\":\"max_\\u0074okens\"}", 1);
    /* categories */
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"length\"}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"\"},\"finish_reason\":\"content_filter\"}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"\"}}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":null,\"refusal\":\"no \\\"way\\\"\"}}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":\"text\",\"finish_reason\":7}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":[{\"content\":\"A\"}]}]}", 1);
    CHECK_SCAN("{\"choices\":[]}", 1);
    CHECK_SCAN("{\"choices\":[3,{\"message\":{\"content\":\"A\"}}]}", 1);
    CHECK_SCAN("{\"choices\":null,\"usage\":[1,2]}", 1);
    CHECK_SCAN("{}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\"},\"finish_reason\":"
               "\"a finish reason far longer than the thirty-one bytes kept\"}]}", 1);
    /* every kind of value in members nobody reads, and whitespace */
    CHECK_SCAN(" \n{ \"x\" : [ -0 , 1e5 , 1.5E-3 , -2.25e+2 , true , false , null , { } , [ ] , { \"y\" : [ { } ] } ] ,\r\n"
               "\t\"choices\" : [ { \"message\" : { \"content\" : \"A\" } } ] , \"created\" : 12345678901234567890 } \n", 1);

    /* left to cJSON: the result is still cJSON's */
    CHECK_SCAN("{\"usage\":{\"prompt_tokens\":12.0},\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 0);
    CHECK_SCAN("{\"usage\":{\"completion_tokens\":1234567890123456789},\"choices\":[]}", 0);
    /* beyond long's range: capped, not an undefined cast (UBSan aborts the
     * sanitized run on one) */
    CHECK_SCAN("{\"usage\":{\"prompt_tokens\":4e19,\"completion_tokens\":-1e300},\"choices\":[]}", 0);
    const char *huge = "{\"usage\":{\"prompt_tokens\":4e19,\"completion_tokens\":-1e300},"
                       "\"choices\":[{\"message\":{\"content\":\"A\"}}]}";
    llm_api_parse(LLM_PROVIDER_OPENAI, 200, huge, strlen(huge), &r);
    assert_true(r.prompt_tokens == 1000000000000000L && r.completion_tokens == 0);
    llm_api_result_clear(&r);
    /* a count below 0 (a faulty server) is 0, by the scanner as by cJSON:
     * taken as sent, -5 wrapped the token counters of the metrics */
    const char *negative = "{\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":-0},"
                           "\"choices\":[{\"message\":{\"content\":\"A\"}}]}";
    assert_int_equal(llm_api_scan(LLM_PROVIDER_OPENAI, negative, strlen(negative), &r), 0);
    assert_true(r.prompt_tokens == 0 && r.completion_tokens == 0);
    llm_api_result_clear(&r);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":-1.5},\"choices\":[]}", 0);
    const char *neg_a = "{\"content\":[{\"type\":\"text\",\"text\":\"A\"}],\"usage\":{\"input_tokens\":-7,"
                        "\"output_tokens\":-2,\"cache_read_input_tokens\":3}}";
    assert_int_equal(llm_api_scan(LLM_PROVIDER_ANTHROPIC, neg_a, strlen(neg_a), &r), 0);
    assert_true(r.prompt_tokens == 3 && r.completion_tokens == 0);
    llm_api_result_clear(&r);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"A\"}],\"usage\":{\"input_tokens\":-7,"
                         "\"output_tokens\":-2,\"cache_read_input_tokens\":3}}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\\ud800b\"}}]}", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\\udc00b\"}}]}", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\\u0000b\"}}]}", 0);
    /* cJSON decodes strings nobody reads too: a lone surrogate there fails
     * its parse ("not JSON"), a \u0000 there changes nothing */
    CHECK_SCAN("{\"x\":\"a\\ud83db\",\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 0);
    CHECK_SCAN("{\"x\":\"a\\ud83d\\u0041\",\"choices\":[]}", 0);
    CHECK_SCAN("{\"x\":\"a\\u0000b\",\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 1);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\\qb\"}}]}", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"a\tb\"}}]}", 0);
    CHECK_SCAN("{\"cho\\u0069ces\":[{\"message\":{\"content\":\"A\"}}]}", 0);
    CHECK_SCAN("{\"choices\":{\"first\":{\"message\":{\"content\":\"A\"}}}}", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\"}}]} trailing", 0);
    CHECK_SCAN("\xef\xbb\xbf{\"choices\":[{\"message\":{\"content\":\"A\"}}]}", 0);
    CHECK_SCAN("[{\"choices\":[]}]", 0);
    CHECK_SCAN("<html>", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A\"}}", 0);
    CHECK_SCAN("{\"choices\":[{\"message\":{\"content\":\"A}}]}", 0);
    CHECK_SCAN("{\"x\":01,\"choices\":[]}", 0);
    CHECK_SCAN("{\"x\":tru,\"choices\":[]}", 0);
    CHECK_SCAN("{\"x\":1.,\"choices\":[]}", 0);
    CHECK_SCAN("{\"x\":[1,],\"choices\":[]}", 0);
    CHECK_SCAN("{\"x\" 1}", 0);
    /* nesting beyond the scanner's limit (64), well within cJSON's */
    char deep[400];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"x\":");
    for (int i = 0; i < 100; i++) deep[n++] = '[';
    for (int i = 0; i < 100; i++) deep[n++] = ']';
    n += (size_t)snprintf(deep + n, sizeof(deep) - n, ",\"choices\":[{\"message\":{\"content\":\"A\"}}]}");
    check_scan(deep, n, 0);
    /* a body cut anywhere is never read past its end */
    const char *full = "{\"choices\":[{\"message\":{\"content\":\"x\\u00e9\\n\"},\"finish_reason\":\"stop\"}],"
                       "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}";
    for (size_t cut = 1; cut < strlen(full); cut++) {
        char *part = malloc(cut);
        memcpy(part, full, cut);
        llm_api_result t;
        assert_int_equal(llm_api_scan(LLM_PROVIDER_OPENAI, part, cut, &t), -1);
        assert_same_as_dom(part, cut);
        free(part);
    }
}

/* body's usage, read by the scanner and by cJSON alike. */
static void check_usage(llm_provider provider, const char *body, long prompt, long completion, long cache_read,
                        long cache_write) {
    llm_api_result r;
    for (int dom = 0; dom < 2; dom++) {
        if (dom) llm_api_parse_dom(provider, 200, body, strlen(body), &r);
        else assert_int_equal(llm_api_scan(provider, body, strlen(body), &r), 0);
        assert_int_equal(r.prompt_tokens, prompt);
        assert_int_equal(r.completion_tokens, completion);
        assert_int_equal(r.cache_read_tokens, cache_read);
        assert_int_equal(r.cache_write_tokens, cache_write);
        llm_api_result_clear(&r);
    }
}

/* Anthropic's Messages answers through the same scanner. */
static void test_anthropic_scan(void **s) {
    (void)s;
    char *body = slurp("anthropic-response.json");
    check_scan_of(LLM_PROVIDER_ANTHROPIC, body, strlen(body), 1);
    llm_api_result r;
    assert_int_equal(llm_api_scan(LLM_PROVIDER_ANTHROPIC, body, strlen(body), &r), 0);
    assert_int_equal(r.category, DECIDE_CAT_OK);
    assert_non_null(r.text);
    assert_true(r.prompt_tokens > 0 && r.completion_tokens > 0);
    llm_api_result_clear(&r);
    free(body);

    /* text blocks joined; other blocks, and blocks of the wrong shape, left out */
    const char *two = "{\"content\":[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"thinking\",\"text\":\"X\"},"
                      "{\"type\":\"text\",\"text\":\"c\\u00e9\"},{\"text\":\"Y\"},{\"type\":\"text\"},7,\"s\",[],"
                      "{\"type\":\"text\",\"text\":3}],\"stop_reason\":\"end_turn\","
                      "\"usage\":{\"input_tokens\":9,\"output_tokens\":4}}";
    assert_int_equal(llm_api_scan(LLM_PROVIDER_ANTHROPIC, two, strlen(two), &r), 0);
    assert_string_equal(r.text, "abc\xc3\xa9");
    assert_string_equal(r.finish_reason, "end_turn");
    assert_int_equal(r.prompt_tokens, 9);
    assert_int_equal(r.completion_tokens, 4);
    llm_api_result_clear(&r);
    check_scan_of(LLM_PROVIDER_ANTHROPIC, two, strlen(two), 1);
    /* a block's text before its type; escaped texts decoded in place,
     * one after another; a type longer than the scanner keeps is not
     * "text"; a \u0000 in a block not of text does not matter */
    const char *later = "{\"content\":[{\"text\":\"q\\\"1\\n\",\"type\":\"text\"},{\"type\":\"texttexttexttexttext\","
                        "\"text\":\"Z\"},{\"text\":\"\\ud83d\\ude00\\/\",\"type\":\"text\"},{\"type\":\"text\",\"text\":\"e\"},"
                        "{\"type\":\"thinking\",\"text\":\"a\\u0000b\"}]}";
    assert_int_equal(llm_api_scan(LLM_PROVIDER_ANTHROPIC, later, strlen(later), &r), 0);
    assert_string_equal(r.text, "q\"1\n\xf0\x9f\x98\x80/e");
    llm_api_result_clear(&r);
    check_scan_of(LLM_PROVIDER_ANTHROPIC, later, strlen(later), 1);
    /* the first of duplicate keys, in a block and at the top */
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"image\",\"type\":\"text\",\"text\":\"A\",\"text\":\"B\"}]}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"A\"}],\"content\":[]}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":{\"type\":\"text\",\"text\":\"A\"},\"content\":[]}", 1);
    CHECK_SCAN_ANTHROPIC("{\"stop_reason\":null,\"stop_reason\":\"refusal\",\"content\":[]}", 1);
    /* categories */
    CHECK_SCAN_ANTHROPIC("{\"content\":[],\"stop_reason\":\"refusal\"}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"{\"}],\"stop_reason\":\"max_tokens\"}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"\"}]}", 1);
    CHECK_SCAN_ANTHROPIC("{\"content\":\"text\"}", 1);
    CHECK_SCAN_ANTHROPIC("{\"usage\":{\"input_tokens\":\"9\"}}", 1);
    CHECK_SCAN_ANTHROPIC("{}", 1);
    /* the prompt's tokens include those written to and read from the
     * cache (input_tokens leaves them out; OpenAI's prompt_tokens counts
     * them): 9 + 100 + 2,000 */
    const char *cached = "{\"content\":[{\"type\":\"text\",\"text\":\"{}\"}],\"stop_reason\":\"end_turn\","
                         "\"usage\":{\"input_tokens\":9,\"cache_creation_input_tokens\":100,"
                         "\"cache_read_input_tokens\":2000,\"output_tokens\":4}}";
    /* and which of them the cache priced apart */
    check_usage(LLM_PROVIDER_ANTHROPIC, cached, 2109, 4, 2000, 100);
    /* OpenAI: the cached part of prompt_tokens, in prompt_tokens_details */
    check_usage(LLM_PROVIDER_OPENAI,
                "{\"choices\":[{\"message\":{\"content\":\"{}\"},\"finish_reason\":\"stop\"}],"
                "\"usage\":{\"prompt_tokens\":2048,\"completion_tokens\":5,"
                "\"prompt_tokens_details\":{\"cached_tokens\":1920,\"audio_tokens\":0}}}",
                2048, 5, 1920, 0);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3,\"cached_tokens\":9},"
               "\"prompt_tokens_details\":{\"cached_tokens\":4}},\"choices\":[]}", 1);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens_details\":null,\"prompt_tokens_details\":{\"cached_tokens\":4}},"
               "\"choices\":[]}", 1);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens_details\":[{\"cached_tokens\":4}]},\"choices\":[]}", 1);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":-4}},\"choices\":[]}", 1);
    CHECK_SCAN("{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":4.5}},\"choices\":[]}", 0);
    CHECK_SCAN_ANTHROPIC("{\"usage\":{\"input_tokens\":9,\"cache_read_input_tokens\":null,"
                         "\"cache_creation_input_tokens\":-5,\"cache_read_input_tokens\":7}}", 1);
    /* left to cJSON */
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"a\\u0000b\"}]}", 0);
    CHECK_SCAN_ANTHROPIC("{\"usage\":{\"output_tokens\":4.0},\"content\":[]}", 0);
    CHECK_SCAN_ANTHROPIC("{\"cont\\u0065nt\":[]}", 0);
    CHECK_SCAN_ANTHROPIC("{\"content\":[]}x", 0);
    CHECK_SCAN_ANTHROPIC("{\"content\":[{\"type\":\"text\",\"text\":\"a\\udd00\"}]}", 0);
    /* an OpenAI body read as Anthropic's, and the other way round */
    char *oa = slurp("openai-response.json");
    check_scan_of(LLM_PROVIDER_ANTHROPIC, oa, strlen(oa), 1);
    free(oa);
    char *an = slurp("anthropic-response.json");
    check_scan_of(LLM_PROVIDER_OPENAI, an, strlen(an), 1);
    free(an);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_shapes),   cmocka_unit_test(test_anthropic_shapes), cmocka_unit_test(test_anthropic_body),
        cmocka_unit_test(test_categories),      cmocka_unit_test(test_build_bodies),
        cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_tool_answers),
        cmocka_unit_test(test_sends_schema),
        cmocka_unit_test(test_answer_copy_out_of_memory),
        cmocka_unit_test(test_reflection_prompt), cmocka_unit_test(test_retry_conversation),
        cmocka_unit_test(test_openai_scan),       cmocka_unit_test(test_anthropic_scan),
        cmocka_unit_test(test_nul_in_answer),
        cmocka_unit_test(test_long_messages_cut_as_utf8),
        cmocka_unit_test(test_messages_not_utf8_are_mended),
    };
    return cmocka_run_group_tests_name("llm_api", tests, NULL, NULL);
}
