#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "llm_gate.h"

/* A call waiting at the gate, as the worker's job embeds its node. */
typedef struct call {
    llm_gate_node node;
    const char *model;
    int started;
} call;

typedef struct rec {
    llm_gate *g;
    call *order[256]; /* in the order the gate started them */
    size_t n;
    /* a start that fails at once: leaves and pumps from inside the pump */
    int fail_starts;
    int depth, max_depth;
} rec;

static void on_start(llm_gate_node *n, void *ud) {
    rec *r = ud;
    call *c = (call *)((char *)n - offsetof(call, node));
    c->started++;
    if (r->n < sizeof(r->order) / sizeof(r->order[0])) r->order[r->n] = c;
    r->n++;
    if (r->fail_starts) {
        r->depth++;
        if (r->depth > r->max_depth) r->max_depth = r->depth;
        llm_gate_leave(r->g, n, 0, -1, 0, NULL, NULL);
        llm_gate_pump(r->g, 0);
        r->depth--;
    }
}

static llm_gate *gate(rec *r, size_t max_inflight, int aimd) {
    memset(r, 0, sizeof(*r));
    r->g = llm_gate_new(max_inflight, aimd, 5000, on_start, r);
    assert_non_null(r->g);
    return r->g;
}

static void push(llm_gate *g, call *c, size_t n, const char *model) {
    for (size_t i = 0; i < n; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].model = model;
        assert_int_equal(llm_gate_push(g, model, &c[i].node), 0);
    }
}

static size_t started(const call *c, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += c[i].started;
    return k;
}

/* model's lane as llm_gate_lane_get gives it */
static llm_gate_lane_info lane_info(const llm_gate *g, const char *model) {
    llm_gate_lane_info info = {0};
    for (size_t i = 0; i < llm_gate_lanes(g); i++) {
        llm_gate_lane_get(g, i, &info);
        if (!strcmp(info.model, model)) return info;
    }
    fail_msg("no lane %s", model);
    return info;
}

static double lane_limit(const llm_gate *g, const char *model) { return lane_info(g, model).limit; }

/* The process bound holds whatever the lanes allow, and calls start in
 * the order they came within a lane. */
static void test_max_inflight_bounds_every_lane(void **state) {
    (void)state;
    rec r;
    llm_gate *g = gate(&r, 4, 1);
    call c[10];
    push(g, c, 10, "m");
    assert_int_equal(llm_gate_pump(g, 1000), 0);
    assert_int_equal(started(c, 10), 4);
    assert_int_equal(llm_gate_active(g), 4);
    for (size_t i = 0; i < 4; i++) assert_ptr_equal(r.order[i], &c[i]);
    /* one ends: one more starts, the next in line */
    llm_gate_leave(g, &c[0].node, 200, -1, 1001, NULL, NULL);
    llm_gate_pump(g, 1001);
    assert_int_equal(started(c, 10), 5);
    assert_ptr_equal(r.order[4], &c[4]);
    llm_gate_free(g);
    llm_gate_free(NULL);
}

/* AIMD, as a table: what each status does to the lane's limit (16 at
 * first), with the time it comes at. */
static void test_aimd_halves_on_429_once_a_second_and_grows_back(void **state) {
    (void)state;
    static const struct {
        uint64_t at_ms;
        long status;
        int lowered;
        double limit;
    } steps[] = {
        {1000, 429, 1, 8},      /* halves */
        {1500, 429, 0, 8},      /* same burst: within the second, not again */
        {2000, 429, 1, 4},      /* a second later: again */
        {2001, 500, 0, 4},      /* a server error says nothing of the rate */
        {2002, 200, 0, 4.25},   /* a success adds 1/limit */
        {3500, 429, 1, 2.125},
        {5000, 429, 1, 1.0625},
        {6500, 429, 1, 1},      /* never below one call */
        {8000, 429, 1, 1},
    };
    rec r;
    llm_gate *g = gate(&r, 16, 1);
    call c[1];
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        push(g, c, 1, "m");
        llm_gate_pump(g, steps[i].at_ms);
        assert_int_equal(c[0].started, 1);
        double before = -1, after = -1;
        int lowered = llm_gate_leave(g, &c[0].node, steps[i].status, -1, steps[i].at_ms, &before, &after);
        assert_int_equal(lowered, steps[i].lowered);
        if (lowered) assert_true(after == before / 2 || after == 1);
        assert_true(lane_limit(g, "m") == steps[i].limit);
    }
    /* grows back to max_inflight and no further */
    for (int i = 0; i < 400; i++) {
        push(g, c, 1, "m");
        llm_gate_pump(g, 9000);
        llm_gate_leave(g, &c[0].node, 200, -1, 9000, NULL, NULL);
    }
    assert_true(lane_limit(g, "m") == 16);
    llm_gate_free(g);

    /* llm.aimd off: a 429 leaves the limit alone */
    g = gate(&r, 16, 0);
    push(g, c, 1, "m");
    llm_gate_pump(g, 1000);
    assert_int_equal(llm_gate_leave(g, &c[0].node, 429, -1, 1000, NULL, NULL), 0);
    assert_true(lane_limit(g, "m") == 16);
    llm_gate_free(g);
}

/* A lowered limit holds the lane's calls back though the process has room. */
static void test_a_lowered_limit_holds_its_lane(void **state) {
    (void)state;
    rec r;
    llm_gate *g = gate(&r, 8, 1);
    call a[20];
    push(g, a, 8, "a");
    llm_gate_pump(g, 1000);
    assert_int_equal(started(a, 8), 8);
    llm_gate_leave(g, &a[0].node, 429, -1, 1000, NULL, NULL); /* 8 -> 4 */
    /* server errors: no change either way */
    for (int i = 1; i < 8; i++) llm_gate_leave(g, &a[i].node, 500, -1, 1000, NULL, NULL);
    push(g, a + 8, 12, "a");
    llm_gate_pump(g, 1001);
    assert_int_equal(started(a + 8, 12), 4);
    assert_int_equal(llm_gate_active(g), 4);
    llm_gate_free(g);
}

/* A gate of 8 calls whose lane "model-a" a 429 at 1000 ms paused for
 * retry_after_ms: a[0]'s call, its only one, has left. */
static llm_gate *paused_gate(rec *r, call *a, long retry_after_ms) {
    llm_gate *g = gate(r, 8, 1);
    push(g, a, 1, "model-a");
    llm_gate_pump(g, 1000);
    llm_gate_leave(g, &a[0].node, 429, retry_after_ms, 1000, NULL, NULL);
    return g;
}

/* A Retry-After pauses its model's lane only: another model's calls start
 * meanwhile, and the pump says when to come back. */
static void test_retry_after_pauses_that_model_only(void **state) {
    (void)state;
    rec r;
    call a[4], b[4];
    llm_gate *g = paused_gate(&r, a, 3000);
    push(g, a + 1, 3, "model-a");
    push(g, b, 4, "model-b");
    assert_int_equal(llm_gate_pump(g, 1200), 2800); /* back when a's pause ends */
    assert_int_equal(started(b, 4), 4);
    assert_int_equal(started(a + 1, 3), 0);
    assert_int_equal(llm_gate_pump(g, 3999), 1);
    assert_int_equal(started(a + 1, 3), 0);
    assert_int_equal(llm_gate_pump(g, 4000), 0);
    assert_int_equal(started(a + 1, 3), 3);
    llm_gate_free(g);

    /* capped by max_pause_ms (5000 here) */
    g = paused_gate(&r, a, 600000);
    push(g, a + 1, 1, "model-a");
    assert_int_equal(llm_gate_pump(g, 1000), 5000);
    llm_gate_free(g);
    /* a pause with nothing waiting in it needs no wakeup */
    g = paused_gate(&r, a, 3000);
    assert_int_equal(llm_gate_pump(g, 1000), 0);
    llm_gate_free(g);
}

static int lane_held(const llm_gate *g, const char *model) { return lane_info(g, model).held; }

/* c's call refused for the account, as the worker takes it: the lane
 * held until until_ms, the call left, its job back at the gate.  Returns
 * llm_gate_hold's answer. */
static int refused(llm_gate *g, call *c, uint64_t until_ms, uint64_t now_ms) {
    int first = llm_gate_hold(g, &c->node, until_ms);
    llm_gate_leave(g, &c->node, 0, -1, now_ms, NULL, NULL);
    assert_int_equal(llm_gate_push(g, c->model, &c->node), 0);
    return first;
}

/* A refused account (llm_gate_hold) pauses its model's lane, then lets one
 * call through at a time until one is answered with a 2xx: a spent quota
 * costs one call a pause, not one a job.  Another model's lane goes on,
 * and the held lane's limit is what it was. */
static void test_a_held_lane_probes_one_call_until_one_goes_through(void **state) {
    (void)state;
    rec r;
    call a[4], b[2];
    llm_gate *g = gate(&r, 8, 1);
    push(g, a, 4, "model-a");
    push(g, b, 1, "model-b");
    llm_gate_pump(g, 0);
    assert_int_equal(started(a, 4) + started(b, 1), 5);
    /* two of a's calls come back refused; the first holds the lane */
    assert_int_equal(refused(g, &a[0], 1100, 100), 1);
    assert_int_equal(refused(g, &a[1], 1150, 150), 0);
    assert_int_equal(lane_held(g, "model-a"), 1);
    push(g, b + 1, 1, "model-b");
    assert_int_equal(llm_gate_pump(g, 200), 950); /* back when the hold's pause ends */
    assert_int_equal(started(b, 2), 2);           /* the other model goes on */
    assert_int_equal(started(a, 2), 2);           /* a's did not start again */
    /* the two still running are refused too, later: the pause reaches on */
    assert_int_equal(refused(g, &a[2], 1300, 300), 0);
    llm_gate_leave(g, &a[3].node, 500, -1, 300, NULL, NULL); /* a 5xx proves nothing */
    assert_int_equal(llm_gate_push(g, "model-a", &a[3].node), 0);
    assert_int_equal(llm_gate_pump(g, 1299), 1);
    assert_int_equal(started(a, 4), 4);
    /* the pause over: one call, the probe, and no other while it runs */
    llm_gate_pump(g, 1300);
    assert_int_equal(started(a, 4), 5);
    assert_int_equal(a[0].started, 2);
    assert_int_equal(llm_gate_pump(g, 5000), 0);
    assert_int_equal(started(a, 4), 5);
    /* refused: held again, one more pause, one more probe */
    assert_int_equal(refused(g, &a[0], 6000, 5000), 0);
    assert_int_equal(llm_gate_pump(g, 5000), 1000);
    assert_int_equal(started(a, 4), 5);
    llm_gate_pump(g, 6000);
    assert_int_equal(started(a, 4), 6);
    assert_int_equal(a[1].started, 2);
    /* answered: the lane goes on as before, every waiting call at once */
    llm_gate_leave(g, &a[1].node, 200, -1, 6100, NULL, NULL);
    assert_int_equal(lane_held(g, "model-a"), 0);
    assert_int_equal(llm_gate_pump(g, 6100), 0);
    assert_int_equal(started(a, 4), 9);
    assert_true(lane_limit(g, "model-a") == 8.0);
    for (int i = 0; i < 4; i++)
        if (i != 1) llm_gate_leave(g, &a[i].node, 200, -1, 6200, NULL, NULL);
    llm_gate_leave(g, &b[0].node, 200, -1, 6200, NULL, NULL);
    llm_gate_leave(g, &b[1].node, 200, -1, 6200, NULL, NULL);
    assert_int_equal(llm_gate_active(g), 0);
    llm_gate_free(g);
}

/* Calls let in before the account ran out may still be answered 2xx
 * after the hold: that proves nothing, and the lane stays held (the next
 * pause ends in one probe, not in every waiting call at once); only a
 * call started while held lifts it. */
static void test_a_2xx_started_before_the_hold_does_not_lift_it(void **state) {
    (void)state;
    rec r;
    call a[10];
    llm_gate *g = gate(&r, 4, 1);
    push(g, a, 10, "model-a");
    llm_gate_pump(g, 0);
    assert_int_equal(started(a, 10), 4);
    assert_int_equal(lane_held(g, "model-a"), 0);
    assert_int_equal(refused(g, &a[0], 1000, 0), 1);
    for (int i = 1; i < 4; i++) llm_gate_leave(g, &a[i].node, 200, -1, 10, NULL, NULL);
    assert_int_equal(lane_held(g, "model-a"), 1);
    llm_gate_pump(g, 1001);
    assert_int_equal(started(a, 10), 5); /* one probe */
    assert_ptr_equal(r.order[4], &a[4]);
    /* the probe's 2xx lifts it: the rest go */
    llm_gate_leave(g, &a[4].node, 200, -1, 1100, NULL, NULL);
    assert_int_equal(lane_held(g, "model-a"), 0);
    llm_gate_pump(g, 1100);
    assert_int_equal(started(a, 10), 9);
    llm_gate_free(g);
}

/* A waiting call taken out (its job ended while it waited) never starts,
 * from any place in its lane's queue; the rest start in their order.  A
 * started call, or one taken out already, is no waiting one. */
static void test_a_waiting_call_can_be_taken_out(void **state) {
    (void)state;
    rec r;
    call a[6];
    llm_gate *g = gate(&r, 1, 0);
    push(g, a, 6, "model-a");
    llm_gate_pump(g, 0);
    assert_int_equal(started(a, 6), 1);
    assert_int_equal(llm_gate_cancel(g, &a[0].node), -1); /* running */
    assert_int_equal(llm_gate_cancel(g, &a[2].node), 0);  /* middle */
    assert_int_equal(llm_gate_cancel(g, &a[1].node), 0);  /* head */
    assert_int_equal(llm_gate_cancel(g, &a[5].node), 0);  /* tail */
    assert_int_equal(llm_gate_cancel(g, &a[5].node), -1); /* gone already */
    assert_int_equal(lane_info(g, "model-a").waiting, 2);
    for (int i = 0; i < 3; i++) {
        llm_gate_leave(g, &r.order[r.n - 1]->node, 200, -1, 0, NULL, NULL);
        llm_gate_pump(g, 0);
    }
    assert_int_equal(r.n, 3);
    assert_ptr_equal(r.order[1], &a[3]);
    assert_ptr_equal(r.order[2], &a[4]);
    /* a call pushed after a taken-out tail queues behind the rest */
    push(g, a + 1, 1, "model-a");
    llm_gate_pump(g, 0);
    assert_int_equal(r.n, 4);
    assert_ptr_equal(r.order[3], &a[1]);
    assert_int_equal(a[2].started + a[5].started, 0);
    llm_gate_free(g);
}

/* With the process bound reached, lanes take turns: one model's backlog
 * does not hold another's calls back until it has drained. */
static void test_lanes_take_turns(void **state) {
    (void)state;
    rec r;
    llm_gate *g = gate(&r, 4, 1);
    call a[20], b[3];
    push(g, a, 20, "a");
    push(g, b, 3, "b");
    llm_gate_pump(g, 1000);
    assert_int_equal(started(a, 20), 2);
    assert_int_equal(started(b, 3), 2);
    /* as calls end, the free slots alternate between the lanes */
    for (size_t i = 0; i < 4; i++) {
        llm_gate_leave(g, &r.order[i]->node, 200, -1, 1001, NULL, NULL);
        llm_gate_pump(g, 1001);
    }
    assert_int_equal(started(b, 3), 3);
    assert_int_equal(started(a, 20), 5);
    llm_gate_free(g);
}

/* Past LLM_GATE_LANES_MAX models, the rest share the last lane. */
static void test_models_past_the_lanes_share_one(void **state) {
    (void)state;
    rec r;
    llm_gate *g = gate(&r, 1000, 1);
    static call c[LLM_GATE_LANES_MAX + 10];
    char names[LLM_GATE_LANES_MAX + 10][16];
    for (int i = 0; i < LLM_GATE_LANES_MAX + 10; i++) {
        snprintf(names[i], sizeof(names[i]), "m%d", i);
        push(g, &c[i], 1, names[i]);
    }
    assert_int_equal(llm_gate_lanes(g), LLM_GATE_LANES_MAX);
    llm_gate_lane_info info;
    llm_gate_lane_get(g, LLM_GATE_LANES_MAX - 1, &info);
    assert_string_equal(info.model, "");
    assert_int_equal(info.waiting, 11);
    llm_gate_lane_get(g, 0, &info);
    assert_string_equal(info.model, "m0");
    /* a known model still finds its own lane */
    call again;
    push(g, &again, 1, "m5");
    llm_gate_lane_get(g, 5, &info);
    assert_int_equal(info.waiting, 2);
    llm_gate_pump(g, 1);
    assert_int_equal(llm_gate_active(g), LLM_GATE_LANES_MAX + 11);
    llm_gate_free(g);
}

/* A start that fails at once leaves and pumps from inside the pump: the
 * gate goes on in the outer pump instead of recursing once per call
 * (12,500 waiting calls would have been 12,500 frames). */
static void test_a_failing_start_does_not_recurse(void **state) {
    (void)state;
    rec r;
    llm_gate *g = gate(&r, 4, 1);
    r.fail_starts = 1;
    call c[200];
    push(g, c, 200, "m");
    llm_gate_pump(g, 0);
    assert_int_equal(started(c, 200), 200);
    assert_int_equal(r.max_depth, 1);
    assert_int_equal(llm_gate_active(g), 0);
    /* a node that never entered a lane (its push failed) leaves as a no-op */
    llm_gate_node lone = {0};
    assert_int_equal(llm_gate_leave(g, &lone, 429, 1000, 0, NULL, NULL), 0);
    llm_gate_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_inflight_bounds_every_lane),
        cmocka_unit_test(test_aimd_halves_on_429_once_a_second_and_grows_back),
        cmocka_unit_test(test_a_lowered_limit_holds_its_lane),
        cmocka_unit_test(test_retry_after_pauses_that_model_only),
        cmocka_unit_test(test_a_held_lane_probes_one_call_until_one_goes_through),
        cmocka_unit_test(test_a_2xx_started_before_the_hold_does_not_lift_it),
        cmocka_unit_test(test_a_waiting_call_can_be_taken_out),
        cmocka_unit_test(test_lanes_take_turns),
        cmocka_unit_test(test_models_past_the_lanes_share_one),
        cmocka_unit_test(test_a_failing_start_does_not_recurse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
