/* preload_allocs.c - LD_PRELOAD shim for make bench (tests/bench.py): how
 * many times a program asks its allocator for memory, and from where.
 *   PRELOAD_ALLOCS_FILE=FILE  rewritten every 10 ms (to FILE.tmp, then
 *                             renamed: a reader never sees half of it):
 *                             "seq N" first, then one line per loaded
 *                             object that called, "COUNT NAME" (the
 *                             program itself is named "program")
 * Counted: the calls of malloc, calloc and realloc, each charged to the
 * object its caller's code lies in (the return address: a library that
 * allocates on behalf of its caller is charged, not the caller).  free is
 * not counted.  Each call is passed on to the next definition (the
 * program's own allocator, tcmalloc for the worker, or libc's).
 * Built by the bench: cc -shared -fPIC -o X.so preload_allocs.c -ldl -lpthread */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OBJECTS_MAX 64

typedef struct object {
    uintptr_t lo, hi;   /* its executable segment (the first one) */
    char name[96];
} object;

static object objects[OBJECTS_MAX];
static int nobjects;
static atomic_ulong counts[OBJECTS_MAX + 1];   /* the last: callers in no object known */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

/* dlsym may allocate before the real functions are known: from here. */
static char boot[4096];
static size_t boot_used;

static int in_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof(boot); }

static void *boot_alloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof(boot)) return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

static int resolving;

static void resolve(void) {
    if (real_malloc || resolving) return;
    resolving = 1;
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    resolving = 0;
}

static void count(const void *caller) {
    uintptr_t a = (uintptr_t)caller;
    for (int i = 0; i < nobjects; i++)
        if (a >= objects[i].lo && a < objects[i].hi) {
            atomic_fetch_add_explicit(&counts[i], 1, memory_order_relaxed);
            return;
        }
    atomic_fetch_add_explicit(&counts[OBJECTS_MAX], 1, memory_order_relaxed);
}

void *malloc(size_t n) {
    if (!real_malloc) {
        resolve();
        if (!real_malloc) return boot_alloc(n);
    }
    count(__builtin_return_address(0));
    return real_malloc(n);
}

void *calloc(size_t k, size_t n) {
    if (!real_calloc) {
        resolve();
        if (!real_calloc) return boot_alloc(k * n); /* the arena is zeroed (static) */
    }
    count(__builtin_return_address(0));
    return real_calloc(k, n);
}

void *realloc(void *p, size_t n) {
    if (!real_realloc) resolve();
    if (in_boot(p) || !real_realloc) {
        void *q = real_malloc ? real_malloc(n) : boot_alloc(n);
        if (q && p) {
            size_t room = (size_t)(boot + sizeof(boot) - (char *)p);
            memcpy(q, p, n < room ? n : room);
        }
        return q;
    }
    count(__builtin_return_address(0));
    return real_realloc(p, n);
}

void free(void *p) {
    if (!p || in_boot(p)) return;
    if (!real_free) resolve();
    if (real_free) real_free(p);
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (nobjects >= OBJECTS_MAX) return 1;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        object *o = &objects[nobjects++];
        o->lo = info->dlpi_addr + ph->p_vaddr;
        o->hi = o->lo + ph->p_memsz;
        const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "program";
        const char *slash = strrchr(name, '/');
        snprintf(o->name, sizeof(o->name), "%s", slash ? slash + 1 : name);
        break;
    }
    return 0;
}

static atomic_int stop;
static pthread_t watcher;
static int watching;
static char path[4096], tmp[4200];

/* Written without stdio, which would allocate (and be counted). */
static void *watch(void *arg) {
    (void)arg;
    struct timespec tick = {0, 10 * 1000 * 1000};
    static char text[OBJECTS_MAX * 128 + 64];
    for (unsigned long seq = 1; !atomic_load(&stop); seq++) {
        size_t n = (size_t)snprintf(text, sizeof(text), "seq %lu\n", seq);
        for (int i = 0; i <= OBJECTS_MAX && n < sizeof(text); i++) {
            unsigned long c = atomic_load_explicit(&counts[i], memory_order_relaxed);
            if (c)
                n += (size_t)snprintf(text + n, sizeof(text) - n, "%lu %s\n", c,
                                      i < OBJECTS_MAX ? objects[i].name : "unknown");
        }
        if (n > sizeof(text)) n = sizeof(text);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return NULL;
        ssize_t w = write(fd, text, n);
        close(fd);
        if (w == (ssize_t)n) rename(tmp, path);
        nanosleep(&tick, NULL);
    }
    return NULL;
}

/* Every object the program needs is mapped before any constructor runs;
 * one opened later (dlopen) is counted as unknown. */
__attribute__((constructor)) static void allocs_start(void) {
    resolve();
    const char *p = getenv("PRELOAD_ALLOCS_FILE");
    if (!p) return;
    dl_iterate_phdr(add_object, NULL);
    snprintf(path, sizeof(path), "%s", p);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    watching = pthread_create(&watcher, NULL, watch, NULL) == 0;
}

__attribute__((destructor)) static void allocs_end(void) {
    if (!watching) return;
    atomic_store(&stop, 1);
    pthread_join(watcher, NULL);
}
