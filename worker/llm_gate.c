/* The gate in front of the LLM: a lane per model (see llm_gate.h). */
#include "llm_gate.h"

#include <stdlib.h>
#include <string.h>

struct llm_gate_lane {
    char *model;                /* "" : the lane shared past LLM_GATE_LANES_MAX */
    llm_gate_node *head, *tail; /* waiting, in order */
    size_t active, waiting;
    double limit;
    uint64_t paused_until_ms, last_decrease_ms;
    int held;                   /* llm_gate_hold: one call at a time until a probe's 2xx */
};

struct llm_gate {
    llm_gate_lane *lanes[LLM_GATE_LANES_MAX];
    size_t nlanes;
    size_t turn;       /* the lane that goes first in the next round */
    size_t active;
    size_t max_inflight;
    int aimd;
    long max_pause_ms;
    llm_gate_start_fn start;
    void *ud;
    int pumping;       /* inside llm_gate_pump: a nested call only asks again */
    int again;
    uint64_t now_ms;   /* the outer pump's time, for a nested one */
};

llm_gate *llm_gate_new(size_t max_inflight, int aimd, long max_pause_ms, llm_gate_start_fn start, void *ud) {
    llm_gate *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->max_inflight = max_inflight ? max_inflight : 1;
    g->aimd = aimd;
    g->max_pause_ms = max_pause_ms;
    g->start = start;
    g->ud = ud;
    return g;
}

void llm_gate_free(llm_gate *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nlanes; i++) {
        free(g->lanes[i]->model);
        free(g->lanes[i]);
    }
    free(g);
}

static llm_gate_lane *lane_new(const char *model) {
    llm_gate_lane *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    if (!(l->model = strdup(model))) {
        free(l);
        return NULL;
    }
    return l;
}

/* The lane of model, made on first use.  Lanes are looked up by a scan:
 * there are few (a process's models), and the common case is one, found
 * at once. */
static llm_gate_lane *lane_of(llm_gate *g, const char *model) {
    size_t named = g->nlanes;
    if (named == LLM_GATE_LANES_MAX) named--; /* the last is the shared one */
    for (size_t i = 0; i < named; i++)
        if (!strcmp(g->lanes[i]->model, model)) return g->lanes[i];
    if (g->nlanes == LLM_GATE_LANES_MAX) return g->lanes[LLM_GATE_LANES_MAX - 1];
    llm_gate_lane *l = lane_new(g->nlanes == LLM_GATE_LANES_MAX - 1 ? "" : model);
    if (!l) return NULL;
    l->limit = (double)g->max_inflight;
    g->lanes[g->nlanes++] = l;
    return l;
}

int llm_gate_push(llm_gate *g, const char *model, llm_gate_node *n) {
    llm_gate_lane *l = lane_of(g, model ? model : "");
    if (!l) return -1;
    n->next = NULL;
    n->lane = l;
    if (l->tail) l->tail->next = n;
    else l->head = n;
    l->tail = n;
    l->waiting++;
    return 0;
}

int llm_gate_cancel(llm_gate *g, llm_gate_node *n) {
    (void)g;
    llm_gate_lane *l = n->lane;
    if (!l) return -1;
    llm_gate_node *prev = NULL, *it = l->head;
    while (it && it != n) {
        prev = it;
        it = it->next;
    }
    if (!it) return -1; /* running, not waiting */
    if (prev) prev->next = n->next;
    else l->head = n->next;
    if (l->tail == n) l->tail = prev;
    l->waiting--;
    n->next = NULL;
    n->lane = NULL;
    return 0;
}

uint64_t llm_gate_pump(llm_gate *g, uint64_t now_ms) {
    if (g->pumping) {
        /* from a start callback: the outer pump takes another round */
        g->again = 1;
        return 0;
    }
    g->pumping = 1;
    g->now_ms = now_ms;
    uint64_t wake = 0;
    do {
        g->again = 0;
        wake = 0;
        int started = 1;
        while (started && g->active < g->max_inflight) {
            started = 0;
            size_t n = g->nlanes, first = g->turn;
            for (size_t k = 0; k < n && g->active < g->max_inflight; k++) {
                llm_gate_lane *l = g->lanes[(first + k) % n];
                if (!l->head) continue;
                if (l->paused_until_ms > now_ms) continue;
                if ((double)l->active >= l->limit) continue;
                if (l->held && l->active) continue; /* the one probe is out */
                llm_gate_node *node = l->head;
                l->head = node->next;
                if (!l->head) l->tail = NULL;
                node->next = NULL;
                l->waiting--;
                l->active++;
                g->active++;
                node->probe = l->held;
                started = 1;
                g->start(node, g->ud);
            }
            if (n) g->turn = (first + 1) % n;
        }
        for (size_t i = 0; i < g->nlanes; i++) {
            const llm_gate_lane *l = g->lanes[i];
            if (l->head && l->paused_until_ms > now_ms && (!wake || l->paused_until_ms - now_ms < wake))
                wake = l->paused_until_ms - now_ms;
        }
    } while (g->again);
    g->pumping = 0;
    return wake;
}

int llm_gate_leave(llm_gate *g, llm_gate_node *n, long status, long retry_after_ms, uint64_t now_ms,
                   double *before, double *after) {
    llm_gate_lane *l = n->lane;
    int lowered = 0, probe = n->probe;
    n->lane = NULL;
    n->probe = 0;
    if (!l) return 0;
    if (l->active) l->active--;
    if (g->active) g->active--;
    if (status == 429) {
        if (g->aimd && (!l->last_decrease_ms || now_ms - l->last_decrease_ms >= 1000)) {
            double was = l->limit;
            l->limit = l->limit / 2 < 1 ? 1 : l->limit / 2;
            l->last_decrease_ms = now_ms;
            if (before) *before = was;
            if (after) *after = l->limit;
            lowered = 1;
        }
        if (retry_after_ms > 0) {
            long ms = g->max_pause_ms > 0 && retry_after_ms > g->max_pause_ms ? g->max_pause_ms : retry_after_ms;
            uint64_t until = now_ms + (uint64_t)ms;
            if (until > l->paused_until_ms) l->paused_until_ms = until;
        }
    } else if (status >= 200 && status < 300 && l->held) {
        if (probe) l->held = 0; /* the account works again: the lane as it was */
    } else if (status >= 200 && status < 300 && l->limit < (double)g->max_inflight) {
        l->limit += 1.0 / l->limit;
        if (l->limit > (double)g->max_inflight) l->limit = (double)g->max_inflight;
    }
    return lowered;
}

int llm_gate_hold(llm_gate *g, llm_gate_node *n, uint64_t until_ms) {
    (void)g;
    llm_gate_lane *l = n->lane;
    if (!l) return 0;
    int was = l->held;
    l->held = 1;
    if (until_ms > l->paused_until_ms) l->paused_until_ms = until_ms;
    return !was;
}

int llm_gate_held(const llm_gate_node *n) { return n->lane ? n->lane->held : 0; }

size_t llm_gate_active(const llm_gate *g) { return g->active; }

size_t llm_gate_lanes(const llm_gate *g) { return g->nlanes; }

void llm_gate_lane_get(const llm_gate *g, size_t i, llm_gate_lane_info *out) {
    const llm_gate_lane *l = g->lanes[i];
    out->model = l->model;
    out->active = l->active;
    out->waiting = l->waiting;
    out->limit = l->limit;
    out->paused_until_ms = l->paused_until_ms;
    out->held = l->held;
}
