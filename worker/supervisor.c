#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"
#include "worker.h"

/* Quick deaths (or failed forks) in a row after which a slot is given up. */
#define SUPERVISOR_MAX_FAILURES 5
/* A worker that lived less than this died "quickly". */
#define SUPERVISOR_QUICK_MS 5000

typedef struct child {
    pid_t pid;            /* 0: not running */
    uint64_t started_ms;
    int failures;         /* quick deaths or failed forks in a row, for backoff */
    uint64_t restart_at;  /* when not running: monotonic ms of the next start, 0: none */
    int fork_errno;       /* why its last fork failed; 0 when it did not */
} child;

/* The SIGCHLD handler only has to exist: a signal whose default action is
 * to be ignored is not always kept pending for sigtimedwait. */
static void supervisor_on_child(int sig) { (void)sig; }

/* Forks the worker of slot; -1 when fork failed.  The child gets the
 * signal mask and dispositions it had before the supervisor's. */
static pid_t supervisor_spawn(const config *cfg, const char *base_id, int slot, const sigset_t *oldmask) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* Child: default signal dispositions and the mask from before, but
     * SIGTERM and SIGINT stay blocked until the worker's handlers are in
     * (worker_run unblocks them): a stop forwarded while it set up killed
     * it with no drain, and the supervisor's clean stop exited 1. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigset_t mask = *oldmask;
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    char id[160];
    snprintf(id, sizeof(id), "%s-%d", base_id, slot);
    log_init(LOG_INFO, LOG_FORMAT_AUTO, id);
    log_level lvl;
    log_format fmt;
    if (!log_level_parse(config_get(cfg, "log.level"), &lvl) &&
        !log_format_parse(config_get(cfg, "log.format"), &fmt))
        log_init(lvl, fmt, id);
    _exit(worker_run(cfg, id, slot));
}

/* The wait before the next start of a slot that failed `failures` times in
 * a row: none after the first, then doubling (a bad config would spin). */
static uint64_t supervisor_backoff_ms(int failures) {
    return failures > 1 ? 200u << (failures < 6 ? failures : 6) : 0;
}

/* Starts slot i now; a failed fork counts as a quick death.  Returns 0, or
 * -1 when the slot is given up. */
static int supervisor_start(const config *cfg, const char *base_id, child *k, int i, const sigset_t *oldmask) {
    k->restart_at = 0;
    pid_t pid = supervisor_spawn(cfg, base_id, i, oldmask);
    if (pid > 0) {
        /* the log said it could not start: say that it did */
        if (k->fork_errno) log_info(NULL, 0, "supervisor: worker %d started (pid %d) after a failed fork", i, (int)pid);
        k->pid = pid;
        k->started_ms = util_mono_ms();
        k->fork_errno = 0;
        return 0;
    }
    k->pid = 0;
    k->failures++;
    k->fork_errno = errno;
    log_error(NULL, 0, "supervisor: cannot start worker %d: fork: %s", i, strerror(k->fork_errno));
    if (k->failures > SUPERVISOR_MAX_FAILURES) {
        log_error(NULL, 0, "supervisor: worker %d cannot be started; giving up", i);
        return -1;
    }
    k->restart_at = util_mono_ms() + supervisor_backoff_ms(k->failures);
    if (!k->restart_at) k->restart_at = 1;
    return 0;
}

/* Says how many of the n workers the first round of forks started: a
 * failed fork is no worker (it is retried with the backoff).  The reason
 * given is the last failure's: one round's forks fail for one cause. */
static void supervisor_log_started(const child *kids, int n) {
    int live = 0, failed = 0, why = 0;
    for (int i = 0; i < n; i++) {
        if (kids[i].pid > 0) live++;
        if (kids[i].fork_errno) {
            failed++;
            why = kids[i].fork_errno;
        }
    }
    if (!failed)
        log_info(NULL, 0, "supervisor: %d worker process(es) started", live);
    else
        log_warn(NULL, 0, "supervisor: %d of %d worker process(es) started; %d could not be forked (%s), retrying",
                 live, n, failed, strerror(why));
}

int supervisor_run(const config *cfg, int n, const char *base_id) {
    child *kids = calloc((size_t)n, sizeof(*kids));
    if (!kids) return 1;
    /* SIGTERM, SIGINT and SIGCHLD stay blocked and are taken only by
     * sigtimedwait: a handler setting a flag could run between the flag's
     * check and a blocking waitpid, and the stop waited for a child to die. */
    sigset_t set, oldmask;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &oldmask);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = supervisor_on_child;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    int stop_signal = 0, forwarded = 0, rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (supervisor_start(cfg, base_id, &kids[i], i, &oldmask)) rc = 1;
    supervisor_log_started(kids, n);
    const struct timespec no_wait = {0, 0};
    for (;;) {
        /* every child that ended */
        int status, sig;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < n; i++) {
                if (kids[i].pid != pid) continue;
                kids[i].pid = 0;
                if (stop_signal) {
                    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
                    break;
                }
                /* Died on its own: restart, backing off if it keeps dying
                 * fast. */
                uint64_t lived = util_mono_ms() - kids[i].started_ms;
                kids[i].failures = lived < SUPERVISOR_QUICK_MS ? kids[i].failures + 1 : 0;
                log_warn(NULL, 0, "supervisor: worker %d (pid %d) %s %d; restarting", i, (int)pid,
                         WIFSIGNALED(status) ? "killed by signal" : "exited with",
                         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                if (kids[i].failures > SUPERVISOR_MAX_FAILURES) {
                    log_error(NULL, 0, "supervisor: worker %d keeps failing; giving up", i);
                    rc = 1;
                    break;
                }
                uint64_t at = util_mono_ms() + supervisor_backoff_ms(kids[i].failures);
                kids[i].restart_at = at ? at : 1;
                break;
            }
        }
        /* a stop that came meanwhile, before any restart */
        while ((sig = sigtimedwait(&set, NULL, &no_wait)) > 0)
            if ((sig == SIGTERM || sig == SIGINT) && !stop_signal) stop_signal = sig;
        if (rc && !stop_signal) stop_signal = SIGTERM; /* a slot was given up: stop the rest */
        if (stop_signal && !forwarded) {
            log_info(NULL, 0, "supervisor: signal %d, stopping workers", stop_signal);
            for (int i = 0; i < n; i++)
                if (kids[i].pid > 0) kill(kids[i].pid, SIGTERM);
            forwarded = 1;
        }
        /* restarts that are due (none after a stop); the time to the next */
        int alive = 0;
        uint64_t next = 0, now = util_mono_ms();
        for (int i = 0; i < n; i++) {
            if (stop_signal) kids[i].restart_at = 0;
            if (!kids[i].pid && kids[i].restart_at && kids[i].restart_at <= now &&
                supervisor_start(cfg, base_id, &kids[i], i, &oldmask)) {
                rc = 1;
                stop_signal = SIGTERM;
                forwarded = 0; /* the top of the loop stops the others */
            }
            if (kids[i].pid) alive++;
            if (!kids[i].pid && kids[i].restart_at && (!next || kids[i].restart_at < next)) next = kids[i].restart_at;
        }
        if (stop_signal && !forwarded) continue;
        if (!alive && !next) break;
        /* Sleep until a signal (a child's end among them) or the next
         * restart; a minute at most, in case a SIGCHLD was merged. */
        uint64_t wait_ms = next ? (next > now ? next - now : 0) : 60000;
        struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
        sig = sigtimedwait(&set, NULL, &ts);
        if ((sig == SIGTERM || sig == SIGINT) && !stop_signal) stop_signal = sig;
    }
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    free(kids);
    return rc;
}
