/* test_schema.c - unit tests for common/schema.c (cmocka). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonin.h"
#include "util.h"
#include "jsonout.h"
#include "schema.h"
#include "schema_format.h"
#include "schema_regex.h"
#include "validate_cli.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static schema *compile_text(const char *text, const schema_options *opts)
{
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    char err[256];
    schema *s = schema_compile(NULL, doc, opts, err, sizeof err);
    if (!s)
        fail_msg("compile failed: %s", err);
    cJSON_Delete(doc);
    return s;
}

/* Validates text; returns the result and fills v. */
static int check(const schema *s, const char *text, schema_violations *v)
{
    cJSON *inst = cJSON_Parse(text);
    assert_non_null(inst);
    int fast = schema_validate(s, inst, NULL);
    int r = schema_validate(s, inst, v);
    cJSON_Delete(inst);
    assert_int_equal(fast, r); /* both modes must agree */
    return r;
}

static const schema_violation *find_code(const schema_violations *v, const char *code,
                                         const char *path)
{
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->items[i].code, code) == 0 && strcmp(v->items[i].path, path) == 0)
            return &v->items[i];
    return NULL;
}

static void test_types_and_paths(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"object\",\"properties\":{"
                             "\"user\":{\"type\":\"object\",\"properties\":{"
                             "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"user\":{\"age\":3,\"tags\":[\"a\"]}}", &v), 0);
    assert_int_equal(v.count, 0);
    /* 3.0 is an integer (cJSON numbers are doubles) */
    assert_int_equal(check(s, "{\"user\":{\"age\":3.0}}", &v), 0);

    assert_int_equal(check(s, "{\"user\":{\"age\":3.5,\"tags\":[\"a\",7]}}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_int_equal(v.total, 2);
    const schema_violation *a = &v.items[0];
    assert_string_equal(a->code, SCHEMA_WRONG_TYPE);
    assert_string_equal(a->path, "/user/age");
    assert_string_equal(a->keyword_location, "/properties/user/properties/age/type");
    assert_string_equal(a->message, "expected integer, got number");
    assert_string_equal(a->expected, "\"integer\"");
    assert_string_equal(a->actual, "3.5");
    const schema_violation *b = &v.items[1];
    assert_string_equal(b->path, "/user/tags/1");
    assert_string_equal(b->keyword_location, "/properties/user/properties/tags/items/type");
    assert_string_equal(b->message, "expected string, got integer");
    schema_violations_clear(&v);
    assert_null(v.items);
    assert_int_equal(v.count, 0);
    schema_free(s);
}

static void test_required_and_additional(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"object\",\"required\":[\"id\",\"name\"],"
                             "\"properties\":{\"id\":{\"type\":\"string\"},\"name\":{}},"
                             "\"additionalProperties\":false}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"id\":\"x\",\"name\":1}", &v), 0);
    assert_int_equal(check(s, "{\"id\":\"x\",\"extra/x\":true}", &v), 1);
    assert_int_equal(v.count, 2);
    /* a missing member is reported at its own path: where the fix goes */
    const schema_violation *m = find_code(&v, SCHEMA_MISSING_FIELD, "/name");
    assert_non_null(m);
    assert_string_equal(m->keyword_location, "/required");
    assert_string_equal(m->message, "missing required property \"name\"");
    assert_string_equal(m->expected, "\"name\"");
    /* the JSON Pointer escapes '/' as ~1 */
    const schema_violation *u = find_code(&v, SCHEMA_UNEXPECTED_FIELD, "/extra~1x");
    assert_non_null(u);
    assert_string_equal(u->keyword_location, "/additionalProperties");
    assert_non_null(strstr(u->message, "\"extra/x\" is not allowed"));
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_pattern_properties(void **state)
{
    (void)state;
    schema *s = compile_text("{\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},"
                             "\"additionalProperties\":{\"type\":\"number\"}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"x-a\":\"s\",\"b\":1}", &v), 0);
    assert_int_equal(check(s, "{\"x-a\":1,\"b\":\"s\"}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.items[0].path, "/x-a");
    assert_string_equal(v.items[0].keyword_location, "/patternProperties/^x-/type");
    assert_string_equal(v.items[1].path, "/b");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_enum_const_equality(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"a\":{\"enum\":[1,\"x\",{\"k\":[1,2]}]},"
                             "\"b\":{\"const\":{\"p\":1,\"q\":[true,null]}}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"a\":1.0}", &v), 0);
    assert_int_equal(check(s, "{\"a\":{\"k\":[1.0,2]}}", &v), 0);
    assert_int_equal(check(s, "{\"b\":{\"q\":[true,null],\"p\":1.0}}", &v), 0);
    assert_int_equal(check(s, "{\"a\":true}", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_ENUM_MISMATCH);
    assert_string_equal(v.items[0].expected, "[1,\"x\",{\"k\":[1,2]}]");
    assert_string_equal(v.items[0].actual, "true");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "{\"b\":{\"p\":1}}", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_CONST_MISMATCH);
    assert_string_equal(v.items[0].path, "/b");
    schema_violations_clear(&v);
    schema_free(s);

    /* objects in another key order: sorted and compared in step (a lookup
     * per member was quadratic); values swapped between keys differ (and
     * hash apart: they all met in one run) */
    s = compile_text("{\"uniqueItems\":true}", NULL);
    assert_int_equal(check(s, "[{\"a\":1,\"b\":2,\"c\":{\"x\":1,\"y\":2}},{\"c\":{\"y\":2,\"x\":1},\"b\":2,\"a\":1}]", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_NOT_UNIQUE);
    schema_violations_clear(&v);
    assert_int_equal(check(s, "[{\"a\":1,\"b\":2},{\"b\":1,\"a\":2},{\"a\":2,\"b\":1,\"c\":3}]", &v), 0);
    assert_int_equal(check(s, "[{\"a\":1,\"b\":2},{\"b\":2,\"c\":1}]", &v), 0);
    sbuf b = { 0 };
    sbuf_puts(&b, "[");
    for (int i = 0; i < 2; i++) { /* 2 x 5,000 members, reversed, equal */
        sbuf_puts(&b, i ? ",{" : "{");
        for (int k = 0; k < 5000; k++) sbuf_printf(&b, "%s\"k%d\":%d", k ? "," : "", i ? 4999 - k : k, i ? 4999 - k : k);
        sbuf_puts(&b, "}");
    }
    sbuf_puts(&b, "]");
    assert_int_equal(check(s, b.data, &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_NOT_UNIQUE);
    schema_violations_clear(&v);
    sbuf_free(&b);
    schema_free(s);
}

static void test_numbers(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":10,"
                             "\"multipleOf\":0.01}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "0", &v), 0);
    assert_int_equal(check(s, "9.99", &v), 0);
    assert_int_equal(check(s, "0.07", &v), 0); /* 0.07/0.01 is not exact in binary */
    assert_int_equal(check(s, "10", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_OUT_OF_RANGE);
    assert_string_equal(v.items[0].keyword_location, "/exclusiveMaximum");
    assert_string_equal(v.items[0].message, "value 10 must be less than 10");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "-0.5", &v), 1);
    assert_string_equal(v.items[0].message, "value -0.5 is less than the minimum 0");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "0.001", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_NOT_MULTIPLE);
    assert_string_equal(v.items[0].expected, "0.01");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_string_lengths_code_points(void **state)
{
    (void)state;
    schema *s = compile_text("{\"minLength\":2,\"maxLength\":3}", NULL);
    schema_violations v = { 0 };
    /* 3 code points, 7 bytes */
    assert_int_equal(check(s, "\"h\\u00e9\\ud83d\\ude00\"", &v), 0);
    assert_int_equal(check(s, "\"\\ud83d\\ude00\"", &v), 1); /* one code point */
    assert_string_equal(v.items[0].code, SCHEMA_TOO_SHORT);
    assert_string_equal(v.items[0].message, "string has 1 character, fewer than the minimum length 2");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "\"abcd\"", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_TOO_LONG);
    schema_violations_clear(&v);

    /* cJSON does not check UTF-8: an invalid string is reported */
    cJSON *bad = cJSON_CreateString("a\xff\xfe");
    assert_int_equal(schema_validate(s, bad, &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_INVALID_VALUE);
    assert_non_null(strstr(v.items[0].message, "UTF-8"));
    schema_violations_clear(&v);
    cJSON_Delete(bad);
    schema_free(s);
}

static void test_pattern_ecma(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"d\":{\"pattern\":\"^\\\\d+$\"},"
                             "\"w\":{\"pattern\":\"^\\\\w+$\"},\"s\":{\"pattern\":\"^\\\\s$\"},"
                             "\"e\":{\"pattern\":\"^abc$\"}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"d\":\"123\",\"w\":\"a_1\",\"s\":\"\\u00a0\",\"e\":\"abc\"}", &v), 0);
    /* ECMA \d is ASCII only: Arabic-Indic digits do not match */
    assert_int_equal(check(s, "{\"d\":\"\\u0661\"}", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_PATTERN_MISMATCH);
    assert_string_equal(v.items[0].expected, "\"^\\\\d+$\"");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "{\"w\":\"\\u00e9\"}", &v), 1);
    schema_violations_clear(&v);
    /* '$' does not match before a final newline */
    assert_int_equal(check(s, "{\"e\":\"abc\\n\"}", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);
}

/* The built-in matcher for simple patterns must agree with PCRE2. */
static void test_regex_fast_path_matches_pcre(void **state)
{
    (void)state;
    static const char *pats[] = {
        "^[A-Z]{2}$", "^[A-Z]{3}-[0-9]{4,8}$", "^[^@ ]+@[^@ ]+$", "^\\+?[0-9 ()-]{6,20}$",
        "^[a-z_]{1,32}$", "^WH-[0-9]{2}$", "^\\d+$", "^\\w*$", "^a*b?c$", "^[0-9A-Z -]{3,10}$",
        "^x{2,}y", "^", "^$", "^[a-c]+[d-f]*$", "^\\.[^.]{1,3}$", "^[-a]+$", "^[b-d]{0}x",
        /* not simple (left to PCRE2), listed to exercise the fallback */
        "^a{1, 3}$", "^a*a$", "^(ab)+$", "^[a-z]{2}(-[A-Z]{2})?$", "abc", "^\\s+$", "^.+$", "^[a-z]+?x$",
    };
    static const char *subjects[] = {
        "", "A", "AB", "ABC", "ab", "ABC-1234", "ABC-123456789", "abc-1234", "a@b", "a@@b",
        "\xc3\xa9@b", "a b@c", "+41 (0)44 123", "12345", "1234567890123456789012", "foo_bar",
        "WH-07", "WH-7", "007", "\xd9\xa1", "a_1", "c", "bc", "aaac", "xx", "xxxy", "abcdef",
        "aaaddd", ".ab", ".abcd", "a{1, 3}", "a", "aaa", "-a-", "ababab", "ab-CD", "  ", "x\ny",
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        char err[128];
        schema_regex *fast = schema_regex_compile(pats[i], 0, err, sizeof err);
        schema_regex *pcre = schema_regex_compile(pats[i], SCHEMA_REGEX_PCRE_ONLY, err, sizeof err);
        assert_non_null(fast);
        assert_non_null(pcre);
        assert_false(schema_regex_is_simple(pcre));
        /* the first 17 patterns are in the simple subset, the rest not */
        assert_int_equal(schema_regex_is_simple(fast), i < 17);
        for (size_t j = 0; j < sizeof subjects / sizeof subjects[0]; j++) {
            const char *sub = subjects[j];
            int a = schema_regex_match(fast, sub, strlen(sub));
            int b = schema_regex_match(pcre, sub, strlen(sub));
            if (a != b)
                fail_msg("pattern %s on \"%s\": fast %d, pcre2 %d", pats[i], sub, a, b);
        }
        schema_regex_free(fast);
        schema_regex_free(pcre);
    }
}

/* Group names PCRE2 10.42 refuses as they are: one of 40 characters, and
 * the 32 that two names begin with. */
#define NAME40 "name_of_forty_characters_for_pcre2_abcde"
#define PREFIX32 "same_thirty_two_character_prefix"

/* ECMA-262 meanings PCRE2 does not have by default, each pattern with
 * the built-in matcher allowed and without (they must agree).  want: 1
 * match, 0 no match (node's answer: new RegExp(pattern).test(subject)). */
static void test_regex_ecma_cases(void **state)
{
    (void)state;
    static const struct {
        const char *pattern, *subject;
        int want;
    } cases[] = {
        /* a backreference to a group that did not take part (or not yet)
         * matches the empty string */
        { "^(?:(a)|b)\\1$", "b", 1 },
        { "^(?:(a)|b)\\1$", "aa", 1 },
        { "^(?:(a)|b)\\1$", "bb", 0 },
        { "^(?:(a)|b)\\1$", "a", 0 },
        { "^\\1(a)$", "a", 1 },
        { "^(a)\\1$", "aa", 1 },
        { "^(?<n>a)?b\\k<n>$", "b", 1 },
        { "^(?<n>a)?b\\k<n>$", "aba", 1 },
        /* \S, \D, \W inside a class: the complement of ECMA's sets */
        { "^a[^\\S\\r\\n]b$", "a\xe2\x80\x83" "b", 1 }, /* U+2003 */
        { "^a[^\\S\\r\\n]b$", "a\nb", 0 },
        { "^a[^\\S\\r\\n]b$", "axb", 0 },
        { "^a[\\S]b$", "a\xe3\x80\x80" "b", 0 }, /* U+3000 */
        { "^a[\\S]b$", "a\xef\xbb\xbf" "b", 0 }, /* U+FEFF */
        { "^a[\\S]b$", "axb", 1 },
        { "^a[\\S]b$", "a\xf0\x9f\x98\x80" "b", 1 },
        { "^a[\\S]b$", "a\xe1\xa0\x8e" "b", 1 }, /* U+180E: not Zs since Unicode 6.3 */
        { "^a[\\S]b$", "a\xe2\x80\x8b" "b", 1 }, /* U+200B: not Zs */
        { "^[\\D]$", "\xd9\xa1", 1 },              /* U+0661 */
        { "^[^\\D]$", "\xd9\xa1", 0 },
        { "^[\\W]$", "\xc3\xa9", 1 },
        { "^[^\\W]$", "\xc3\xa9", 0 },
        { "^[\\S\\s]$", "\xe2\x80\xa8", 1 },      /* U+2028 */
        /* Annex B, which schemas may rely on (format "regex" takes the u
         * flag's grammar: test_regex_strict_validity): a class escape next
         * to a '-' makes no range, the '-' is a member */
        { "^[\\s-a]$", "-", 1 },
        { "^[\\s-a]$", "a", 1 },
        { "^[\\s-a]$", " ", 1 },
        { "^[\\s-a]$", "b", 0 },
        { "^[a-\\s]$", "-", 1 },
        { "^[\\d-\\w]$", "-", 1 },
        { "^[\\d-\\w]$", "x", 1 },
        { "^[\\S-a]$", "-", 1 },
        { "^[\\S-a]$", " ", 0 },
        { "^[\\xe9-\\d]$", "-", 1 },
        { "^[\xc3\xa9-\\d]$", "-", 1 },
        { "^[\\w-]$", "-", 1 },
        { "^[-\\d]$", "-", 1 },
        { "^[a-z-\\d]$", "-", 1 },
        { "^[a-z-\\d]$", "5", 1 },
        { "^[a-z-\\d]$", "A", 0 },
        /* \N with no group N is a legacy octal escape (\8, \9: the digit) */
        { "^\\1$", "\x01", 1 },
        { "^\\12$", "\n", 1 },
        { "^(a)\\12$", "a\n", 1 },
        { "^(a)\\2$", "a\x02", 1 },
        { "^\\8$", "8", 1 },
        { "^\\18$", "\x01" "8", 1 },
        { "^\\377$", "\xc3\xbf", 1 },
        { "^\\400$", " 0", 1 },
        { "^[\\1]$", "\x01", 1 },
        { "^[\\12]$", "\n", 1 },
        { "^[\\8]$", "8", 1 },
        /* and \N with N groups in the whole pattern is one, before them too
         * (PCRE2 took \10 before its group for octal) */
        { "^(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\\10$", "abcdefghijj", 1 },
        { "^\\10(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)$", "abcdefghij", 1 },
        /* without named groups, \k is the letter */
        { "^\\k$", "k", 1 },
        { "^\\k<a>$", "k<a>", 1 },
        { "^(?<a>x)\\k<a>$", "xx", 1 },
        /* group names PCRE2 10.42 refuses (over 32 bytes, '$', a combining
         * mark, \u escapes) are valid ECMA names: PCRE2 gets others */
        { "^(?<" NAME40 ">a)b\\k<" NAME40 ">$", "aba", 1 },
        { "^(?<" NAME40 ">a)b\\k<" NAME40 ">$", "abb", 0 },
        { "^(?<$a>x)\\k<$a>$", "xx", 1 },
        { "^(?<$a>x)\\k<$a>$", "xy", 0 },
        { "^(?<cafe\xcc\x81>x)\\k<cafe\xcc\x81>$", "xx", 1 }, /* e, U+0301 */
        { "^(?<cafe\xcc\x81>x)\\k<cafe\xcc\x81>$", "xy", 0 },
        { "^(?<\\u0061\\u{62}>x)\\k<ab>$", "xx", 1 },
        /* names alike in their first 32 characters are two names */
        { "^(?<" PREFIX32 "1>x)(?<" PREFIX32 "2>y)\\k<" PREFIX32 "1>$", "xyx", 1 },
        { "^(?<" PREFIX32 "1>x)(?<" PREFIX32 "2>y)\\k<" PREFIX32 "1>$", "xyy", 0 },
        /* and so in PCRE2's (?P<name> and (?'name' */
        { "^(?P<$a>x)(?'" NAME40 "'y)\\k<$a>\\k<" NAME40 ">$", "xyxy", 1 },
        { "^(?P<$a>x)(?'" NAME40 "'y)\\k<$a>\\k<" NAME40 ">$", "xyyx", 0 },
        /* a pattern with PCRE2's own references to names keeps its names */
        { "^(?<a>x)(?P=a)\\k'a'\\k{a}\\g{a}$", "xxxxx", 1 },
        { "^(?<a>x)(?&a)(?(<a>)y|z)$", "xxy", 1 },
        { "^(?<a>x)(?P>a)(?(<a>)y|z)$", "xxz", 0 },
        /* ES2025: groups in different alternatives may share a name */
        { "^(?:(?<a>x)|(?<a>y))\\k<a>$", "yy", 1 },
        { "^(?:(?<a>x)|(?<a>y))\\k<a>$", "yx", 0 },
        { "^(?:(?<a>x)|(?<a>y)|z)\\k<a>$", "z", 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int flags = 0; flags <= SCHEMA_REGEX_PCRE_ONLY; flags += SCHEMA_REGEX_PCRE_ONLY) {
            char err[128] = "";
            schema_regex *re = schema_regex_compile(cases[i].pattern, flags, err, sizeof err);
            if (!re)
                fail_msg("%s: %s", cases[i].pattern, err);
            int got = schema_regex_match(re, cases[i].subject, strlen(cases[i].subject));
            if (got != cases[i].want)
                fail_msg("%s on \"%s\" (flags %d): %d, expected %d", cases[i].pattern, cases[i].subject,
                         flags, got, cases[i].want);
            schema_regex_free(re);
        }
    }
}

/* format "regex" (schema_regex_is_valid) takes the grammar of the u flag,
 * which has no Annex B: node's new RegExp(pattern, "u") throws for the
 * invalid ones. */
static void test_regex_strict_validity(void **state)
{
    (void)state;
    static const struct {
        const char *pattern;
        int valid;
    } cases[] = {
        { "^[\\s-a]$", 0 }, { "^[a-\\s]$", 0 }, { "^[\\d-\\w]$", 0 }, { "^[\\xe9-\\d]$", 0 },
        { "^[\\w-]$", 1 }, { "^[-\\d]$", 1 }, { "^[a-z-\\d]$", 1 }, { "^[\\s\\d]$", 1 },
        { "^\\1$", 0 }, { "^\\12$", 0 }, { "^(a)\\2$", 0 }, { "^[\\1]$", 0 }, { "^\\8$", 0 },
        { "^(a)\\1$", 1 }, { "^\\1(a)$", 1 }, { "^\\10(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)$", 1 },
        { "^\\k$", 0 }, { "^\\k<a>$", 0 }, { "^(?<a>x)\\k<a>$", 1 }, { "^\\0$", 1 },
        /* a group name is any identifier, of any length, \u escapes decoded;
         * \k takes <name>, a group's */
        { "^(?<$a>x)\\k<$a>$", 1 }, { "(?<" NAME40 ">x)\\k<" NAME40 ">", 1 },
        { "(?<cafe\xcc\x81>x)", 1 }, { "(?<\\u{1d49c}>x)\\k<\xf0\x9d\x92\x9c>", 1 },
        { "(?<a\\u200db>x)", 1 }, { "(?<a>x)\\k<b>", 0 }, { "(?<" PREFIX32 "1>x)\\k<" PREFIX32 "2>", 0 },
        { "(?<1a>x)", 0 }, { "(?<a\xe2\x86\x92>x)", 0 }, { "(?<\\ud835>x)", 0 }, { "(?<a>x)\\k'a'", 0 },
        /* ES2025: only groups in different alternatives share a name */
        { "(?:(?<a>x)|(?<a>y))", 1 }, { "(?<a>x)|((?<a>y))", 1 }, { "(?<a>x)(?<a>y)", 0 },
        { "(?<a>x|(?<a>y))", 0 }, { "(?:(?<a>x)|y)(?<a>z)", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (schema_regex_is_valid(cases[i].pattern) != cases[i].valid)
            fail_msg("%s: valid %d, expected %d", cases[i].pattern, !cases[i].valid, cases[i].valid);
}

/* \s and \S, inside a class and out, negated or not, against ECMA's set
 * of white space and line terminators for every code point of the BMP
 * and a few beyond. */
static void test_regex_white_space_sets(void **state)
{
    (void)state;
    static const char *const ws[] = { "^\\s$", "^[\\s]$", "^[^\\S]$", "^[a\\s]$" };
    static const char *const not_ws[] = { "^\\S$", "^[\\S]$", "^[^\\s]$", "^[\\Sa]$" };
    schema_regex *rw[4], *rn[4];
    char err[128];
    for (int k = 0; k < 4; k++) {
        rw[k] = schema_regex_compile(ws[k], SCHEMA_REGEX_PCRE_ONLY, err, sizeof err);
        rn[k] = schema_regex_compile(not_ws[k], SCHEMA_REGEX_PCRE_ONLY, err, sizeof err);
        assert_non_null(rw[k]);
        assert_non_null(rn[k]);
    }
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp = cp < 0xFFFF ? cp + 1 : cp + 0x1111) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        int is_ws = (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
                    (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
                    cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
        char s[5];
        size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (n == 1) {
            s[0] = (char)cp;
        } else {
            for (size_t i = n - 1; i > 0; i--)
                s[i] = (char)(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
            s[0] = (char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | (cp >> (6 * (n - 1))));
        }
        for (int k = 0; k < 4; k++) {
            if (k == 3 && cp == 'a')
                continue; /* in both classes of their own */
            if (schema_regex_match(rw[k], s, n) != is_ws)
                fail_msg("%s on U+%04X: %d", ws[k], (unsigned)cp, !is_ws);
            if (schema_regex_match(rn[k], s, n) != !is_ws)
                fail_msg("%s on U+%04X: %d", not_ws[k], (unsigned)cp, is_ws);
        }
    }
    for (int k = 0; k < 4; k++) {
        schema_regex_free(rw[k]);
        schema_regex_free(rn[k]);
    }
}

static void test_local_refs(void **state)
{
    (void)state;
    schema *s = compile_text("{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1},"
                             "\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"$ref\":\"#/$defs/pos\"},"
                             "\"next\":{\"$ref\":\"#/$defs/node\"}}}},"
                             "\"definitions\":{\"s\":{\"type\":\"string\"}},"
                             "\"properties\":{\"list\":{\"$ref\":\"#/$defs/node\"},\"name\":{\"$ref\":\"#/definitions/s\"}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"list\":{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}},\"name\":\"n\"}", &v), 0);
    assert_int_equal(check(s, "{\"list\":{\"v\":1,\"next\":{\"v\":0}},\"name\":5}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.items[0].path, "/list/next/v");
    assert_string_equal(v.items[0].keyword_location, "/$defs/pos/minimum");
    assert_string_equal(v.items[1].path, "/name");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_anyof_closest_branch(void **state)
{
    (void)state;
    /* a discriminated union: the branch whose "kind" const matches is the
     * one to report, even though another branch has fewer errors */
    schema *s = compile_text(
        "{\"anyOf\":["
        "{\"type\":\"object\",\"required\":[\"kind\"],\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}}},"
        "{\"type\":\"object\",\"required\":[\"kind\",\"w\",\"h\"],\"properties\":{\"kind\":{\"const\":\"rect\"},"
        "\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}}}]}",
        NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"kind\":\"rect\",\"w\":1,\"h\":2}", &v), 0);
    assert_int_equal(check(s, "{\"kind\":\"rect\",\"w\":\"wide\",\"h\":\"tall\"}", &v), 1);
    assert_int_equal(v.count, 3);
    assert_string_equal(v.items[0].code, SCHEMA_NO_MATCH);
    assert_string_equal(v.items[0].keyword_location, "/anyOf");
    assert_non_null(strstr(v.items[0].message, "closest is #1"));
    assert_string_equal(v.items[1].path, "/w");
    assert_string_equal(v.items[1].keyword_location, "/anyOf/1/properties/w/type");
    assert_string_equal(v.items[2].path, "/h");
    schema_violations_clear(&v);

    /* no discriminator matches: fewest violations wins */
    assert_int_equal(check(s, "{\"kind\":\"circle\",\"r\":\"big\"}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_non_null(strstr(v.items[0].message, "closest is #0"));
    assert_string_equal(v.items[1].path, "/r");
    schema_violations_clear(&v);
    schema_free(s);

    /* every branch fails on its type: one merged WRONG_TYPE */
    s = compile_text("{\"properties\":{\"x\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}}", NULL);
    assert_int_equal(check(s, "{\"x\":5}", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_WRONG_TYPE);
    assert_string_equal(v.items[0].path, "/x");
    assert_string_equal(v.items[0].message, "expected string or null, got integer");
    assert_string_equal(v.items[0].expected, "[\"string\",\"null\"]");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_oneof(void **state)
{
    (void)state;
    schema *s = compile_text("{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "1", &v), 0);
    assert_int_equal(check(s, "2.5", &v), 0);
    assert_int_equal(check(s, "3", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_NO_MATCH);
    assert_string_equal(v.items[0].keyword_location, "/oneOf");
    assert_non_null(strstr(v.items[0].message, "more than one"));
    schema_violations_clear(&v);
    assert_int_equal(check(s, "1.5", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);

    /* discriminated oneOf: the branch whose "kind" matches is reported */
    s = compile_text("{\"properties\":{\"event\":{\"oneOf\":["
                     "{\"type\":\"object\",\"required\":[\"kind\",\"url\"],\"properties\":{"
                     "\"kind\":{\"const\":\"click\"},\"url\":{\"type\":\"string\"}}},"
                     "{\"type\":\"object\",\"required\":[\"kind\",\"key\"],\"properties\":{"
                     "\"kind\":{\"enum\":[\"keydown\",\"keyup\"]},\"key\":{\"type\":\"string\",\"maxLength\":1}}}]}}}",
                     NULL);
    assert_int_equal(check(s, "{\"event\":{\"kind\":\"keyup\",\"key\":\"a\"}}", &v), 0);
    assert_int_equal(check(s, "{\"event\":{\"kind\":\"keyup\",\"key\":\"Enter\"}}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.items[0].code, SCHEMA_NO_MATCH);
    assert_string_equal(v.items[0].path, "/event");
    assert_string_equal(v.items[0].keyword_location, "/properties/event/oneOf");
    assert_non_null(strstr(v.items[0].message, "closest is #1"));
    assert_string_equal(v.items[1].code, SCHEMA_TOO_LONG);
    assert_string_equal(v.items[1].path, "/event/key");
    assert_string_equal(v.items[1].keyword_location, "/properties/event/oneOf/1/properties/key/maxLength");
    schema_violations_clear(&v);
    schema_free(s);

    /* oneOf of constants: one ENUM_MISMATCH listing the choices */
    s = compile_text("{\"oneOf\":[{\"const\":\"a\"},{\"const\":\"b\"},{\"enum\":[\"c\",\"d\"]}]}", NULL);
    assert_int_equal(check(s, "\"z\"", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_ENUM_MISMATCH);
    assert_string_equal(v.items[0].expected, "[\"a\",\"b\",\"c\",\"d\"]");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_cap_and_order(void **state)
{
    (void)state;
    schema_options o = { SCHEMA_DRAFT_2020_12, 0, 3 };
    schema *s = compile_text("{\"items\":{\"type\":\"string\"}}", &o);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "[1,2,\"ok\",4,5,6]", &v), 1);
    assert_int_equal(v.count, 3);
    assert_int_equal(v.total, 5);
    assert_string_equal(v.items[0].path, "/0");
    assert_string_equal(v.items[1].path, "/1");
    assert_string_equal(v.items[2].path, "/3");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_to_json(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"a\":{\"enum\":[\"x\",\"y\"]}},\"required\":[\"b\"]}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"a\":\"z\"}", &v), 1);
    cJSON *j = schema_violations_to_json(&v);
    assert_true(cJSON_IsArray(j));
    assert_int_equal(cJSON_GetArraySize(j), 2);
    const cJSON *first = cJSON_GetArrayItem(j, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "path")), "/a");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "keyword")), "/properties/a/enum");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "code")), "ENUM_MISMATCH");
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(first, "expected")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "actual")), "z");
    const cJSON *second = cJSON_GetArrayItem(j, 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(second, "code")), "MISSING_FIELD");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(second, "actual")));
    cJSON_Delete(j);
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_actual_truncated(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"string\"}", NULL);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < 500; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(i));
    schema_violations v = { 0 };
    assert_int_equal(schema_validate(s, arr, &v), 1);
    size_t n = strlen(v.items[0].actual);
    assert_true(n <= 210);
    assert_true(n > 100);
    assert_string_equal(v.items[0].actual + n - 3, "...");
    schema_violations_clear(&v);
    cJSON_Delete(arr);
    schema_free(s);
}

/* {"properties":{K:{"properties":{K:{"properties":{"a0":{},...}}}}}} with
 * a name K of klen '~' (escaped to "~0" in a pointer) and n leaves. */
static cJSON *nested_names(size_t klen, int n)
{
    char *k = malloc(klen + 1);
    memset(k, '~', klen);
    k[klen] = '\0';
    cJSON *leaves = cJSON_CreateObject(), *inner = cJSON_CreateObject(), *mid = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "a%d", i);
        cJSON_AddItemToObject(leaves, name, cJSON_CreateObject());
    }
    cJSON_AddItemToObject(inner, "properties", leaves);
    cJSON *p1 = cJSON_CreateObject();
    cJSON_AddItemToObject(p1, k, inner);
    cJSON_AddItemToObject(mid, "properties", p1);
    cJSON *p0 = cJSON_CreateObject(), *root = cJSON_CreateObject();
    cJSON_AddItemToObject(p0, k, mid);
    cJSON_AddItemToObject(root, "properties", p0);
    free(k);
    return root;
}

/* Each node keeps its location whole: two names of 16,000 '~' over 3,100
 * subschemas (65 KB of schema, an inline schema's most) compiled to 250 MB
 * in 0.7 s.  Such a schema is refused now; long names over few nodes
 * and deep nesting still compile. */
static void test_location_amplification(void **state)
{
    (void)state;
    char err[256] = "";
    cJSON *doc = nested_names(16000, 3100);
    schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
    assert_null(s);
    assert_non_null(strstr(err, "schema too large compiled"));
    cJSON_Delete(doc);
    doc = nested_names(1000, 300);
    s = schema_compile(NULL, doc, NULL, err, sizeof err);
    if (!s)
        fail_msg("refused: %s", err);
    assert_true(schema_mem_bytes(s) < 20u << 20);
    schema_free(s);
    cJSON_Delete(doc);
    /* 60 levels of ordinary names, 300 leaves at the bottom */
    cJSON *d = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(d, "properties");
    for (int i = 0; i < 300; i++) {
        char name[16];
        snprintf(name, sizeof name, "leaf%d", i);
        cJSON_AddItemToObject(props, name, cJSON_CreateObject());
    }
    for (int level = 0; level < 60; level++) {
        cJSON *up = cJSON_CreateObject(), *up_props = cJSON_AddObjectToObject(up, "properties");
        char name[32];
        snprintf(name, sizeof name, "level_%02d_name", level);
        cJSON_AddItemToObject(up_props, name, d);
        d = up;
    }
    s = schema_compile(NULL, d, NULL, err, sizeof err);
    if (!s)
        fail_msg("refused: %s", err);
    schema_free(s);
    cJSON_Delete(d);
}

static void test_compile_errors(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *needle;
    } cases[] = {
        { "{\"properties\":{\"a\":{\"minLength\":-1}}}", "/properties/a/minLength" },
        { "{\"properties\":{\"a\":{\"pattern\":\"(\"}}}", "/properties/a/pattern" },
        { "{\"items\":{\"$ref\":\"#/$defs/missing\"}}", "/items/$ref" },
        { "{\"type\":\"strnig\"}", "/type" },
        { "{\"allOf\":[]}", "/allOf" },
        { "{\"$ref\":\"http://example.com/nowhere.json\"}", "nowhere" },
        /* a regex's group names as written, not as PCRE2 is given them */
        { "{\"pattern\":\"(?<" NAME40 ">x)\\\\k<" NAME40 "x>\"}",
          "backreference \\k<" NAME40 "x> to a group that does not exist" },
        { "{\"pattern\":\"(?<$a>x)(?<$a>y)\"}", "duplicate group name '$a'" },
        { "{\"pattern\":\"(?<a\xe2\x86\x92>x)\"}", "invalid group name 'a\xe2\x86\x92'" },
        { "{\"pattern\":\"(?<$a>x)\\\\k<$a\"}", "group name '$a' without its closing >" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *doc = cJSON_Parse(cases[i].schema);
        char err[256] = "";
        schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
        if (s)
            fail_msg("schema %s compiled", cases[i].schema);
        if (!strstr(err, cases[i].needle))
            fail_msg("error for %s lacks %s: %s", cases[i].schema, cases[i].needle, err);
        cJSON_Delete(doc);
    }
}

static void test_registry_remote_ref(void **state)
{
    (void)state;
    schema_registry *reg = schema_registry_new();
    cJSON *remote = cJSON_Parse("{\"$defs\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}},"
                                "\"$id\":\"https://example.com/common.json\"}");
    char err[256];
    assert_int_equal(schema_registry_add(reg, "https://example.com/common.json", remote, err, sizeof err), 0);
    cJSON_Delete(remote); /* the registry keeps its own copy */
    cJSON *doc = cJSON_Parse("{\"properties\":{\"id\":{\"$ref\":\"https://example.com/common.json#/$defs/id\"}}}");
    schema *s = schema_compile(reg, doc, NULL, err, sizeof err);
    assert_non_null(s);
    cJSON_Delete(doc);
    schema_registry_free(reg); /* the compiled schema does not need it */
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"id\":\"abc\"}", &v), 0);
    assert_int_equal(check(s, "{\"id\":\"ABC\"}", &v), 1);
    assert_string_equal(v.items[0].keyword_location,
                        "https://example.com/common.json#/$defs/id/pattern");
    schema_violations_clear(&v);
    schema_free(s);
}

/* Two documents claiming one URI: a $ref to it resolved to whichever was
 * loaded first (readdir's order, which differs between machines).  Now
 * the second is refused, unless it is the same document again. */
static void test_registry_refuses_a_uri_taken(void **state)
{
    (void)state;
    schema_registry *reg = schema_registry_new();
    char err[256];
    cJSON *a = cJSON_Parse("{\"$id\":\"https://example.com/id.json\",\"type\":\"string\","
                           "\"$defs\":{\"n\":{\"$id\":\"https://example.com/n.json\",\"type\":\"number\"}}}");
    cJSON *b = cJSON_Parse("{\"$id\":\"https://example.com/id.json\",\"type\":\"integer\"}");
    cJSON *c = cJSON_Parse("{\"$defs\":{\"x\":{\"$id\":\"https://example.com/n.json\",\"type\":\"null\"}}}");
    cJSON *d = cJSON_Parse("{\"type\":\"boolean\"}");
    assert_int_equal(schema_registry_add(reg, "file:///s/a.json", a, err, sizeof err), 0);
    /* the same again: nothing changes */
    assert_int_equal(schema_registry_add(reg, "file:///s/a.json", a, err, sizeof err), 0);
    /* the root $id of another file */
    assert_int_not_equal(schema_registry_add(reg, "file:///s/b.json", b, err, sizeof err), 0);
    assert_string_equal(err, "file:///s/b.json: $id https://example.com/id.json is taken already, by file:///s/a.json");
    /* an embedded $id */
    assert_int_not_equal(schema_registry_add(reg, "file:///s/c.json", c, err, sizeof err), 0);
    assert_non_null(strstr(err, "$id https://example.com/n.json is taken already, by file:///s/a.json"));
    /* a URI that is another document's $id, or another document under
     * a URI taken */
    assert_int_not_equal(schema_registry_add(reg, "https://example.com/n.json", d, err, sizeof err), 0);
    assert_string_equal(err, "https://example.com/n.json is taken already, by file:///s/a.json");
    assert_int_not_equal(schema_registry_add(reg, "file:///s/a.json", d, err, sizeof err), 0);
    /* what resolves is the first document's */
    cJSON *doc = cJSON_Parse("{\"$ref\":\"https://example.com/id.json\"}");
    schema *s = schema_compile(reg, doc, NULL, err, sizeof err);
    assert_non_null(s);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "\"x\"", &v), 0);
    assert_int_equal(check(s, "1", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);
    cJSON_Delete(doc);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
    schema_registry_free(reg);
}

static void test_metaschema_ref(void **state)
{
    (void)state;
    schema *s = compile_text("{\"$ref\":\"https://json-schema.org/draft/2020-12/schema\"}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"type\":\"object\",\"properties\":{\"a\":{\"minLength\":1}}}", &v), 0);
    assert_int_equal(check(s, "{\"properties\":{\"a\":{\"minLength\":-1}}}", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);
    s = compile_text("{\"$ref\":\"http://json-schema.org/draft-07/schema#\"}", NULL);
    assert_int_equal(check(s, "{\"type\":[\"string\",\"bogus\"]}", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_draft7_ref_siblings(void **state)
{
    (void)state;
    const char *text = "{\"definitions\":{\"s\":{\"type\":\"string\"}},"
                       "\"properties\":{\"a\":{\"$ref\":\"#/definitions/s\",\"maxLength\":2}}}";
    schema_options d7 = { SCHEMA_DRAFT_7, 0, 0 };
    schema *s7 = compile_text(text, &d7);
    schema *s20 = compile_text(text, NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s7, "{\"a\":\"long\"}", &v), 0); /* maxLength ignored */
    assert_int_equal(check(s20, "{\"a\":\"long\"}", &v), 1);
    schema_violations_clear(&v);
    schema_free(s7);
    schema_free(s20);
}

static void test_unevaluated(void **state)
{
    (void)state;
    schema *s = compile_text("{\"allOf\":[{\"properties\":{\"a\":true}}],"
                             "\"anyOf\":[{\"properties\":{\"b\":true}},{\"properties\":{\"c\":true}}],"
                             "\"unevaluatedProperties\":false}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"a\":1,\"b\":2,\"c\":3}", &v), 0);
    assert_int_equal(check(s, "{\"a\":1,\"d\":4}", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_UNEXPECTED_FIELD);
    assert_string_equal(v.items[0].path, "/d");
    assert_string_equal(v.items[0].keyword_location, "/unevaluatedProperties");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_format_assertion(void **state)
{
    (void)state;
    const char *text = "{\"properties\":{\"when\":{\"format\":\"date-time\"},\"ip\":{\"format\":\"ipv4\"},"
                       "\"mail\":{\"format\":\"email\"},\"id\":{\"format\":\"uuid\"}}}";
    schema_options on = { SCHEMA_DRAFT_2020_12, 1, 0 };
    schema *annot = compile_text(text, NULL);
    schema *assert_ = compile_text(text, &on);
    const char *bad = "{\"when\":\"2024-02-30T10:00:00Z\",\"ip\":\"256.1.1.1\",\"mail\":\"no-at\","
                      "\"id\":\"1234\"}";
    const char *good = "{\"when\":\"2024-02-29T23:59:60Z\",\"ip\":\"10.0.0.1\",\"mail\":\"a.b@example.com\","
                       "\"id\":\"123e4567-e89b-12d3-a456-426614174000\"}";
    schema_violations v = { 0 };
    assert_int_equal(check(annot, bad, &v), 0); /* annotation only by default */
    assert_int_equal(check(assert_, good, &v), 0);
    assert_int_equal(check(assert_, bad, &v), 1);
    assert_int_equal(v.count, 4);
    for (size_t i = 0; i < v.count; i++)
        assert_string_equal(v.items[i].code, SCHEMA_FORMAT_MISMATCH);
    assert_string_equal(v.items[0].path, "/when");
    assert_string_equal(v.items[0].message, "string is not a valid date-time");
    assert_string_equal(v.items[1].expected, "\"ipv4\"");
    schema_violations_clear(&v);
    schema_free(annot);
    schema_free(assert_);
}

/* RFC 3987 leaves E0000-E0FFF (tag characters) out of ucschar; RFC 6570
 * leaves ' out of a template's literals; RFC 5321's "IPv6:" tag is
 * case-insensitive.  Each was the other way. */
static void test_format_edges(void **state)
{
    (void)state;
    static const struct {
        const char *format, *text;
        int valid;
    } cases[] = {
        { "iri", "http://a/\xF3\xA0\x80\x81", 0 },          /* U+E0001 */
        { "iri-reference", "\xF3\xA0\x84\x80", 0 },          /* U+E0100 */
        { "iri", "http://a/\xF3\xA1\x80\x80", 1 },          /* U+E1000 */
        { "iri", "http://a/\xC3\xA9", 1 },
        { "uri-template", "http://a/'x'", 0 },
        { "uri-template", "http://a/{x}", 1 },
        { "email", "a@[ipv6:::1]", 1 },
        { "email", "a@[IPv6:::1]", 1 },
        { "email", "a@[ipv6:nope]", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int id = schema_format_id(cases[i].format);
        assert_true(id > 0);
        int got = schema_format_check(id, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].valid)
            fail_msg("%s \"%s\": %d", cases[i].format, cases[i].text, got);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_regex_limit(void **state)
{
    (void)state;
    schema *s = compile_text("{\"pattern\":\"^(a+)+$\"}", NULL);
    cJSON *inst = cJSON_CreateString("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!");
    schema_violations v = { 0 };
    double t0 = now_s();
    int r = schema_validate(s, inst, &v);
    double dt = now_s() - t0;
    assert_true(dt < 2.0);
    if (r == -1) {
        assert_int_equal(v.count, 1);
        assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
        assert_non_null(strstr(v.items[0].message, "match limit"));
    } else {
        /* if PCRE2 optimised the backtracking away, the answer is right */
        assert_int_equal(r, 1);
        assert_string_equal(v.items[0].code, SCHEMA_PATTERN_MISMATCH);
    }
    schema_violations_clear(&v);
    cJSON_Delete(inst);
    schema_free(s);

    /* a nested-quantifier pattern PCRE2 cannot optimise: must hit the limit */
    s = compile_text("{\"pattern\":\"^(\\\\w+\\\\s?)*$\"}", NULL);
    inst = cJSON_CreateString("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!");
    t0 = now_s();
    r = schema_validate(s, inst, &v);
    assert_true(now_s() - t0 < 2.0);
    assert_int_equal(r, -1);
    assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
    assert_int_equal(schema_validate(s, inst, NULL), -1);
    schema_violations_clear(&v);
    cJSON_Delete(inst);
    schema_free(s);
}

/* A pattern that runs in linear time on a long valid string: PCRE2's JIT
 * ran out of its 32 KiB stack past some 10,000 characters, and the
 * interpreter after it out of depth, so a valid answer failed as
 * LIMIT_EXCEEDED.  And a quantified backreference to a group that took
 * no part matches "" (ECMA), which PCRE2's JIT never did. */
static void test_regex_long_strings_and_unset_backreferences(void **state)
{
    (void)state;
    schema *s = compile_text("{\"pattern\":\"^([^<>]|<br>)*$\"}", NULL);
    for (size_t n = 15000; n <= 60000; n += 45000) {
        char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            text[i] = "abc"[i % 3];
        text[n] = '\0';
        cJSON *inst = cJSON_CreateString(text);
        schema_violations v = { 0 };
        int r = schema_validate(s, inst, &v);
        if (r != 0)
            fail_msg("%zu characters: %d, %s", n, r, v.count ? v.items[0].message : "");
        text[n / 2] = '<';
        cJSON_SetValuestring(inst, text);
        assert_int_equal(schema_validate(s, inst, NULL), 1);
        cJSON_Delete(inst);
        free(text);
    }
    schema_free(s);
    static const struct {
        const char *pattern, *text;
        int valid;
    } refs[] = {
        { "^(?:(a)|b)\\\\1+$", "b", 1 },
        { "^(?:(a)|b)\\\\1+?$", "b", 1 },
        { "^(\\\")?x\\\\1{1,}$", "x", 1 },
        { "^(?:(a)|b)\\\\1+$", "aaa", 1 },
        { "^(?:(a)|b)\\\\1+$", "ab", 0 },
        { "^(a)\\\\1$", "aa", 1 },
        { "^(a)\\\\1$", "ab", 0 },
        /* named: \k<n> as \1 */
        { "^(?:(?<n>a)|b)\\\\k<n>+$", "b", 1 },
        { "^(?:(?<n>a)|b)\\\\k<n>{2}$", "b", 1 },
        { "^(?:(?<n>a)|b)\\\\k<n>+$", "aaa", 1 },
        { "^(?:(?<n>a)|b)\\\\k<n>+$", "ab", 0 },
        { "^(?<name_of_thirty_two_characters_xx>a)\\\\k<name_of_thirty_two_characters_xx>$", "aa", 1 },
        { "^(?:(?<" NAME40 ">a)|b)\\\\k<" NAME40 ">+$", "b", 1 },
        { "^(?:(?<" NAME40 ">a)|b)\\\\k<" NAME40 ">+$", "aaa", 1 },
        { "^(?:(?<" NAME40 ">a)|b)\\\\k<" NAME40 ">+$", "ab", 0 },
        { "^(?<n>a)\\\\k<n>$", "ab", 0 },
    };
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        char text[192];
        snprintf(text, sizeof text, "{\"pattern\":\"%s\"}", refs[i].pattern);
        s = compile_text(text, NULL);
        cJSON *inst = cJSON_CreateString(refs[i].text);
        int r = schema_validate(s, inst, NULL);
        if (r != !refs[i].valid)
            fail_msg("%s on \"%s\": %d", refs[i].pattern, refs[i].text, r);
        cJSON_Delete(inst);
        schema_free(s);
    }
}

static void test_regex_time_budget(void **state)
{
    (void)state;
    /* each string costs a fraction of a millisecond of backtracking, well
     * under the per-match limit; 10000 of them would take seconds, but the
     * per-validation regex budget stops the validation within ~0.1 s */
    schema *s = compile_text("{\"items\":{\"not\":{\"pattern\":\"^(\\\\w+\\\\s?)*$\"}}}", NULL);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < 10000; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString("aaaaaaaaaaaaaa!"));
    double t0 = now_s();
    int r = schema_validate(s, arr, NULL);
    double dt = now_s() - t0;
    assert_int_equal(r, -1);
    assert_true(dt < 1.0);
    schema_violations v = { 0 };
    assert_int_equal(schema_validate(s, arr, &v), -1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
    assert_non_null(strstr(v.items[0].message, "ms in this validation"));
    schema_violations_clear(&v);
    cJSON_Delete(arr);
    schema_free(s);
}

static void test_depth_limit(void **state)
{
    (void)state;
    /* {"$ref":"#"} recurses on the same instance forever */
    schema *s = compile_text("{\"$ref\":\"#\"}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "1", &v), -1);
    assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
    assert_non_null(strstr(v.items[0].message, "depth"));
    schema_violations_clear(&v);
    schema_free(s);
}

/* A schema that applies a subschema twice per level, or a recursive anyOf
 * met by a deep value, costs 2^depth evaluations: a 2 KB schema, or an
 * answer of 240 bytes, held the loop for minutes and took GBs.  Both give
 * up with LIMIT_EXCEEDED; a large value that is valid does not. */
static void test_evaluation_budget(void **state)
{
    (void)state;
    /* d0 .. d40: each an allOf of two $refs to the next */
    sbuf b = { 0 };
    sbuf_puts(&b, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 40; i++)
        sbuf_printf(&b, "\"d%d\":{\"allOf\":[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"}]},", i, i + 1,
                    i + 1);
    sbuf_puts(&b, "\"d40\":{\"maxLength\":1000}}}");
    schema *s = compile_text(b.data, NULL);
    schema_violations v = { 0 };
    double t0 = now_s();
    assert_int_equal(check(s, "{\"answer\":\"anything\"}", &v), -1);
    assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
    assert_non_null(strstr(v.items[0].message, "evaluations"));
    schema_violations_clear(&v);
    schema_free(s);

    /* a recursive anyOf (a node: a leaf or a branch, with kids) and an
     * answer 40 kids deep that is neither */
    s = compile_text("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"anyOf\":["
                     "{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                     "\"required\":[\"leaf\"]},"
                     "{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                     "\"required\":[\"branch\"]}]}}}", NULL);
    b.len = 0;
    for (int i = 0; i < 40; i++) sbuf_puts(&b, "{\"kids\":[");
    sbuf_puts(&b, "{}");
    for (int i = 0; i < 40; i++) sbuf_puts(&b, "]}");
    assert_int_equal(check(s, b.data, &v), -1);
    assert_string_equal(v.items[v.count - 1].code, SCHEMA_LIMIT_EXCEEDED);
    schema_violations_clear(&v);
    /* printed, not asserted (these machines are noisy): a second before */
    print_message("two exponential validations: %.3f s\n", now_s() - t0);

    /* 10,000 objects of 20 members, each through an anyOf of 5: valid */
    schema_free(s);
    b.len = 0;
    sbuf_puts(&b, "{\"type\":\"array\",\"items\":{\"anyOf\":[");
    for (int k = 0; k < 5; k++) {
        sbuf_printf(&b, "%s{\"type\":\"object\",\"properties\":{", k ? "," : "");
        for (int m = 0; m < 20; m++) sbuf_printf(&b, "%s\"m%d\":{\"type\":\"integer\",\"minimum\":%d}", m ? "," : "", m, k);
        sbuf_puts(&b, "},\"required\":[\"m0\"]}");
    }
    sbuf_puts(&b, "]}}");
    s = compile_text(b.data, NULL);
    b.len = 0;
    sbuf_puts(&b, "[");
    for (int i = 0; i < 10000; i++) {
        sbuf_puts(&b, i ? ",{" : "{");
        for (int m = 0; m < 20; m++) sbuf_printf(&b, "%s\"m%d\":%d", m ? "," : "", m, 4 - i % 5);
        sbuf_puts(&b, "}");
    }
    sbuf_puts(&b, "]");
    assert_int_equal(check(s, b.data, &v), 0);
    schema_free(s);
    sbuf_free(&b);
}

/* A $id, $ref or anchor longer than SCHEMA_URI_MAX fails the compile:
 * each $ref resolved against a long $id copied it (500 KB and 4,000 refs:
 * 4 GB). */
static void test_uri_max(void **state)
{
    (void)state;
    static const char *const kws[] = { "$id", "$ref", "$anchor", "$schema" };
    for (size_t k = 0; k < sizeof kws / sizeof kws[0]; k++) {
        for (int over = 0; over < 2; over++) {
            sbuf b = { 0 };
            size_t n = SCHEMA_URI_MAX + over;
            sbuf_printf(&b, "{\"properties\":{\"x\":{\"%s\":\"", kws[k]);
            const char *head = k == 2 ? "a" : "https://x.example/";
            sbuf_puts(&b, head);
            for (size_t i = strlen(head); i < n; i++) sbuf_puts(&b, "a");
            sbuf_puts(&b, "\"}}}");
            cJSON *doc = cJSON_Parse(b.data);
            char err[256] = "";
            schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
            if (over) {
                assert_null(s);
                if (!strstr(err, "longer than")) fail_msg("%s: %s", kws[k], err);
            } else if (strstr(err, "longer than")) {
                fail_msg("%s of %zu bytes refused: %s", kws[k], n, err);
            }
            schema_free(s);
            cJSON_Delete(doc);
            sbuf_free(&b);
        }
    }
}

typedef struct thread_arg {
    const schema *s;
    schema_registry *reg; /* shared, read by concurrent compiles */
    int failures;
} thread_arg;

static void *validate_many(void *p)
{
    thread_arg *a = p;
    cJSON *good = cJSON_Parse("{\"name\":\"abc\",\"n\":[1,2,3]}");
    cJSON *bad = cJSON_Parse("{\"name\":\"ABC\",\"n\":[1,\"x\"]}");
    /* each thread also compiles against the shared registry and uses the
     * lazily built format tables (IDN host names) */
    cJSON *doc = cJSON_Parse("{\"properties\":{\"h\":{\"format\":\"idn-hostname\"},"
                             "\"c\":{\"$ref\":\"https://example.com/c.json\"}}}");
    schema_options fa = { SCHEMA_DRAFT_2020_12, 1, 0 };
    char err[256];
    schema *own = schema_compile(a->reg, doc, &fa, err, sizeof err);
    cJSON *h_ok = cJSON_Parse("{\"h\":\"\u0628\u0660\u0628.example\",\"c\":\"EU\"}");
    cJSON *h_bad = cJSON_Parse("{\"h\":\"\u0628\u0660\u06f0\",\"c\":\"eu\"}");
    if (!own)
        a->failures++;
    for (int i = 0; i < 2000; i++) {
        schema_violations v = { 0 };
        if (schema_validate(a->s, good, NULL) != 0)
            a->failures++;
        if (schema_validate(a->s, bad, &v) != 1 || v.count != 2)
            a->failures++;
        schema_violations_clear(&v);
        if (own && (i % 20) == 0) {
            if (schema_validate(own, h_ok, NULL) != 0)
                a->failures++;
            if (schema_validate(own, h_bad, &v) != 1 || v.count != 2)
                a->failures++;
            schema_violations_clear(&v);
        }
    }
    schema_free(own);
    cJSON_Delete(doc);
    cJSON_Delete(h_ok);
    cJSON_Delete(h_bad);
    cJSON_Delete(good);
    cJSON_Delete(bad);
    return NULL;
}

static void test_concurrency(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"object\",\"properties\":{\"name\":{\"pattern\":\"^[a-z]+$\"},"
                             "\"n\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}",
                             NULL);
    schema_registry *reg = schema_registry_new();
    cJSON *c = cJSON_Parse("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\"}");
    char err[128];
    assert_int_equal(schema_registry_add(reg, "https://example.com/c.json", c, err, sizeof err), 0);
    cJSON_Delete(c);
    pthread_t t[2];
    thread_arg args[2] = { { s, reg, 0 }, { s, reg, 0 } };
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, validate_many, &args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(args[0].failures, 0);
    assert_int_equal(args[1].failures, 0);
    schema_registry_free(reg);
    schema_free(s);
}


static void test_draft7_dependencies_and_items(void **state)
{
    (void)state;
    schema_options d7 = { SCHEMA_DRAFT_7, 0, 0 };
    schema *s = compile_text("{\"dependencies\":{\"card\":[\"cvv\"],\"vip\":{\"required\":[\"level\"]}},"
                             "\"properties\":{\"t\":{\"items\":[{\"type\":\"string\"},{\"type\":\"number\"}],"
                             "\"additionalItems\":false}}}",
                             &d7);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"card\":1,\"cvv\":2,\"t\":[\"a\",1]}", &v), 0);
    assert_int_equal(check(s, "{\"card\":1,\"vip\":true,\"t\":[\"a\",1,2]}", &v), 1);
    assert_int_equal(v.count, 3);
    assert_string_equal(v.items[0].code, SCHEMA_MISSING_FIELD);
    assert_string_equal(v.items[0].keyword_location, "/dependencies/card");
    assert_string_equal(v.items[0].message, "missing property \"cvv\", required when \"card\" is present");
    assert_string_equal(v.items[1].keyword_location, "/dependencies/vip/required");
    assert_string_equal(v.items[2].code, SCHEMA_TOO_MANY_ITEMS);
    assert_string_equal(v.items[2].path, "/t");
    assert_string_equal(v.items[2].message, "array has 3 items, but only 2 are allowed");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_if_then_else(void **state)
{
    (void)state;
    schema *s = compile_text("{\"if\":{\"properties\":{\"country\":{\"const\":\"US\"}}},"
                             "\"then\":{\"properties\":{\"zip\":{\"pattern\":\"^[0-9]{5}$\"}}},"
                             "\"else\":{\"properties\":{\"zip\":{\"maxLength\":10}}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"country\":\"US\",\"zip\":\"12345\"}", &v), 0);
    assert_int_equal(check(s, "{\"country\":\"FR\",\"zip\":\"75001 Paris\"}", &v), 1);
    assert_string_equal(v.items[0].keyword_location, "/else/properties/zip/maxLength");
    schema_violations_clear(&v);
    assert_int_equal(check(s, "{\"country\":\"US\",\"zip\":\"7500\"}", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].keyword_location, "/then/properties/zip/pattern");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_property_names_and_unique(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"m\":{\"propertyNames\":{\"maxLength\":3}},"
                             "\"u\":{\"uniqueItems\":true}}}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"m\":{\"abc\":1},\"u\":[1,\"1\",[1],{\"a\":1}]}", &v), 0);
    assert_int_equal(check(s, "{\"m\":{\"abcd\":1},\"u\":[{\"a\":1,\"b\":2},3,{\"b\":2,\"a\":1.0}]}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.items[0].path, "/m/abcd");
    assert_string_equal(v.items[0].code, SCHEMA_TOO_LONG);
    assert_non_null(strstr(v.items[0].message, "property name \"abcd\""));
    assert_string_equal(v.items[1].code, SCHEMA_NOT_UNIQUE);
    assert_string_equal(v.items[1].message, "array items 0 and 2 are equal; items must be unique");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_multiple_of_decimals(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *inst;
        int want;
    } cases[] = {
        { "{\"multipleOf\":0.1}", "0.3", 0 },
        { "{\"multipleOf\":0.1}", "0.35", 1 },
        { "{\"multipleOf\":0.0001}", "0.0075", 0 },
        { "{\"multipleOf\":0.0001}", "0.00751", 1 },
        { "{\"multipleOf\":1.5}", "4.5", 0 },
        { "{\"multipleOf\":1.5}", "35", 1 },
        { "{\"multipleOf\":0.5}", "1e308", 0 },
        { "{\"multipleOf\":0.123456789}", "1e308", 1 },
        { "{\"multipleOf\":3}", "-9", 0 },
        { "{\"multipleOf\":0.01}", "19.99", 0 },
        { "{\"multipleOf\":0.01}", "123456.78", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        schema *s = compile_text(cases[i].schema, NULL);
        cJSON *inst = cJSON_Parse(cases[i].inst);
        int r = schema_validate(s, inst, NULL);
        if (r != cases[i].want)
            fail_msg("%s against %s: got %d", cases[i].inst, cases[i].schema, r);
        cJSON_Delete(inst);
        schema_free(s);
    }
}

static void test_duplicate_keywords_first_wins(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"a\":{\"type\":\"string\"}},\"properties\":{\"b\":{}},"
                             "\"additionalProperties\":false}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"a\":\"x\"}", &v), 0);
    assert_int_equal(check(s, "{\"b\":1}", &v), 1);
    assert_string_equal(v.items[0].code, SCHEMA_UNEXPECTED_FIELD);
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_limit_after_known_invalid(void **state)
{
    (void)state;
    /* "properties" fails first; the reporting pass then recurses through
     * the self-$ref into the depth limit: still invalid, with a note */
    schema *s = compile_text("{\"properties\":{\"a\":{\"type\":\"string\"}},\"$ref\":\"#\"}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"a\":1}", &v), 1);
    assert_true(v.count >= 2);
    assert_string_equal(v.items[0].code, SCHEMA_WRONG_TYPE);
    assert_string_equal(v.items[v.count - 1].code, SCHEMA_LIMIT_EXCEEDED);
    schema_violations_clear(&v);
    schema_free(s);
}

/* A leaf schema is first checked all at once; the answer must still be the
 * one of the keywords taken in schema order: a pattern that hits its limit
 * before a failing maxLength makes the validation fail with -1, after it
 * the instance is plainly invalid. */
static void test_keyword_order_with_limit(void **state)
{
    (void)state;
    cJSON *inst = cJSON_CreateString("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!");
    schema *first = compile_text("{\"pattern\":\"^(\\\\w+\\\\s?)*$\",\"maxLength\":3}", NULL);
    schema *last = compile_text("{\"maxLength\":3,\"pattern\":\"^(\\\\w+\\\\s?)*$\"}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(schema_validate(first, inst, NULL), -1);
    assert_int_equal(schema_validate(first, inst, &v), -1);
    assert_string_equal(v.items[0].code, SCHEMA_LIMIT_EXCEEDED);
    schema_violations_clear(&v);
    assert_int_equal(schema_validate(last, inst, NULL), 1);
    assert_int_equal(schema_validate(last, inst, &v), 1);
    assert_true(v.count == 2);
    assert_string_equal(v.items[0].code, SCHEMA_TOO_LONG);
    assert_string_equal(v.items[1].code, SCHEMA_LIMIT_EXCEEDED);
    schema_violations_clear(&v);
    schema_free(first);
    schema_free(last);
    cJSON_Delete(inst);
}

/* Long texts (past the stack buffers of a report) and more violations
 * than fit in the first scratch block: every string must come out whole. */
static void test_long_and_many_violations(void **state)
{
    (void)state;
    char key[701], *text = malloc(4096);
    memset(key, 'k', 700);
    key[700] = '\0';
    schema *s = compile_text("{\"propertyNames\":{\"maxLength\":600},"
                             "\"properties\":{\"a\":{}},\"additionalProperties\":false}", NULL);
    snprintf(text, 4096, "{\"a\":1,\"%s\":2}", key);
    schema_violations v = { 0 };
    assert_int_equal(check(s, text, &v), 1);
    assert_int_equal(v.count, 2);
    /* propertyNames comes first in schema order; its message names the key */
    assert_string_equal(v.items[0].code, SCHEMA_TOO_LONG);
    assert_int_equal(strlen(v.items[0].path), 701);
    assert_true(strncmp(v.items[0].message, "property name \"kkk", 18) == 0);
    assert_non_null(strstr(v.items[0].message, "\": string has 700 characters, more than the maximum length 600"));
    assert_string_equal(v.items[1].code, SCHEMA_UNEXPECTED_FIELD);
    assert_int_equal(strlen(v.items[1].path), 701);
    assert_int_equal(strlen(v.items[1].message), 700 + strlen("property \"\" is not allowed"));
    schema_violations_clear(&v);
    schema_free(s);

    schema_options o = { SCHEMA_DRAFT_2020_12, 0, 200 };
    s = compile_text("{\"items\":{\"type\":\"integer\"}}", &o);
    size_t len = 0;
    len += (size_t)snprintf(text + len, 4096 - len, "[");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, 4096 - len, "%s\"%04d-%s\"", i ? "," : "", i,
                                "0123456789012345678901234567890123456789012345678901234567890123456789");
    snprintf(text + len, 4096 - len, "]");
    assert_int_equal(check(s, text, &v), 1);
    assert_int_equal(v.count, 40);
    assert_int_equal(v.total, 40);
    for (int i = 0; i < 40; i++) {
        char path[16], actual[128];
        snprintf(path, sizeof path, "/%d", i);
        snprintf(actual, sizeof actual, "\"%04d-%s\"", i,
                 "0123456789012345678901234567890123456789012345678901234567890123456789");
        assert_string_equal(v.items[i].path, path);
        assert_string_equal(v.items[i].keyword_location, "/items/type");
        assert_string_equal(v.items[i].message, "expected integer, got string");
        assert_string_equal(v.items[i].expected, "\"integer\"");
        assert_string_equal(v.items[i].actual, actual);
    }
    schema_violations_clear(&v);
    schema_free(s);
    free(text);
}

/* Texts that do not depend on the instance are made once at compile time
 * and the violations point at them (schema.h): they must read the same
 * whether the list stays in its first block, is copied out of it (more
 * than 32 violations) or had a message rewritten (propertyNames). */
static void test_fixed_texts_shared_with_the_schema(void **state)
{
    (void)state;
    schema_options o = { SCHEMA_DRAFT_2020_12, 0, 200 };
    schema *s = compile_text("{\"items\":{\"type\":\"object\",\"required\":[\"id\"],"
                             "\"properties\":{\"e\":{\"enum\":[\"x\",\"y\"]},\"c\":{\"const\":7},"
                             "\"p\":{\"pattern\":\"^a+$\"},\"m\":{\"minimum\":2}}},"
                             "\"propertyNames\":{\"pattern\":\"^[0-9]+$\"}}", &o);
    for (int items = 1; items <= 12; items += 11) { /* 5 and 60 violations */
        char text[2048];
        size_t len = (size_t)snprintf(text, sizeof text, "[");
        for (int i = 0; i < items; i++)
            len += (size_t)snprintf(text + len, sizeof text - len,
                                    "%s{\"e\":\"z\",\"c\":8,\"p\":\"b\",\"m\":1}", i ? "," : "");
        snprintf(text + len, sizeof text - len, "]");
        schema_violations v = { 0 };
        assert_int_equal(check(s, text, &v), 1);
        assert_int_equal(v.count, (size_t)items * 5);
        for (int i = 0; i < items; i++) {
            const schema_violation *x = &v.items[i * 5];
            char path[32];
            snprintf(path, sizeof path, "/%d/id", i);
            assert_string_equal(x[0].path, path);
            assert_string_equal(x[0].keyword_location, "/items/required");
            assert_string_equal(x[0].message, "missing required property \"id\"");
            assert_string_equal(x[0].expected, "\"id\"");
            assert_string_equal(x[1].keyword_location, "/items/properties/e/enum");
            assert_string_equal(x[1].message, "value must be one of [\"x\",\"y\"]");
            assert_string_equal(x[1].expected, "[\"x\",\"y\"]");
            assert_string_equal(x[1].actual, "\"z\"");
            assert_string_equal(x[2].keyword_location, "/items/properties/c/const");
            assert_string_equal(x[2].message, "value must be 7");
            assert_string_equal(x[2].expected, "7");
            assert_string_equal(x[2].actual, "8");
            assert_string_equal(x[3].keyword_location, "/items/properties/p/pattern");
            assert_string_equal(x[3].message, "string does not match the pattern \"^a+$\"");
            assert_string_equal(x[3].expected, "\"^a+$\"");
            assert_string_equal(x[4].keyword_location, "/items/properties/m/minimum");
            assert_string_equal(x[4].message, "value 1 is less than the minimum 2");
            assert_string_equal(x[4].expected, "2");
            /* one text for every report of a keyword: not copied */
            for (int k = 0; k < 5; k++)
                assert_ptr_equal(x[k].keyword_location, v.items[k].keyword_location);
            assert_ptr_equal(x[1].message, v.items[1].message);
        }
        schema_violations_clear(&v);
    }
    /* propertyNames rewrites a message; the rest still reads right */
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"k\":1}", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].keyword_location, "/propertyNames/pattern");
    assert_string_equal(v.items[0].message, "property name \"k\": string does not match the pattern \"^[0-9]+$\"");
    assert_string_equal(v.items[0].expected, "\"^[0-9]+$\"");
    schema_violations_clear(&v);
    schema_free(s);
}

/* The closest oneOf branch is walked again with full reports: what it
 * reports must be what a walk of that branch alone reports, a merged
 * anyOf inside it included. */
static void test_oneof_closest_with_nested_anyof(void **state)
{
    (void)state;
    schema *s = compile_text(
        "{\"oneOf\":["
        "{\"type\":\"object\",\"required\":[\"kind\"],\"properties\":{\"kind\":{\"const\":\"a\"},"
        "\"v\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}},"
        "{\"type\":\"object\",\"required\":[\"kind\",\"w\"],\"properties\":{\"kind\":{\"const\":\"b\"},"
        "\"w\":{\"type\":\"integer\"}}}]}",
        NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"kind\":\"a\",\"v\":5}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_string_equal(v.items[0].code, SCHEMA_NO_MATCH);
    assert_string_equal(v.items[0].path, "");
    assert_string_equal(v.items[0].keyword_location, "/oneOf");
    assert_non_null(strstr(v.items[0].message, "closest is #0"));
    assert_string_equal(v.items[1].code, SCHEMA_WRONG_TYPE);
    assert_string_equal(v.items[1].path, "/v");
    assert_string_equal(v.items[1].keyword_location, "/oneOf/0/properties/v/anyOf");
    assert_string_equal(v.items[1].message, "expected string or null, got integer");
    assert_string_equal(v.items[1].actual, "5");
    schema_violations_clear(&v);

    assert_int_equal(check(s, "{\"kind\":\"b\",\"w\":\"x\"}", &v), 1);
    assert_int_equal(v.count, 2);
    assert_non_null(strstr(v.items[0].message, "closest is #1"));
    assert_string_equal(v.items[1].path, "/w");
    assert_string_equal(v.items[1].keyword_location, "/oneOf/1/properties/w/type");
    schema_violations_clear(&v);
    schema_free(s);
}

/* anyOf/oneOf whose branches each hold one member to a value of their
 * own go straight to the branch the instance names: the answers and the
 * reports must be those of comparing every branch. */
static void test_discriminated_union(void **state)
{
    (void)state;
    schema_violations v = { 0 };
    /* two branches with the same value are no discriminator: both match */
    schema *s = compile_text("{\"oneOf\":["
                             "{\"properties\":{\"kind\":{\"const\":\"a\"}}},"
                             "{\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"string\"}}}]}",
                             NULL);
    assert_int_equal(check(s, "{\"kind\":\"a\",\"x\":\"s\"}", &v), 1);
    assert_non_null(strstr(v.items[0].message, "more than one"));
    schema_violations_clear(&v);
    schema_free(s);

    /* branches behind $refs; the named branch fails on another const too,
     * so every branch is disqualified and the fewest violations win */
    s = compile_text("{\"$defs\":{"
                     "\"a\":{\"required\":[\"x\",\"y\"],\"properties\":{\"kind\":{\"const\":\"a\"},"
                     "\"v\":{\"const\":1},\"x\":{\"type\":\"string\"}}},"
                     "\"b\":{\"properties\":{\"kind\":{\"enum\":[\"b\"]},\"x\":{\"type\":\"string\"}}}},"
                     "\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"$ref\":\"#/$defs/b\"}]}",
                     NULL);
    assert_int_equal(check(s, "{\"kind\":\"b\",\"x\":\"s\"}", &v), 0);
    assert_int_equal(check(s, "{\"kind\":\"a\",\"x\":\"s\",\"y\":0,\"v\":1}", &v), 0);
    assert_int_equal(check(s, "{\"kind\":\"a\",\"x\":5,\"v\":2}", &v), 1);
    assert_non_null(strstr(v.items[0].message, "closest is #1")); /* 2 errors against 3 */
    assert_int_equal(v.count, 3);
    assert_string_equal(v.items[1].keyword_location, "/$defs/b/properties/kind/enum");
    assert_string_equal(v.items[2].keyword_location, "/$defs/b/properties/x/type");
    schema_violations_clear(&v);
    /* the named branch fails on other things only: it is the one reported */
    assert_int_equal(check(s, "{\"kind\":\"a\",\"x\":5,\"v\":1}", &v), 1);
    assert_non_null(strstr(v.items[0].message, "closest is #0"));
    assert_int_equal(v.count, 3);
    assert_string_equal(v.items[1].path, "/y");
    assert_string_equal(v.items[1].code, SCHEMA_MISSING_FIELD);
    assert_string_equal(v.items[2].path, "/x");
    schema_violations_clear(&v);
    schema_free(s);

    /* annotations of the named branch count for unevaluatedProperties */
    s = compile_text("{\"oneOf\":["
                     "{\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":true}},"
                     "{\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":true}}],"
                     "\"unevaluatedProperties\":false}",
                     NULL);
    assert_int_equal(check(s, "{\"kind\":\"a\",\"x\":1}", &v), 0);
    assert_int_equal(check(s, "{\"kind\":\"a\",\"y\":1}", &v), 1);
    assert_non_null(find_code(&v, SCHEMA_UNEXPECTED_FIELD, "/y"));
    schema_violations_clear(&v);
    schema_free(s);

    /* past the store cap, `total` still counts what each item reports:
     * NO_MATCH and the named branch's two violations */
    s = compile_text("{\"items\":{\"oneOf\":["
                     "{\"required\":[\"k0\"],\"properties\":{\"kind\":{\"const\":\"k0\"},\"v\":{\"type\":\"integer\"}}},"
                     "{\"required\":[\"k1\"],\"properties\":{\"kind\":{\"const\":\"k1\"},\"v\":{\"type\":\"integer\"}}},"
                     "{\"required\":[\"k2\"],\"properties\":{\"kind\":{\"const\":\"k2\"},\"v\":{\"type\":\"integer\"}}}]}}",
                     &(schema_options){ .max_violations = 2 });
    char big[8192] = "[";
    for (int i = 0; i < 200; i++)
        strcat(big, i ? ",{\"kind\":\"k1\",\"v\":1.5}" : "{\"kind\":\"k1\",\"v\":1.5}");
    strcat(big, "]");
    assert_int_equal(check(s, big, &v), 1);
    assert_int_equal(v.count, 2);
    assert_int_equal(v.total, 600);
    schema_violations_clear(&v);
    schema_free(s);
}

static char g_tmpdir[64];

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char g_stderr[2048];

static void capture_to(int fdno, const char *path, int *saved)
{
    *saved = dup(fdno);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(*saved >= 0 && fd >= 0);
    dup2(fd, fdno);
    close(fd);
}

static void slurp_into(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Runs validate_cli_main with stdout captured into out, stderr into
 * g_stderr. */
static int run_cli(char **argv, int argc, char *out, size_t outlen)
{
    char po[256], pe[256];
    snprintf(po, sizeof po, "%s/stdout.txt", g_tmpdir);
    snprintf(pe, sizeof pe, "%s/stderr.txt", g_tmpdir);
    fflush(stdout);
    fflush(stderr);
    int so, se;
    capture_to(1, po, &so);
    capture_to(2, pe, &se);
    int rc = validate_cli_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    slurp_into(po, out, outlen);
    slurp_into(pe, g_stderr, sizeof g_stderr);
    return rc;
}

/* `retort validate SCHEMA FILE` on a FILE that is not taken as JSON:
 * exit 1 and one NOT_JSON line with the message. */
static void cli_not_json(const char *schema_path, const char *name, const char *text, const char *message)
{
    char path[256], out[4096];
    write_file(name, text);
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
    char *argv[] = { "validate", (char *)schema_path, path };
    assert_int_equal(run_cli(argv, 3, out, sizeof out), 1);
    cJSON *l = cJSON_Parse(out);
    assert_non_null(l);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l, "code")), "NOT_JSON");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l, "message")), message);
    cJSON_Delete(l);
}

/* A limit's message names the schema's location: cut at its buffer
 * inside a character of a name, it was no UTF-8, and neither was the
 * event carrying it.  So was a compile error's. */
static void test_limit_message_stays_utf8(void **state)
{
    (void)state;
    char name[256] = "", sch[1024];
    for (int i = 0; i < 100; i++)
        strcat(name, "\xc3\xa9");
    snprintf(sch, sizeof sch, "{\"$ref\":\"#/$defs/%s\",\"$defs\":{\"%s\":{\"items\":{\"$ref\":\"#/$defs/%s\"}}}}",
             name, name, name);
    char *inst = malloc(1201);
    memset(inst, '[', 600);
    memset(inst + 600, ']', 600);
    inst[1200] = '\0';
    schema *s = compile_text(sch, NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, inst, &v), -1);
    assert_true(v.count >= 1);
    assert_non_null(strstr(v.items[0].message, "\xc3\xa9"));
    assert_true(util_utf8_valid(v.items[0].message, strlen(v.items[0].message)));
    schema_violations_clear(&v);
    schema_free(s);
    free(inst);
    /* a compile error naming the location, into a short buffer */
    snprintf(sch, sizeof sch, "{\"properties\":{\"%s\":{\"multipleOf\":0}}}", name);
    cJSON *doc = cJSON_Parse(sch);
    char err[64];
    for (size_t len = 20; len <= sizeof err; len++) {
        assert_null(schema_compile(NULL, doc, NULL, err, len));
        assert_true(util_utf8_valid(err, strlen(err)));
    }
    cJSON_Delete(doc);
}

/* The branches of an anyOf that fail on const alone merge into one list
 * of the values allowed; a value cut to its snippet could not be read
 * back and was left out, so the list told the model "x" was the only
 * one.  Not merged then: the closest branch is reported. */
static void test_merged_enum_keeps_long_const(void **state)
{
    (void)state;
    char sch[1024], big[301];
    memset(big, 'v', 300);
    big[300] = '\0';
    snprintf(sch, sizeof sch, "{\"anyOf\":[{\"const\":\"%s\"},{\"const\":\"x\"}]}", big);
    schema *s = compile_text(sch, NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "\"y\"", &v), 1);
    assert_true(v.count >= 1);
    for (size_t i = 0; i < v.count; i++)
        assert_string_not_equal(v.items[i].message, "value must be one of [\"x\"]");
    schema_violations_clear(&v);
    schema_free(s);
    /* short values still merge */
    s = compile_text("{\"anyOf\":[{\"const\":\"a\"},{\"enum\":[\"b\",\"c\"]}]}", NULL);
    assert_int_equal(check(s, "\"y\"", &v), 1);
    assert_int_equal(v.count, 1);
    assert_string_equal(v.items[0].message, "value must be one of [\"a\",\"b\",\"c\"]");
    schema_violations_clear(&v);
    schema_free(s);
}

/* contentMediaType application/json (draft 7 asserts it) reads the
 * content as strictly as an answer: cJSON took "{} trailing" and "01";
 * "application/jsonx" is another type, parameters may follow. */
static void test_content_json_strict(void **state)
{
    (void)state;
    schema_options o = { .default_draft = SCHEMA_DRAFT_7 };
    schema *s = compile_text("{\"contentMediaType\":\"application/json\"}", &o);
    static const struct {
        const char *inst;
        int valid;
    } cases[] = {
        { "\"{} trailing\"", 0 }, { "\"[01]\"", 0 }, { "\"{\\\"a\\\":1}\"", 1 }, { "\" [1] \"", 1 }, { "\"\"", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        schema_violations v = { 0 };
        if (check(s, cases[i].inst, &v) != !cases[i].valid)
            fail_msg("%s", cases[i].inst);
        schema_violations_clear(&v);
    }
    schema_free(s);
    s = compile_text("{\"contentMediaType\":\"Application/JSON; charset=utf-8\"}", &o);
    assert_int_equal(check(s, "\"{} x\"", NULL), 1);
    schema_free(s);
    s = compile_text("{\"contentMediaType\":\"application/jsonx\"}", &o);
    assert_int_equal(check(s, "\"{} x\"", NULL), 0);
    schema_free(s);
}

/* A $ref's JSON pointer is read as RFC 6901 says: an array index is
 * digits alone (strtol took "+0" and " 0", and the cast to int made
 * 4294967296 element 0), and a %00 does not cut the pointer short. */
static void test_ref_pointer_strictness(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"$defs\":{\"a\":[{\"type\":\"string\"}]},\"$ref\":\"#/$defs/a/4294967296\"}",
        "{\"$defs\":{\"a\":[{\"type\":\"string\"}]},\"$ref\":\"#/$defs/a/+0\"}",
        "{\"$defs\":{\"a\":[{\"type\":\"string\"}]},\"$ref\":\"#/$defs/a/%200\"}",
        "{\"$defs\":{\"a\":[{\"type\":\"string\"}]},\"$ref\":\"#/$defs/a/00\"}",
        "{\"$defs\":{\"a\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/a%00/no/such\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *doc = cJSON_Parse(bad[i]);
        char err[256] = "";
        schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
        if (s)
            fail_msg("compiled: %s", bad[i]);
        assert_non_null(strstr(err, "unresolvable $ref"));
        cJSON_Delete(doc);
    }
    schema *s = compile_text("{\"$defs\":{\"a\":[{},{\"type\":\"string\"}]},\"$ref\":\"#/$defs/a/1\"}", NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "1", &v), 1);
    schema_violations_clear(&v);
    schema_free(s);
}

/* A resource's $dynamicAnchors past the 16th were ignored: a $dynamicRef
 * to one took its static target, and an invalid instance passed. */
static void test_many_dynamic_anchors(void **state)
{
    (void)state;
    for (int fillers = 15; fillers <= 40; fillers += 25) {
        char sch[4096];
        int n = snprintf(sch, sizeof sch, "{\"$id\":\"https://example.com/root\",\"$ref\":\"list\",\"$defs\":{");
        for (int i = 0; i < fillers; i++)
            n += snprintf(sch + n, sizeof sch - (size_t)n, "\"f%d\":{\"$dynamicAnchor\":\"a%d\"},", i, i);
        snprintf(sch + n, sizeof sch - (size_t)n,
                 "\"foo\":{\"$dynamicAnchor\":\"items\",\"type\":\"string\"},"
                 "\"list\":{\"$id\":\"list\",\"type\":\"array\",\"items\":{\"$dynamicRef\":\"#items\"},"
                 "\"$defs\":{\"items\":{\"$dynamicAnchor\":\"items\"}}}}}");
        schema *s = compile_text(sch, NULL);
        schema_violations v = { 0 };
        if (check(s, "[\"foo\",42]", &v) != 1)
            fail_msg("with %d anchors before it, 42 passed", fillers);
        schema_violations_clear(&v);
        assert_int_equal(check(s, "[\"foo\",\"bar\"]", &v), 0);
        schema_free(s);
    }
}

/* multipleOf past 2^53, where a double is no longer the number written:
 * its shortest decimal made 2^60 (written in full) 1152921504606847e3,
 * which no 16 divides.  Read by jsonin (the worker's reader), the text is
 * taken as written, exactly; read by cJSON, the double's exact value. */
static void test_multiple_of_large_numbers(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *inst;
        int valid_text, valid_double;
    } cases[] = {
        { "{\"multipleOf\":16}", "1152921504606846976", 1, 1 },         /* 2^60 */
        { "{\"multipleOf\":4096}", "9223372036854775808", 1, 1 },       /* 2^63 */
        { "{\"multipleOf\":13}", "14987979559889010688", 1, 1 },        /* 13 * 2^60 */
        { "{\"multipleOf\":2}", "9007199254740993", 0, 1 },             /* 2^53 + 1: odd */
        { "{\"multipleOf\":3}", "100000000000000000000000000000002", 1, 0 },
        { "{\"multipleOf\":7}", "1e400", 0, 0 },
        { "{\"multipleOf\":10}", "1e400", 1, 0 },
        { "{\"multipleOf\":0.5}", "123456789012345678.5", 1, 1 },
        { "{\"multipleOf\":0.5}", "12345678901234567890.25", 0, 1 },
        { "{\"multipleOf\":1e-3}", "-9.0071992547409930e15", 1, 1 },
        { "{\"multipleOf\":25}", "1.0000000000000000000000000075e28", 1, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        schema *s = compile_text(cases[i].schema, NULL);
        size_t err_at = 0;
        cJSON *inst = jsonin_parse_all(cases[i].inst, strlen(cases[i].inst), &err_at);
        assert_non_null(inst);
        int r = schema_validate(s, inst, NULL);
        if (r != !cases[i].valid_text)
            fail_msg("%s on %s as written: %d", cases[i].schema, cases[i].inst, r);
        jsonin_free(inst);
        inst = cJSON_Parse(cases[i].inst);
        r = schema_validate(s, inst, NULL);
        if (r != !cases[i].valid_double)
            fail_msg("%s on %s as a double: %d", cases[i].schema, cases[i].inst, r);
        cJSON_Delete(inst);
        schema_free(s);
    }
}

/* A number of an instance read by jsonin (the worker's reader keeps its
 * text) shows in the violation as written, not through a double:
 * 12345678901234567890 would read 1.2345678901234567e+19 and 1e400 would
 * read 1e999.  A tree of cJSON's own reader has no text: the
 * double's shortest form. */
/* Member names are compared with the schema's as words (schema.c
 * ent_name_eq): every length around the word sizes; a name one byte
 * short of the expected one, one byte longer, or different in its last
 * byte; each name in turn ending at the last byte of a page before an
 * unmapped one. */
static void test_member_names_compared_exactly(void **state)
{
    (void)state;
    enum { N = 19 };
    static const char full[] = "abcdefghijklmnopqr"; /* names of 0..18 bytes */
    char schema_text[2048] = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{";
    for (int i = 0; i < N; i++)
        snprintf(schema_text + strlen(schema_text), sizeof schema_text - strlen(schema_text),
                 "%s\"%.*s\":{\"const\":%d}", i ? "," : "", i, full, i);
    strcat(schema_text, "}}");
    schema *s = compile_text(schema_text, NULL);
    long page = sysconf(_SC_PAGESIZE);
    char *pages = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(pages != MAP_FAILED);
    assert_int_equal(mprotect(pages + page, (size_t)page, PROT_NONE), 0);
    /* bad: -1 every name right, else name `bad` changed as `kind` says
     * (0 last byte, 1 one byte short, 2 one byte more); end: the name
     * placed at the page's end (-1 none) */
    for (int bad = -1; bad < N; bad++) {
        for (int kind = 0; kind < 3; kind++) {
            if ((bad < 0 && kind) || (bad == 0 && kind != 2))
                continue; /* "" has no last byte to change or drop */
            for (int end = -1; end < N; end++) {
                char names[N][24], want[32] = "";
                cJSON *inst = cJSON_CreateObject();
                for (int i = 0; i < N; i++) {
                    char *nm = names[i];
                    memcpy(nm, full, (size_t)i);
                    nm[i] = '\0';
                    if (i == bad) {
                        if (kind == 2) {
                            nm[i] = 'Z';
                            nm[i + 1] = '\0';
                        } else if (i > 0) {
                            nm[i - 1] = kind == 0 ? 'Z' : '\0';
                        }
                        snprintf(want, sizeof want, "/%s", nm);
                    }
                    if (i == end)
                        nm = memcpy(pages + page - (long)(strlen(nm) + 1), nm, strlen(nm) + 1);
                    cJSON_AddItemToObjectCS(inst, nm, cJSON_CreateNumber(i));
                }
                schema_violations v = {0};
                int fast = schema_validate(s, inst, NULL);
                int r = schema_validate(s, inst, &v);
                assert_int_equal(fast, r);
                if (bad < 0 && r != 0)
                    fail_msg("end %d: valid instance found invalid: %s %s", end, v.items[0].path, v.items[0].message);
                if (bad >= 0) {
                    /* the changed name is not the schema's: a member not
                     * allowed, or (one byte short is the name before it)
                     * a second member under a const of another value */
                    int found = 0;
                    for (size_t k = 0; k < v.count; k++)
                        found |= strcmp(v.items[k].path, want) == 0;
                    if (r != 1 || !found)
                        fail_msg("bad %d kind %d end %d: no violation at %s", bad, kind, end, want);
                }
                schema_violations_clear(&v);
                cJSON_Delete(inst);
            }
        }
    }
    munmap(pages, (size_t)page * 2);
    schema_free(s);
}

static void test_numbers_as_written(void **state)
{
    (void)state;
    schema *s = compile_text("{\"properties\":{\"n\":{\"maximum\":100},\"t\":{\"type\":\"string\"}}}", NULL);
    static const struct {
        const char *text, *actual;
    } cases[] = {
        { "{\"n\":12345678901234567890}", "12345678901234567890" },
        { "{\"n\":1e400}", "1e400" },
        { "{\"n\":100.50}", "100.50" },
        { "{\"t\":1E+2}", "1E+2" },
        { "{\"t\":[1.0,-0]}", "[1.0,-0]" },
        /* longer than any double prints: still as written */
        { "{\"n\":123456789012345678901234567890123456789012345678901234567890}",
          "123456789012345678901234567890123456789012345678901234567890" },
        { "{\"t\":-1.00000000000000000000000000000000000000000000000000000001e-7}",
          "-1.00000000000000000000000000000000000000000000000000000001e-7" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t err_at = 0;
        cJSON *inst = jsonin_parse_all(cases[i].text, strlen(cases[i].text), &err_at);
        assert_non_null(inst);
        schema_violations v = { 0 };
        assert_int_equal(schema_validate(s, inst, &v), 1);
        assert_int_equal(v.count, 1);
        assert_string_equal(v.items[0].actual, cases[i].actual);
        if (cases[i].text[2] == 'n') {
            char want[160];
            snprintf(want, sizeof want, "value %s is greater than the maximum 100", cases[i].actual);
            assert_string_equal(v.items[0].message, want);
        }
        /* and in the violations' JSON (records, events, retort validate),
         * printed by jsonout (cJSON_Parse of the text gave the double) */
        cJSON *arr = schema_violations_to_json(&v);
        char *out = jsonout_print(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "actual"));
        assert_string_equal(out, cases[i].actual);
        free(out);
        cJSON_Delete(arr);
        schema_violations_clear(&v);
        jsonin_free(inst);
    }
    cJSON *inst = cJSON_Parse("{\"n\":12345678901234567890}");
    schema_violations v = { 0 };
    assert_int_equal(schema_validate(s, inst, &v), 1);
    assert_string_equal(v.items[0].actual, "1.2345678901234567e+19");
    schema_violations_clear(&v);
    cJSON_Delete(inst);
    schema_free(s);
}

/* required checked together with properties while reporting: the missing
 * members still come first, in `required` order, then what properties
 * finds; a path longer than the formatting buffers ends in an index. */
static void test_required_order_and_long_path(void **state)
{
    (void)state;
    schema *s = compile_text("{\"type\":\"object\",\"required\":[\"a\",\"b\",\"c\"],"
                             "\"properties\":{\"c\":{\"type\":\"string\"},\"d\":{\"type\":\"integer\"}},"
                             "\"additionalProperties\":false}",
                             NULL);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "{\"d\":\"x\",\"c\":1,\"e\":true}", &v), 1);
    assert_int_equal(v.count, 5);
    assert_string_equal(v.items[0].code, SCHEMA_MISSING_FIELD);
    assert_string_equal(v.items[0].path, "/a");
    assert_string_equal(v.items[0].expected, "\"a\"");
    assert_string_equal(v.items[1].path, "/b");
    assert_string_equal(v.items[1].keyword_location, "/required");
    assert_string_equal(v.items[2].code, SCHEMA_WRONG_TYPE);
    assert_string_equal(v.items[2].path, "/d");
    assert_string_equal(v.items[3].path, "/c");
    assert_string_equal(v.items[4].code, SCHEMA_UNEXPECTED_FIELD);
    assert_string_equal(v.items[4].path, "/e");
    schema_violations_clear(&v);
    schema_free(s);

    char key[701], text[2048];
    memset(key, 'k', 700);
    key[700] = '\0';
    snprintf(text, sizeof text, "{\"properties\":{\"%s\":{\"items\":{\"type\":\"string\"}}}}", key);
    s = compile_text(text, NULL);
    snprintf(text, sizeof text, "{\"%s\":[\"ok\",1234567]}", key);
    assert_int_equal(check(s, text, &v), 1);
    assert_int_equal(v.count, 1);
    assert_int_equal(strlen(v.items[0].path), 703);
    assert_string_equal(v.items[0].path + 701, "/1");
    schema_violations_clear(&v);
    schema_free(s);
}

static void test_validate_cli(void **state)
{
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/test_schema_XXXXXX");
    assert_non_null(mkdtemp(g_tmpdir));
    write_file("s.json", "{\"type\":\"object\",\"required\":[\"id\"],\"properties\":{\"id\":{\"$ref\":\"defs.json#/$defs/id\"}}}");
    write_file("defs.json", "{\"$defs\":{\"id\":{\"type\":\"integer\",\"minimum\":1}}}");
    write_file("ok.json", "{\"id\":3}");
    write_file("bad.json", "{\"id\":0}");
    write_file("broken.json", "{\"id\":");
    write_file("badschema.json", "{\"properties\":{\"id\":{\"maxLength\":\"x\"}}}");
    char s[256], ok[256], bad[256], broken[256], badschema[256], out[4096];
    snprintf(s, sizeof s, "%s/s.json", g_tmpdir);
    snprintf(ok, sizeof ok, "%s/ok.json", g_tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.json", g_tmpdir);
    snprintf(broken, sizeof broken, "%s/broken.json", g_tmpdir);
    snprintf(badschema, sizeof badschema, "%s/badschema.json", g_tmpdir);

    char *a1[] = { "validate", s, ok };
    assert_int_equal(run_cli(a1, 3, out, sizeof out), 0);
    assert_string_equal(out, "");

    char *a2[] = { "validate", s, ok, bad, broken };
    assert_int_equal(run_cli(a2, 5, out, sizeof out), 1);
    /* two JSON lines: the violation of bad.json, NOT_JSON for broken.json */
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    *nl = '\0';
    cJSON *l1 = cJSON_Parse(out), *l2 = cJSON_Parse(nl + 1);
    assert_non_null(l1);
    assert_non_null(l2);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l1, "instance")), bad);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l1, "code")), "OUT_OF_RANGE");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l1, "path")), "/id");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l2, "instance")), broken);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(l2, "code")), "NOT_JSON");
    cJSON_Delete(l1);
    cJSON_Delete(l2);

    /* read as strictly as the worker reads answers: a leading zero is not
     * JSON, and the message points at the byte */
    cli_not_json(s, "lax.json", "{\"id\":\n 01}", "not valid JSON (line 2 column 3)");
    /* a NUL in a string is refused, not validated cut short, and said so */
    cli_not_json(s, "nul.json", "{\"id\":\"a\\u0000b\"}",
                 "a string holds \\u0000, the NUL character, which is not supported (line 1 column 9)");

    char *a3[] = { "validate", badschema, ok };
    assert_int_equal(run_cli(a3, 3, out, sizeof out), 2);
    assert_string_equal(out, "");
    assert_non_null(strstr(g_stderr, "/properties/id/maxLength: must be a non-negative integer"));
    char *a4[] = { "validate", "--draft", "5", s };
    assert_int_equal(run_cli(a4, 4, out, sizeof out), 2);
    assert_non_null(strstr(g_stderr, "--draft must be 7 or 2020-12"));
    char *a5[] = { "validate", "--help" };
    assert_int_equal(run_cli(a5, 2, out, sizeof out), 0);
    assert_non_null(strstr(out, "usage: retort validate"));
    /* standard input is read once: a schema from it and the default
     * instance, or two "-", found it empty the second time and reported
     * an instance never given as NOT_JSON (exit 1) */
    char *a6[] = { "validate", "-" };
    assert_int_equal(run_cli(a6, 2, out, sizeof out), 2);
    assert_non_null(strstr(g_stderr, "standard input (-) can be read once"));
    char *a7[] = { "validate", s, "-", "-" };
    assert_int_equal(run_cli(a7, 4, out, sizeof out), 2);
    assert_string_equal(out, "");
    /* a schema in a directory whose name holds '#' or '%': its relative
     * $ref was resolved in the directory's name cut at the '#' */
    char dir[256], sub[300], mainp[300], inst[300];
    snprintf(dir, sizeof dir, "%s/a#b%%25c", g_tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(sub, sizeof sub, "a#b%%25c/other.json");
    write_file(sub, "{\"type\":\"integer\"}");
    snprintf(sub, sizeof sub, "a#b%%25c/main.json");
    write_file(sub, "{\"$ref\":\"other.json\"}");
    snprintf(sub, sizeof sub, "a#b%%25c/inst.json");
    write_file(sub, "\"x\"");
    snprintf(mainp, sizeof mainp, "%s/main.json", dir);
    snprintf(inst, sizeof inst, "%s/inst.json", dir);
    char *a8[] = { "validate", mainp, inst };
    assert_int_equal(run_cli(a8, 3, out, sizeof out), 1);
    assert_non_null(strstr(out, "\"code\":\"WRONG_TYPE\""));
    /* and through --ref-dir, a file named so */
    snprintf(sub, sizeof sub, "a#b%%25c/o#t.json");
    write_file(sub, "{\"type\":\"integer\"}");
    write_file("reft.json", "{\"$ref\":\"https://x.test/o%23t.json\"}");
    char reft[300];
    snprintf(reft, sizeof reft, "%s/reft.json", g_tmpdir);
    char *a9[] = { "validate", "--ref-dir", dir, "--ref-base", "https://x.test/", reft, inst };
    assert_int_equal(run_cli(a9, 7, out, sizeof out), 1);
    assert_non_null(strstr(out, "\"code\":\"WRONG_TYPE\""));
    static const char *const in_dir[] = { "other.json", "main.json", "inst.json", "o#t.json" };
    for (size_t i = 0; i < sizeof in_dir / sizeof in_dir[0]; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", dir, in_dir[i]);
        unlink(p);
    }
    rmdir(dir);

    const char *names[] = { "s.json", "defs.json", "ok.json", "bad.json", "broken.json",
                            "badschema.json", "lax.json", "nul.json", "reft.json", "stdout.txt", "stderr.txt" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", g_tmpdir, names[i]);
        unlink(p);
    }
    rmdir(g_tmpdir);
}

/* A $ref naming a file no path can be (longer than PATH_MAX, or with a
 * %00 inside) is an unresolvable $ref, not a file to read: the decoded
 * path was written into a PATH_MAX stack buffer before its length was
 * checked (a 20,000-byte ref overflowed it). */
static void test_validate_cli_long_ref(void **state)
{
    (void)state;
    static const size_t lens[] = { 20000, PATH_MAX, PATH_MAX - 5, 300 };
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/test_schema_XXXXXX");
    assert_non_null(mkdtemp(g_tmpdir));
    write_file("one.json", "1");
    char inst[256], sp[256], out[4096];
    snprintf(inst, sizeof inst, "%s/one.json", g_tmpdir);
    snprintf(sp, sizeof sp, "%s/longref.json", g_tmpdir);
    for (size_t i = 0; i <= sizeof lens / sizeof lens[0]; i++) {
        size_t n = i < sizeof lens / sizeof lens[0] ? lens[i] : 0;
        char *text = malloc(n + 64);
        assert_non_null(text);
        if (n) {
            strcpy(text, "{\"$ref\":\"");
            memset(text + 9, 'a', n);
            strcpy(text + 9 + n, ".json\"}");
        } else {
            /* one.json, but with a NUL in its name: not that file */
            strcpy(text, "{\"$ref\":\"one.json%00x\"}");
        }
        write_file("longref.json", text);
        free(text);
        char *argv[] = { "validate", sp, inst };
        assert_int_equal(run_cli(argv, 3, out, sizeof out), 2);
        assert_string_equal(out, "");
        /* past SCHEMA_URI_MAX the compile refuses the $ref itself (after
         * the file loader has looked at it: the overflow was there) */
        if (!strstr(g_stderr, n + 5 > SCHEMA_URI_MAX ? "longer than" : "unresolvable $ref"))
            fail_msg("ref of %zu bytes: %s", n, g_stderr);
    }
    const char *names[] = { "one.json", "longref.json", "stdout.txt", "stderr.txt" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", g_tmpdir, names[i]);
        unlink(p);
    }
    rmdir(g_tmpdir);
}

static void test_registry_load_dir(void **state)
{
    (void)state;
    char dir[64] = "/tmp/test_schema_reg_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128], p1[160], p2[160];
    snprintf(sub, sizeof sub, "%s/nested", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(p1, sizeof p1, "%s/nested/name.json", dir);
    snprintf(p2, sizeof p2, "%s/notes.json", dir);
    FILE *f = fopen(p1, "w");
    fputs("{\"type\":\"string\",\"minLength\":2}", f);
    fclose(f);
    f = fopen(p2, "w");
    fputs("this is not json", f); /* skipped, not an error */
    fclose(f);
    schema_registry *reg = schema_registry_new();
    char err[256];
    assert_int_equal(schema_registry_load_dir(reg, dir, "http://schemas.test/", err, sizeof err), 0);
    cJSON *doc = cJSON_Parse("{\"$ref\":\"http://schemas.test/nested/name.json\"}");
    schema *s = schema_compile(reg, doc, NULL, err, sizeof err);
    assert_non_null(s);
    schema_violations v = { 0 };
    assert_int_equal(check(s, "\"ab\"", &v), 0);
    assert_int_equal(check(s, "\"a\"", &v), 1);
    assert_string_equal(v.items[0].keyword_location, "http://schemas.test/nested/name.json#/minLength");
    schema_violations_clear(&v);
    schema_free(s);
    cJSON_Delete(doc);
    schema_registry_free(reg);
    assert_int_not_equal(schema_registry_load_dir(NULL, dir, "x", err, sizeof err), 0);
    unlink(p1);
    unlink(p2);
    rmdir(sub);
    rmdir(dir);
}

/* ---- schema_mem_bytes ---------------------------------------------------- */

/* {"prefixItems":[{},...]} of n subschemas: about 240 times its text
 * compiled (a node and its location per {}), the case that made a cache
 * bounded by entries alone unbounded in memory. */
static char *prefix_items_text(size_t n)
{
    char *t = malloc(32 + 3 * n);
    assert_non_null(t);
    size_t l = (size_t)sprintf(t, "{\"prefixItems\":[");
    for (size_t i = 0; i < n; i++)
        l += (size_t)sprintf(t + l, i ? ",{}" : "{}");
    strcpy(t + l, "]}");
    return t;
}

/* n properties, each with a pattern of its own (PCRE2 code, compiled
 * outside the schema's arena) */
static char *patterns_text(size_t n)
{
    char *t = malloc(32 + 80 * n);
    assert_non_null(t);
    size_t l = (size_t)sprintf(t, "{\"properties\":{");
    for (size_t i = 0; i < n; i++)
        l += (size_t)sprintf(t + l, "%s\"p%zu\":{\"pattern\":\"^[a-z]+%zu(x|y)*[0-9]{2,5}$\"}", i ? "," : "", i, i);
    strcpy(t + l, "}}");
    return t;
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

/* glibc's count of the heap in use (ASan's allocator keeps no such count) */
#if !UNDER_ASAN
static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}
#endif

/* The estimate grows with the schema, and within a few tenths of what the
 * heap grew by compiling it (JIT code is mapped apart from the heap, so a
 * schema of regexes holds more than the heap shows: up to twice). */
static void mem_estimate_against_heap(const char *text, double lo, double hi)
{
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    char err[256];
    schema *warm = schema_compile(NULL, doc, NULL, err, sizeof err); /* PCRE2's once-only setup */
    assert_non_null(warm);
    schema_free(warm);
#if !UNDER_ASAN
    size_t before = heap_in_use();
#endif
    schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
    assert_non_null(s);
    size_t est = schema_mem_bytes(s);
    assert_true(est > strlen(text));
#if !UNDER_ASAN
    size_t grew = heap_in_use() - before;
    print_message("  %zu bytes of text: estimate %zu, heap +%zu (%.2f)\n", strlen(text), est, grew,
                  (double)est / (double)grew);
    if ((double)est < lo * (double)grew || (double)est > hi * (double)grew)
        fail_msg("estimate %zu, heap grew by %zu: not within %.2f-%.2f of it", est, grew, lo, hi);
#else
    (void)lo;
    (void)hi;
#endif
    schema_free(s);
    cJSON_Delete(doc);
}

static void test_mem_bytes(void **state)
{
    (void)state;
    assert_int_equal(schema_mem_bytes(NULL), 0);
    schema *one = compile_text("{}", NULL);
    size_t small = schema_mem_bytes(one);
    assert_true(small > 0);
    schema_free(one);
    /* 64 KB of text, as schemas.inline_max_bytes allows: about 15 MB */
    char *t = prefix_items_text(21000);
    schema *s = compile_text(t, NULL);
    size_t big = schema_mem_bytes(s);
    assert_true(big > 100 * strlen(t));
    assert_true(big < 1000 * strlen(t));
    schema_free(s);
    mem_estimate_against_heap(t, 0.9, 1.2);
    free(t);
    t = patterns_text(1000);
    mem_estimate_against_heap(t, 0.9, 2.0);
    free(t);
    /* copies of const and enum values (cJSON trees, outside the arena) */
    t = malloc(64 + 16 * 3000);
    assert_non_null(t);
    size_t l = (size_t)sprintf(t, "{\"const\":[");
    for (int i = 0; i < 3000; i++)
        l += (size_t)sprintf(t + l, "%s{\"k\":\"v%d\"}", i ? "," : "", i);
    strcpy(t + l, "],\"enum\":[[1,2,3],{\"four\":4}]}");
    mem_estimate_against_heap(t, 0.9, 1.2);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_and_paths),
        cmocka_unit_test(test_required_and_additional),
        cmocka_unit_test(test_pattern_properties),
        cmocka_unit_test(test_enum_const_equality),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_string_lengths_code_points),
        cmocka_unit_test(test_pattern_ecma),
        cmocka_unit_test(test_regex_fast_path_matches_pcre),
        cmocka_unit_test(test_regex_ecma_cases),
        cmocka_unit_test(test_regex_white_space_sets),
        cmocka_unit_test(test_regex_strict_validity),
        cmocka_unit_test(test_local_refs),
        cmocka_unit_test(test_anyof_closest_branch),
        cmocka_unit_test(test_oneof),
        cmocka_unit_test(test_cap_and_order),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_actual_truncated),
        cmocka_unit_test(test_compile_errors),
        cmocka_unit_test(test_location_amplification),
        cmocka_unit_test(test_multiple_of_large_numbers),
        cmocka_unit_test(test_limit_message_stays_utf8),
        cmocka_unit_test(test_many_dynamic_anchors),
        cmocka_unit_test(test_ref_pointer_strictness),
        cmocka_unit_test(test_content_json_strict),
        cmocka_unit_test(test_merged_enum_keeps_long_const),
        cmocka_unit_test(test_registry_remote_ref),
        cmocka_unit_test(test_registry_refuses_a_uri_taken),
        cmocka_unit_test(test_metaschema_ref),
        cmocka_unit_test(test_draft7_ref_siblings),
        cmocka_unit_test(test_unevaluated),
        cmocka_unit_test(test_format_assertion),
        cmocka_unit_test(test_format_edges),
        cmocka_unit_test(test_regex_limit),
        cmocka_unit_test(test_regex_long_strings_and_unset_backreferences),
        cmocka_unit_test(test_regex_time_budget),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_evaluation_budget),
        cmocka_unit_test(test_uri_max),
        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_draft7_dependencies_and_items),
        cmocka_unit_test(test_if_then_else),
        cmocka_unit_test(test_property_names_and_unique),
        cmocka_unit_test(test_multiple_of_decimals),
        cmocka_unit_test(test_duplicate_keywords_first_wins),
        cmocka_unit_test(test_limit_after_known_invalid),
        cmocka_unit_test(test_keyword_order_with_limit),
        cmocka_unit_test(test_long_and_many_violations),
        cmocka_unit_test(test_fixed_texts_shared_with_the_schema),
        cmocka_unit_test(test_oneof_closest_with_nested_anyof),
        cmocka_unit_test(test_discriminated_union),
        cmocka_unit_test(test_required_order_and_long_path),
        cmocka_unit_test(test_numbers_as_written),
        cmocka_unit_test(test_member_names_compared_exactly),
        cmocka_unit_test(test_validate_cli),
        cmocka_unit_test(test_validate_cli_long_ref),
        cmocka_unit_test(test_registry_load_dir),
        cmocka_unit_test(test_mem_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
