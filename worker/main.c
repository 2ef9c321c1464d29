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
#include "batch_cli.h"
#include "cli_config.h"
#include "status_cli.h"
#include "supervisor.h"
#include "validate_cli.h"
#include "worker.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: retort worker [options]        run the worker pool (retort-worker is the same)\n"
            "       retort validate SCHEMA [FILE...] validate JSON files against a schema (--help)\n"
            "       retort status JOB_ID [options]   show a job's state and attempt history\n"
            "       retort submit FILE.jsonl [--batch ID]  produce one job per line\n"
            "       retort watch BATCH               live progress of a batch\n"
            "       retort results BATCH -o OUT.jsonl  outputs in input order (escalations to --errors)\n"
            "       retort resubmit BATCH --escalated [--max-attempts N]\n"
            "       retort report BATCH              success rate, attempts, violations, tokens, cost\n"
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

static int worker_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    }
    config *cfg = NULL;
    int print_config = 0;
    int rc = cli_config_load(argc, argv, &cfg, &print_config);
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
    rc = n > 1 ? supervisor_run(cfg, n, id) : worker_run(cfg, id, 0);
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
    if (!strcmp(argv[1], "submit") || !strcmp(argv[1], "watch") || !strcmp(argv[1], "results") ||
        !strcmp(argv[1], "resubmit") || !strcmp(argv[1], "report"))
        return batch_cli_main(argc - 1, argv + 1);
    fprintf(stderr, "retort: unknown command '%s' (try retort --help)\n", argv[1]);
    return 2;
}
