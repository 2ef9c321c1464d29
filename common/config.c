#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { CFG_STR, CFG_INT, CFG_BOOL, CFG_ENUM } cfg_type;

/* What --print-config hides of a value. */
enum {
    CFG_MASK_NONE = 0,
    CFG_MASK_ALL,       /* a password */
    CFG_MASK_URL_CREDS, /* a URL's userinfo, query and fragment (an endpoint) */
    CFG_MASK_URL_PATH,  /* all but the scheme and host (a Slack webhook URL's
                           path is its secret) */
};

typedef struct cfg_def {
    const char *key;
    cfg_type type;
    const char *def;
    long long min, max;   /* CFG_INT */
    const char *choices;  /* CFG_ENUM: "a|b|c" */
    int secret;           /* what config_dump hides: a CFG_MASK_* */
    const char *help;
} cfg_def;

#define I(k, d, lo, hi, h) {k, CFG_INT, d, lo, hi, NULL, 0, h}
#define S(k, d, h) {k, CFG_STR, d, 0, 0, NULL, 0, h}
#define B(k, d, h) {k, CFG_BOOL, d, 0, 0, NULL, 0, h}
#define E(k, d, c, h) {k, CFG_ENUM, d, 0, 0, c, 0, h}

static const cfg_def cfg_defs[] = {
    S("kafka.bootstrap.servers", "127.0.0.1:9092", "Kafka brokers (any kafka.* key goes to librdkafka as is)"),
    S("kafka.group.id", "retort-workers", "consumer group of the pool"),
    S("topics.jobs", "retort.jobs", "topic of generation jobs (retry jobs are republished here)"),
    S("topics.final", "retort.final", "topic of final events"),
    S("topics.escalations", "retort.escalations", "topic of escalation events"),
    S("topics.dlq", "retort.dlq", "dead-letter topic for malformed jobs"),
    E("topics.outcome_partitioning", "key", "key|sticky", "how final, escalation and dead-letter events spread over their topic's partitions: key (librdkafka's partitioner on the job id: a job's events stay in order on one partition) or sticky (each worker fills one partition for a window of kafka.producer.linger.ms, or kafka.producer.sticky.partitioning.linger.ms if set, then the next: one produce request per window instead of one per partition, but a job's events of different runs may land on different partitions); the key is the job id either way, and retry jobs always go by key"),
    S("redis.host", "127.0.0.1", "Redis host"),
    I("redis.port", "6379", 1, 65535, "Redis port"),
    {"redis.password", CFG_STR, "", 0, 0, NULL, CFG_MASK_ALL, "Redis password (AUTH); empty for none"},
    I("redis.db", "0", 0, 1024, "Redis database number"),
    S("redis.key_prefix", "retort", "prefix of every Redis key"),
    I("redis.ttl_s", "604800", 60, 31536000, "lifetime of a job's state in Redis, seconds"),
    E("llm.provider", "openai", "openai|anthropic", "LLM API: OpenAI-compatible chat completions or Anthropic Messages"),
    {"llm.base_url", CFG_STR, "http://127.0.0.1:8000/v1", 0, 0, NULL, CFG_MASK_URL_CREDS, "base URL; requests go to {base_url}/chat/completions or {base_url}/messages"},
    S("llm.api_key_env", "OPENAI_API_KEY", "name of the environment variable holding the API key (the key itself is never logged)"),
    S("llm.model", "gpt-4o-mini", "model used when a job names none"),
    I("llm.timeout_ms", "60000", 100, 3600000, "whole-request timeout"),
    I("llm.connect_timeout_ms", "5000", 100, 600000, "connect timeout"),
    S("llm.ca_file", "", "PEM bundle of CA certificates that verify the LLM endpoint's TLS certificate (empty: the system's store)"),
    I("llm.max_response_bytes", "4194304", 1024, 1073741824, "cap on a response body; a larger answer (2xx) is unread and repaired as a cut one (category truncated), a larger error body is a network error"),
    I("llm.max_inflight", "64", 1, 100000, "LLM calls in flight per worker process"),
    E("llm.response_format", "auto", "auto|on|off", "send the schema as response_format json_schema (auto: strict only when the schema allows it)"),
    I("llm.max_tokens", "1024", 1, 1000000, "max_tokens sent when a job's params set none (required by Anthropic)"),
    S("llm.anthropic_version", "2023-06-01", "anthropic-version header"),
    B("llm.prompt_cache", "false", "Anthropic: mark the system prompt (instructions, schema, the job's system messages) for the prompt cache; the jobs of a schema then read it at a tenth of the input price, but each write costs a quarter more (worth it for batches; OpenAI caches on its own)"),
    I("llm.max_transient_retries", "4", 0, 100, "retries in place of one attempt after timeouts, network errors, 429 and 5xx"),
    I("llm.backoff_base_ms", "500", 1, 600000, "first backoff of a transient retry (doubles, with jitter)"),
    I("llm.backoff_max_ms", "30000", 1, 3600000, "cap on one backoff, Retry-After included"),
    E("llm.on_account_error", "escalate", "escalate|pause", "a call refused for the account, not the job (a spent quota or credit, a refused API key: categories quota and auth): escalate the job, or pause: hold that model's calls, try one every llm.account_pause_ms, and go on once one goes through (jobs wait with their attempts unspent; a job's deadline still ends it)"),
    I("llm.account_pause_ms", "60000", 1000, 3600000, "with llm.on_account_error=pause, how long a model's calls are held before one tries the account again"),
    B("llm.aimd", "true", "halve a model's concurrency limit on its 429s (at most once a second), grow it by one per round of successes"),
    I("ratelimit.rpm", "0", 0, 100000000, "requests per minute to llm.base_url for each model (a job's own, or llm.model), shared by every worker through Redis (0: none); ratelimit.<model>.rpm sets one model's"),
    I("ratelimit.tpm", "0", 0, 1000000000, "tokens per minute, likewise (estimated before a call, settled after); ratelimit.<model>.tpm sets one model's"),
    I("retry.max_attempts", "3", 1, 100, "attempts per job, the first included, when a job says nothing"),
    I("retry.max_attempts_ceiling", "10", 1, 100, "upper bound on a job's own max_attempts"),
    S("retry.critical_codes", "REFUSAL,CONTENT_FILTER,UNKNOWN_SCHEMA,AUTH,BAD_REQUEST,CONTEXT_LENGTH", "codes and categories that escalate at once"),
    I("retry.previous_output_max_bytes", "8192", 256, 1048576, "cap on the previous output carried by a retry job"),
    I("retry.max_violations", "20", 1, 1000, "violations reported per attempt"),
    I("retry.max_message_bytes", "900000", 4096, 100000000, "a retry job larger than this is cut (previous output to 1 KiB and 5 violations, then no output and 1 violation); keep under the topic's max message size (a retry Kafka refuses as too large is cut further, at last to no reflection)"),
    B("retry.local", "true", "run a job's next attempt here as soon as its retry job is delivered, instead of when the retry job comes back from Kafka behind the backlog of its partition; the retry job still goes to the topic (the job's message stays uncommitted until the attempt ends, and whoever reads the retry job finds the attempt done, or waits for it, or takes it over if this worker dies)"),
    I("retry.token_budget", "0", 0, 1000000000, "tokens per job over all attempts when the job sets no token_budget (0: none)"),
    {"escalation.webhook_url", CFG_STR, "", 0, 0, NULL, CFG_MASK_URL_PATH, "POST every escalation event here as well (empty: off)"},
    I("escalation.webhook_timeout_ms", "5000", 100, 600000, "timeout of one webhook call"),
    S("escalation.webhook_ca_file", "", "PEM bundle of CA certificates that verify the webhook's TLS certificate "
      "(empty: the system's store)"),
    I("escalation.webhook_retries", "5", 0, 100, "retries of a failed webhook call (backoff, Retry-After honoured)"),
    I("escalation.webhook_max_pending", "1000", 1, 1000000, "webhook calls held at once, with their retries; past "
      "it an escalation is not posted (said, and counted)"),
    S("retry.template", "", "repair prompt template ({attempt} {max} {reason} {violations} {schema} {previous_output}); empty: built-in"),
    S("rules.file", "", "JSON array of rules run on every output after its schema (see common/rules.h); empty: none"),
    S("plugins.paths", "", "comma-separated validator plugin .so files (see worker/retort_plugin.h); empty: none"),
    S("schemas.dir", "schemas/output", "directory of output schemas; the id product.v1 is product.v1.json"),
    S("schemas.envelopes", "schemas", "directory of the job and event envelope schemas"),
    B("schemas.format_assert", "false", "treat `format` as an assertion"),
    I("schemas.inline_max_bytes", "65536", 1024, 16777216, "longest inline schema (a job's own, as compact JSON) compiled; a longer one escalates the job: compiled, a schema can take a few hundred times its size"),
    I("schemas.inline_cache", "64", 0, 100000, "inline schemas (a job's own) kept compiled, least recently used out first, so that jobs sending the same schema compile it once (0: compile it for every job)"),
    I("schemas.inline_cache_max_bytes", "67108864", 0, 1099511627776LL, "memory the kept inline schemas may hold, compiled, in bytes (about: what the compiler allocated for them); least recently used out first until both this and schemas.inline_cache hold. A schema over it alone is compiled for its job and not kept (0: no bound but schemas.inline_cache)"),
    S("events.source", "/retort/worker", "ce_source of produced events"),
    S("worker.id", "", "worker id in logs and Redis (default: host-pid)"),
    I("worker.processes", "1", 1, 256, "worker processes forked by the supervisor"),
    I("worker.drain_timeout_ms", "30000", 0, 3600000, "on SIGTERM, how long in-flight jobs may take"),
    I("worker.close_timeout_ms", "30000", 1000, 3600000, "after the drain, how long closing the Kafka clients (final commit, group leave, producer flush) may take before the process exits anyway"),
    I("worker.lease_ms", "5000", 1000, 600000, "this process's lease in Redis, renewed three times a lease: while it holds, other workers wait for the attempts it runs instead of calling the LLM for them again; a dead worker's attempts are taken over once it lapses"),
    I("worker.takeover_after_ms", "600000", 0, 86400000, "how long a message waits for an attempt of its job that a live worker holds before taking it over anyway"),
    I("worker.max_jobs", "0", 0, 200000, "jobs held per worker process: LLM calls and the Redis, validation and producing around them (0: llm.max_inflight plus a quarter; never fewer than llm.max_inflight)"),
    I("worker.max_delivering", "0", 0, 1000000, "jobs whose outcome waits only for Kafka's delivery report hold no job slot: at most worker.max_jobs + this many jobs live (0: worker.max_jobs)"),
    I("metrics.port", "0", 0, 65535, "port of /metrics, /healthz and /readyz (0: off); worker N of --processes uses port + N"),
    S("metrics.host", "0.0.0.0", "address the metrics server listens on"),
    E("log.level", "info", "debug|info|warn|error", "log level"),
    E("log.format", "auto", "auto|json|text", "json lines, or a human format (auto: text on a terminal)"),
};
#define NDEFS (sizeof(cfg_defs) / sizeof(cfg_defs[0]))

typedef struct cfg_entry {
    char *key;
    char *value;
} cfg_entry;

struct config {
    cfg_entry *entries;
    size_t count, cap;
};

static const cfg_def *find_def(const char *key) {
    for (size_t i = 0; i < NDEFS; i++)
        if (strcmp(cfg_defs[i].key, key) == 0) return &cfg_defs[i];
    return NULL;
}

static cfg_entry *find_entry(const config *cfg, const char *key) {
    for (size_t i = 0; i < cfg->count; i++)
        if (strcmp(cfg->entries[i].key, key) == 0) return &cfg->entries[i];
    return NULL;
}

static int put(config *cfg, const char *key, const char *value) {
    cfg_entry *e = find_entry(cfg, key);
    char *v = strdup(value);
    if (!v) return -1;
    if (e) {
        free(e->value);
        e->value = v;
        return 0;
    }
    if (cfg->count == cfg->cap) {
        size_t cap = cfg->cap ? cfg->cap * 2 : 64;
        cfg_entry *p = realloc(cfg->entries, cap * sizeof(*p));
        if (!p) { free(v); return -1; }
        cfg->entries = p;
        cfg->cap = cap;
    }
    cfg->entries[cfg->count].key = strdup(key);
    cfg->entries[cfg->count].value = v;
    if (!cfg->entries[cfg->count].key) { free(v); return -1; }
    cfg->count++;
    return 0;
}

/* put, saying why when it fails (the callers print err) */
static int put_or_say(config *cfg, const char *key, const char *value, char *err, size_t errlen) {
    if (!put(cfg, key, value)) return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

config *config_new(void) {
    config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg) return NULL;
    for (size_t i = 0; i < NDEFS; i++) {
        if (put(cfg, cfg_defs[i].key, cfg_defs[i].def)) {
            config_free(cfg);
            return NULL;
        }
    }
    return cfg;
}

void config_free(config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->count; i++) {
        free(cfg->entries[i].key);
        free(cfg->entries[i].value);
    }
    free(cfg->entries);
    free(cfg);
}

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on")) *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off")) *out = 0;
    else return -1;
    return 0;
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

int config_set(config *cfg, const char *key, const char *value, char *err, size_t errlen) {
    if (strncmp(key, "pricing.", 8) == 0) {
        /* pricing.MODEL.input / .output / .cache_read / .cache_write: USD
         * per million tokens */
        size_t n = strlen(key);
        int in = n > 14 && !strcmp(key + n - 6, ".input");
        int outp = n > 15 && !strcmp(key + n - 7, ".output");
        outp |= (n > 19 && !strcmp(key + n - 11, ".cache_read")) || (n > 20 && !strcmp(key + n - 12, ".cache_write"));
        char *end;
        errno = 0;
        double d = strtod(value, &end);
        /* !(d >= 0): NaN too; strtod also reads "inf", and 1e999 as inf
         * with ERANGE */
        if ((!in && !outp) || end == value || *end || errno == ERANGE || !isfinite(d) || !(d >= 0)) {
            snprintf(err, errlen, "config key '%s': expected pricing.MODEL.input, .output, .cache_read or .cache_write = "
                                  "USD per million tokens", key);
            return -1;
        }
        return put_or_say(cfg, key, value, err, errlen);
    }
    if (strncmp(key, "ratelimit.", 10) == 0 && !find_def(key)) {
        /* ratelimit.MODEL.rpm / ratelimit.MODEL.tpm: one model's limits
         * (a model's name may hold dots: the suffix says which limit) */
        size_t n = strlen(key);
        int ok = n > 14 && (!strcmp(key + n - 4, ".rpm") || !strcmp(key + n - 4, ".tpm"));
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        /* the bounds of ratelimit.rpm and .tpm */
        long long max = ok && !strcmp(key + n - 4, ".rpm") ? 100000000 : 1000000000;
        if (!ok || errno || end == value || *end || v < 0 || v > max) {
            snprintf(err, errlen, "config key '%s': expected ratelimit.MODEL.rpm or .tpm = a whole number from 0", key);
            return -1;
        }
        return put_or_say(cfg, key, value, err, errlen);
    }
    if (strncmp(key, "kafka.", 6) == 0) {
        if (!key[6]) {
            snprintf(err, errlen, "config key '%s': empty librdkafka property", key);
            return -1;
        }
        return put_or_say(cfg, key, value, err, errlen);
    }
    const cfg_def *d = find_def(key);
    if (!d) {
        snprintf(err, errlen, "unknown config key '%s' (see --help for the list)", key);
        return -1;
    }
    switch (d->type) {
    case CFG_INT: {
        char *end;
        errno = 0;
        long long n = strtoll(value, &end, 10);
        if (errno || end == value || *end || n < d->min || n > d->max) {
            snprintf(err, errlen, "config key '%s': '%s' is not an integer in [%lld, %lld]",
                     key, value, d->min, d->max);
            return -1;
        }
        break;
    }
    case CFG_BOOL: {
        int b;
        if (parse_bool(value, &b)) {
            snprintf(err, errlen, "config key '%s': '%s' is not a boolean (true|false)", key, value);
            return -1;
        }
        break;
    }
    case CFG_ENUM:
        if (!choice_ok(d->choices, value)) {
            snprintf(err, errlen, "config key '%s': '%s' is not one of %s", key, value, d->choices);
            return -1;
        }
        break;
    case CFG_STR:
        /* ce_source: the CloudEvents header must not be empty; nor may
         * Anthropic's version header (every call without it: 400) */
        if (!value[0] && (!strcmp(key, "events.source") || !strcmp(key, "llm.anthropic_version"))) {
            snprintf(err, errlen, "config key '%s': must not be empty", key);
            return -1;
        }
        /* Every key is PREFIX:job:{ID}...: a brace in the prefix would be
         * the hash tag of every key (one Cluster slot for all), and the
         * batch commands hold keys in buffers sized for 200 bytes of it */
        if (!strcmp(key, "redis.key_prefix") && (strlen(value) > 200 || strpbrk(value, "{}"))) {
            snprintf(err, errlen, "config key '%s': at most 200 bytes, without braces", key);
            return -1;
        }
        break;
    }
    if (put(cfg, key, value)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

int config_load_file(config *cfg, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -1;
    }
    /* getline: a line of any length (a PEM value runs to kilobytes); fgets
     * into a fixed buffer read the rest of a long one as a line of its own */
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    for (;;) {
        errno = 0;
        if (getline(&line, &cap, f) == -1) {
            if (ferror(f) || !feof(f)) { /* a read error, or out of memory */
                snprintf(err, errlen, "cannot read config file %s: %s", path, strerror(errno ? errno : EIO));
                rc = -1;
            }
            break;
        }
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#' || *s == '!') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected key=value", path, lineno);
            rc = -1;
            goto done;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        char inner[1024];
        if (config_set(cfg, key, value, inner, sizeof(inner))) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, inner);
            rc = -1;
            goto done;
        }
    }
done:
    free(line);
    fclose(f);
    return rc;
}

int config_load_env(config *cfg, char **envp, char *err, size_t errlen) {
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, "RETORT_", 7) != 0) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[256];
        size_t n = (size_t)(eq - (*e + 7));
        if (n == 0 || n >= sizeof(name)) continue;
        for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)(*e)[7 + i]);
        name[n] = '\0';
        if (!strcmp(name, "config")) continue;
        char key[256];
        if (strncmp(name, "kafka_", 6) == 0) {
            for (size_t i = 0; i <= n; i++) key[i] = name[i] == '_' ? '.' : name[i];
        } else {
            /* section_rest: the first '_' is the dot, the rest stay, since
             * Retort's own keys use '_' inside names (llm.base_url). */
            char *us = strchr(name, '_');
            if (!us) continue;
            snprintf(key, sizeof(key), "%.*s.%s", (int)(us - name), name, us + 1);
        }
        char inner[1024];
        if (config_set(cfg, key, eq + 1, inner, sizeof(inner))) {
            snprintf(err, errlen, "environment %.*s: %s", (int)(eq - *e), *e, inner);
            return -1;
        }
    }
    return 0;
}

const char *config_get(const config *cfg, const char *key) {
    cfg_entry *e = find_entry(cfg, key);
    return e ? e->value : NULL;
}

long long config_get_int(const config *cfg, const char *key) {
    const char *v = config_get(cfg, key);
    return v ? strtoll(v, NULL, 10) : 0;
}

int config_get_bool(const config *cfg, const char *key) {
    const char *v = config_get(cfg, key);
    int b = 0;
    if (v) parse_bool(v, &b);
    return b;
}

void config_foreach_prefix(const config *cfg, const char *prefix,
                           void (*fn)(const char *key, const char *value, void *ud), void *ud) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < cfg->count; i++)
        if (strncmp(cfg->entries[i].key, prefix, n) == 0)
            fn(cfg->entries[i].key + n, cfg->entries[i].value, ud);
}

void config_print_help(FILE *out) {
    fprintf(out, "Configuration keys (file key=value, env RETORT_SECTION_NAME, flag --set key=value):\n");
    for (size_t i = 0; i < NDEFS; i++) {
        const cfg_def *d = &cfg_defs[i];
        fprintf(out, "  %-30s default %-12s %s", d->key, d->def[0] ? d->def : "\"\"", d->help);
        if (d->type == CFG_ENUM) fprintf(out, " (%s)", d->choices);
        fputc('\n', out);
    }
    fprintf(out, "  pricing.<model>.input          USD per million prompt tokens (retort report)\n"
                 "  pricing.<model>.output         USD per million completion tokens\n"
                 "  pricing.<model>.cache_read     USD per million prompt tokens read from the provider's cache\n"
                 "                                 (default: Anthropic a tenth of input, else input)\n"
                 "  pricing.<model>.cache_write    USD per million prompt tokens written to it (default:\n"
                 "                                 Anthropic 1.25 times input, else input)\n"
                 "  ratelimit.<model>.rpm          requests per minute of one model (else ratelimit.rpm)\n"
                 "  ratelimit.<model>.tpm          tokens per minute of one model (else ratelimit.tpm)\n"
                 "  kafka.<property>               any librdkafka property, for both clients\n"
                 "  kafka.consumer.<property>      librdkafka property for the consumer only\n"
                 "  kafka.producer.<property>      librdkafka property for the producer only\n");
}

/* librdkafka properties known to hold no secret, shown by config_dump;
 * any other kafka.* value is masked (sasl.password, ssl.key.pem,
 * ssl.key.password, sasl.oauthbearer.config with its clientSecret,
 * sasl.jaas.config, and whatever a later librdkafka adds). */
static const char *const kafka_clear[] = {
    "bootstrap.servers", "metadata.broker.list", "client.id", "client.rack", "client.dns.lookup",
    "group.id", "group.instance.id", "group.protocol", "group.remote.assignor",
    "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "max.poll.interval.ms", "auto.offset.reset", "enable.auto.commit", "enable.auto.offset.store",
    "auto.commit.interval.ms", "enable.partition.eof", "isolation.level", "check.crcs",
    "allow.auto.create.topics", "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms",
    "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.error.backoff.ms",
    "queued.min.messages", "queued.max.messages.kbytes", "linger.ms", "queue.buffering.max.ms",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.num.messages",
    "batch.size", "compression.type", "compression.codec", "compression.level", "acks",
    "request.required.acks", "enable.idempotence", "enable.gapless.guarantee",
    "message.timeout.ms", "delivery.timeout.ms", "message.max.bytes", "receive.message.max.bytes",
    "max.in.flight", "max.in.flight.requests.per.connection", "retries", "message.send.max.retries",
    "retry.backoff.ms", "retry.backoff.max.ms", "request.timeout.ms", "socket.timeout.ms",
    "socket.keepalive.enable", "socket.nagle.disable", "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes", "socket.connection.setup.timeout.ms", "connections.max.idle.ms",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms", "metadata.max.age.ms",
    "topic.metadata.refresh.interval.ms", "topic.metadata.refresh.sparse",
    "topic.metadata.propagation.max.ms", "broker.address.family", "broker.address.ttl",
    "api.version.request", "api.version.request.timeout.ms", "broker.version.fallback",
    "statistics.interval.ms", "debug", "log_level", "log.connection.close", "log.queue",
    "partitioner", "sticky.partitioning.linger.ms", "transactional.id", "transaction.timeout.ms",
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.scope", "ssl.ca.location",
    "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
    "ssl.ca.certificate.stores", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "ssl.cipher.suites", "ssl.curves.list",
    "ssl.sigalgs.list",
};

/* How config_dump shows the value of key. */
static int dump_mask(const char *key) {
    const cfg_def *d = find_def(key);
    if (d) return d->secret;
    if (!strncmp(key, "pricing.", 8) || !strncmp(key, "ratelimit.", 10))
        return CFG_MASK_NONE; /* numbers (config_set checked them) */
    if (strncmp(key, "kafka.", 6) != 0) return CFG_MASK_ALL; /* none such: set() refuses */
    const char *prop = key + 6;
    if (!strncmp(prop, "consumer.", 9)) prop += 9;
    else if (!strncmp(prop, "producer.", 9)) prop += 9;
    for (size_t i = 0; i < sizeof(kafka_clear) / sizeof(kafka_clear[0]); i++)
        if (!strcmp(prop, kafka_clear[i])) return CFG_MASK_NONE;
    return CFG_MASK_ALL;
}

#define MASK "********"

/* A URL with its secret parts masked (mask: CFG_MASK_URL_*); a value that
 * is not scheme://... is masked whole. */
static void dump_url(FILE *out, const char *v, int mask) {
    const char *sep = strstr(v, "://");
    if (!sep || sep == v || strcspn(v, "/?#@") < (size_t)(sep - v)) {
        fputs(MASK, out);
        return;
    }
    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL; /* the last '@' of the authority ends its userinfo */
    for (const char *p = auth; p < auth + alen; p++)
        if (*p == '@') at = p;
    const char *host = at ? at + 1 : auth;
    fprintf(out, "%.*s%s%.*s", (int)(auth - v), v, at ? MASK "@" : "", (int)(auth + alen - host), host);
    const char *rest = auth + alen;
    if (mask == CFG_MASK_URL_PATH) {
        if (*rest) fputs("/" MASK, out);
        return;
    }
    size_t plen = strcspn(rest, "?#");
    fprintf(out, "%.*s", (int)plen, rest);
    rest += plen;
    if (*rest == '?') {
        fputs("?" MASK, out);
        rest += strcspn(rest, "#");
    }
    if (*rest == '#') fputs("#" MASK, out);
}

const char *config_get_masked(const config *cfg, const char *key, char *buf, size_t len) {
    const char *v = config_get(cfg, key);
    if (!len) return buf;
    buf[0] = '\0';
    if (!v) return buf;
    int mask = v[0] ? dump_mask(key) : CFG_MASK_NONE;
    FILE *f = fmemopen(buf, len, "w");
    if (!f) {
        snprintf(buf, len, "%s", mask == CFG_MASK_NONE ? v : MASK);
        return buf;
    }
    if (mask == CFG_MASK_NONE) fputs(v, f);
    else if (mask == CFG_MASK_ALL) fputs(MASK, f);
    else dump_url(f, v, mask);
    fclose(f);
    buf[len - 1] = '\0';
    return buf;
}

void config_dump(const config *cfg, FILE *out) {
    fputs("# " MASK " stands for what is masked: passwords, URL credentials, queries and a webhook\n"
          "# URL's path, and every kafka.* value but those of properties known to hold no secret\n", out);
    for (size_t i = 0; i < cfg->count; i++) {
        const char *key = cfg->entries[i].key, *v = cfg->entries[i].value;
        int mask = v[0] ? dump_mask(key) : CFG_MASK_NONE; /* empty: nothing to hide */
        fprintf(out, "%s=", key);
        if (mask == CFG_MASK_NONE) fputs(v, out);
        else if (mask == CFG_MASK_ALL) fputs(MASK, out);
        else dump_url(out, v, mask);
        fputc('\n', out);
    }
}
