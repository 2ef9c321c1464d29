#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "recent.h"

static void test_covers_the_range_of_its_run(void **state) {
    (void)state;
    recent *r = recent_new(8);
    assert_non_null(r);
    assert_int_equal(recent_add(r, "job-a", 1, 2, 3), 0);
    static const struct {
        const char *id;
        int run, attempt, covered;
    } cases[] = {
        {"job-a", 1, 1, 0}, /* attempt 1 was not run after a retry job */
        {"job-a", 1, 2, 1}, {"job-a", 1, 3, 1},
        {"job-a", 1, 4, 0}, /* the retry job of the last attempt: not run here */
        {"job-a", 2, 2, 0}, /* another run (retort resubmit) */
        {"job-b", 1, 2, 0}, {"job-", 1, 2, 0}, {"job-aa", 1, 2, 0}, {"", 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(recent_covers(r, cases[i].id, cases[i].run, cases[i].attempt), cases[i].covered);
    assert_int_equal(recent_count(r), 1);
    recent_free(r);
}

static void test_the_oldest_goes_first(void **state) {
    (void)state;
    recent *r = recent_new(3);
    char id[32];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        assert_int_equal(recent_add(r, id, 1, 2, 2), 0);
        assert_int_equal(recent_count(r), i < 3 ? (size_t)i + 1 : 3);
    }
    /* 0 and 1 were overwritten; 2, 3, 4 are held */
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "job-%d", i);
        assert_int_equal(recent_covers(r, id, 1, 2), i >= 2);
    }
    recent_free(r);
}

static void test_many_ids_share_buckets(void **state) {
    (void)state;
    /* 1,000 entries over 1,024 buckets: chains of several; every id is
     * found, with its own range, until it is overwritten */
    recent *r = recent_new(1000);
    char id[32];
    for (int i = 0; i < 1500; i++) {
        snprintf(id, sizeof(id), "%08x-%d", (unsigned)i * 2654435761u, i);
        assert_int_equal(recent_add(r, id, 1 + i % 3, 2 + i % 2, 2 + i % 2 + i % 4), 0);
    }
    for (int i = 0; i < 1500; i++) {
        snprintf(id, sizeof(id), "%08x-%d", (unsigned)i * 2654435761u, i);
        int held = i >= 500;
        int first = 2 + i % 2, last = first + i % 4, run = 1 + i % 3;
        assert_int_equal(recent_covers(r, id, run, first), held);
        assert_int_equal(recent_covers(r, id, run, last), held);
        assert_int_equal(recent_covers(r, id, run, last + 1), 0);
        assert_int_equal(recent_covers(r, id, run, first - 1), 0);
        assert_int_equal(recent_covers(r, id, run + 1, first), 0);
    }
    assert_int_equal(recent_count(r), 1000);
    recent_free(r);
}

static void test_runs_of_one_job_side_by_side(void **state) {
    (void)state;
    recent *r = recent_new(4);
    assert_int_equal(recent_add(r, "j", 1, 2, 2), 0);
    assert_int_equal(recent_add(r, "j", 2, 2, 4), 0);
    assert_true(recent_covers(r, "j", 1, 2));
    assert_false(recent_covers(r, "j", 1, 3));
    assert_true(recent_covers(r, "j", 2, 3));
    recent_free(r);
}

static void test_bounds(void **state) {
    (void)state;
    assert_null(recent_new(0));
    recent_free(NULL);
    recent *r = recent_new(1);
    assert_int_equal(recent_add(r, "x", 1, 2, 2), 0);
    assert_int_equal(recent_add(r, "y", 1, 2, 2), 0);
    assert_false(recent_covers(r, "x", 1, 2));
    assert_true(recent_covers(r, "y", 1, 2));
    assert_int_equal(recent_count(r), 1);
    recent_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_covers_the_range_of_its_run),
        cmocka_unit_test(test_the_oldest_goes_first),
        cmocka_unit_test(test_many_ids_share_buckets),
        cmocka_unit_test(test_runs_of_one_job_side_by_side),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
