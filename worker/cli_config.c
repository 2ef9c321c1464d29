#include "cli_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Loads defaults, file, environment, then flags (argv[1..]).  Returns 0, or
 * 2 on a usage/config error (printed). */
int cli_config_load(int argc, char **argv, config **out, int *print_config) {
    config *cfg = config_new();
    char err[2048];
    const char *file = getenv("RETORT_CONFIG");
    if (!cfg) return 2;
    for (int i = 1; i < argc; i++)
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && i + 1 < argc) file = argv[++i];
    if (file && config_load_file(cfg, file, err, sizeof(err))) goto bad;
    if (config_load_env(cfg, environ, err, sizeof(err))) goto bad;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char *key = NULL;
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            if (!v) { /* it ran on the defaults, silently */
                snprintf(err, sizeof(err), "%s needs a file", a);
                goto bad;
            }
            i++;
            continue;
        }
        if (!strcmp(a, "--print-config")) { if (print_config) *print_config = 1; continue; }
        if (!strcmp(a, "-s") || !strcmp(a, "--set")) {
            if (!v || !strchr(v, '=')) {
                snprintf(err, sizeof(err), "%s needs KEY=VALUE", a);
                goto bad;
            }
            char *kv = strdup(v);
            char *eq = strchr(kv, '=');
            *eq = '\0';
            int rc = config_set(cfg, kv, eq + 1, err, sizeof(err));
            free(kv);
            if (rc) goto bad;
            i++;
            continue;
        }
        if (!strcmp(a, "-p") || !strcmp(a, "--processes")) key = "worker.processes";
        else if (!strcmp(a, "-b") || !strcmp(a, "--brokers")) key = "kafka.bootstrap.servers";
        else if (!strcmp(a, "--log-level")) key = "log.level";
        else if (!strcmp(a, "--log-format")) key = "log.format";
        else {
            snprintf(err, sizeof(err), "unknown option '%s' (see --help)", a);
            goto bad;
        }
        if (!v) {
            snprintf(err, sizeof(err), "%s needs a value", a);
            goto bad;
        }
        if (config_set(cfg, key, v, err, sizeof(err))) goto bad;
        i++;
    }
    /* worker N of --processes serves metrics on metrics.port + N: past
     * 65535 the port wrapped, and the worker listened on one at random */
    long long mport = config_get_int(cfg, "metrics.port"), nproc = config_get_int(cfg, "worker.processes");
    if (mport > 0 && mport + nproc - 1 > 65535) {
        snprintf(err, sizeof(err), "metrics.port %lld with %lld processes (port + N for worker N) goes past 65535",
                 mport, nproc);
        goto bad;
    }
    *out = cfg;
    return 0;
bad:
    fprintf(stderr, "retort: %s\n", err);
    config_free(cfg);
    return 2;
}

