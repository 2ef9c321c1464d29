/* fake_clock.c - an LD_PRELOAD shim for the tests: the wall clock of one
 * thread runs FAKE_CLOCK_OFFSET_S seconds off, as a machine whose clock is
 * wrong.
 *
 * Only the process's first thread (the worker's loop, where it reads the
 * wall clock for its records and Redis calls) is moved.  librdkafka's
 * threads wait on condition variables with deadlines of CLOCK_REALTIME,
 * which the kernel keeps in real time: moved too, their waits ran an hour
 * long and the consumer lost its group (libfaketime does that).  The
 * monotonic clocks are left alone.
 *
 * Build: cc -shared -fPIC -o fake_clock.so fake_clock.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long offset_s(void) {
    static long off = -1;
    if (off == -1) {
        const char *s = getenv("FAKE_CLOCK_OFFSET_S");
        off = s ? atol(s) : 0;
    }
    return syscall(SYS_gettid) == getpid() ? off : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += offset_s();
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    int rc = real(tv, tz);
    if (rc == 0 && tv) tv->tv_sec += offset_s();
    return rc;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
