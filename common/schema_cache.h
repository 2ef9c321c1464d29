/* schema_cache.h - inline schemas compiled once for every job that sends
 * them.
 *
 * A job may carry its output schema inline instead of naming one of
 * schemas.dir.  Compiling it costs more than the rest of a job (a schema
 * of 30 properties, about 70 us), and a backend that sends its schema with
 * every job sends the same few again and again.  The cache keeps the
 * compiled form of the last `max_entries` distinct schemas, keyed by their
 * compact JSON text (the text the model is sent, so it is printed anyway):
 * two documents are the same schema when they print the same.  It is
 * bounded by entries and, optionally, by the memory the kept schemas hold
 * (schema_cache_set_max_mem): a compiled schema can take a few hundred
 * times its text, so a bound on entries alone does not bound memory.
 * Entries a job holds are never evicted; the least recently used of the
 * others go first, until both bounds hold.  One thread (the worker's loop); the registry and options are the
 * same for every call. */
#ifndef RETORT_SCHEMA_CACHE_H
#define RETORT_SCHEMA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "schema.h"

typedef struct schema_cache schema_cache;

typedef struct schema_cache_entry {
    const schema *compiled; /* valid while the entry is held */
    const char *text;       /* the schema as compact JSON, likewise */
    size_t text_len;
    void *user;             /* the caller's, kept with the entry (NULL at first);
                               freed with user_free when the entry goes */
} schema_cache_entry;

typedef struct schema_cache_stats {
    uint64_t hits, misses; /* gets that found the schema compiled, and those that compiled it */
    size_t entries;        /* kept now (held ones included) */
    size_t mem_bytes;      /* what the kept entries hold, about (schema_mem_bytes and their text) */
} schema_cache_stats;

/* reg (borrowed, may be NULL) and opts (copied, may be NULL) are what
 * every schema is compiled with.  max_entries 0: nothing is kept (every
 * get compiles, every release frees).  user_free (may be NULL) frees an
 * entry's user data.  NULL on out of memory. */
schema_cache *schema_cache_new(schema_registry *reg, const schema_options *opts, size_t max_entries,
                               void (*user_free)(void *user));
/* Accepts NULL.  Frees every kept entry, held or not: nothing may use
 * one after. */
void schema_cache_free(schema_cache *c);
/* Schemas whose compact text is longer than max_bytes (0: no limit, the
 * default) are refused by schema_cache_get, not compiled: a compiled
 * schema can take a few hundred times its text, and inline schemas come
 * from whoever writes to the jobs topic. */
void schema_cache_set_max_bytes(schema_cache *c, size_t max_bytes);
/* Bound on the memory the kept entries hold, in bytes (0: none, the
 * default), measured by schema_mem_bytes plus the entry's text.  Least
 * recently used entries not held go first until the kept ones fit (held
 * ones may keep the cache over until they are released).  A schema that
 * alone holds more than max_mem is compiled and handed to its caller but
 * not kept: it is freed at its release, and the next get of it compiles
 * it again.  The caller's user data is not counted. */
void schema_cache_set_max_mem(schema_cache *c, size_t max_mem);

/* The compiled form of doc (borrowed), compiled now unless kept.  Held by
 * the caller until schema_cache_release.  NULL when doc does not compile
 * (the compiler's message in err) or on out of memory. */
schema_cache_entry *schema_cache_get(schema_cache *c, const cJSON *doc, char *err, size_t errlen);
/* Accepts NULL. */
void schema_cache_release(schema_cache *c, schema_cache_entry *e);

void schema_cache_get_stats(const schema_cache *c, schema_cache_stats *out);

#endif
