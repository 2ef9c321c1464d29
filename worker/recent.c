/* recent.c - see recent.h.  A ring of entries in insertion order (the
 * oldest is overwritten) with a chained hash index over it; chains link
 * ring slots by index, so an entry costs its id and no other allocation. */
#include "recent.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NIL SIZE_MAX

typedef struct recent_entry {
    char *job_id;      /* NULL: the slot is free */
    int run, first, last;
    size_t bucket;
    size_t hnext;      /* next slot of the same bucket, or NIL */
} recent_entry;

struct recent {
    recent_entry *ring;
    size_t cap, next, count;
    size_t *buckets;   /* head slot per bucket, or NIL */
    size_t nbuckets;   /* a power of two */
};

static size_t hash_id(const char *s) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

recent *recent_new(size_t cap) {
    recent *r = calloc(1, sizeof(*r));
    if (!r || !cap) goto fail;
    r->cap = cap;
    r->nbuckets = 16;
    while (r->nbuckets < cap) r->nbuckets <<= 1;
    r->ring = calloc(cap, sizeof(*r->ring));
    r->buckets = malloc(r->nbuckets * sizeof(*r->buckets));
    if (!r->ring || !r->buckets) goto fail;
    for (size_t i = 0; i < r->nbuckets; i++) r->buckets[i] = NIL;
    return r;
fail:
    recent_free(r);
    return NULL;
}

void recent_free(recent *r) {
    if (!r) return;
    if (r->ring)
        for (size_t i = 0; i < r->cap; i++) free(r->ring[i].job_id);
    free(r->ring);
    free(r->buckets);
    free(r);
}

/* Takes slot i out of its bucket's chain and frees its id. */
static void evict(recent *r, size_t i) {
    recent_entry *e = &r->ring[i];
    for (size_t *pp = &r->buckets[e->bucket]; *pp != NIL; pp = &r->ring[*pp].hnext) {
        if (*pp == i) {
            *pp = e->hnext;
            break;
        }
    }
    free(e->job_id);
    e->job_id = NULL;
    r->count--;
}

int recent_add(recent *r, const char *job_id, int run, int first, int last) {
    char *id = strdup(job_id);
    if (!id) return -1;
    size_t i = r->next;
    if (r->ring[i].job_id) evict(r, i);
    recent_entry *e = &r->ring[i];
    e->job_id = id;
    e->run = run;
    e->first = first;
    e->last = last;
    e->bucket = hash_id(job_id) & (r->nbuckets - 1);
    e->hnext = r->buckets[e->bucket];
    r->buckets[e->bucket] = i;
    r->next = (i + 1) % r->cap;
    r->count++;
    return 0;
}

int recent_covers(const recent *r, const char *job_id, int run, int attempt) {
    for (size_t i = r->buckets[hash_id(job_id) & (r->nbuckets - 1)]; i != NIL; i = r->ring[i].hnext) {
        const recent_entry *e = &r->ring[i];
        if (e->run == run && attempt >= e->first && attempt <= e->last && !strcmp(e->job_id, job_id)) return 1;
    }
    return 0;
}

size_t recent_count(const recent *r) { return r->count; }
