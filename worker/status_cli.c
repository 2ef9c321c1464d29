#include "status_cli.h"

#include "batch_util.h"
#include "cli_config.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonin.h"
#include "jsonout.h"

/* The job hash's counters and times (worker/state.c).  Only these print
 * as numbers: any other field is text that may look like one (a batch id
 * 0x1F or 007 is not 31 or 7). */
static const char *const status_numeric[] = {"attempt", "max_attempts", "run", "prompt_tokens",
                                             "completion_tokens", "created", "updated", "recorded",
                                             "published"};

static int status_numeric_field(const char *k) {
    for (size_t i = 0; i < sizeof(status_numeric) / sizeof(status_numeric[0]); i++)
        if (!strcmp(k, status_numeric[i])) return 1;
    return 0;
}

/* A decimal integer, whole: what the scripts write with HSET/HINCRBY. */
static int status_parse_int(const char *v, long long *out) {
    char *end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return *v && !*end && !errno;
}

static const char status_usage[] =
    "usage: retort status JOB_ID [-c FILE] [--set redis.host=H] ...\n"
    "Prints the job's status, attempt count, token totals and every attempt's record.\n";

int status_cli_main(int argc, char **argv) {
    /* the batch commands' parser: options before the job id too */
    batch_opt opts[] = {{"--help", "-h", 0, NULL, 0}};
    const char *pos[1];
    size_t npos;
    config *cfg = NULL;
    int rc = batch_util_args("status", status_usage, argc, argv, opts, 1, pos, 1, &npos, &cfg);
    if (rc) return rc;
    if (opts[0].set || npos != 1) {
        if (opts[0].set) fputs(status_usage, stdout);
        else fprintf(stderr, "retort status: which job?\n%s", status_usage);
        config_free(cfg);
        return opts[0].set ? BATCH_EXIT_OK : BATCH_EXIT_USAGE;
    }
    const char *job_id = pos[0];
    redisContext *c = NULL;
    redisReply *h = NULL, *l = NULL;
    cJSON *out = NULL;
    rc = 2;
    /* The batch commands' connection: an AUTH or SELECT that fails is an
     * error (ignored, the job was looked up in db 0), and a stuck server
     * times out after 30 s. */
    char err[1024];
    if (!(c = batch_util_redis(cfg, err, sizeof(err)))) {
        fprintf(stderr, "retort status: %s\n", err);
        goto done;
    }
    const char *prefix = config_get(cfg, "redis.key_prefix");
    h = redisCommand(c, "HGETALL %s:job:{%s}", prefix, job_id);
    l = redisCommand(c, "LRANGE %s:job:{%s}:history 0 -1", prefix, job_id);
    if (!h || !l || h->type != REDIS_REPLY_ARRAY || l->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "retort status: redis: %s\n", h && h->type == REDIS_REPLY_ERROR ? h->str : c->errstr);
        goto done;
    }
    if (h->elements == 0) {
        fprintf(stderr, "retort status: no state for job %s (unknown, or expired)\n", job_id);
        rc = 1;
        goto done;
    }
    out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "job_id", job_id);
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const char *k = h->element[i]->str, *v = h->element[i + 1]->str;
        if (!strcmp(k, "owner")) continue;
        long long n;
        if (status_numeric_field(k) && status_parse_int(v, &n)) cJSON_AddNumberToObject(out, k, (double)n);
        else cJSON_AddStringToObject(out, k, v);
    }
    cJSON *hist = cJSON_AddArrayToObject(out, "history");
    for (size_t i = 0; i < l->elements; i++) {
        /* read with jsonin and printed with jsonout: a number of the
         * model's output shows as it was written (cJSON would print
         * 12345678901234567890 as 1.2345678901234567e+19) */
        cJSON *in = jsonin_parse_all(l->element[i]->str, l->element[i]->len, NULL);
        cJSON *rec = in ? cJSON_Duplicate(in, 1) : NULL;
        jsonin_free(in);
        if (rec) cJSON_AddItemToArray(hist, rec);
    }
    char *s = jsonout_print_formatted(out);
    if (!s) {
        fprintf(stderr, "retort status: out of memory\n");
        rc = 2; /* 1 says the job is unknown */
        goto done;
    }
    printf("%s\n", s);
    free(s);
    rc = 0;
done:
    cJSON_Delete(out);
    freeReplyObject(h);
    freeReplyObject(l);
    if (c) redisFree(c);
    config_free(cfg);
    return rc;
}
