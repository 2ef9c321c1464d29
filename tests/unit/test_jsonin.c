/* jsonin must build the tree cJSON builds for valid JSON, and reject what
 * RFC 8259 rejects, including what cJSON lets through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "jsonin.h"
#include "jsonout.h"

/* Same shape, types, keys, strings and numbers (bit for bit), and the
 * same sibling links (the first child's prev is the last child). */
static void same_tree(const cJSON *a, const cJSON *b, const char *doc)
{
    if ((a->type & 0xFF) != (b->type & 0xFF))
        fail_msg("%s: type %d vs %d", doc, a->type & 0xFF, b->type & 0xFF);
    if (a->valueint != b->valueint)
        fail_msg("%s: valueint %d vs %d", doc, a->valueint, b->valueint);
    if (memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) != 0)
        fail_msg("%s: valuedouble %.17g vs %.17g", doc, a->valuedouble, b->valuedouble);
    /* a number's text (b is jsonin's: it keeps it, cJSON does not) */
    if ((b->type & 0xFF) == cJSON_Number) {
        if (a->valuestring || !b->valuestring || strtod(b->valuestring, NULL) != b->valuedouble)
            fail_msg("%s: number text \"%s\" for %.17g", doc, b->valuestring ? b->valuestring : "(null)",
                     b->valuedouble);
    } else if (!a->valuestring != !b->valuestring || (a->valuestring && strcmp(a->valuestring, b->valuestring)))
        fail_msg("%s: valuestring \"%s\" vs \"%s\"", doc, a->valuestring ? a->valuestring : "(null)",
                 b->valuestring ? b->valuestring : "(null)");
    if (!a->string != !b->string || (a->string && strcmp(a->string, b->string)))
        fail_msg("%s: key \"%s\" vs \"%s\"", doc, a->string ? a->string : "(null)", b->string ? b->string : "(null)");
    const cJSON *ca = a->child, *cb = b->child, *la = NULL, *lb = NULL;
    for (; ca && cb; la = ca, lb = cb, ca = ca->next, cb = cb->next) {
        if (la) {
            assert_ptr_equal(ca->prev, la);
            assert_ptr_equal(cb->prev, lb);
        }
        same_tree(ca, cb, doc);
    }
    if (ca || cb)
        fail_msg("%s: child counts differ", doc);
    if (a->child) {
        assert_ptr_equal(a->child->prev, la);
        assert_ptr_equal(b->child->prev, lb);
    }
}

static void check_same(const char *doc, size_t len)
{
    const char *end_c = NULL, *end_j = NULL;
    cJSON *c = cJSON_ParseWithLengthOpts(doc, len, &end_c, 0);
    size_t at = 0;
    cJSON *j = jsonin_parse(doc, len, &end_j, &at);
    if (!c)
        fail_msg("cJSON rejects the test document %s", doc);
    if (!j)
        fail_msg("jsonin rejects %s at byte %zu", doc, at);
    assert_ptr_equal(end_c, end_j);
    same_tree(c, j, doc);
    cJSON_Delete(c);
    jsonin_free(j);
}

static void test_same_as_cjson(void **s)
{
    (void)s;
    static const char *const docs[] = {
        "0", "-0", "1", "-1", "1.5", "-1.5", "1e5", "1E-5", "2.5e+3", "0.1", "1999.99", "0.000001",
        "123456789012345678901234567890", "9007199254740993", "9007199254740992", "999999999999999",
        "1000000000000000", "1e400", "-1e400", "5e-324", "1e-400", "2147483647", "2147483648", "-2147483648",
        "-2147483649", "0.30000000000000004", "1.7976931348623157e308", "1e22", "1e23", "123e-22", "123e-23",
        "4.35", "0.000000000000000000000000000001", "12345678901234567890e-10", "1.00000000000000011",
        "true", "false", "null", "\"\"", "\"abc\"", "\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\"",
        "\"\\u00e9\\u20ac\\ud83d\\ude00\\u0041\"", "\"x\\u0001y\\u001f\"", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
        "[]", "{}", "[[]]", "[{}]", "{\"a\":[]}", "[1,2,3]", "[1,[2,[3,[4]]],{\"k\":null}]",
        "{\"a\":1,\"a\":2,\"b\":{\"c\":[true,false,null,\"s\",-3.25e-2]}}",
        " \t\r\n{ \"a\" : [ 1 , 2 ] , \"b\" : \"c\" } \n",
        "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"status\":\"paid\",\"items\":[{\"sku\":\"ABC-1234\","
        "\"quantity\":2,\"price\":{\"amount\":1999.99,\"currency\":\"GBP\"}}],\"note\":\"a, b [c] {d}\"}",
        "\xEF\xBB\xBF{\"bom\":1}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        check_same(docs[i], strlen(docs[i]));
}

/* The mantissa * 10^k shortcut against strtod, over many decimal forms. */
static void test_numbers_match_strtod(void **s)
{
    (void)s;
    uint64_t r = 0x9E3779B97F4A7C15ull;
    char buf[80];
    for (int i = 0; i < 200000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int intd = (int)(r % 18), fracd = (int)((r >> 8) % 18), ex = (int)((r >> 16) % 61) - 30;
        size_t o = 0;
        if (r >> 63)
            buf[o++] = '-';
        uint64_t q = r >> 20;
        buf[o++] = (char)('1' + q % 9);
        for (int k = 0; k < intd; k++, q /= 7)
            buf[o++] = (char)('0' + q % 10);
        if (fracd) {
            buf[o++] = '.';
            for (int k = 0; k < fracd; k++, q /= 3)
                buf[o++] = (char)('0' + (q + (uint64_t)k) % 10);
        }
        if ((r >> 40) & 1)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "e%d", ex);
        buf[o] = '\0';
        cJSON *j = jsonin_parse(buf, o, NULL, NULL);
        assert_non_null(j);
        double want = strtod(buf, NULL);
        if (memcmp(&want, &j->valuedouble, sizeof want) != 0)
            fail_msg("%s: %.17g, strtod %.17g", buf, j->valuedouble, want);
        jsonin_free(j);
    }
}

#define EARLY ((size_t)-1)

static void test_rejects(void **s)
{
    (void)s;
    /* Several of these cJSON 1.7.15 accepts: leading zeros, "1.", white
     * space other than the four, raw control characters, \u with non-hex
     * digits (read as U+0000), and an unclosed container that ends the
     * text right after a closed one ("[[]" reads as [[]]). */
    static const struct {
        const char *doc;
        size_t at; /* where parsing stops; EARLY: a value ends before the text does */
    } bad[] = {
        { "", 0 }, { "   ", 3 }, { "01", EARLY }, { "-01", EARLY }, { "1.", 2 }, { ".5", 0 }, { "+1", 0 },
        { "-", 1 }, { "1e", 2 }, { "1e+", 3 }, { "1.e5", 2 }, { "-a", 1 }, { "[1,]", 3 }, { "{\"a\":1,}", 7 },
        { "[[]", 3 }, { "{\"a\":{}", 7 }, { "[1 2]", 3 }, { "{1:2}", 1 }, { "{\"a\" 1}", 5 }, { "{\"a\"}", 4 },
        { "\"abc", 4 }, { "\"a\tb\"", 2 }, { "\"\\x\"", 1 }, { "\"\\u12G4\"", 1 }, { "\"\\u12\"", 1 },
        { "\"\\ud800\"", 1 }, { "\"\\udc00\"", 1 }, { "\"\\ud800\\u0041\"", 1 }, { "\"\\", 1 }, { "tru", 0 },
        { "nul", 0 }, { "falsy", 0 }, { "\x01 1", 0 }, { "\f1", 0 }, { "[", 1 }, { "{", 1 }, { "{\"a\":", 5 },
        { "x", 0 }, { "[1,\v2]", 3 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t at = 999;
        const char *end = NULL;
        size_t len = strlen(bad[i].doc);
        cJSON *j = jsonin_parse(bad[i].doc, len, &end, &at);
        if (bad[i].at == EARLY) {
            /* "01" is 0 followed by 1: the caller sees the rest */
            assert_non_null(j);
            assert_true(end < bad[i].doc + len);
            jsonin_free(j);
            continue;
        }
        if (j)
            fail_msg("accepted \"%s\"", bad[i].doc);
        if (at != bad[i].at)
            fail_msg("\"%s\": stopped at %zu, expected %zu", bad[i].doc, at, bad[i].at);
        assert_null(end);
    }
}

/* Each number keeps its text as written, and jsonout prints it so: what
 * a double cannot hold (more than 17 digits, 1e400, trailing zeros) comes
 * out as it went in, where cJSON prints the double.  A duplicate keeps
 * it, and cJSON's own printer ignores it. */
static void test_number_text(void **s)
{
    (void)s;
    const char *doc = "{\"id\":12345678901234567890,\"n\":[9007199254740993,1e400,-0,1.50,2E-3,0.1],"
                      "\"x\":-1.0e+2}";
    cJSON *j = jsonin_parse_all(doc, strlen(doc), NULL);
    assert_non_null(j);
    char *out = jsonout_print(j);
    assert_string_equal(out, doc);
    free(out);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    assert_string_equal(id->valuestring, "12345678901234567890");
    assert_true(id->valuedouble == 12345678901234567890.0);
    cJSON *dup = cJSON_Duplicate(j, 1);
    out = jsonout_print(dup);
    assert_string_equal(out, doc);
    free(out);
    char *c = cJSON_PrintUnformatted(dup);
    assert_non_null(strstr(c, "\"id\":1.2345678901234567e+19"));
    free(c);
    cJSON_Delete(dup); /* frees the copied texts: ASan checks */
    /* a tree cJSON built prints as before */
    cJSON *built = cJSON_CreateNumber(12345678901234567890.0);
    out = jsonout_print(built);
    assert_string_equal(out, "1.2345678901234567e+19");
    free(out);
    cJSON_Delete(built);
    jsonin_free(j);
    /* the string area holds the texts too: numbers only, back to back,
     * with the last one at the very end of the input */
    const char *nums[] = { "7", "-12.5e-3", "[1,2,3]", "[1e1,22,333,4444]", "[[0],-0.0]", " 42 " };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        size_t len = strlen(nums[i]);
        char *t = malloc(len); /* unterminated: ASan sees a read past it */
        memcpy(t, nums[i], len);
        cJSON *v = jsonin_parse_all(t, len, NULL);
        assert_non_null(v);
        out = jsonout_print(v);
        char want[64];
        size_t a = strspn(nums[i], " "), l = strlen(nums[i] + a);
        while (l && nums[i][a + l - 1] == ' ')
            l--;
        snprintf(want, sizeof want, "%.*s", (int)l, nums[i] + a);
        assert_string_equal(out, want);
        free(out);
        jsonin_free(v);
        free(t);
    }
}

/* "\u0000" is an error where cJSON cuts the string short, in a value
 * or a key, at any depth; the error offset is its backslash, which
 * jsonin_nul_at recognises (and nothing else). */
static void test_nul_escape(void **s)
{
    (void)s;
    static const struct {
        const char *doc;
        size_t at;
    } nul[] = {
        { "\"\\u0000\"", 1 },
        { "\"abc\\u0000def\"", 4 },
        { "{\"a\\u0000\":1}", 3 },
        { "{\"k\":[1,{\"n\":\"x\\u0000\"}]}", 15 },
        { "[\"\\u00e9\\u0000\"]", 8 },
    };
    for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
        size_t len = strlen(nul[i].doc), at = 999;
        cJSON *c = cJSON_ParseWithLength(nul[i].doc, len);
        assert_non_null(c); /* cJSON takes it, cut short */
        cJSON_Delete(c);
        cJSON *j = jsonin_parse(nul[i].doc, len, NULL, &at);
        if (j)
            fail_msg("accepted %s", nul[i].doc);
        if (at != nul[i].at)
            fail_msg("%s: stopped at %zu, expected %zu", nul[i].doc, at, nul[i].at);
        assert_true(jsonin_nul_at(nul[i].doc, len, at));
        assert_null(jsonin_parse_all(nul[i].doc, len, &at));
        assert_true(jsonin_nul_at(nul[i].doc, len, at));
    }
    /* other failures are not taken for one */
    static const char *const other[] = { "\"\\u000\"", "\"\\u0001", "[1,]", "\"\\x\"", "\"\\u0001\" x" };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        size_t len = strlen(other[i]), at = 999;
        assert_null(jsonin_parse_all(other[i], len, &at));
        if (jsonin_nul_at(other[i], len, at))
            fail_msg("%s: taken for a NUL at %zu", other[i], at);
    }
    assert_false(jsonin_nul_at("\\u0000", 6, 7));
    assert_false(jsonin_nul_at("\\u000", 5, 0));
    assert_false(jsonin_nul_at(NULL, 0, 0));
    /* \u0000 written as an escaped backslash and text is no NUL */
    cJSON *ok = jsonin_parse_all("\"\\\\u0000\"", 9, NULL);
    assert_non_null(ok);
    assert_string_equal(ok->valuestring, "\\u0000");
    jsonin_free(ok);
}

/* The input need not be terminated, and the value may stop early. */
static void test_bounds_and_end(void **s)
{
    (void)s;
    static const char *const docs[] = { "123", "-1.5e3", "\"abc\"", "[1,2]", "{\"a\":true}", "null", "12345678901234567890" };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        size_t len = strlen(docs[i]);
        char *exact = malloc(len); /* no NUL: ASan catches a read past it */
        memcpy(exact, docs[i], len);
        const char *end = NULL;
        cJSON *j = jsonin_parse(exact, len, &end, NULL);
        assert_non_null(j);
        assert_ptr_equal(end, exact + len);
        jsonin_free(j);
        /* every proper prefix but the numbers' is an error, and none reads past */
        for (size_t k = 0; k < len; k++) {
            char *pre = malloc(k ? k : 1);
            memcpy(pre, docs[i], k);
            cJSON *p = jsonin_parse(pre, k, NULL, NULL);
            if (p && !(docs[i][0] == '-' || (docs[i][0] >= '0' && docs[i][0] <= '9')))
                fail_msg("prefix %zu of %s accepted", k, docs[i]);
            jsonin_free(p);
            free(pre);
        }
        free(exact);
    }
    const char *text = "{\"a\":[1]} and more, [{,";
    const char *end = NULL;
    cJSON *j = jsonin_parse(text, strlen(text), &end, NULL);
    assert_non_null(j);
    assert_ptr_equal(end, text + 9);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "a")->string, "a");
    /* the tree reads, prints and duplicates like any cJSON tree */
    char *printed = cJSON_PrintUnformatted(j);
    assert_string_equal(printed, "{\"a\":[1]}");
    cJSON *dup = cJSON_Duplicate(j, 1);
    assert_true(cJSON_Compare(dup, j, 1));
    cJSON_Delete(dup);
    cJSON_free(printed);
    jsonin_free(j);
    jsonin_free(NULL);
    assert_null(jsonin_parse(NULL, 0, NULL, NULL));
}

/* Many nodes: the block is sized by counting brackets and commas, 16
 * bytes at a time with byte counters that are summed every 255 blocks. */
static void test_large(void **s)
{
    (void)s;
    for (size_t n = 1; n <= 20000; n = n * 3 + 1) {
        char *doc = malloc(2 * n + 2);
        size_t o = 0;
        doc[o++] = '[';
        for (size_t i = 0; i < n; i++) {
            doc[o++] = (char)('0' + i % 10);
            doc[o++] = i + 1 < n ? ',' : ']';
        }
        cJSON *j = jsonin_parse(doc, o, NULL, NULL);
        assert_non_null(j);
        assert_int_equal(cJSON_GetArraySize(j), n);
        jsonin_free(j);
        check_same(doc, o);
        free(doc);
    }
}

/* One value and nothing but white space around it. */
static void test_parse_all(void **s)
{
    (void)s;
    size_t at = 0;
    cJSON *j = jsonin_parse_all(" \n{\"a\":[1]} \r\n\t", 13, &at);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "a")), 1);
    jsonin_free(j);
    assert_null(jsonin_parse_all("{} {}", 5, &at));
    assert_int_equal(at, 3);
    assert_null(jsonin_parse_all("01", 2, &at));
    assert_int_equal(at, 1);
    assert_null(jsonin_parse_all("[1,", 3, &at));
    assert_int_equal(at, 3);
    assert_null(jsonin_parse_all("  ", 2, &at));
    assert_int_equal(at, 2);
}

static void test_depth(void **s)
{
    (void)s;
    char *doc = malloc(2 * 1001 + 1);
    for (int depth = 1000; depth <= 1001; depth++) {
        memset(doc, '[', (size_t)depth);
        memset(doc + depth, ']', (size_t)depth);
        size_t at = 0;
        cJSON *j = jsonin_parse(doc, 2 * (size_t)depth, NULL, &at);
        if (depth == 1000) {
            assert_non_null(j);
            check_same(doc, 2 * (size_t)depth);
        } else {
            assert_null(j);
            assert_int_equal(at, 1000);
        }
        jsonin_free(j);
    }
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_cjson),
        cmocka_unit_test(test_numbers_match_strtod),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_nul_escape),
        cmocka_unit_test(test_number_text),
        cmocka_unit_test(test_bounds_and_end),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_parse_all),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
