#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "sticky.h"

/* ctx of the availability callback: which partitions have a leader, and
 * how often it was asked */
typedef struct leaders {
    int up[16];
    int asked;
} leaders;

static int available(const void *ctx, int32_t p) {
    leaders *l = (leaders *)ctx;
    l->asked++;
    return l->up[p];
}

static leaders all_up(void) {
    leaders l = {{0}, 0};
    for (int i = 0; i < 16; i++) l.up[i] = 1;
    return l;
}

static void test_one_partition_per_window(void **state) {
    (void)state;
    leaders l = all_up();
    sticky s = {0, -1, 5, 10000};
    /* the first message starts at the seed, and every message of the
     * window goes where it went */
    assert_int_equal(sticky_pick(&s, 1000000, 8, available, &l), 5);
    for (int64_t t = 1000000; t < 1010000; t += 700)
        assert_int_equal(sticky_pick(&s, t, 8, available, &l), 5);
    /* the window's end moves on to the next partition, round robin */
    assert_int_equal(sticky_pick(&s, 1010000, 8, available, &l), 6);
    assert_int_equal(sticky_pick(&s, 1019999, 8, available, &l), 6);
    assert_int_equal(sticky_pick(&s, 1020000, 8, available, &l), 7);
    assert_int_equal(sticky_pick(&s, 1030000, 8, available, &l), 0);
    assert_int_equal(sticky_pick(&s, 1040000, 8, available, &l), 1);
}

static void test_every_partition_in_turn(void **state) {
    (void)state;
    leaders l = all_up();
    sticky s = {0, -1, 123456789, 10000};
    int seen[6] = {0};
    int64_t t = 0;
    for (int w = 0; w < 60; w++, t += 10000) {
        int32_t p = sticky_pick(&s, t, 6, available, &l);
        assert_true(p >= 0 && p < 6);
        seen[p]++;
    }
    for (int p = 0; p < 6; p++) assert_int_equal(seen[p], 10);
}

static void test_skips_partitions_without_leader(void **state) {
    (void)state;
    leaders l = all_up();
    l.up[3] = l.up[4] = 0;
    sticky s = {0, -1, 2, 10000};
    assert_int_equal(sticky_pick(&s, 0, 6, available, &l), 2);
    assert_int_equal(sticky_pick(&s, 10000, 6, available, &l), 5);
    /* the current partition loses its leader mid-window: a new window
     * starts on the next one that has one */
    l.up[5] = 0;
    assert_int_equal(sticky_pick(&s, 12000, 6, available, &l), 0);
    assert_int_equal(sticky_pick(&s, 21999, 6, available, &l), 0);
    assert_int_equal(s.until_us, 22000);
    /* none has one: -1, and the state stays as it was */
    leaders none = {{0}, 0};
    assert_int_equal(sticky_pick(&s, 30000, 6, available, &none), -1);
    assert_int_equal(none.asked, 6);
    assert_int_equal(s.part, 0);
}

static void test_partition_count_changes(void **state) {
    (void)state;
    leaders l = all_up();
    sticky s = {0, -1, 0, 10000};
    assert_int_equal(sticky_pick(&s, 0, 16, available, &l), 0);
    s.part = 12;
    /* the topic now has 4 partitions (as librdkafka may report before
     * its metadata is complete): 12 is out of range, so a new one is
     * taken within it */
    int32_t p = sticky_pick(&s, 100, 4, available, &l);
    assert_true(p >= 0 && p < 4);
    assert_int_equal(sticky_pick(&s, 200, 4, available, &l), p);
    assert_int_equal(sticky_pick(&s, 200, 0, available, &l), -1);
}

static void test_zero_window_moves_every_message(void **state) {
    (void)state;
    leaders l = all_up();
    /* sticky.partitioning.linger.ms = 0 */
    sticky s = {0, -1, 0, 0};
    assert_int_equal(sticky_pick(&s, 7, 3, available, &l), 0);
    assert_int_equal(sticky_pick(&s, 7, 3, available, &l), 1);
    assert_int_equal(sticky_pick(&s, 7, 3, available, &l), 2);
    assert_int_equal(sticky_pick(&s, 7, 3, available, &l), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_partition_per_window),
        cmocka_unit_test(test_every_partition_in_turn),
        cmocka_unit_test(test_skips_partitions_without_leader),
        cmocka_unit_test(test_partition_count_changes),
        cmocka_unit_test(test_zero_window_moves_every_message),
    };
    return cmocka_run_group_tests_name("sticky", tests, NULL, NULL);
}
