/* Table-driven tests of the retry decision: every category x attempts left
 * x fixable x critical, plus transient budgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <cmocka.h>

#include "decide.h"

typedef struct row {
    decide_category cat;
    int attempt, max_attempts;
    int tries, max_tries;
    int critical, fixable, budget;
    decide_action want;
    const char *reason_has;
} row;

static const row table[] = {
    /* valid output is final whatever else holds */
    {DECIDE_CAT_OK, 1, 3, 0, 4, 0, 1, 0, DECIDE_FINAL, "valid on attempt 1"},
    {DECIDE_CAT_OK, 3, 3, 0, 4, 0, 1, 0, DECIDE_FINAL, "valid on attempt 3"},
    {DECIDE_CAT_OK, 2, 3, 4, 4, 1, 0, 1, DECIDE_FINAL, NULL},
    /* fixable invalid output: retry while attempts are left */
    {DECIDE_CAT_INVALID, 1, 3, 0, 4, 0, 1, 0, DECIDE_RETRY, "validation failed on attempt 1 of 3"},
    {DECIDE_CAT_INVALID, 2, 3, 0, 4, 0, 1, 0, DECIDE_RETRY, NULL},
    {DECIDE_CAT_INVALID, 3, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "validation failed after 3 attempts"},
    {DECIDE_CAT_INVALID, 1, 1, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "validation failed after 1 attempt"},
    {DECIDE_CAT_INVALID, 5, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "after 5 attempts"},
    /* not fixable or critical: escalate at once */
    {DECIDE_CAT_INVALID, 1, 3, 0, 4, 0, 0, 0, DECIDE_ESCALATE, "not fixable"},
    {DECIDE_CAT_INVALID, 1, 3, 0, 4, 1, 1, 0, DECIDE_ESCALATE, "critical"},
    {DECIDE_CAT_INVALID, 1, 3, 0, 4, 0, 1, 1, DECIDE_ESCALATE, "budget"},
    /* other output problems follow the same rule */
    {DECIDE_CAT_TRUNCATED, 1, 3, 0, 4, 0, 1, 0, DECIDE_RETRY, "truncated"},
    {DECIDE_CAT_TRUNCATED, 3, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "truncated failed after 3 attempts"},
    {DECIDE_CAT_EMPTY, 1, 2, 0, 4, 0, 1, 0, DECIDE_RETRY, NULL},
    {DECIDE_CAT_EMPTY, 2, 2, 0, 4, 0, 1, 0, DECIDE_ESCALATE, NULL},
    {DECIDE_CAT_REFUSAL, 1, 3, 0, 4, 1, 1, 0, DECIDE_ESCALATE, "critical failure (refusal)"},
    {DECIDE_CAT_REFUSAL, 1, 3, 0, 4, 0, 1, 0, DECIDE_RETRY, NULL},
    {DECIDE_CAT_CONTENT_FILTER, 1, 3, 0, 4, 1, 1, 0, DECIDE_ESCALATE, "content_filter"},
    /* transient failures retry in place on their own budget */
    {DECIDE_CAT_TIMEOUT, 1, 3, 0, 4, 0, 1, 0, DECIDE_RETRY_IN_PLACE, "timeout, retry 1 of 4"},
    {DECIDE_CAT_TIMEOUT, 3, 3, 3, 4, 0, 1, 0, DECIDE_RETRY_IN_PLACE, "retry 4 of 4"},
    {DECIDE_CAT_TIMEOUT, 1, 3, 4, 4, 0, 1, 0, DECIDE_ESCALATE, "llm call failed (timeout) after 5 tries"},
    {DECIDE_CAT_NETWORK, 1, 3, 0, 4, 0, 1, 0, DECIDE_RETRY_IN_PLACE, NULL},
    {DECIDE_CAT_NETWORK, 1, 3, 0, 0, 0, 1, 0, DECIDE_ESCALATE, "network"},
    {DECIDE_CAT_RATE_LIMITED, 2, 3, 1, 4, 0, 1, 0, DECIDE_RETRY_IN_PLACE, "rate_limited"},
    {DECIDE_CAT_RATE_LIMITED, 1, 3, 2, 4, 0, 1, 1, DECIDE_ESCALATE, "budget"},
    {DECIDE_CAT_SERVER_ERROR, 1, 3, 0, 4, 0, 0, 0, DECIDE_RETRY_IN_PLACE, NULL},
    {DECIDE_CAT_SERVER_ERROR, 1, 3, 4, 4, 0, 1, 0, DECIDE_ESCALATE, "server_error"},
    /* permanent failures escalate whatever the budget */
    {DECIDE_CAT_AUTH, 1, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "auth is not retryable"},
    {DECIDE_CAT_QUOTA, 1, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "quota is not retryable"},
    {DECIDE_CAT_BAD_REQUEST, 1, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "bad_request"},
    {DECIDE_CAT_CONTEXT_LENGTH, 1, 5, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "context_length"},
    {DECIDE_CAT_UNKNOWN_SCHEMA, 1, 3, 0, 4, 0, 1, 0, DECIDE_ESCALATE, "unknown_schema"},
    {DECIDE_CAT_INVALID_SCHEMA, 1, 3, 0, 4, 0, 0, 0, DECIDE_ESCALATE, "invalid_schema is not retryable"},
    {DECIDE_CAT_BUDGET, 1, 3, 0, 4, 0, 1, 1, DECIDE_ESCALATE, "budget"},
};

static void test_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const row *r = &table[i];
        decide_input in = {r->cat, r->attempt, r->max_attempts, r->tries, r->max_tries,
                           r->critical, r->fixable, r->budget};
        char reason[256] = "";
        decide_action got = decide(&in, reason, sizeof(reason));
        if (got != r->want) fail_msg("row %zu (%s): got %s, want %s", i, decide_category_name(r->cat),
                                     decide_action_name(got), decide_action_name(r->want));
        assert_true(reason[0] != '\0');
        if (r->reason_has && !strstr(reason, r->reason_has))
            fail_msg("row %zu: reason '%s' lacks '%s'", i, reason, r->reason_has);
    }
}

/* Exhaustive sweep: the invariants that must hold for every input. */
static void test_invariants(void **state) {
    (void)state;
    for (int cat = 0; cat < DECIDE_CAT_COUNT; cat++)
        for (int attempt = 1; attempt <= 4; attempt++)
            for (int max = 1; max <= 4; max++)
                for (int tries = 0; tries <= 3; tries++)
                    for (int bits = 0; bits < 8; bits++) {
                        decide_input in = {(decide_category)cat, attempt, max, tries, 2,
                                           bits & 1, (bits >> 1) & 1, (bits >> 2) & 1};
                        char reason[256];
                        decide_action a = decide(&in, reason, sizeof(reason));
                        /* final only for valid output, and always for it */
                        assert_int_equal(a == DECIDE_FINAL, cat == DECIDE_CAT_OK);
                        /* in-place retries only for transient failures within budget */
                        if (a == DECIDE_RETRY_IN_PLACE)
                            assert_true(decide_category_is_transient(in.category) && tries < 2 &&
                                        !in.budget_exceeded);
                        /* a retry always has an attempt left and nothing critical */
                        if (a == DECIDE_RETRY)
                            assert_true(attempt < max && !in.critical && !in.budget_exceeded &&
                                        (cat != DECIDE_CAT_INVALID || in.fixable));
                    }
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(decide_category_name(DECIDE_CAT_RATE_LIMITED), "rate_limited");
    assert_string_equal(decide_category_name(DECIDE_CAT_CONTEXT_LENGTH), "context_length");
    assert_string_equal(decide_action_name(DECIDE_ESCALATE), "escalate");
    assert_true(decide_category_is_transient(DECIDE_CAT_TIMEOUT));
    assert_false(decide_category_is_transient(DECIDE_CAT_AUTH));
    assert_false(decide_category_is_transient(DECIDE_CAT_QUOTA));
    assert_string_equal(decide_category_name(DECIDE_CAT_QUOTA), "quota");
    assert_string_equal(decide_category_name(DECIDE_CAT_BUDGET), "budget");
    assert_false(decide_category_is_transient(DECIDE_CAT_INVALID));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_invariants),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
