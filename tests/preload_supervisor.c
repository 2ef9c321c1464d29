/* preload_supervisor.c - LD_PRELOAD shim for the supervisor's tests
 * (tests/integration/test_supervisor.py), in the process that loads it
 * only (not in the workers it forks):
 *   PRELOAD_TERM_IN_WAITPID=FILE  the first waitpid() once FILE exists
 *                              raises SIGTERM just before waiting: a stop
 *                              that comes between the supervisor's last
 *                              look and its wait
 *   PRELOAD_FAIL_FORKS=N       the first N fork() calls fail (EAGAIN)
 *   PRELOAD_FORK_LOG=FILE      a line per fork() call, failed or not
 *   PRELOAD_CHILD_PAUSE_MS=N   a child sleeps N ms as it starts (a stop
 *                              then comes before its worker is set up),
 *                              after a "child" line in PRELOAD_FORK_LOG
 * Built by the test: cc -shared -fPIC -o X.so preload_supervisor.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t preload_owner;

__attribute__((constructor)) static void preload_init(void) { preload_owner = getpid(); }

pid_t waitpid(pid_t pid, int *status, int options) {
    static pid_t (*real)(pid_t, int *, int);
    static int fired;
    if (!real) real = (pid_t(*)(pid_t, int *, int))dlsym(RTLD_NEXT, "waitpid");
    const char *trigger = getenv("PRELOAD_TERM_IN_WAITPID");
    if (getpid() == preload_owner && !fired && trigger && access(trigger, F_OK) == 0) {
        fired = 1;
        raise(SIGTERM);
    }
    return real(pid, status, options);
}

pid_t fork(void) {
    static pid_t (*real)(void);
    static int calls;
    if (!real) real = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
    const char *fail = getenv("PRELOAD_FAIL_FORKS");
    const char *log = getenv("PRELOAD_FORK_LOG");
    if (getpid() != preload_owner) return real();
    calls++;
    if (log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "fork %d\n", calls);
            fclose(f);
        }
    }
    if (fail && calls <= atoi(fail)) {
        errno = EAGAIN;
        return -1;
    }
    pid_t pid = real();
    const char *pause = getenv("PRELOAD_CHILD_PAUSE_MS");
    if (pid == 0 && pause) {
        if (log) {
            FILE *f = fopen(log, "a");
            if (f) {
                fprintf(f, "child %d\n", (int)getpid());
                fclose(f);
            }
        }
        usleep((useconds_t)atoi(pause) * 1000);
    }
    return pid;
}
