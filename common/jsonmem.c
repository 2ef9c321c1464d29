/* jsonmem.c - see jsonmem.h. */
#include "jsonmem.h"

#include <cjson/cJSON.h>
#include <malloc.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define JSONMEM_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JSONMEM_CACHE 0
#endif
#endif
#ifndef JSONMEM_CACHE
#define JSONMEM_CACHE 1
#endif

#define NCLASS 6
/* cJSON nodes are 64 bytes; keys and short values fill the rest. */
static const size_t CLASS_SIZE[NCLASS] = {32, 64, 96, 128, 192, 256};
/* Per class and thread: enough for the trees of a few hundred jobs, at most
 * about 3 MB in all. */
#define LIST_MAX 4096

typedef struct free_block {
    struct free_block *next;
} free_block;

typedef struct block_list {
    free_block *head;
    unsigned count;
} block_list;

static __thread int t_enabled;
static __thread block_list t_lists[NCLASS];

static int class_of_request(size_t n) {
    for (int c = 0; c < NCLASS; c++)
        if (n <= CLASS_SIZE[c]) return c;
    return -1;
}

/* The class a freed block can serve: the largest whose size fits in it,
 * only when it is not much larger (blocks from elsewhere, say a 1 KiB
 * string, go back to free()). */
static int class_of_block(size_t usable) {
    for (int c = NCLASS - 1; c >= 0; c--) {
        if (CLASS_SIZE[c] <= usable) return usable - CLASS_SIZE[c] <= 16 ? c : -1;
    }
    return -1;
}

static void *jm_malloc(size_t n) {
    int c = t_enabled ? class_of_request(n) : -1;
    if (c < 0) return malloc(n);
    block_list *l = &t_lists[c];
    if (l->head) {
        free_block *b = l->head;
        l->head = b->next;
        l->count--;
        return b;
    }
    return malloc(CLASS_SIZE[c]);
}

static void jm_free(void *p) {
    if (!p) return;
    if (t_enabled) {
        int c = class_of_block(malloc_usable_size(p));
        if (c >= 0 && t_lists[c].count < LIST_MAX) {
            free_block *b = p;
            b->next = t_lists[c].head;
            t_lists[c].head = b;
            t_lists[c].count++;
            return;
        }
    }
    free(p);
}

void jsonmem_init(void) {
    if (!JSONMEM_CACHE) return;
    cJSON_Hooks hooks = {jm_malloc, jm_free};
    cJSON_InitHooks(&hooks);
    t_enabled = 1;
}

size_t jsonmem_cached(void) {
    size_t n = 0;
    for (int c = 0; c < NCLASS; c++) n += t_lists[c].count;
    return n;
}
