/* batch_tally.h - counts by string key (violation codes, paths, reasons,
 * models) for retort report: a hash table, then the entries sorted by
 * count. */
#ifndef RETORT_BATCH_TALLY_H
#define RETORT_BATCH_TALLY_H

#include <stddef.h>

typedef struct batch_tally batch_tally;

typedef struct batch_tally_entry {
    const char *key;  /* owned by the tally */
    long long count;
} batch_tally_entry;

batch_tally *batch_tally_new(void);
void batch_tally_free(batch_tally *t); /* accepts NULL */
/* Forgets every key (keeps the table for reuse). */
void batch_tally_clear(batch_tally *t);

/* Adds n to key's count (key borrowed, copied).  0 = ok, -1 out of memory. */
int batch_tally_add(batch_tally *t, const char *key, long long n);
/* key's count; 0 when absent. */
long long batch_tally_get(const batch_tally *t, const char *key);
size_t batch_tally_size(const batch_tally *t);

/* Every entry, highest count first, ties by key (strcmp).  Returns a
 * malloc'd array (the caller frees it, not the keys), valid until the
 * tally is changed or freed; NULL (with *n 0) when empty or out of memory. */
batch_tally_entry *batch_tally_sorted(const batch_tally *t, size_t *n);

#endif
