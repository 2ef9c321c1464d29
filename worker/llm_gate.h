/* The gate in front of the LLM: which waiting calls may start now.
 *
 * A process holds at most max_inflight calls.  Within that bound each
 * model has a lane of its own, as providers limit each model apart: a 429
 * halves that lane's concurrency limit (AIMD: at most once a second, so
 * one burst of 429s halves once; each success adds 1/limit back, up to
 * max_inflight) and its Retry-After pauses that lane only.  A model whose
 * calls are refused therefore no longer holds back the others' calls,
 * which wait in lanes of their own.  Lanes take turns (one call each per
 * round), so one model's backlog does not starve another's.
 *
 * No clock and no loop: the caller passes the time and arms its own timer
 * with what llm_gate_pump returns.  Waiting calls are linked through an
 * llm_gate_node the caller embeds in its own struct (no allocation per
 * call). */
#ifndef RETORT_LLM_GATE_H
#define RETORT_LLM_GATE_H

#include <stddef.h>
#include <stdint.h>

/* Past this many models, the rest share one lane. */
#define LLM_GATE_LANES_MAX 64

typedef struct llm_gate llm_gate;
typedef struct llm_gate_lane llm_gate_lane;

typedef struct llm_gate_node {
    struct llm_gate_node *next;
    llm_gate_lane *lane; /* set by llm_gate_push; llm_gate_leave takes it */
    int probe;           /* started while its lane was held (llm_gate_hold) */
} llm_gate_node;

/* Called for each call let through (the node leaves the gate's queue;
 * the call then counts against its lane until llm_gate_leave).  May call
 * llm_gate_leave and llm_gate_pump itself (a call that fails to start):
 * the gate then goes on in the outer pump, rather than recursing. */
typedef void (*llm_gate_start_fn)(llm_gate_node *n, void *ud);

/* aimd: lower a lane's limit on 429s.  max_pause_ms caps a Retry-After.
 * NULL on out of memory. */
llm_gate *llm_gate_new(size_t max_inflight, int aimd, long max_pause_ms, llm_gate_start_fn start, void *ud);
/* Accepts NULL.  Queued nodes are the caller's: it frees them. */
void llm_gate_free(llm_gate *g);

/* Queues n (borrowed until started) behind model's waiting calls; model
 * is copied (a lane is made on first use and kept).  0 = ok; -1 out of
 * memory, when n is not queued. */
int llm_gate_push(llm_gate *g, const char *model, llm_gate_node *n);

/* Takes n out of its lane's queue before it starts (a job that ends
 * while it waits); n is then in no lane.  0 = ok; -1 when n is not
 * waiting (started, or never queued).  O(calls waiting in the lane). */
int llm_gate_cancel(llm_gate *g, llm_gate_node *n);

/* Starts waiting calls while their lanes' limits, pauses and the process
 * bound allow.  Returns the ms until the earliest pause of a lane with
 * waiting calls ends (then pump again), 0 when none is waiting on one. */
uint64_t llm_gate_pump(llm_gate *g, uint64_t now_ms);

/* A call of n's lane ended with HTTP status (0: none); retry_after_ms <= 0:
 * none given.  Does not pump.  Returns 1 when a 429 lowered the lane's
 * limit, from *before to *after (for the caller's log), else 0. */
int llm_gate_leave(llm_gate *g, llm_gate_node *n, long status, long retry_after_ms, uint64_t now_ms,
                   double *before, double *after);

/* n's call (not yet left) found the account refused (a spent quota, a
 * refused key): n's lane pauses until until_ms, then lets one call
 * through at a time (the probe) until a call started while held leaves
 * with a 2xx, when the lane goes on as before the hold (its limit
 * unchanged).  A 2xx of a call started before the hold proves nothing:
 * it was let in before the account ran out.  Calls already running
 * finish as they will; each refused one may hold again.  Returns 1 when
 * the lane was not held before, else 0. */
int llm_gate_hold(llm_gate *g, llm_gate_node *n, uint64_t until_ms);

/* Whether n's lane is held (n queued or running; 0 when n is in no lane). */
int llm_gate_held(const llm_gate_node *n);

/* Calls in flight, in all lanes. */
size_t llm_gate_active(const llm_gate *g);

/* A lane's state, for the log and /metrics (model "" is the shared lane
 * of the models past LLM_GATE_LANES_MAX). */
typedef struct llm_gate_lane_info {
    const char *model;          /* valid while the gate lives */
    size_t active, waiting;
    double limit;
    uint64_t paused_until_ms;   /* 0: never paused */
    int held;                   /* llm_gate_hold, until a call goes through */
} llm_gate_lane_info;

size_t llm_gate_lanes(const llm_gate *g);
/* i < llm_gate_lanes(g) */
void llm_gate_lane_get(const llm_gate *g, size_t i, llm_gate_lane_info *out);

#endif
