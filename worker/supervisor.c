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

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

typedef struct child {
    pid_t pid;
    uint64_t started_ms;
    int failures;   /* quick deaths in a row, for backoff */
} child;

static pid_t spawn(const config *cfg, const char *base_id, int slot) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* Child: default signal dispositions; the worker installs its own. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
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

int supervisor_run(const config *cfg, int n, const char *base_id) {
    child *kids = calloc((size_t)n, sizeof(*kids));
    if (!kids) return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    for (int i = 0; i < n; i++) {
        kids[i].pid = spawn(cfg, base_id, i);
        kids[i].started_ms = util_mono_ms();
    }
    log_info(NULL, 0, "supervisor: %d worker process(es) started", n);
    int forwarded = 0, alive = n, rc = 0;
    while (alive > 0) {
        if (stop_signal && !forwarded) {
            log_info(NULL, 0, "supervisor: signal %d, stopping workers", (int)stop_signal);
            for (int i = 0; i < n; i++)
                if (kids[i].pid > 0) kill(kids[i].pid, SIGTERM);
            forwarded = 1;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < n; i++) {
            if (kids[i].pid != pid) continue;
            kids[i].pid = 0;
            alive--;
            if (stop_signal) {
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
                break;
            }
            /* Died on its own: restart, backing off if it keeps dying fast
             * (a bad config would otherwise spin). */
            uint64_t lived = util_mono_ms() - kids[i].started_ms;
            kids[i].failures = lived < 5000 ? kids[i].failures + 1 : 0;
            log_warn(NULL, 0, "supervisor: worker %d (pid %d) %s %d; restarting", i, (int)pid,
                     WIFSIGNALED(status) ? "killed by signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            if (kids[i].failures > 5) {
                log_error(NULL, 0, "supervisor: worker %d keeps failing; giving up", i);
                rc = 1;
                break;
            }
            if (kids[i].failures > 1) {
                unsigned delay = 200u << (kids[i].failures < 6 ? kids[i].failures : 6);
                struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            kids[i].pid = spawn(cfg, base_id, i);
            kids[i].started_ms = util_mono_ms();
            alive++;
            break;
        }
        if (rc && !stop_signal) {
            stop_signal = SIGTERM;
        }
    }
    free(kids);
    return rc;
}
