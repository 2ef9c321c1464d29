#include "schema_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"

typedef struct centry {
    schema_cache_entry pub; /* first: a held entry is handed out as this */
    char *text;
    schema *compiled;
    uint64_t h;
    size_t mem;                  /* what it holds, about: schema_mem_bytes and the text */
    size_t refs;
    int kept;                    /* in the table (else freed at its last release) */
    struct centry *hnext;        /* the table's chain */
    struct centry *prev, *next;  /* recency: most recent at the head */
} centry;

struct schema_cache {
    schema_registry *reg;
    schema_options opts;
    size_t max_entries, count;
    size_t max_bytes; /* longest schema text compiled; 0: no limit */
    size_t max_mem, mem; /* bound on the kept entries' mem (0: none), and their sum */
    void (*user_free)(void *);
    centry **table;
    size_t mask;
    centry *head, *tail;
    uint64_t hits, misses;
};

/* Eight bytes a step: schemas run to kilobytes, and a byte at a time
 * would cost a few microseconds of the job it is meant to save. */
static uint64_t text_hash(const char *s, size_t n)
{
    const uint64_t mul = 0x9E3779B97F4A7C15ull;
    uint64_t h = n * mul, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * mul;
        h ^= h >> 29;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * mul;
    return h ^ (h >> 32);
}

schema_cache *schema_cache_new(schema_registry *reg, const schema_options *opts, size_t max_entries,
                               void (*user_free)(void *user))
{
    schema_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->reg = reg;
    if (opts)
        c->opts = *opts;
    c->max_entries = max_entries;
    c->user_free = user_free;
    if (max_entries) {
        size_t n = 16;
        while (n < max_entries * 2)
            n *= 2;
        if (!(c->table = calloc(n, sizeof *c->table))) {
            free(c);
            return NULL;
        }
        c->mask = n - 1;
    }
    return c;
}

static void entry_free(schema_cache *c, centry *e)
{
    if (e->pub.user && c->user_free)
        c->user_free(e->pub.user);
    schema_free(e->compiled);
    free(e->text);
    free(e);
}

static void lru_unlink(schema_cache *c, centry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(schema_cache *c, centry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

/* Takes e out of the table and the recency list. */
static void drop(schema_cache *c, centry *e)
{
    centry **p = &c->table[e->h & c->mask];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    lru_unlink(c, e);
    e->kept = 0;
    c->count--;
    c->mem -= e->mem;
}

static int over(const schema_cache *c)
{
    return c->count > c->max_entries || (c->max_mem && c->mem > c->max_mem);
}

/* Down to max_entries and max_mem, least recently used first, held
 * entries skipped (the cache may stay over while jobs hold them). */
static void evict(schema_cache *c)
{
    centry *e = c->tail;
    while (over(c) && e) {
        centry *prev = e->prev;
        if (!e->refs) {
            drop(c, e);
            entry_free(c, e);
        }
        e = prev;
    }
}

void schema_cache_set_max_bytes(schema_cache *c, size_t max_bytes)
{
    c->max_bytes = max_bytes;
}

void schema_cache_set_max_mem(schema_cache *c, size_t max_mem)
{
    c->max_mem = max_mem;
    evict(c);
}

schema_cache_entry *schema_cache_get(schema_cache *c, const cJSON *doc, char *err, size_t errlen)
{
    char *text = jsonout_print(doc);
    centry *e = NULL;
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    size_t len = strlen(text);
    if (c->max_bytes && len > c->max_bytes) {
        snprintf(err, errlen, "%zu bytes, over schemas.inline_max_bytes (%zu)", len, c->max_bytes);
        free(text);
        return NULL;
    }
    uint64_t h = text_hash(text, len);
    if (c->max_entries) {
        for (e = c->table[h & c->mask]; e; e = e->hnext) {
            if (e->h == h && e->pub.text_len == len && memcmp(e->text, text, len) == 0) {
                free(text);
                e->refs++;
                lru_unlink(c, e);
                lru_push(c, e);
                c->hits++;
                return &e->pub;
            }
        }
    }
    schema *s = schema_compile(c->reg, doc, &c->opts, err, errlen);
    if (!s)
        goto fail;
    if (!(e = calloc(1, sizeof *e))) {
        schema_free(s);
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    e->compiled = s;
    e->text = text;
    e->h = h;
    /* the entry and its text too: a small schema's text is a fair part */
    e->mem = schema_mem_bytes(s) + sizeof *e + len + 1;
    e->refs = 1;
    e->pub.compiled = s;
    e->pub.text = text;
    e->pub.text_len = len;
    c->misses++;
    /* One over the whole bound is its job's alone, freed at its release:
     * kept, it would push every other schema out, and the next one would
     * push it out in turn. */
    if (c->max_entries && (!c->max_mem || e->mem <= c->max_mem)) {
        e->kept = 1;
        e->hnext = c->table[h & c->mask];
        c->table[h & c->mask] = e;
        lru_push(c, e);
        c->count++;
        c->mem += e->mem;
        evict(c);
    }
    return &e->pub;
fail:
    free(text);
    return NULL;
}

void schema_cache_release(schema_cache *c, schema_cache_entry *pub)
{
    if (!pub)
        return;
    centry *e = (centry *)pub;
    if (--e->refs)
        return;
    if (!e->kept)
        entry_free(c, e);
    else if (over(c))
        evict(c);
}

void schema_cache_get_stats(const schema_cache *c, schema_cache_stats *out)
{
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->count;
    out->mem_bytes = c->mem;
}

void schema_cache_free(schema_cache *c)
{
    if (!c)
        return;
    centry *e = c->head;
    while (e) {
        centry *next = e->next;
        entry_free(c, e);
        e = next;
    }
    free(c->table);
    free(c);
}
