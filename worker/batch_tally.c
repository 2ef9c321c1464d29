#include "batch_tally.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *key;  /* NULL: empty */
    uint64_t hash;
    long long count;
} slot;

struct batch_tally {
    slot *slots;
    size_t cap;   /* power of two */
    size_t used;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

batch_tally *batch_tally_new(void) {
    batch_tally *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->cap = 16;
    t->slots = calloc(t->cap, sizeof(*t->slots));
    if (!t->slots) {
        free(t);
        return NULL;
    }
    return t;
}

void batch_tally_clear(batch_tally *t) {
    /* up to the last key: `retort report` clears a table a job, which
     * keeps the size the busiest job grew it to */
    for (size_t i = 0; i < t->cap && t->used; i++) {
        if (!t->slots[i].key) continue;
        free(t->slots[i].key);
        t->slots[i].key = NULL;
        t->used--;
    }
}

void batch_tally_free(batch_tally *t) {
    if (!t) return;
    batch_tally_clear(t);
    free(t->slots);
    free(t);
}

/* Linear probing; the table stays at most half full. */
static slot *lookup(slot *slots, size_t cap, const char *key, uint64_t h) {
    size_t i = (size_t)h & (cap - 1);
    while (slots[i].key && (slots[i].hash != h || strcmp(slots[i].key, key))) i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int grow(batch_tally *t) {
    size_t cap = t->cap * 2;
    slot *s = calloc(cap, sizeof(*s));
    if (!s) return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key) *lookup(s, cap, t->slots[i].key, t->slots[i].hash) = t->slots[i];
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

int batch_tally_add(batch_tally *t, const char *key, long long n) {
    if ((t->used + 1) * 2 > t->cap && grow(t)) return -1;
    uint64_t h = hash_str(key);
    slot *s = lookup(t->slots, t->cap, key, h);
    if (!s->key) {
        s->key = strdup(key);
        if (!s->key) return -1;
        s->hash = h;
        s->count = 0;
        t->used++;
    }
    s->count += n;
    return 0;
}

long long batch_tally_get(const batch_tally *t, const char *key) {
    const slot *s = lookup(t->slots, t->cap, key, hash_str(key));
    return s->key ? s->count : 0;
}

size_t batch_tally_size(const batch_tally *t) { return t->used; }

static int by_count(const void *a, const void *b) {
    const batch_tally_entry *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return strcmp(x->key, y->key);
}

batch_tally_entry *batch_tally_sorted(const batch_tally *t, size_t *n) {
    *n = 0;
    if (!t->used) return NULL;
    batch_tally_entry *e = malloc(t->used * sizeof(*e));
    if (!e) return NULL;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key) e[(*n)++] = (batch_tally_entry){t->slots[i].key, t->slots[i].count};
    qsort(e, *n, sizeof(*e), by_count);
    return e;
}
