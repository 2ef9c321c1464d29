/* mock_kafka.c - a stand-alone Kafka "broker" for tests and benchmarks.
 *
 * Built on librdkafka's mock cluster (rdkafka_mock.h), so no JVM and no real
 * broker is needed.  The process prints one line
 *
 *     BOOTSTRAP host:port[,host:port...]
 *
 * on stdout and then serves until SIGINT/SIGTERM (and, with --control, until
 * stdin reaches EOF or a `quit` command arrives).
 *
 * Usage:
 *   mock-kafka [--brokers N] [--partitions P] [--topics a,b,c]
 *              [--topic NAME:PARTS]... [--control]
 *
 * Control commands (one per line on stdin, each answered `OK` or `ERR reason`):
 *   broker_down ID            disconnect broker ID and refuse new connections
 *   broker_up ID              accept connections again
 *   broker_rtt ID MS          add MS of round-trip delay to broker ID
 *   delay ID APIKEY MS [N]    answer broker ID's next N (1) requests of APIKEY
 *                             MS late; they take effect at once (a produced
 *                             message can be fetched before its producer
 *                             hears that it was)
 *   errors APIKEY ERR [ERR..] the next requests of APIKEY fail with ERR...
 *   clear_errors APIKEY       drop pending injected errors of APIKEY
 *   partition_leader TOPIC PART BROKER
 *   topic_create NAME PARTS
 *   quit
 * APIKEY is a number or a name (Produce, Fetch, Metadata, JoinGroup, ...);
 * ERR is a number or a librdkafka error name (NOT_LEADER_FOR_PARTITION,
 * _TRANSPORT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, ...).
 *
 * Limits of the mock (librdkafka 2.0.2): a partition keeps only its last
 * 100,000 messages or 5 MiB; a consumer group's first join takes ~3 s; the
 * CreateTopics admin API is not supported (topics are auto-created on
 * metadata requests, with the default partition count).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define DEFAULT_TOPICS "retort.jobs,retort.final,retort.escalations,retort.dlq"
#define MAX_LINE 4096
#define MAX_ERRS 64

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mock-kafka [--brokers N] [--partitions P] [--topics a,b,c]\n"
            "                  [--topic NAME:PARTS]... [--control]\n");
}

/* Strict integer parse: the whole string must be a number in [lo, hi]. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static const struct {
    const char *name;
    int key;
} api_keys[] = {
    {"Produce", 0},          {"Fetch", 1},           {"ListOffsets", 2},
    {"Metadata", 3},         {"OffsetCommit", 8},    {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},      {"Heartbeat", 12},
    {"LeaveGroup", 13},      {"SyncGroup", 14},      {"DescribeGroups", 15},
    {"ListGroups", 16},      {"ApiVersions", 18},    {"InitProducerId", 22},
    {"AddPartitionsToTxn", 24}, {"AddOffsetsToTxn", 25}, {"EndTxn", 26},
    {"TxnOffsetCommit", 28},
};

static int parse_api_key(const char *s, int16_t *out)
{
    long v;
    size_t i;

    if (parse_long(s, 0, 32767, &v) == 0) {
        *out = (int16_t)v;
        return 0;
    }
    for (i = 0; i < sizeof(api_keys) / sizeof(api_keys[0]); i++) {
        if (strcasecmp(s, api_keys[i].name) == 0) {
            *out = (int16_t)api_keys[i].key;
            return 0;
        }
    }
    return -1;
}

/* Accepts a number, or a name as librdkafka spells it in its error table
 * (with or without the RD_KAFKA_RESP_ERR_ prefix). */
static int parse_err(const char *s, rd_kafka_resp_err_t *out)
{
    const struct rd_kafka_err_desc *descs = NULL;
    size_t n = 0, i;
    long v;
    const char *prefix = "RD_KAFKA_RESP_ERR_";

    if (parse_long(s, -100000, 100000, &v) == 0) {
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    if (strncasecmp(s, prefix, strlen(prefix)) == 0)
        s += strlen(prefix);
    rd_kafka_get_err_descs(&descs, &n);
    for (i = 0; i < n; i++) {
        if (descs[i].name && strcasecmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return 0;
        }
    }
    return -1;
}

/* Splits line into at most max whitespace separated words (in place). */
static int split_words(char *line, char **argv, int max)
{
    int n = 0;
    char *save = NULL;
    char *tok = strtok_r(line, " \t\r\n", &save);

    while (tok && n < max) {
        argv[n++] = tok;
        tok = strtok_r(NULL, " \t\r\n", &save);
    }
    return n;
}

static void reply(rd_kafka_resp_err_t err, const char *what)
{
    if (err)
        printf("ERR %s: %s\n", what, rd_kafka_err2str(err));
    else
        printf("OK\n");
    fflush(stdout);
}

static void reply_err(const char *msg)
{
    printf("ERR %s\n", msg);
    fflush(stdout);
}

/* Runs one control command.  Returns 1 when the command asks to quit. */
static int run_command(rd_kafka_mock_cluster_t *mc, char *line)
{
    char *argv[MAX_ERRS + 4];
    int argc = split_words(line, argv, (int)(sizeof(argv) / sizeof(argv[0])));
    long a, b;

    if (argc == 0)
        return 0; /* blank line: no answer, so scripts may pad */
    if (strcmp(argv[0], "quit") == 0) {
        reply(RD_KAFKA_RESP_ERR_NO_ERROR, "quit");
        return 1;
    }
    if (strcmp(argv[0], "broker_down") == 0 || strcmp(argv[0], "broker_up") == 0) {
        if (argc != 2 || parse_long(argv[1], -1, 1000000, &a)) {
            reply_err("usage: broker_down|broker_up ID");
            return 0;
        }
        if (argv[0][7] == 'd')
            reply(rd_kafka_mock_broker_set_down(mc, (int32_t)a), argv[0]);
        else
            reply(rd_kafka_mock_broker_set_up(mc, (int32_t)a), argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "broker_rtt") == 0) {
        if (argc != 3 || parse_long(argv[1], -1, 1000000, &a) ||
            parse_long(argv[2], 0, 3600000, &b)) {
            reply_err("usage: broker_rtt ID MS");
            return 0;
        }
        reply(rd_kafka_mock_broker_set_rtt(mc, (int32_t)a, (int)b), argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "delay") == 0) {
        int16_t key;
        long n = 1;

        if ((argc != 4 && argc != 5) || parse_long(argv[1], -1, 1000000, &a) ||
            parse_api_key(argv[2], &key) || parse_long(argv[3], 0, 3600000, &b) ||
            (argc == 5 && parse_long(argv[4], 1, 1000, &n))) {
            reply_err("usage: delay ID APIKEY MS [N]");
            return 0;
        }
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        for (long i = 0; i < n && !err; i++)
            err = rd_kafka_mock_broker_push_request_error_rtts(mc, (int32_t)a, key, 1,
                                                               RD_KAFKA_RESP_ERR_NO_ERROR, (int)b);
        reply(err, argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "errors") == 0) {
        rd_kafka_resp_err_t errs[MAX_ERRS];
        int16_t key;
        int i;

        if (argc < 3 || parse_api_key(argv[1], &key)) {
            reply_err("usage: errors APIKEY ERRCODE [ERRCODE...]");
            return 0;
        }
        if (argc - 2 > MAX_ERRS) {
            reply_err("too many error codes");
            return 0;
        }
        for (i = 2; i < argc; i++) {
            if (parse_err(argv[i], &errs[i - 2])) {
                printf("ERR unknown error code %s\n", argv[i]);
                fflush(stdout);
                return 0;
            }
        }
        rd_kafka_mock_push_request_errors_array(mc, key, (size_t)(argc - 2), errs);
        reply(RD_KAFKA_RESP_ERR_NO_ERROR, argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "clear_errors") == 0) {
        int16_t key;

        if (argc != 2 || parse_api_key(argv[1], &key)) {
            reply_err("usage: clear_errors APIKEY");
            return 0;
        }
        rd_kafka_mock_clear_request_errors(mc, key);
        reply(RD_KAFKA_RESP_ERR_NO_ERROR, argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "partition_leader") == 0) {
        if (argc != 4 || parse_long(argv[2], 0, 1000000, &a) ||
            parse_long(argv[3], -1, 1000000, &b)) {
            reply_err("usage: partition_leader TOPIC PART BROKER");
            return 0;
        }
        reply(rd_kafka_mock_partition_set_leader(mc, argv[1], (int32_t)a, (int32_t)b),
              argv[0]);
        return 0;
    }
    if (strcmp(argv[0], "topic_create") == 0) {
        if (argc != 3 || parse_long(argv[2], 1, 100000, &a)) {
            reply_err("usage: topic_create NAME PARTS");
            return 0;
        }
        reply(rd_kafka_mock_topic_create(mc, argv[1], (int)a, 1), argv[0]);
        return 0;
    }
    printf("ERR unknown command %s\n", argv[0]);
    fflush(stdout);
    return 0;
}

/* Reads whatever stdin has (non-blocking after poll said readable) and runs
 * complete lines.  Returns 1 on EOF or quit. */
static int pump_stdin(rd_kafka_mock_cluster_t *mc, char *buf, size_t *used)
{
    ssize_t n = read(STDIN_FILENO, buf + *used, MAX_LINE - 1 - *used);
    char *nl;

    if (n < 0)
        return (errno == EINTR || errno == EAGAIN) ? 0 : 1;
    if (n == 0) {
        /* EOF: a last unterminated line still counts. */
        if (*used) {
            buf[*used] = '\0';
            *used = 0;
            if (run_command(mc, buf))
                return 1;
        }
        return 1;
    }
    *used += (size_t)n;
    buf[*used] = '\0';
    while ((nl = memchr(buf, '\n', *used)) != NULL) {
        size_t len = (size_t)(nl - buf) + 1;

        *nl = '\0';
        if (run_command(mc, buf))
            return 1;
        memmove(buf, buf + len, *used - len);
        *used -= len;
        buf[*used] = '\0';
    }
    if (*used >= MAX_LINE - 1) {
        reply_err("line too long");
        *used = 0;
    }
    return 0;
}

static int add_topic(rd_kafka_mock_cluster_t *mc, const char *name, int parts)
{
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name, parts, 1);

    if (err) {
        fprintf(stderr, "mock-kafka: topic %s: %s\n", name, rd_kafka_err2str(err));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long brokers = 1, partitions = 6;
    const char *topics = DEFAULT_TOPICS;
    const char *extra[256];
    int n_extra = 0, control = 0, i, rc = 1;
    char errstr[512];
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_t *rk = NULL;
    rd_kafka_mock_cluster_t *mc = NULL;
    struct sigaction sa;
    char *list = NULL, *save = NULL, *tok;
    char linebuf[MAX_LINE];
    size_t used = 0;

    for (i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(opt, "--control") == 0) {
            control = 1;
        } else if (strcmp(opt, "--brokers") == 0) {
            if (parse_long(val, 1, 64, &brokers))
                goto bad_arg;
            i++;
        } else if (strcmp(opt, "--partitions") == 0) {
            if (parse_long(val, 1, 10000, &partitions))
                goto bad_arg;
            i++;
        } else if (strcmp(opt, "--topics") == 0) {
            if (!val)
                goto bad_arg;
            topics = val;
            i++;
        } else if (strcmp(opt, "--topic") == 0) {
            if (!val || !strchr(val, ':') || n_extra == 256)
                goto bad_arg;
            extra[n_extra++] = val;
            i++;
        } else if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            goto bad_arg;
        }
        continue;
bad_arg:
        fprintf(stderr, "mock-kafka: bad or incomplete option %s\n", opt);
        usage(stderr);
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: poll() must wake up on a signal */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    conf = rd_kafka_conf_new();
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "mock-kafka: rd_kafka_new: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        goto cleanup;
    }
    conf = NULL; /* taken by rd_kafka_new */

    mc = rd_kafka_mock_cluster_new(rk, (int)brokers);
    if (!mc) {
        fprintf(stderr, "mock-kafka: cannot create the mock cluster\n");
        goto cleanup;
    }

    list = strdup(topics);
    if (!list)
        goto cleanup;
    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*tok && add_topic(mc, tok, (int)partitions))
            goto cleanup;
    }
    for (i = 0; i < n_extra; i++) {
        char name[512];
        const char *colon = strrchr(extra[i], ':');
        size_t len = (size_t)(colon - extra[i]);
        long parts;

        if (len == 0 || len >= sizeof(name) || parse_long(colon + 1, 1, 10000, &parts)) {
            fprintf(stderr, "mock-kafka: bad --topic %s (want NAME:PARTS)\n", extra[i]);
            goto cleanup;
        }
        memcpy(name, extra[i], len);
        name[len] = '\0';
        if (add_topic(mc, name, (int)parts))
            goto cleanup;
    }

    printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);

    while (!g_stop) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int pr;

        if (!control) {
            /* Nothing to do but wait; the mock cluster has its own thread. */
            pr = poll(NULL, 0, 500);
            continue;
        }
        pr = poll(&pfd, 1, 500);
        if (pr > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
            if (pump_stdin(mc, linebuf, &used))
                break;
        }
    }
    rc = 0;

cleanup:
    free(list);
    if (mc)
        rd_kafka_mock_cluster_destroy(mc);
    if (rk)
        rd_kafka_destroy(rk);
    return rc;
}
