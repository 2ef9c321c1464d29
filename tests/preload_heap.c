/* preload_heap.c - LD_PRELOAD shim for the worker's tests
 * (tests/integration/test_resilience.py): how much of the heap the
 * process holds, as its allocator counts it, without asking the worker.
 *   PRELOAD_HEAP_FILE=FILE  rewritten every 10 ms with the bytes the
 *                           program has allocated and not freed and the
 *                           count of writes so far ("BYTES SEQ"), one line
 *                           of fixed width, so a reader never sees half of
 *                           one; a reader that waits for SEQ to move on
 *                           gets a count taken after it looked
 * The worker links tcmalloc: its generic.current_allocated_bytes.  With
 * glibc's malloc: mallinfo2 (chunks in use, mmapped ones too, all arenas).
 * Built by the test: cc -shared -fPIC -o X.so preload_heap.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int (*tc_property_fn)(const char *name, size_t *value);

static atomic_int heap_stop;
static pthread_t heap_thread;
static int heap_running;

static size_t heap_in_use(tc_property_fn tc) {
    size_t bytes;
    if (tc && tc("generic.current_allocated_bytes", &bytes)) return bytes;
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void *heap_watch(void *arg) {
    int fd = (int)(long)arg;
    struct timespec tick = {0, 10 * 1000 * 1000};
    tc_property_fn tc = (tc_property_fn)dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
    for (unsigned long seq = 1; !atomic_load(&heap_stop); seq++) {
        char line[48];
        int n = snprintf(line, sizeof(line), "%20zu %20lu\n", heap_in_use(tc), seq);
        if (pwrite(fd, line, (size_t)n, 0) != n) return NULL;
        nanosleep(&tick, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void heap_start(void) {
    const char *path = getenv("PRELOAD_HEAP_FILE");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    heap_running = pthread_create(&heap_thread, NULL, heap_watch, (void *)(long)fd) == 0;
}

/* The watcher calls into the allocator: at exit it is stopped and joined
 * here, instead of calling it until the process is gone. */
__attribute__((destructor)) static void heap_end(void) {
    if (!heap_running) return;
    atomic_store(&heap_stop, 1);
    pthread_join(heap_thread, NULL);
}
