#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "offsets.h"

static void test_in_order(void **state) {
    (void)state;
    offsets *o = offsets_new();
    uint64_t e = offsets_add(o, 0, 10, NULL);
    offsets_add(o, 0, 11, NULL);
    int64_t commit = -1;
    assert_int_equal(offsets_done(o, 0, e, 10, &commit), 1);
    assert_int_equal(commit, 11);
    assert_int_equal(offsets_done(o, 0, e, 11, &commit), 1);
    assert_int_equal(commit, 12);
    assert_int_equal(offsets_pending(o), 0);
    offsets_free(o);
}

static void test_out_of_order_no_gap(void **state) {
    (void)state;
    offsets *o = offsets_new();
    uint64_t e = 0;
    for (int64_t off = 100; off < 105; off++) e = offsets_add(o, 3, off, NULL);
    int64_t commit = -1;
    /* 101..103 finish first: nothing may be committed while 100 is pending */
    assert_int_equal(offsets_done(o, 3, e, 102, &commit), 0);
    assert_int_equal(offsets_done(o, 3, e, 101, &commit), 0);
    assert_int_equal(offsets_done(o, 3, e, 103, &commit), 0);
    assert_int_equal(commit, -1);
    assert_int_equal(offsets_pending(o), 2);
    assert_int_equal(offsets_done(o, 3, e, 100, &commit), 1);
    assert_int_equal(commit, 104); /* 100..103 done, 104 pending */
    assert_int_equal(offsets_done(o, 3, e, 104, &commit), 1);
    assert_int_equal(commit, 105);
    /* a second completion of the same offset is refused */
    assert_int_equal(offsets_done(o, 3, e, 104, &commit), -1);
    offsets_free(o);
}

static void test_partitions_and_epochs(void **state) {
    (void)state;
    offsets *o = offsets_new();
    uint64_t e0 = offsets_add(o, 0, 5, NULL);
    uint64_t e1 = offsets_add(o, 1, 7, NULL);
    int64_t commit;
    offsets_drop(o, 0);
    assert_int_equal(offsets_pending(o), 1);
    /* revoked: its completion is ignored */
    assert_int_equal(offsets_done(o, 0, e0, 5, &commit), -1);
    /* re-assigned: a new epoch, the old job's completion still ignored */
    uint64_t e0b = offsets_add(o, 0, 5, NULL);
    assert_true(e0b != e0);
    assert_int_equal(offsets_done(o, 0, e0, 5, &commit), -1);
    assert_int_equal(offsets_done(o, 0, e0b, 5, &commit), 1);
    assert_int_equal(commit, 6);
    assert_int_equal(offsets_done(o, 1, e1, 7, &commit), 1);
    assert_int_equal(commit, 8);
    offsets_free(o);
}

/* Many offsets in random completion order: the committed position only
 * moves forward and always equals the lowest pending offset. */
static void test_random_order(void **state) {
    (void)state;
    enum { N = 5000 };
    offsets *o = offsets_new();
    uint64_t e = 0;
    for (int i = 0; i < N; i++) e = offsets_add(o, 0, 1000 + i, NULL);
    int *perm = malloc(N * sizeof(int));
    unsigned char *done = calloc(N, 1);
    for (int i = 0; i < N; i++) perm[i] = i;
    srand(7);
    for (int i = N - 1; i > 0; i--) {
        int k = rand() % (i + 1), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    int64_t last = 1000;
    int lowest = 0;
    for (int i = 0; i < N; i++) {
        int64_t commit = -1;
        int rc = offsets_done(o, 0, e, 1000 + perm[i], &commit);
        done[perm[i]] = 1;
        while (lowest < N && done[lowest]) lowest++;
        if (rc == 1) {
            assert_true(commit > last);
            last = commit;
        }
        assert_int_equal(last, 1000 + lowest);
    }
    assert_int_equal(last, 1000 + N);
    free(perm);
    free(done);
    offsets_free(o);
}

/* The consumer moved back (an offset reset to earliest after the log was
 * truncated, a topic made again): the offsets still in flight go stale
 * and the partition is tracked afresh.  Appended to them, 5 after 10 and
 * 11 broke the ring's order: 10 was never found, and nothing was stored
 * again while the partition stayed assigned. */
static void test_rewind(void **state) {
    (void)state;
    offsets *o = offsets_new();
    int64_t from = 0, commit = -1;
    uint64_t e = offsets_add(o, 0, 10, &from);
    assert_int_equal(from, -1);
    offsets_add(o, 0, 11, &from);
    assert_int_equal(from, -1);
    uint64_t e2 = offsets_add(o, 0, 5, &from);
    assert_int_equal(from, 11);
    assert_true(e2 != 0 && e2 != e);
    assert_int_equal(offsets_pending(o), 1);
    offsets_add(o, 0, 6, &from);
    assert_int_equal(from, -1);
    /* the old epoch's jobs finish and store nothing */
    assert_int_equal(offsets_done(o, 0, e, 10, &commit), -1);
    assert_int_equal(offsets_done(o, 0, e, 11, &commit), -1);
    assert_int_equal(offsets_done(o, 0, e2, 6, &commit), 0);
    assert_int_equal(offsets_done(o, 0, e2, 5, &commit), 1);
    assert_int_equal(commit, 7);
    assert_int_equal(offsets_pending(o), 0);
    /* the same offsets again, one of them done: only the undone counted */
    uint64_t e3 = offsets_add(o, 0, 20, NULL);
    offsets_add(o, 0, 21, NULL);
    assert_int_equal(offsets_done(o, 0, e3, 21, &commit), 0);
    uint64_t e4 = offsets_add(o, 0, 20, &from);
    assert_int_equal(from, 21);
    assert_true(e4 != e3);
    assert_int_equal(offsets_pending(o), 1);
    offsets_add(o, 0, 21, NULL);
    assert_int_equal(offsets_done(o, 0, e4, 20, &commit), 1);
    assert_int_equal(commit, 21);
    assert_int_equal(offsets_done(o, 0, e4, 21, &commit), 1);
    assert_int_equal(commit, 22);
    assert_int_equal(offsets_pending(o), 0);
    /* all done, then moved back: nothing in flight, same epoch is fine */
    uint64_t e5 = offsets_add(o, 0, 3, &from);
    assert_int_equal(from, -1);
    assert_int_equal(offsets_done(o, 0, e5, 3, &commit), 1);
    assert_int_equal(commit, 4);
    offsets_free(o);
}

/* Moved back into the window (the log truncated under the consumer, and
 * the position reset to its new end): 100..200 in flight, then 150.  The
 * messages 100..149 do not come again: their jobs still count, and
 * nothing is committed past them until they are done.  Made stale with
 * the others, they let 150's completion store 151, and a crash then lost
 * them. */
static void test_rewind_into_the_window(void **state) {
    (void)state;
    offsets *o = offsets_new();
    int64_t from = 0, commit = -1;
    uint64_t e = 0;
    for (int64_t off = 100; off <= 200; off++) e = offsets_add(o, 0, off, NULL);
    assert_int_equal(offsets_done(o, 0, e, 120, &commit), 0);
    uint64_t e2 = offsets_add(o, 0, 150, &from);
    assert_int_equal(from, 200);
    assert_true(e2 != 0 && e2 != e);
    assert_int_equal(offsets_pending(o), 49 + 1); /* 100..149 but 120, and 150 */
    offsets_add(o, 0, 151, &from);
    assert_int_equal(from, -1);
    /* the new 150 and 151 done: 100 is not, so nothing to store */
    assert_int_equal(offsets_done(o, 0, e2, 150, &commit), 0);
    assert_int_equal(offsets_done(o, 0, e2, 151, &commit), 0);
    /* the stale 150..200 store nothing, and do not pass for the new ones */
    assert_int_equal(offsets_done(o, 0, e, 150, &commit), -1);
    assert_int_equal(offsets_done(o, 0, e, 152, &commit), -1);
    assert_int_equal(offsets_done(o, 0, e, 200, &commit), -1);
    /* the new epoch's jobs do not pass for the old ones either */
    assert_int_equal(offsets_done(o, 0, e2, 101, &commit), -1);
    for (int64_t off = 101; off <= 149; off++)
        if (off != 120) assert_int_equal(offsets_done(o, 0, e, off, &commit), 0);
    assert_int_equal(offsets_done(o, 0, e, 100, &commit), 1);
    assert_int_equal(commit, 152);
    assert_int_equal(offsets_pending(o), 0);
    offsets_free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_out_of_order_no_gap),
        cmocka_unit_test(test_partitions_and_epochs),
        cmocka_unit_test(test_random_order),
        cmocka_unit_test(test_rewind),
        cmocka_unit_test(test_rewind_into_the_window),
    };
    return cmocka_run_group_tests_name("offsets", tests, NULL, NULL);
}
