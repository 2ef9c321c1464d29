/* retort - command line: the worker pool and its tools.
 *
 *   retort worker [options]      run the pool (also: retort-worker [options])
 *   retort validate SCHEMA [INSTANCE...]
 *   retort status JOB_ID         a job's state and history from Redis
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "status_cli.h"
#include "supervisor.h"
#include "validate_cli.h"
#include "worker.h"

extern char **environ;

static void usage(FILE *out) {
    fprintf(out,
            "usage: retort worker [options]        run the worker pool (retort-worker is the same)\n"
            "       retort validate SCHEMA [FILE...] validate JSON files against a schema (--help)\n"
            "       retort status JOB_ID [options]   show a job's state and attempt history\n"
            "\n"
            "worker options:\n"
            "  -c, --config FILE       properties file (key=value); also RETORT_CONFIG\n"
            "  -s, --set KEY=VALUE     set a key (repeatable); overrides file and environment\n"
            "  -p, --processes N       fork N worker processes under a supervisor (worker.processes)\n"
            "  -b, --brokers LIST      kafka.bootstrap.servers\n"
            "      --log-level LEVEL   debug|info|warn|error\n"
            "      --print-config      print the effective configuration (secrets masked) and exit\n"
            "  -h, --help              this help and every configuration key\n"
            "\n"
            "Precedence: defaults < file < RETORT_* environment < flags.\n\n");
    config_print_help(out);
}

/* Loads defaults, file, environment, then flags (argv[1..]).  Returns 0, or
 * 2 on a usage/config error (printed). */
int main_load_config(int argc, char **argv, config **out, int *print_config) {
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
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) { i++; continue; }
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
    *out = cfg;
    return 0;
bad:
    fprintf(stderr, "retort: %s\n", err);
    config_free(cfg);
    return 2;
}

static int worker_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    }
    config *cfg = NULL;
    int print_config = 0;
    int rc = main_load_config(argc, argv, &cfg, &print_config);
    if (rc) return rc;
    if (print_config) {
        config_dump(cfg, stdout);
        config_free(cfg);
        return 0;
    }
    char id[128];
    const char *wid = config_get(cfg, "worker.id");
    if (wid && wid[0]) {
        snprintf(id, sizeof(id), "%s", wid);
    } else {
        char host[64] = "worker";
        gethostname(host, sizeof(host) - 1);
        snprintf(id, sizeof(id), "%s-%d", host, (int)getpid());
    }
    log_level lvl = LOG_INFO;
    log_format fmt = LOG_FORMAT_AUTO;
    log_level_parse(config_get(cfg, "log.level"), &lvl);
    log_format_parse(config_get(cfg, "log.format"), &fmt);
    log_init(lvl, fmt, id);
    int n = (int)config_get_int(cfg, "worker.processes");
    rc = n > 1 ? supervisor_run(cfg, n, id) : worker_run(cfg, id);
    config_free(cfg);
    return rc;
}

int main(int argc, char **argv) {
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    if (!strcmp(prog, "retort-worker")) return worker_main(argc, argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "worker")) return worker_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "validate")) return validate_cli_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "status")) return status_cli_main(argc - 1, argv + 1);
    fprintf(stderr, "retort: unknown command '%s' (try retort --help)\n", argv[1]);
    return 2;
}
