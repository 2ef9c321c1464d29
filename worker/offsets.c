#include "offsets.h"

#include <stdlib.h>
#include <string.h>

/* A ring of in-flight offsets in arrival (= increasing) order.  Completion
 * marks an entry; the head is popped while done.  Lookup is a binary search
 * since entries stay sorted.  Each entry keeps the epoch it was added in:
 * after a move back into the window, the entries below the new offset
 * are still the partition's (epoch: the partition's current one, for
 * entries added from now on). */
typedef struct part {
    int32_t partition;
    uint64_t epoch;
    int64_t *offs;
    uint64_t *epochs;
    unsigned char *done;
    size_t head, count, cap;
    struct part *next;
} part;

struct offsets {
    part *parts;
    uint64_t next_epoch;
    size_t pending;
};

offsets *offsets_new(void) {
    offsets *o = calloc(1, sizeof(*o));
    if (o) o->next_epoch = 1;
    return o;
}

static void part_free(part *p) {
    free(p->offs);
    free(p->epochs);
    free(p->done);
    free(p);
}

void offsets_free(offsets *o) {
    if (!o) return;
    offsets_drop_all(o);
    free(o);
}

static part *find(const offsets *o, int32_t partition) {
    for (part *p = o->parts; p; p = p->next)
        if (p->partition == partition) return p;
    return NULL;
}

static int grow(part *p) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    int64_t *offs = malloc(cap * sizeof(*offs));
    uint64_t *epochs = malloc(cap * sizeof(*epochs));
    unsigned char *done = malloc(cap);
    if (!offs || !epochs || !done) {
        free(offs);
        free(epochs);
        free(done);
        return -1;
    }
    for (size_t i = 0; i < p->count; i++) {
        size_t j = (p->head + i) % (p->cap ? p->cap : 1);
        offs[i] = p->offs[j];
        epochs[i] = p->epochs[j];
        done[i] = p->done[j];
    }
    free(p->offs);
    free(p->epochs);
    free(p->done);
    p->offs = offs;
    p->epochs = epochs;
    p->done = done;
    p->head = 0;
    p->cap = cap;
    return 0;
}

/* The position of the first entry at or above offset (p->count if none). */
static size_t lower_bound(const part *p, int64_t offset) {
    size_t lo = 0, hi = p->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->offs[(p->head + mid) % p->cap] < offset) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

uint64_t offsets_add(offsets *o, int32_t partition, int64_t offset, int64_t *rewound_from) {
    if (rewound_from) *rewound_from = -1;
    part *p = find(o, partition);
    if (p && p->count && offset <= p->offs[(p->head + p->count - 1) % p->cap]) {
        /* Moved back: the entries from this offset on go stale (their
         * completions store nothing; their messages come again after this
         * one).  Those below it stay: their messages do not come again,
         * and a store past them before they are done would lose them at
         * a crash. */
        if (rewound_from) *rewound_from = p->offs[(p->head + p->count - 1) % p->cap];
        size_t keep = lower_bound(p, offset);
        for (size_t i = keep; i < p->count; i++)
            if (!p->done[(p->head + i) % p->cap]) o->pending--;
        p->count = keep;
        if (!keep) p->head = 0;
        p->epoch = o->next_epoch++;
    }
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p) return 0;
        p->partition = partition;
        p->epoch = o->next_epoch++;
        p->next = o->parts;
        o->parts = p;
    }
    if (p->count == p->cap && grow(p)) return 0;
    size_t idx = (p->head + p->count) % p->cap;
    p->offs[idx] = offset;
    p->epochs[idx] = p->epoch;
    p->done[idx] = 0;
    p->count++;
    o->pending++;
    return p->epoch;
}

int offsets_done(offsets *o, int32_t partition, uint64_t epoch, int64_t offset, int64_t *commit) {
    part *p = find(o, partition);
    if (!p || p->count == 0) return -1;
    size_t lo = lower_bound(p, offset);
    if (lo == p->count) return -1;
    size_t idx = (p->head + lo) % p->cap;
    if (p->offs[idx] != offset || p->epochs[idx] != epoch || p->done[idx]) return -1;
    p->done[idx] = 1;
    o->pending--;
    if (lo != 0) return 0;
    int64_t last = offset;
    while (p->count && p->done[p->head]) {
        last = p->offs[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
    }
    *commit = last + 1;
    return 1;
}

void offsets_drop(offsets *o, int32_t partition) {
    for (part **pp = &o->parts; *pp; pp = &(*pp)->next) {
        if ((*pp)->partition == partition) {
            part *p = *pp;
            for (size_t i = 0; i < p->count; i++)
                if (!p->done[(p->head + i) % p->cap]) o->pending--;
            *pp = p->next;
            part_free(p);
            return;
        }
    }
}

void offsets_drop_all(offsets *o) {
    while (o->parts) offsets_drop(o, o->parts->partition);
}

size_t offsets_pending(const offsets *o) { return o->pending; }
