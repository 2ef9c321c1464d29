/* test_rules.c - unit tests for common/rules.c (cmocka). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "util.h"

static rules *compile(const char *text)
{
    cJSON *spec = cJSON_Parse(text);
    if (!spec)
        fail_msg("test spec is not JSON: %s", text);
    char err[256] = "";
    rules *r = rules_compile(spec, err, sizeof err);
    cJSON_Delete(spec);
    if (!r)
        fail_msg("compile failed: %s", err);
    return r;
}

/* Runs r on output_text; the returned array is the caller's. */
static cJSON *run(const rules *r, const char *output_text)
{
    cJSON *out = cJSON_Parse(output_text);
    if (!out)
        fail_msg("test output is not JSON: %s", output_text);
    cJSON *v = cJSON_CreateArray();
    size_t n = rules_check(r, out, v);
    cJSON_Delete(out);
    assert_int_equal(n, (size_t)cJSON_GetArraySize(v));
    return v;
}

static const char *str(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static const cJSON *find(const cJSON *arr, const char *code, const char *path)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (!strcmp(str(v, "code"), code) && !strcmp(str(v, "path"), path))
            return v;
    }
    return NULL;
}

static int fixable(const cJSON *v)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "fixable");
    assert_true(cJSON_IsBool(f));
    return cJSON_IsTrue(f);
}

/* Every violation has exactly the documented members. */
static void assert_shape(const cJSON *arr)
{
    static const char *const keys[] = { "path", "keyword", "code", "message", "expected", "actual", "fixable" };
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        assert_int_equal(cJSON_GetArraySize(v), 7);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            assert_non_null(cJSON_GetObjectItemCaseSensitive(v, keys[i]));
        assert_non_null(str(v, "message"));
        assert_true(str(v, "message")[0] != '\0');
    }
}

static void test_pointer(void **state)
{
    (void)state;
    cJSON *doc = cJSON_Parse("{\"a/b\":{\"m~n\":[10,[20,{\"x\":\"y\"}]]},\"\":1,\"arr\":[7],\"~1\":2}");
    assert_non_null(doc);
    assert_ptr_equal(rules_pointer_get(doc, ""), doc);
    const cJSON *y = rules_pointer_get(doc, "/a~1b/m~0n/1/1/x");
    assert_true(cJSON_IsString(y));
    assert_string_equal(y->valuestring, "y");
    assert_int_equal(rules_pointer_get(doc, "/a~1b/m~0n/1/0")->valueint, 20);
    assert_int_equal(rules_pointer_get(doc, "/")->valueint, 1);    /* member "" */
    assert_int_equal(rules_pointer_get(doc, "/~01")->valueint, 2); /* member "~1": ~0 first, then 1 */
    assert_int_equal(rules_pointer_get(doc, "/arr/0")->valueint, 7);
    assert_null(rules_pointer_get(doc, "/arr/1"));  /* out of range */
    assert_null(rules_pointer_get(doc, "/arr/00")); /* leading zero */
    assert_null(rules_pointer_get(doc, "/arr/-"));
    assert_null(rules_pointer_get(doc, "/arr/0/x")); /* into a number */
    assert_null(rules_pointer_get(doc, "/a/b"));     /* '/' must be ~1 */
    assert_null(rules_pointer_get(doc, "arr"));      /* no leading '/' */
    assert_null(rules_pointer_get(doc, "/~2"));      /* bad escape */
    assert_null(rules_pointer_get(NULL, ""));
    cJSON_Delete(doc);
}

static void test_forbid_anywhere(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"I don't know\",\"as an AI\",\"AI\"]}]");
    cJSON *v = run(r, "{\"summary\":\"Well, I DON'T know.\","
                      "\"items\":[{\"note\":\"fine\"},{\"note\":[\"ok\",\"As an   AI model\"]}],"
                      "\"said\":\"she said hi to Aida over Thai food\",\"curly\":\"I don\xe2\x80\x99t know\","
                      "\"a/b\":{\"~k\":\"ask the AI.\"},\"n\":5,\"AI\":true}");
    assert_shape(v);
    const cJSON *s = find(v, "FORBIDDEN_PHRASE", "/summary");
    assert_non_null(s);
    assert_string_equal(str(s, "message"), "/summary must not contain \"I don't know\"");
    assert_string_equal(str(s, "keyword"), "rules/0/forbid_phrases");
    assert_string_equal(str(s, "actual"), "Well, I DON'T know.");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "expected")));
    assert_true(fixable(s));
    /* nested arrays: each string at its own path; two phrases -> two violations */
    int at_note = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!strcmp(str(it, "path"), "/items/1/note/1"))
            at_note++;
    }
    assert_int_equal(at_note, 2);
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/curly"));   /* U+2019 apostrophe */
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/a~1b/~0k")); /* escaped member names */
    assert_null(find(v, "FORBIDDEN_PHRASE", "/said"));        /* "AI" only as a whole word */
    assert_null(find(v, "FORBIDDEN_PHRASE", "/items/0/note"));
    assert_int_equal(cJSON_GetArraySize(v), 5);
    cJSON_Delete(v);

    /* the output itself a string: reported at the root */
    v = run(r, "\"As an AI, I can't\"");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    s = find(v, "FORBIDDEN_PHRASE", "");
    assert_non_null(s);
    assert_non_null(strstr(str(s, "message"), "the answer must not contain"));
    cJSON_Delete(v);
    rules_free(r);
}

static void test_forbid_pointer_case(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"lorem ipsum\"],\"pointer\":\"/items\","
                       "\"case_sensitive\":true}]");
    cJSON *v = run(r, "{\"items\":[[\"x lorem ipsum\"],{\"d\":\"Lorem Ipsum\"}],\"other\":\"lorem ipsum\"}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/items/0/0"));
    cJSON_Delete(v);
    v = run(r, "{\"other\":\"lorem ipsum\"}"); /* pointer target missing: nothing */
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
    rules_free(r);

    /* case-insensitive by default, with Unicode case folding; punctuation is literal */
    r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"\xc3\x84rger (sic)\",\"a.b\"]}]");
    v = run(r, "[\"kein \xc3\xa4rger (SIC) hier\",\"axb\",\"A.B\"]");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/0"));
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/2"));
    cJSON_Delete(v);
    rules_free(r);
}

static void test_long_string_excerpt(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"as an AI\"]}]");
    sbuf b = { 0 };
    sbuf_puts(&b, "{\"s\":\"");
    for (int i = 0; i < 300; i++)
        sbuf_puts(&b, "\xc3\xa9");
    sbuf_puts(&b, " as an AI ");
    for (int i = 0; i < 300; i++)
        sbuf_puts(&b, "x");
    sbuf_puts(&b, "\"}");
    cJSON *v = run(r, b.data);
    sbuf_free(&b);
    assert_int_equal(cJSON_GetArraySize(v), 1);
    const char *actual = str(cJSON_GetArrayItem(v, 0), "actual");
    assert_non_null(actual);
    assert_true(strlen(actual) < 200);
    assert_non_null(strstr(actual, "as an AI"));
    assert_memory_equal(actual, "...", 3);
    assert_true(util_utf8_valid(actual, strlen(actual))); /* not cut inside a code point */
    cJSON_Delete(v);
    rules_free(r);
}

static void test_must_match(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"must_match\",\"pointer\":\"/items/1/0/sku\",\"regex\":\"^[A-Z]{3}-\\\\d{4}$\"},"
                       "{\"type\":\"must_not_match\",\"pointer\":\"/items/1/0/sku\",\"regex\":\"^TST-\"}]");
    cJSON *v = run(r, "{\"items\":[0,[{\"sku\":\"ABC-1234\"}]]}");
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);

    v = run(r, "{\"items\":[0,[{\"sku\":\"abc-1234\"}]]}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    assert_shape(v);
    const cJSON *m = find(v, "PATTERN_MISMATCH", "/items/1/0/sku");
    assert_non_null(m);
    assert_string_equal(str(m, "message"), "/items/1/0/sku must match the pattern ^[A-Z]{3}-\\d{4}$");
    assert_string_equal(str(m, "expected"), "^[A-Z]{3}-\\d{4}$");
    assert_string_equal(str(m, "actual"), "abc-1234");
    assert_string_equal(str(m, "keyword"), "rules/0/must_match");
    cJSON_Delete(v);

    /* \d is ASCII: Arabic-Indic digits do not match */
    v = run(r, "{\"items\":[0,[{\"sku\":\"ABC-\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4\"}]]}");
    assert_non_null(find(v, "PATTERN_MISMATCH", "/items/1/0/sku"));
    cJSON_Delete(v);

    v = run(r, "{\"items\":[0,[{\"sku\":\"TST-0001\"}]]}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    m = find(v, "FORBIDDEN_PATTERN", "/items/1/0/sku");
    assert_non_null(m);
    assert_string_equal(str(m, "keyword"), "rules/1/must_not_match");
    assert_string_equal(str(m, "message"), "/items/1/0/sku must not match the pattern ^TST-");
    cJSON_Delete(v);

    /* not a string: must_match says so, must_not_match has nothing to say */
    v = run(r, "{\"items\":[0,[{\"sku\":1234}]]}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    m = find(v, "WRONG_TYPE", "/items/1/0/sku");
    assert_non_null(m);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "actual")->valueint, 1234);
    cJSON_Delete(v);

    /* missing: neither rule fires */
    v = run(r, "{\"items\":[0,[{}]]}");
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
    rules_free(r);
}

static void test_not_empty(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"not_empty\",\"pointer\":\"/s\"}]");
    static const char *const empty[] = {
        "{\"s\":\"\"}", "{\"s\":\"  \\n\\t \"}", "{\"s\":\"\\u00a0\\u200b\\u3000\"}", "{\"s\":[]}",
        "{\"s\":{}}",   "{\"s\":null}",
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        cJSON *v = run(r, empty[i]);
        if (cJSON_GetArraySize(v) != 1 || !find(v, "EMPTY_VALUE", "/s"))
            fail_msg("%s not reported as empty", empty[i]);
        assert_shape(v);
        cJSON_Delete(v);
    }
    static const char *const full[] = { "{\"s\":0}", "{\"s\":false}", "{\"s\":\" x \"}", "{\"s\":[null]}",
                                        "{\"s\":{\"a\":null}}" };
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) {
        cJSON *v = run(r, full[i]);
        if (cJSON_GetArraySize(v) != 0)
            fail_msg("%s reported as empty", full[i]);
        cJSON_Delete(v);
    }
    cJSON *v = run(r, "{\"t\":\"x\"}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    const cJSON *m = find(v, "MISSING_FIELD", "/s");
    assert_non_null(m);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "actual")));
    assert_true(fixable(m));
    cJSON_Delete(v);
    v = run(r, "{\"s\":\"   \"}");
    assert_string_equal(str(cJSON_GetArrayItem(v, 0), "message"), "/s must not be empty or only white space");
    cJSON_Delete(v);
    rules_free(r);
}

static void test_length(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"length\",\"pointer\":\"/s\",\"min\":6,\"max\":6},"
                       "{\"type\":\"length\",\"pointer\":\"/tags\",\"min\":1,\"max\":5}]");
    /* "héllo😀": 6 code points, 10 bytes */
    cJSON *v = run(r, "{\"s\":\"h\xc3\xa9llo\xf0\x9f\x98\x80\",\"tags\":[\"a\"]}");
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);

    v = run(r, "{\"s\":\"h\xc3\xa9llo\",\"tags\":[]}");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_shape(v);
    const cJSON *m = find(v, "TOO_SHORT", "/s");
    assert_non_null(m);
    assert_string_equal(str(m, "message"), "/s must have at least 6 characters (it has 5)");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "expected")->valueint, 6);
    m = find(v, "TOO_SHORT", "/tags");
    assert_non_null(m);
    assert_string_equal(str(m, "message"), "/tags must have at least 1 item (it has 0)");
    assert_string_equal(str(m, "keyword"), "rules/1/length");
    cJSON_Delete(v);

    v = run(r, "{\"s\":\"h\xc3\xa9llo\xf0\x9f\x98\x80!\",\"tags\":[1,2,3,4,5,6]}");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    m = find(v, "TOO_LONG", "/tags");
    assert_non_null(m);
    assert_string_equal(str(m, "message"), "/tags must have at most 5 items (it has 6)");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "expected")->valueint, 5);
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "actual")));
    assert_non_null(find(v, "TOO_LONG", "/s"));
    cJSON_Delete(v);

    v = run(r, "{\"s\":{\"a\":1}}"); /* /tags missing: nothing; an object has no length */
    assert_int_equal(cJSON_GetArraySize(v), 1);
    assert_non_null(find(v, "WRONG_TYPE", "/s"));
    cJSON_Delete(v);
    rules_free(r);
}

static void test_overrides(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"not_empty\",\"pointer\":\"/x\",\"code\":\"NEED_X\","
                       "\"message\":\"give x: the source always has one\",\"fixable\":false},"
                       "{\"type\":\"must_match\",\"pointer\":\"/y\",\"regex\":\"^y$\",\"fixable\":true}]");
    cJSON *v = run(r, "{\"x\":\"\",\"y\":\"n\"}");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    const cJSON *m = find(v, "NEED_X", "/x");
    assert_non_null(m);
    assert_string_equal(str(m, "message"), "give x: the source always has one");
    assert_false(fixable(m));
    m = find(v, "PATTERN_MISMATCH", "/y");
    assert_non_null(m);
    assert_true(fixable(m));
    cJSON_Delete(v);
    rules_free(r);
}

static void expect_error(const char *spec, const char *want)
{
    cJSON *doc = cJSON_Parse(spec);
    if (!doc)
        fail_msg("test spec is not JSON: %s", spec);
    char err[256] = "";
    rules *r = rules_compile(doc, err, sizeof err);
    if (r)
        fail_msg("accepted a bad spec: %s", spec);
    if (!strstr(err, want))
        fail_msg("spec %s: error \"%s\" does not contain \"%s\"", spec, err, want);
    /* a tiny buffer is cut, never overrun */
    char small[8];
    memset(small, 'Z', sizeof small);
    assert_null(rules_compile(doc, small, 6));
    assert_int_equal(strlen(small), 5);
    assert_int_equal(small[7], 'Z');
    cJSON_Delete(doc);
}

/* A member named twice (jsonin keeps both; a consumer's JSON.parse keeps
 * the last) is checked each time, at every level of the pointer: only the
 * first was, and the second passed a forbidden value. */
static void test_members_named_twice(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"must_not_match\",\"pointer\":\"/sku\",\"regex\":\"^TEST-\"},"
                       "{\"type\":\"not_empty\",\"pointer\":\"/summary\"},"
                       "{\"type\":\"length\",\"pointer\":\"/o/tags\",\"max\":2},"
                       "{\"type\":\"forbid_phrases\",\"pointer\":\"/o/note\",\"phrases\":[\"lorem\"]}]");
    cJSON *v = run(r, "{\"sku\":\"ABC-1234\",\"sku\":\"TEST-0001\",\"summary\":\"ok\",\"summary\":\"\","
                      "\"o\":{\"tags\":[1]},\"o\":{\"tags\":[1],\"tags\":[1,2,3],\"note\":\"lorem ipsum\"}}");
    assert_shape(v);
    assert_non_null(find(v, "FORBIDDEN_PATTERN", "/sku"));
    assert_non_null(find(v, "EMPTY_VALUE", "/summary"));
    assert_non_null(find(v, "TOO_LONG", "/o/tags"));
    assert_non_null(find(v, "FORBIDDEN_PHRASE", "/o/note"));
    assert_int_equal(cJSON_GetArraySize(v), 4);
    cJSON_Delete(v);
    /* once, as ever, when the member is there once, or not at all */
    v = run(r, "{\"sku\":\"ABC-1\",\"o\":{\"tags\":[]}}");
    assert_int_equal(cJSON_GetArraySize(v), 1); /* /summary missing */
    cJSON_Delete(v);
    rules_free(r);
}

static void test_bad_specs(void **state)
{
    (void)state;
    expect_error("{}", "rules: must be an array");
    expect_error("[1]", "rules[0]: must be an object");
    expect_error("[{}]", "rules[0].type");
    expect_error("[{\"type\":\"nope\"}]", "rules[0].type: unknown rule type \"nope\"");
    /* a field given twice: the first won, unseen */
    expect_error("[{\"type\":\"must_match\",\"pointer\":\"/a\",\"regex\":\"^x$\",\"regex\":\"^y$\"}]",
                 "rules[0].regex: given twice");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\"},"
                 "{\"type\":\"must_match\",\"pointer\":\"/a\",\"regex\":\"(unclosed\"}]",
                 "rules[1].regex: ");
    expect_error("[{\"type\":\"must_match\",\"pointer\":\"/a\"}]", "rules[0].regex");
    expect_error("[{\"type\":\"must_not_match\",\"regex\":\"x\"}]", "rules[0].pointer");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"a\"}]", "rules[0].pointer");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a~2\"}]", "rules[0].pointer");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":5}]", "rules[0].pointer");
    expect_error("[{\"type\":\"not_empty\",\"pointr\":\"/a\"}]", "rules[0].pointr");
    expect_error("[{\"type\":\"forbid_phrases\",\"phrases\":[]}]", "rules[0].phrases");
    expect_error("[{\"type\":\"forbid_phrases\"}]", "rules[0].phrases");
    expect_error("[{\"type\":\"forbid_phrases\",\"phrases\":[\"ok\",1]}]", "rules[0].phrases[1]");
    expect_error("[{\"type\":\"forbid_phrases\",\"phrases\":[\"  \"]}]", "rules[0].phrases[0]");
    expect_error("[{\"type\":\"forbid_phrases\",\"phrases\":[\"x\"],\"case_sensitive\":\"yes\"}]",
                 "rules[0].case_sensitive");
    expect_error("[{\"type\":\"forbid_phrases\",\"phrases\":[\"x\"],\"regex\":\"y\"}]", "rules[0].regex");
    expect_error("[{\"type\":\"length\",\"pointer\":\"/a\"}]", "rules[0].min");
    expect_error("[{\"type\":\"length\",\"pointer\":\"/a\",\"min\":-1}]", "rules[0].min");
    expect_error("[{\"type\":\"length\",\"pointer\":\"/a\",\"max\":1.5}]", "rules[0].max");
    expect_error("[{\"type\":\"length\",\"pointer\":\"/a\",\"min\":5,\"max\":2}]", "rules[0].max");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"fixable\":\"no\"}]", "rules[0].fixable");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"code\":\"\"}]", "rules[0].code");
    /* codes as events carry them (^[A-Z][A-Z0-9_]*$, at most 64 bytes): a
     * quote and a newline in one forged series on /metrics */
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"code\":\"E\\\"} 1\\nretort_up{x=\\\"\"}]",
                 "rules[0].code");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"code\":\"price-too-high\"}]", "rules[0].code");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"code\":\"_X\"}]", "rules[0].code");
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"code\":\"2BIG\"}]", "rules[0].code");
    static const struct {
        const char *code;
        int valid;
    } codes[] = {
        { "A", 1 }, { "NEED_X", 1 }, { "BAD_UTF8", 1 }, { "A_", 1 }, { "", 0 }, { "a", 0 }, { "A-B", 0 },
        { "A B", 0 }, { "\xc3\x89", 0 }, { "ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJ", 1 }, /* 64 bytes */
        { "ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJK", 0 }, /* 65 */
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (rules_code_valid(codes[i].code) != codes[i].valid) fail_msg("%s: not %d", codes[i].code, codes[i].valid);
    assert_false(rules_code_valid(NULL));
    expect_error("[{\"type\":\"not_empty\",\"pointer\":\"/a\",\"message\":5}]", "rules[0].message");

    /* a prefix names the source in errors and keywords */
    cJSON *doc = cJSON_Parse("[{\"type\":\"not_empty\",\"pointer\":\"/a\"},{\"type\":\"length\"}]");
    char err[256];
    assert_null(rules_compile_prefix(doc, "x-retort/rules", err, sizeof err));
    assert_non_null(strstr(err, "x-retort/rules[1].pointer"));
    cJSON_DeleteItemFromArray(doc, 1);
    rules *pr = rules_compile_prefix(doc, "x-retort/rules", err, sizeof err);
    assert_non_null(pr);
    cJSON *v = run(pr, "{}");
    assert_string_equal(str(cJSON_GetArrayItem(v, 0), "keyword"), "x-retort/rules/0/not_empty");
    cJSON_Delete(v);
    rules_free(pr);
    cJSON_Delete(doc);

    /* an empty list is valid and passes everything */
    rules *r = compile("[]");
    assert_int_equal(rules_count(r), 0);
    v = run(r, "{\"a\":\"\"}");
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
    rules_free(r);
}

static void test_catastrophic_regex(void **state)
{
    (void)state;
    /* (\w+\s?)*$ on a long run of word characters followed by '!' backtracks
     * exponentially without a limit. */
    rules *r = compile("[{\"type\":\"must_match\",\"pointer\":\"/a\",\"regex\":\"^(\\\\w+\\\\s?)*$\","
                       "\"code\":\"MY_CODE\"},"
                       "{\"type\":\"must_not_match\",\"pointer\":\"/a\",\"regex\":\"(a|aa)+$\"},"
                       "{\"type\":\"not_empty\",\"pointer\":\"/b\"}]");
    char text[200];
    snprintf(text, sizeof text, "{\"a\":\"%s!\"}", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    uint64_t t0 = util_mono_ms();
    cJSON *v = run(r, text);
    uint64_t ms = util_mono_ms() - t0;
    if (ms > 3000)
        fail_msg("pathological patterns took %llu ms", (unsigned long long)ms);
    const cJSON *m = find(v, "LIMIT_EXCEEDED", "/a");
    assert_non_null(m);
    assert_false(fixable(m)); /* the rule's code and fixable do not apply */
    assert_string_equal(str(m, "keyword"), "rules/0/must_match");
    assert_null(find(v, "MY_CODE", "/a"));
    /* the (a|aa)+$ rule also gave up rather than hang, and later rules ran */
    int limits = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!strcmp(str(it, "code"), "LIMIT_EXCEEDED"))
            limits++;
    }
    assert_int_equal(limits, 2);
    assert_non_null(find(v, "MISSING_FIELD", "/b"));
    assert_shape(v);
    cJSON_Delete(v);
    rules_free(r);
}

static void test_cap_and_nulls(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"bad\"]},"
                       "{\"type\":\"not_empty\",\"pointer\":\"/x\"}]");
    sbuf b = { 0 };
    sbuf_puts(&b, "[");
    for (int i = 0; i < 100; i++)
        sbuf_printf(&b, "%s\"bad %d\"", i ? "," : "", i);
    sbuf_puts(&b, "]");
    cJSON *v = run(r, b.data);
    sbuf_free(&b);
    int phrases = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!strcmp(str(it, "code"), "FORBIDDEN_PHRASE"))
            phrases++;
    }
    assert_int_equal(phrases, RULES_MAX_PER_RULE);
    assert_non_null(find(v, "MISSING_FIELD", "/x")); /* the cap is per rule */
    cJSON_Delete(v);

    cJSON *out = cJSON_Parse("{}");
    cJSON *obj = cJSON_CreateObject();
    assert_int_equal(rules_check(NULL, out, obj), 0);
    assert_int_equal(rules_check(r, out, obj), 0); /* not an array: nothing appended */
    assert_int_equal(rules_count(r), 2);
    assert_int_equal(rules_count(NULL), 0);
    cJSON_Delete(obj);
    cJSON_Delete(out);
    rules_free(r);
    rules_free(NULL);
}

typedef struct thread_arg {
    const rules *r;
    const char *text;
    int expected;
    int bad;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    cJSON *out = cJSON_Parse(a->text);
    for (int i = 0; i < 200; i++) {
        cJSON *v = cJSON_CreateArray();
        if ((int)rules_check(a->r, out, v) != a->expected)
            a->bad++;
        cJSON_Delete(v);
    }
    cJSON_Delete(out);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    rules *r = compile("[{\"type\":\"forbid_phrases\",\"phrases\":[\"x y\"]},"
                       "{\"type\":\"must_match\",\"pointer\":\"/k\",\"regex\":\"^[0-9]+$\"}]");
    thread_arg args[4] = {
        { r, "{\"k\":\"12\",\"s\":\"x y\"}", 1, 0 },
        { r, "{\"k\":\"ab\",\"s\":\"x  y\"}", 2, 0 },
        { r, "{\"k\":\"12\"}", 0, 0 },
        { r, "{\"k\":\"a\",\"s\":[\"x y\",\"X Y\"]}", 3, 0 },
    };
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    rules_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pointer),        cmocka_unit_test(test_forbid_anywhere),
        cmocka_unit_test(test_forbid_pointer_case), cmocka_unit_test(test_long_string_excerpt),
        cmocka_unit_test(test_must_match),     cmocka_unit_test(test_not_empty),
        cmocka_unit_test(test_length),         cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_members_named_twice),
        cmocka_unit_test(test_bad_specs),      cmocka_unit_test(test_catastrophic_regex),
        cmocka_unit_test(test_cap_and_nulls),  cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests_name("rules", tests, NULL, NULL);
}
