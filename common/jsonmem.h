/* jsonmem.h - a per-thread cache of small blocks for cJSON's nodes and
 * strings.
 *
 * Every job builds and frees several cJSON trees (the job, the LLM's
 * response, the extracted value, the attempt record): dozens of blocks of
 * 32 to 256 bytes each.  glibc's tcache keeps only 7 blocks per size; the
 * rest go to the fast bins, which every large (>= 1 KiB) malloc then
 * consolidates.  Measured on the worker, that churn was about a tenth of
 * its CPU.  This cache keeps freed small blocks on per-size lists of the
 * thread that installed it.
 *
 * Blocks are ordinary malloc blocks (rounded up to a size class), so
 * freeing cJSON memory with free() stays valid and blocks may cross
 * threads: a thread without the cache (or a full list) hands them back to
 * free().  Under AddressSanitizer the cache is off, so that a use after
 * free is still caught. */
#ifndef RETORT_JSONMEM_H
#define RETORT_JSONMEM_H

#include <stddef.h>

/* Installs the cache as cJSON's allocator (cJSON_InitHooks) and enables it
 * for the calling thread (the loop thread).  May be called at any time:
 * blocks allocated before are plain malloc blocks, freed or cached like the
 * others.  cJSON_InitHooks is process-wide: call it before other threads
 * use cJSON. */
void jsonmem_init(void);

/* Blocks cached by the calling thread, all size classes (for tests). */
size_t jsonmem_cached(void);

#endif
