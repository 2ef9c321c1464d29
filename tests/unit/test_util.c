#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "util.h"

/* The per-second cache must give what strftime gives, across second,
 * day and year boundaries, in any order. */
static void test_rfc3339(void **s) {
    (void)s;
    static const int64_t stamps[] = {0, 999, 1000, 1001, 86399999, 86400000, 1735689599999, 1735689600000,
                                     1735689599998, 1763776000123, 1763776000999, 1763776001000, 951782400000};
    for (size_t i = 0; i < sizeof(stamps) / sizeof(stamps[0]); i++) {
        char got[40], want[40];
        util_rfc3339(stamps[i], got, sizeof(got));
        time_t t = (time_t)(stamps[i] / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        size_t n = strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want + n, sizeof(want) - n, ".%03dZ", (int)(stamps[i] % 1000));
        assert_string_equal(got, want);
        int64_t back = 0;
        assert_int_equal(util_parse_rfc3339(got, &back, NULL, 0), 0);
        assert_true(back == stamps[i]);
    }
    char small[10] = "xxxxxxxxx";
    util_rfc3339(1000, small, sizeof(small));
    assert_string_equal(small, ""); /* too small: empty, never cut */
}

static void *rfc3339_first(void *out) {
    util_rfc3339(-500, out, 40); /* this thread's first stamp, in second -1 */
    return NULL;
}

/* Before 1970: a whole second went one second back with 1000 ms
 * ("23:58.:00Z"), and a thread's first stamp in second -1 met the cache's
 * "nothing yet" and printed ".500Z" alone. */
static void test_rfc3339_before_1970(void **s) {
    (void)s;
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {-1000, "1969-12-31T23:59:59.000Z"}, {-2000, "1969-12-31T23:59:58.000Z"},
        {-1, "1969-12-31T23:59:59.999Z"},    {-1500, "1969-12-31T23:59:58.500Z"},
        {-86400000, "1969-12-31T00:00:00.000Z"},
    };
    char got[40];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        util_rfc3339(cases[i].ms, got, sizeof(got));
        assert_string_equal(got, cases[i].want);
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, rfc3339_first, got), 0);
    pthread_join(t, NULL);
    assert_string_equal(got, "1969-12-31T23:59:59.500Z");
}

/* Dates that do not exist and offsets beyond a day are refused with the
 * reason, not moved (timegm took 2026-02-31 for March 3rd, and sscanf's
 * %2d took +99:99, " 1" and "+1"). */
static void test_parse_rfc3339_ranges(void **s) {
    (void)s;
    static const struct {
        const char *text;
        int64_t ms;
    } ok[] = {
        {"2024-02-29T00:00:00Z", 1709164800000},
        {"1600-02-29T00:00:00Z", -11670998400000},
        {"2000-02-29T12:00:00.5+01:30", 951820200500},
        {"2026-11-26T01:00:00-23:59", 1795741140000},
        {"2026-12-31T23:59:60Z", 1798761600000}, /* leap second */
        {"2027-01-01t00:00:00.000999z", 1798761600000},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t ms = 0;
        char why[128] = "";
        if (util_parse_rfc3339(ok[i].text, &ms, why, sizeof(why)) != 0)
            fail_msg("%s refused: %s", ok[i].text, why);
        if (ms != ok[i].ms) fail_msg("%s: %lld, expected %lld", ok[i].text, (long long)ms, (long long)ok[i].ms);
    }
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"2026-02-31T00:00:00Z", "day 31 does not exist in 2026-02 (28 days)"},
        {"2023-02-29T00:00:00Z", "day 29 does not exist in 2023-02 (28 days)"},
        {"1900-02-29T00:00:00Z", "day 29 does not exist in 1900-02 (28 days)"},
        {"2026-04-31T00:00:00Z", "day 31 does not exist in 2026-04 (30 days)"},
        {"2026-01-00T00:00:00Z", "day 00 does not exist in 2026-01 (31 days)"},
        {"2026-13-01T00:00:00Z", "month 13 does not exist"},
        {"2026-00-01T00:00:00Z", "month 00 does not exist"},
        {"2026-01-01T00:00:00+99:99", "offset +99:99 is out of range (hours 00-23, minutes 00-59)"},
        {"2026-01-01T00:00:00-24:00", "offset -24:00 is out of range"},
        {"2026-01-01T00:00:00+23:60", "offset +23:60 is out of range"},
        {"2026-01-01T24:00:00Z", "time 24:00:00 is out of range"},
        {"2026-01-01T23:60:00Z", "time 23:60:00 is out of range"},
        {"2026-01-01T23:59:61Z", "time 23:59:61 is out of range"},
        {"2026-+1-01T00:00:00Z", "not of the form"},
        {"2026- 1-01T00:00:00Z", "not of the form"},
        {"2026-01-01T00:00:00+", "not of the form"},
        {"2026-01-01T00:00:00+01", "not of the form"},
        {"2026-01-01T00:00:00+01:0", "not of the form"},
        {"2026-01-01T00:00:00+01:000", "not of the form"},
        {"2026-01-01T00:00:00.Z", "not of the form"},
        {"2026-01-01 00:00:00Z", "not of the form"},
        {"2026-01-01T00:00:00", "not of the form"},
        {"2026-01-01", "not of the form"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 0;
        char why[128] = "";
        if (util_parse_rfc3339(bad[i].text, &ms, why, sizeof(why)) != -1)
            fail_msg("%s accepted (%lld)", bad[i].text, (long long)ms);
        if (strncmp(why, bad[i].why, strlen(bad[i].why)) != 0)
            fail_msg("%s: \"%s\", expected \"%s...\"", bad[i].text, why, bad[i].why);
        assert_int_equal(util_parse_rfc3339(bad[i].text, &ms, NULL, 0), -1);
    }
}

static void test_sbuf_printf_grows(void **s) {
    (void)s;
    sbuf b = {0};
    char big[1000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < 50; i++) assert_int_equal(sbuf_printf(&b, "%d:%s;", i, i % 7 ? "x" : big), 0);
    size_t want = 0;
    for (int i = 0; i < 50; i++) want += (size_t)snprintf(NULL, 0, "%d:%s;", i, i % 7 ? "x" : big);
    assert_int_equal(b.len, want);
    assert_int_equal(strlen(b.data), want);
    assert_memory_equal(b.data, "0:", 2);
    sbuf_free(&b);
}

/* What sbuf_json_string writes, a byte at a time (the obvious way). */
static size_t ref_escape(const unsigned char *in, size_t n, char *out) {
    char *o = out;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = in[i];
        if (c == '"' || c == '\\') o += sprintf(o, "\\%c", c);
        else if (c == '\b') o += sprintf(o, "\\b");
        else if (c == '\f') o += sprintf(o, "\\f");
        else if (c == '\n') o += sprintf(o, "\\n");
        else if (c == '\r') o += sprintf(o, "\\r");
        else if (c == '\t') o += sprintf(o, "\\t");
        else if (c < 0x20) o += sprintf(o, "\\u%04x", c);
        else *o++ = (char)c;
    }
    *o++ = '"';
    *o = '\0';
    return (size_t)(o - out);
}

/* Escaped strings read back as the original through cJSON. */
static void test_json_string(void **s) {
    (void)s;
    static const char *const strs[] = {"", "plain", "q\"b\\s/", "\b\f\n\r\t\x01\x1f\x7f", "h\xc3\xa9llo \xe4\xb8\x96",
                                       "</script>"};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        sbuf b = {0};
        assert_int_equal(sbuf_json_string(&b, strs[i], strlen(strs[i])), 0);
        cJSON *v = cJSON_Parse(b.data);
        assert_non_null(v);
        assert_string_equal(v->valuestring, strs[i]);
        char *c = cJSON_PrintUnformatted(v);
        assert_string_equal(b.data, c);
        free(c);
        cJSON_Delete(v);
        sbuf_free(&b);
    }
    /* Each byte that needs escaping (and some that do not), at every
     * position of a 40-byte run: the 16-byte blocks must find each. */
    static const unsigned char probes[] = {0x00, 0x01, 0x1f, 0x20, '"', '\\', '/', 0x7f, 0x80, 0xdf, 0xff, 'a'};
    for (size_t k = 0; k < sizeof(probes); k++) {
        for (size_t at = 0; at < 40; at++) {
            char in[41];
            memset(in, 'x', 40);
            in[40] = '\0';
            in[at] = (char)probes[k];
            sbuf b = {0};
            sbuf_puts(&b, "pre");
            assert_int_equal(sbuf_json_string(&b, in, 40), 0);
            char want[400];
            memcpy(want, "pre", 3);
            ref_escape((const unsigned char *)in, 40, want + 3);
            assert_int_equal(b.len, strlen(want));
            assert_memory_equal(b.data, want, b.len + 1);
            sbuf_free(&b);
        }
    }
}

/* Every length from 0 to 50 (whole 16-byte blocks, a tail, both), one or
 * two bytes to escape at every position of it, in a buffer of exactly
 * that length (the sanitized build reports a read past it): the escaped
 * text is the byte loop's. */
static void test_json_string_blocks(void **s) {
    (void)s;
    static const unsigned char probes[] = {0x00, 0x01, '\b', '\n', 0x1f, 0x20, '"', '\\', '/', 0x7f, 0x80, 0xff};
    for (size_t n = 0; n <= 50; n++) {
        for (size_t k = 0; k < sizeof(probes); k++) {
            for (size_t at = 0; at <= n; at++) {     /* at == n: none */
                for (size_t second = at; second <= n; second += 7) {
                    unsigned char *in = malloc(n ? n : 1);
                    assert_non_null(in);
                    for (size_t i = 0; i < n; i++) in[i] = (unsigned char)('a' + i % 26);
                    if (at < n) in[at] = probes[k];
                    if (second < n && second != at) in[second] = '"';
                    char want[512];
                    size_t want_len = ref_escape(in, n, want);
                    sbuf b = {0};
                    assert_int_equal(sbuf_puts(&b, "<"), 0);
                    assert_int_equal(sbuf_json_string(&b, (const char *)in, n), 0);
                    assert_int_equal(b.len, 1 + want_len);
                    assert_memory_equal(b.data + 1, want, want_len + 1);
                    sbuf_free(&b);
                    free(in);
                }
            }
        }
    }
}

/* util_clamp_ll: within the bounds, truncated; beyond them, NaN and the
 * infinities, the bound (never a cast out of range, which the sanitized
 * build would report). */
static void test_clamp_ll(void **s) {
    (void)s;
    static const struct {
        double d;
        long long lo, hi, want;
    } cases[] = {
        {2.9, 1, 10, 2},          {-2.9, -10, 10, -2},     {1, 1, 10, 1},
        {0.5, 1, 10, 1},          {10, 1, 10, 10},         {1e300, 1, 1000, 1000},
        {-1e300, -5, 5, -5},      {4e19, 0, LLONG_MAX, LLONG_MAX},
        {9.3e18, 0, LLONG_MAX, LLONG_MAX}, {-9.3e18, LLONG_MIN, 0, LLONG_MIN},
        {1e15, -1000000000000000LL, 1000000000000000LL, 1000000000000000LL},
        {HUGE_VAL, 0, 7, 7},      {-HUGE_VAL, 0, 7, 0},    {NAN, 3, 7, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (util_clamp_ll(cases[i].d, cases[i].lo, cases[i].hi) != cases[i].want)
            fail_msg("case %zu: %g in [%lld, %lld] gave %lld, want %lld", i, cases[i].d, cases[i].lo, cases[i].hi,
                     util_clamp_ll(cases[i].d, cases[i].lo, cases[i].hi), cases[i].want);
}

/* util_ltoa(v) writes what snprintf's %lld does, and says its length. */
static void check_ltoa(long long v) {
    char got[21], want[32];
    memset(got, 'x', sizeof(got));
    size_t n = util_ltoa(v, got);
    snprintf(want, sizeof(want), "%lld", v);
    assert_string_equal(got, want);
    assert_int_equal(n, strlen(want));
}

/* util_ltoa at the edges: of the type, and of every digit count (the
 * count is found before the digits are written), both signs. */
static void test_ltoa(void **s) {
    (void)s;
    const long long v[] = {0, 1, -1, 9, 10, -10, 99, 100, 123456789, -987654321, 1000000000000000000LL,
                           9223372036854775807LL, -9223372036854775807LL - 1};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) check_ltoa(v[i]);
    for (long long p = 1; p <= 1000000000000000000LL; p *= 10) {
        const long long e[] = {p - 1, p, p + 1, -(p - 1), -p, -(p + 1)};
        for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) check_ltoa(e[i]);
        if (p > 1000000000000000000LL / 10) break;
    }
}

/* util_concat joins, cuts to fit and says how long the whole was. */
/* \u escapes: hex digits of either case, and each code point as UTF-8
 * (the bytes util_utf8_valid accepts, of the lengths it counts). */
static void test_hex4_and_utf8_put(void **s) {
    (void)s;
    static const struct {
        const char *hex;
        unsigned cp;
        const char *utf8;
    } ok[] = {
        {"0041", 0x41, "A"},        {"00e9", 0xE9, "\xc3\xa9"},       {"00E9", 0xE9, "\xc3\xa9"},
        {"07FF", 0x7FF, "\xdf\xbf"}, {"0800", 0x800, "\xe0\xa0\x80"}, {"20ac", 0x20AC, "\xe2\x82\xac"},
        {"FFFF", 0xFFFF, "\xef\xbf\xbf"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        unsigned cp = 1;
        assert_int_equal(util_hex4(ok[i].hex, &cp), 0);
        assert_int_equal(cp, ok[i].cp);
        char out[4];
        size_t n = util_utf8_put(out, cp);
        assert_int_equal(n, strlen(ok[i].utf8));
        assert_memory_equal(out, ok[i].utf8, n);
        assert_true(util_utf8_valid(out, n));
    }
    char out[4];
    assert_int_equal(util_utf8_put(out, 0x1F600), 4);
    assert_memory_equal(out, "\xf0\x9f\x98\x80", 4);
    assert_int_equal(util_utf8_put(out, 0x10FFFF), 4);
    assert_memory_equal(out, "\xf4\x8f\xbf\xbf", 4);
    unsigned cp = 7;
    static const char *const bad[] = {"00g0", "12 4", "-123", "0x12", "ABC\0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) assert_int_equal(util_hex4(bad[i], &cp), -1);
    assert_int_equal(cp, 7); /* untouched on failure */
}

static void test_concat(void **s) {
    (void)s;
    char buf[8];
    assert_int_equal(util_concat(buf, sizeof(buf), "ab", ":", "cd", (char *)NULL), 5);
    assert_string_equal(buf, "ab:cd");
    assert_int_equal(util_concat(buf, sizeof(buf), "abcd", "efgh", "ij", (char *)NULL), 10);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(util_concat(buf, sizeof(buf), "abcdefg", (char *)NULL), 7);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(util_concat(buf, sizeof(buf), (char *)NULL), 0);
    assert_string_equal(buf, "");
    assert_int_equal(util_concat(buf, 1, "x", (char *)NULL), 1);
    assert_string_equal(buf, "");
    /* cut on a character's boundary, never inside one (U+62B1: 3 bytes) */
    assert_int_equal(util_concat(buf, sizeof(buf), "ab", "\xe6\x8a\xb1\xe6\x8a\xb1", (char *)NULL), 8);
    assert_string_equal(buf, "ab\xe6\x8a\xb1");
    assert_int_equal(util_concat(buf, sizeof(buf), "abcde", "\xe6\x8a\xb1", "z", (char *)NULL), 9);
    assert_string_equal(buf, "abcde");
    assert_true(util_utf8_valid(buf, strlen(buf)));
}

/* A text snprintf cut inside a character loses that character only. */
static void test_utf8_cut_end(void **s) {
    (void)s;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", ""},
        {"abc", "abc"},
        {"ab\xc3\xa9", "ab\xc3\xa9"},                 /* whole 2-byte */
        {"ab\xc3", "ab"},                             /* 2-byte, lead only */
        {"a\xe6\x8a\xb1", "a\xe6\x8a\xb1"},             /* whole 3-byte */
        {"a\xe6\x8a", "a"},                           /* 3-byte, 2 of 3 */
        {"a\xe6", "a"},
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},       /* whole 4-byte */
        {"x\xf0\x9f\x98", "x"},                       /* 4-byte, 3 of 4 */
        {"\xe6\x8a\xb1\xe6\x8a", "\xe6\x8a\xb1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[16];
        snprintf(buf, sizeof(buf), "%s", cases[i].in);
        util_utf8_cut_end(buf);
        assert_string_equal(buf, cases[i].out);
        assert_true(util_utf8_valid(buf, strlen(buf)));
    }
}

/* Text from outside that is not UTF-8: each byte that begins no
 * well-formed sequence becomes U+FFFD, the rest is kept as it was. */
static void test_utf8_scrub(void **s) {
    (void)s;
#define R "\xef\xbf\xbd" /* U+FFFD */
    static const struct {
        const char *in;
        size_t len;
        const char *out;
        size_t out_len;
    } cases[] = {
        {"", 0, "", 0},
        {"abc", 3, "abc", 3},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9", 5},             /* valid: the same */
        {"caf\xe9", 4, "caf" R, 6},                       /* Latin-1 */
        {"\xff\xfe{}", 4, R R "{}", 8},
        {"a\xe6\x8a", 3, "a" R R, 7},                     /* a cut 3-byte: 2 bytes, 2 marks */
        {"\xc0\xaf", 2, R R, 6},                          /* overlong */
        {"\xed\xa0\x80", 3, R R R, 9},                    /* a surrogate */
        {"\xf4\x90\x80\x80", 4, R R R R, 12},             /* past U+10FFFF */
        {"\xf0\x9f\x98\x80\x80", 5, "\xf0\x9f\x98\x80" R, 7}, /* a stray continuation */
        {"a\0b\xff", 4, "a\0b" R, 6},                     /* a NUL is kept */
    };
#undef R
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = 0;
        char *out = util_utf8_scrub(cases[i].in, cases[i].len, &n);
        assert_non_null(out);
        assert_int_equal(n, cases[i].out_len);
        assert_memory_equal(out, cases[i].out, n);
        assert_int_equal(out[n], '\0');
        assert_true(util_utf8_valid(out, n));
        free(out);
    }
}

/* Whole files, across the buffer's growth, with NULs inside; a missing
 * file is NULL with errno set. */
static void test_read_file(void **s) {
    (void)s;
    char path[] = "/tmp/retort-test-util-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = 100000;
    char *want = malloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (char)(i * 7 % 251);
    FILE *f = fdopen(fd, "wb");
    assert_int_equal(fwrite(want, 1, n, f), n);
    fclose(f);
    size_t len = 0;
    char *got = util_read_file(path, &len);
    assert_non_null(got);
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    assert_int_equal(got[n], '\0');
    free(got);
    f = fopen(path, "wb");
    fclose(f);
    got = util_read_file(path, &len);
    assert_non_null(got);
    assert_int_equal(len, 0);
    assert_string_equal(got, "");
    free(got);
    unlink(path);
    errno = 0;
    assert_null(util_read_file(path, &len));
    assert_int_equal(errno, ENOENT);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_rfc3339_before_1970),
        cmocka_unit_test(test_parse_rfc3339_ranges),
        cmocka_unit_test(test_sbuf_printf_grows),
        cmocka_unit_test(test_json_string),
        cmocka_unit_test(test_json_string_blocks),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_clamp_ll),
        cmocka_unit_test(test_ltoa),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_utf8_cut_end),
        cmocka_unit_test(test_utf8_scrub),
        cmocka_unit_test(test_hex4_and_utf8_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
