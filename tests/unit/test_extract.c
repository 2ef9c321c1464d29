#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "extract.h"
#include "jsonin.h"
#include "util.h"

static int ok(const char *text, const char *want_json) {
    cJSON *v = NULL;
    char err[256];
    if (extract_json(text, strlen(text), &v, err, sizeof(err))) return 0;
    cJSON *want = cJSON_Parse(want_json);
    int same = cJSON_Compare(v, want, 1);
    jsonin_free(v);
    cJSON_Delete(want);
    return same;
}

static int rejected(const char *text) {
    cJSON *v = NULL;
    char err[256] = "";
    int rc = extract_json(text, strlen(text), &v, err, sizeof(err));
    if (rc == 0) jsonin_free(v);
    return rc != 0 && v == NULL && err[0];
}

static void test_plain(void **s) {
    (void)s;
    assert_true(ok("{\"a\":1}", "{\"a\":1}"));
    assert_true(ok("  \n{\"a\": [1, 2]}\n\n", "{\"a\":[1,2]}"));
    assert_true(ok("[1,2,3]", "[1,2,3]"));
    assert_true(ok("\"just a string\"", "\"just a string\""));
}

static void test_fence(void **s) {
    (void)s;
    assert_true(ok("```json\n{\"a\":1}\n```", "{\"a\":1}"));
    assert_true(ok("```\n{\"a\":1}\n```\n", "{\"a\":1}"));
    assert_true(ok("Here is the result:\n```json\n{\"a\":1}\n```", "{\"a\":1}"));
    assert_true(ok("Sure.\n```json\n{\"a\":1}\n```\nHope this helps!", "{\"a\":1}"));
    /* two fences, or two lines of prose before: too loose */
    assert_true(rejected("```json\n{\"a\":1}\n```\n```json\n{\"b\":2}\n```"));
    assert_true(rejected("Line one.\nLine two.\n```json\n{\"a\":1}\n```"));
    /* a fence around something that is not one value */
    assert_true(rejected("```json\n{\"a\":1} {\"b\":2}\n```"));
    /* ``` inside a string of the value is no close: it cut the value */
    assert_true(ok("Here it is:\n```json\n{\"md\":\"use ```js\\nx\\n``` here\"}\n```",
                   "{\"md\":\"use ```js\\nx\\n``` here\"}"));
    assert_true(ok("Sure.\n```json\n{\"md\":\"a ``` b\"}\n```", "{\"md\":\"a ``` b\"}"));
    assert_true(ok("```json\n{\"a\":1}```", "{\"a\":1}"));
    assert_true(rejected("Sure.\n```json\n{\"md\":\"a ``` b\"}\n```\n```"));
}

static void test_prose(void **s) {
    (void)s;
    assert_true(ok("Here is the JSON you asked for:\n{\"a\":1}", "{\"a\":1}"));
    assert_true(ok("{\"a\":1}\nLet me know if you need more.", "{\"a\":1}"));
    assert_true(ok("Here it is:\n{\"a\":\n 1}\nDone.", "{\"a\":1}"));
    assert_true(rejected("One.\nTwo.\n{\"a\":1}"));
    assert_true(rejected("{\"a\":1}\nOne.\nTwo."));
    assert_true(rejected("The answer is {\"a\":1} as requested"));
    /* a value inside one cut short (an answer stopped at max_tokens) is a
     * part of the answer, not the answer */
    assert_true(rejected("{\"data\":\n{\"name\":\"a\",\"price\":1}\n"));
    assert_true(rejected("[\n{\"name\":\"a\",\"price\":1}\n"));
    assert_true(rejected("{\"user\": {\"name\":\"a\"}, \"items\":\n[1,2,3]"));
    /* two values: which is meant? */
    assert_true(rejected("{\"draft\":true}\n{\"final\":1}"));
    assert_true(rejected("[1]\n[2]"));
    assert_true(rejected("Here:\n{\"a\":1}\n{\"b\":2}"));
    /* a line of prose that opens with a bracket is still prose */
    assert_true(ok("[Note] the JSON:\n{\"a\":1}", "{\"a\":1}"));
    assert_true(ok("{\"a\":1}\n[Note] made up", "{\"a\":1}"));
    assert_true(rejected("{\"a\":1} trailing words"));
}

static void test_not_json(void **s) {
    (void)s;
    assert_true(rejected(""));
    assert_true(rejected("   \n "));
    assert_true(rejected("Sorry, I cannot produce that right now."));
    assert_true(rejected("{\"a\":1"));
    assert_true(rejected("{\"a\":1}{\"b\":2}"));
    /* invalid UTF-8 is not JSON */
    assert_true(rejected("{\"a\":\"\xff\xfe\"}"));
    assert_true(rejected("{\"a\":\"\xed\xa0\x80\"}")); /* encoded surrogate */
}

/* JSON as RFC 8259 writes it, not as cJSON reads it: each of these
 * cJSON 1.7.15 takes (leading zeros, a bare "1.", raw control characters
 * in strings, \u with non-hex digits, an unclosed array ending the text
 * right after a closed one). */
static void test_strict(void **s) {
    (void)s;
    assert_true(rejected("{\"a\":01}"));
    assert_true(rejected("{\"a\":1.}"));
    assert_true(rejected("{\"a\":\"x\ty\"}"));
    assert_true(rejected("{\"a\":\"\\uzzzz\"}"));
    assert_true(rejected("[[]"));
    assert_true(rejected("```json\n{\"a\":{}\n```"));
    assert_true(ok("{\"a\":\"x\\ty\",\"b\":-0.5e1}", "{\"a\":\"x\\ty\",\"b\":-5}"));
}

/* The error of an answer, or "" when it was taken. */
static const char *why(const char *text) {
    static char err[256];
    cJSON *v = NULL;
    err[0] = '\0';
    if (extract_json(text, strlen(text), &v, err, sizeof(err)) == 0) {
        jsonin_free(v);
        return "";
    }
    return err;
}

/* A "\u0000" in a string is refused, and said to be the reason, however
 * the value is wrapped: cJSON would have cut the string at it and the
 * final event would have carried the shorter value. */
static void test_nul_escape(void **s) {
    (void)s;
    static const char *const nul[] = {
        "{\"name\":\"Ada\\u0000Lovelace\"}",
        "{\"a\":[1,{\"b\":\"\\u0000\"}]}",
        "{\"k\\u0000\":1}",
        "```json\n{\"name\":\"x\\u0000\"}\n```",
        "Here it is:\n{\"name\":\"x\\u0000\"}",
        "{\"name\":\"x\\u0000\"}\nDone.",
    };
    for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
        const char *e = why(nul[i]);
        if (!strstr(e, "\\u0000") || !strstr(e, "NUL"))
            fail_msg("%s: \"%s\"", nul[i], e);
    }
    /* other faults keep the general message; an escaped backslash before
     * u0000 is text, not a NUL */
    assert_null(strstr(why("{\"a\":1"), "NUL"));
    assert_non_null(strstr(why("{\"a\":1"), "not a single JSON value"));
    assert_true(ok("{\"a\":\"\\\\u0000\"}", "{\"a\":\"\\\\u0000\"}"));
    assert_true(ok("{\"a\":\"\\u0001\"}", "{\"a\":\"\\u0001\"}"));
}

/* Blanks alone are an empty answer; one character after them is not. */
static void test_empty(void **s) {
    (void)s;
    assert_non_null(strstr(why(" \n\t\r\n  "), "empty"));
    assert_non_null(strstr(why(""), "empty"));
    assert_null(strstr(why("          \n   x"), "empty"));
    assert_true(ok("\n\n   {\"a\":1}  \n", "{\"a\":1}"));
}

static void test_utf8(void **s) {
    (void)s;
    assert_true(util_utf8_valid("h\xc3\xa9llo", 6));
    assert_false(util_utf8_valid("\xc0\xaf", 2));          /* overlong */
    assert_false(util_utf8_valid("\xe0\x80\xaf", 3));      /* overlong */
    assert_false(util_utf8_valid("\xf4\x90\x80\x80", 4));  /* > U+10FFFF */
    assert_false(util_utf8_valid("\xc3", 1));              /* cut */
    assert_true(util_utf8_valid("\xf0\x9f\x98\x80", 4));
    assert_int_equal(util_utf8_len("h\xc3\xa9\xf0\x9f\x98\x80", 7), 3);
    /* trimming never splits a code point */
    assert_int_equal(util_utf8_trim("a\xc3\xa9", 3, 2), 1);
    /* Each sequence at every position of a 40-byte ASCII run: the
     * eight-bytes-at-a-time skip must stop at each one, and see a
     * sequence cut by the end of the text. */
    static const struct {
        const char *seq;
        int valid;
    } seqs[] = {
        {"\xc3\xa9", 1}, {"\xe2\x82\xac", 1}, {"\xf0\x9f\x98\x80", 1}, {"\x7f", 1},
        {"\xc0\xaf", 0}, {"\xed\xa0\x80", 0}, {"\x80", 0},              {"\xff", 0},
        {"\xc3", 0},      {"\xf0\x9f\x98", 0},
    };
    for (size_t k = 0; k < sizeof seqs / sizeof seqs[0]; k++) {
        size_t n = strlen(seqs[k].seq);
        for (size_t at = 0; at + n <= 40; at++) {
            char run[40];
            memset(run, 'a', sizeof run);
            memcpy(run + at, seqs[k].seq, n);
            if (util_utf8_valid(run, sizeof run) != seqs[k].valid)
                fail_msg("sequence %zu at %zu of 40", k, at);
            /* the text ends right after the sequence */
            if (util_utf8_valid(run, at + n) != seqs[k].valid)
                fail_msg("sequence %zu ending a text of %zu", k, at + n);
        }
    }
    char *b = util_base64((const unsigned char *)"foob", 4);
    assert_string_equal(b, "Zm9vYg==");
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain), cmocka_unit_test(test_fence), cmocka_unit_test(test_prose),
        cmocka_unit_test(test_not_json), cmocka_unit_test(test_strict), cmocka_unit_test(test_utf8), cmocka_unit_test(test_empty),
        cmocka_unit_test(test_nul_escape),
    };
    return cmocka_run_group_tests_name("extract", tests, NULL, NULL);
}
