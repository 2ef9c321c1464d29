/* metrics_violation keeps one series per code, whatever its length, and
 * metrics_render writes label values as the exposition format wants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "metrics.h"

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* A code longer than its slot was stored cut and compared whole: each
 * time it came, it took a new slot, one series a time, until the 64 were
 * used up. */
static void test_long_codes_have_one_series(void **s)
{
    (void)s;
    metrics m;
    metrics_init(&m);
    const char *code = "A_VERY_LONG_VIOLATION_CODE_OVER_THIRTY_TWO_BYTES_AND_STILL_GOING"; /* 64 bytes */
    assert_int_equal(strlen(code), 64);
    for (int i = 0; i < 3; i++) metrics_violation(&m, code);
    metrics_violation(&m, "SHORT");
    sbuf b = { 0 };
    metrics_render(&m, &b);
    char want[128];
    snprintf(want, sizeof want, "retort_violations_total{code=\"%s\"} 3\n", code);
    assert_non_null(strstr(b.data, want));
    assert_non_null(strstr(b.data, "retort_violations_total{code=\"SHORT\"} 1\n"));
    assert_int_equal(count(b.data, "retort_violations_total{"), 2);
    sbuf_free(&b);
}

/* Codes are checked where they are made; a label value is escaped all
 * the same: a quote and a newline in one forged a series. */
static void test_label_values_are_escaped(void **s)
{
    (void)s;
    metrics m;
    metrics_init(&m);
    metrics_violation(&m, "E\"} 1\nretort_up{dependency=\"x\\");
    sbuf b = { 0 };
    metrics_render(&m, &b);
    assert_non_null(strstr(b.data, "retort_violations_total{code=\"E\\\"} 1\\nretort_up{dependency=\\\"x\\\\\"} 1\n"));
    assert_null(strstr(b.data, "\nretort_up{dependency=\"x"));
    sbuf_free(&b);
}

/* Past the 64 series, the rest of the codes are counted under a label no
 * code can be: "OTHER", a code a rule may use, made two series of one. */
static void test_overflow_is_a_series_of_its_own(void **s)
{
    (void)s;
    metrics m;
    metrics_init(&m);
    metrics_violation(&m, "OTHER");
    char code[16];
    for (int i = 0; i < METRICS_MAX_CODES + 2; i++) {
        snprintf(code, sizeof code, "C%d", i);
        metrics_violation(&m, code);
    }
    sbuf b = { 0 };
    metrics_render(&m, &b);
    assert_int_equal(count(b.data, "retort_violations_total{code=\"OTHER\"}"), 1);
    assert_non_null(strstr(b.data, "retort_violations_total{code=\"OTHER\"} 1\n"));
    assert_non_null(strstr(b.data, "retort_violations_total{code=\"_other\"} 3\n"));
    sbuf_free(&b);
}

/* A redirect (curl follows none: a base_url that answers 301 fails every
 * call) was counted as a 2xx. */
static void test_status_classes(void **s)
{
    (void)s;
    metrics m;
    metrics_init(&m);
    static const long status[] = { 200, 301, 308, 404, 429, 503, 0 };
    for (size_t i = 0; i < sizeof status / sizeof status[0]; i++)
        metrics_llm_call(&m, 0, status[i]);
    metrics_llm_call(&m, 1, 302);
    sbuf b = { 0 };
    metrics_render(&m, &b);
    static const char *const want[] = {
        "{provider=\"openai\",status_class=\"2xx\"} 1\n", "{provider=\"openai\",status_class=\"3xx\"} 2\n",
        "{provider=\"openai\",status_class=\"4xx\"} 1\n", "{provider=\"openai\",status_class=\"429\"} 1\n",
        "{provider=\"openai\",status_class=\"5xx\"} 1\n", "{provider=\"openai\",status_class=\"error\"} 1\n",
        "{provider=\"anthropic\",status_class=\"3xx\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(b.data, want[i]))
            fail_msg("no %s in\n%s", want[i], b.data);
    assert_null(strstr(b.data, "{provider=\"anthropic\",status_class=\"2xx\"}"));
    sbuf_free(&b);
}

static void no_start(llm_gate_node *n, void *ud)
{
    (void)n;
    (void)ud;
}

/* The gate's lanes: a series per model, its name escaped like any label. */
static void test_llm_lanes(void **s)
{
    (void)s;
    llm_gate *g = llm_gate_new(16, 1, 60000, no_start, NULL);
    assert_non_null(g);
    llm_gate_node a = { 0 }, q = { 0 }, waiting = { 0 }, h = { 0 };
    assert_int_equal(llm_gate_push(g, "gpt-4o", &a), 0);
    assert_int_equal(llm_gate_push(g, "m\"x", &q), 0);
    assert_int_equal(llm_gate_push(g, "held", &h), 0);
    llm_gate_pump(g, 1000);
    llm_gate_leave(g, &a, 429, 2500, 1000, NULL, NULL);
    assert_int_equal(llm_gate_hold(g, &h, 61000), 1);
    llm_gate_leave(g, &h, 0, -1, 1000, NULL, NULL);
    assert_int_equal(llm_gate_push(g, "gpt-4o", &waiting), 0);
    sbuf b = { 0 };
    metrics_render_llm_lanes(g, 1500, &b);
    assert_non_null(strstr(b.data, "\nretort_llm_concurrency_limit{model=\"gpt-4o\"} 8\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_concurrency_limit{model=\"m\\\"x\"} 16\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_paused_seconds{model=\"gpt-4o\"} 2\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_paused_seconds{model=\"m\\\"x\"} 0\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_waiting_calls{model=\"gpt-4o\"} 1\n"));
    assert_non_null(strstr(b.data, "# TYPE retort_llm_concurrency_limit gauge\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_held{model=\"held\"} 1\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_held{model=\"gpt-4o\"} 0\n"));
    assert_non_null(strstr(b.data, "\nretort_llm_paused_seconds{model=\"held\"} 59.5\n"));
    sbuf_free(&b);
    llm_gate_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_codes_have_one_series),
        cmocka_unit_test(test_label_values_are_escaped),
        cmocka_unit_test(test_overflow_is_a_series_of_its_own),
        cmocka_unit_test(test_status_classes),
        cmocka_unit_test(test_llm_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
