#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"

static void test_defaults_and_set(void **s) {
    (void)s;
    config *c = config_new();
    char err[512];
    assert_string_equal(config_get(c, "topics.jobs"), "retort.jobs");
    assert_int_equal(config_get_int(c, "llm.max_inflight"), 64);
    assert_int_equal(config_get_int(c, "retry.max_attempts"), 3);
    assert_int_equal(config_set(c, "llm.max_inflight", "1000", err, sizeof(err)), 0);
    assert_int_equal(config_get_int(c, "llm.max_inflight"), 1000);
    /* bad key, bad value: errors that name the key */
    assert_int_not_equal(config_set(c, "llm.max_inflite", "5", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "llm.max_inflite"));
    assert_int_not_equal(config_set(c, "llm.max_inflight", "lots", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "llm.max_inflight"));
    assert_int_not_equal(config_set(c, "llm.response_format", "maybe", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "auto|on|off"));
    assert_int_not_equal(config_set(c, "schemas.format_assert", "perhaps", err, sizeof(err)), 0);
    /* the inline schema cache's bound on memory: 64 MiB, 0 for none, not negative */
    assert_int_equal(config_get_int(c, "schemas.inline_cache_max_bytes"), 67108864);
    assert_int_equal(config_set(c, "schemas.inline_cache_max_bytes", "0", err, sizeof(err)), 0);
    assert_int_equal(config_set(c, "schemas.inline_cache_max_bytes", "1099511627776", err, sizeof(err)), 0);
    assert_int_equal(config_get_int(c, "schemas.inline_cache_max_bytes"), 1099511627776LL);
    assert_int_not_equal(config_set(c, "schemas.inline_cache_max_bytes", "-1", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "schemas.inline_cache_max_bytes"));
    /* one model's rate limits: the suffix says which, the name may hold dots */
    assert_int_equal(config_set(c, "ratelimit.gpt-4.1.rpm", "500", err, sizeof(err)), 0);
    assert_int_equal(config_get_int(c, "ratelimit.gpt-4.1.rpm"), 500);
    assert_int_equal(config_set(c, "ratelimit.m.tpm", "0", err, sizeof(err)), 0);
    assert_int_equal(config_set(c, "ratelimit.rpm", "60", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.m.rps", "5", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "ratelimit.m.rps"));
    assert_int_not_equal(config_set(c, "ratelimit..rpm", "5", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.m.rpm", "-1", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.m.rpm", "many", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.rpm", "-1", err, sizeof(err)), 0);
    /* ce_source may not be empty (the events' headers would break their schema) */
    assert_int_not_equal(config_set(c, "events.source", "", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "must not be empty"));
    assert_int_equal(config_set(c, "events.source", "/x", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "llm.anthropic_version", "", err, sizeof(err)), 0);
    /* the key prefix: no brace (it would hash-tag every key), 200 bytes at
     * most (the batch commands' key buffers) */
    char prefix[202];
    memset(prefix, 'p', 201);
    prefix[201] = '\0';
    assert_int_not_equal(config_set(c, "redis.key_prefix", prefix, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "at most 200 bytes"));
    prefix[200] = '\0';
    assert_int_equal(config_set(c, "redis.key_prefix", prefix, err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "redis.key_prefix", "app{1}", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "redis.key_prefix", "app}", err, sizeof(err)), 0);
    assert_int_equal(config_set(c, "redis.key_prefix", "app:retort", err, sizeof(err)), 0);
    /* a model's limits have the bounds of ratelimit.rpm and .tpm (its rpm
     * took ten times as many) */
    assert_int_not_equal(config_set(c, "ratelimit.rpm", "500000000", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.m.rpm", "500000000", err, sizeof(err)), 0);
    assert_int_equal(config_set(c, "ratelimit.m.rpm", "100000000", err, sizeof(err)), 0);
    assert_int_equal(config_set(c, "ratelimit.m.tpm", "1000000000", err, sizeof(err)), 0);
    assert_int_not_equal(config_set(c, "ratelimit.m.tpm", "1000000001", err, sizeof(err)), 0);
    /* kafka.* goes through untouched */
    assert_int_equal(config_set(c, "kafka.linger.ms", "20", err, sizeof(err)), 0);
    assert_string_equal(config_get(c, "kafka.linger.ms"), "20");
    config_free(c);
    config_free(NULL);
}

#include "fail_strdup.h"

/* Out of memory setting a key of every kind says so: some paths returned
 * -1 with err as it was, which the callers print (a buffer of the stack,
 * never written). */
static void test_out_of_memory_says_so(void **s) {
    (void)s;
    config *c = config_new();
    static const char *const kv[][2] = {
        {"pricing.m.input", "1"}, {"kafka.linger.ms", "5"}, {"ratelimit.m.rpm", "5"}, {"llm.model", "x"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        char err[256] = "stale";
        fail_strdup = 1;
        int rc = config_set(c, kv[i][0], kv[i][1], err, sizeof(err));
        fail_strdup = 0;
        assert_int_not_equal(rc, 0);
        if (strcmp(err, "out of memory"))
            fail_msg("%s: err \"%s\"", kv[i][0], err);
    }
    config_free(c);
}

static void test_file_env_precedence(void **s) {
    (void)s;
    char path[] = "/tmp/retort-test-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# comment\n! also a comment\n\nllm.base_url = http://file:1/v1\n"
               "kafka.bootstrap.servers=file:9092\nllm.max_inflight=10\n");
    fclose(f);
    config *c = config_new();
    char err[512];
    assert_int_equal(config_load_file(c, path, err, sizeof(err)), 0);
    assert_string_equal(config_get(c, "llm.base_url"), "http://file:1/v1");
    char *env[] = {"RETORT_LLM_BASE_URL=http://env:2/v1", "RETORT_KAFKA_BOOTSTRAP_SERVERS=env:9092",
                   "PATH=/bin", "RETORT_CONFIG=/ignored", NULL};
    assert_int_equal(config_load_env(c, env, err, sizeof(err)), 0);
    assert_string_equal(config_get(c, "llm.base_url"), "http://env:2/v1");
    assert_string_equal(config_get(c, "kafka.bootstrap.servers"), "env:9092");
    assert_int_equal(config_get_int(c, "llm.max_inflight"), 10);
    char *bad_env[] = {"RETORT_LLM_MAX_INFLIGHT=-3", NULL};
    assert_int_not_equal(config_load_env(c, bad_env, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "RETORT_LLM_MAX_INFLIGHT"));
    config_free(c);

    f = fopen(path, "w");
    fprintf(f, "llm.base_url=x\nnot a pair\n");
    fclose(f);
    c = config_new();
    assert_int_not_equal(config_load_file(c, path, err, sizeof(err)), 0);
    assert_non_null(strstr(err, ":2:"));
    config_free(c);
    unlink(path);
}

/* Prices are finite numbers from 0: strtod reads "nan", "inf" and 1e999
 * (inf, ERANGE), and NaN < 0 is false, so all of them were taken. */
static void test_pricing_values(void **s) {
    (void)s;
    static const struct {
        const char *value;
        int ok;
    } cases[] = {
        {"0", 1}, {"2.5", 1}, {"0.15", 1}, {"1e3", 1}, {"-0", 1},
        {"nan", 0}, {"NaN", 0}, {"-nan", 0}, {"nan(0x1)", 0}, {"inf", 0}, {"-inf", 0},
        {"Infinity", 0}, {"1e999", 0}, {"-1e999", 0}, {"1e-400", 0}, {"-1", 0},
        {"", 0}, {"1.5x", 0}, {"0x", 0},
    };
    config *c = config_new();
    char err[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        int rc = config_set(c, "pricing.gpt-4o.input", cases[i].value, err, sizeof(err));
        if ((rc == 0) != cases[i].ok)
            fail_msg("pricing '%s': %s", cases[i].value, rc ? err : "accepted");
        if (!cases[i].ok) assert_non_null(strstr(err, "pricing.gpt-4o.input"));
    }
    /* the four prices of a model, and nothing else under pricing. */
    static const struct {
        const char *key;
        int ok;
    } keys[] = {
        {"pricing.m.output", 1}, {"pricing.m.cache_read", 1}, {"pricing.m.cache_write", 1},
        {"pricing.claude-3.5.cache_read", 1}, {"pricing.m.cached", 0}, {"pricing.cache_read", 0},
        {"pricing..cache_write", 0}, {"pricing.m.cache_read.x", 0},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        int rc = config_set(c, keys[i].key, "0.3", err, sizeof(err));
        if ((rc == 0) != keys[i].ok) fail_msg("%s: %s", keys[i].key, rc ? err : "accepted");
    }
    config_free(c);
}

/* A line of any length is one line: fgets into 8 KB read the rest of a
 * longer one (a PEM value) as a line of its own. */
static void test_long_line(void **s) {
    (void)s;
    char path[] = "/tmp/retort-test-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    static const size_t lens[] = {8190, 8191, 8192, 20000, 100000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        fprintf(f, "kafka.x%zu=", i);
        for (size_t k = 0; k + 2 < lens[i]; k++) fputc('A', f);
        fputs("==\n", f);
    }
    fputs("llm.max_inflight=7\n", f);
    fclose(f);
    config *c = config_new();
    char err[512] = "";
    if (config_load_file(c, path, err, sizeof(err)) != 0) fail_msg("%s", err);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "kafka.x%zu", i);
        const char *v = config_get(c, key);
        assert_non_null(v);
        assert_int_equal(strlen(v), lens[i]);
        assert_string_equal(v + lens[i] - 2, "==");
    }
    assert_int_equal(config_get_int(c, "llm.max_inflight"), 7);
    config_free(c);
    unlink(path);
}

/* --print-config masks every secret: a password, a key in PEM, an
 * OAUTHBEARER client secret, a Slack webhook URL's path; any kafka.*
 * property not known to hold none; the credentials and query of a URL. */
static void test_secret_masked(void **s) {
    (void)s;
    static const struct {
        const char *key, *value, *shown;
    } cases[] = {
        {"redis.password", "hunter2", "********"},
        {"kafka.ssl.key.pem", "-----BEGIN PRIVATE KEY-----MIIEv", "********"},
        {"kafka.ssl.key.password", "pw1", "********"},
        {"kafka.sasl.password", "pw2", "********"},
        {"kafka.sasl.oauthbearer.config", "clientId=retort clientSecret=s3cr3t", "********"},
        {"kafka.sasl.oauthbearer.client.secret", "s3cr3t2", "********"},
        {"kafka.sasl.jaas.config", "org.apache.kafka...PlainLoginModule password=\"x\";", "********"},
        {"kafka.consumer.ssl.keystore.password", "pw3", "********"},
        {"kafka.producer.some.future.token", "tok", "********"},
        {"escalation.webhook_url", "https://hooks.slack.com/services/T000/B000/XXXXSECRET",
         "https://hooks.slack.com/********"},
        {"llm.base_url", "https://user:pa55@llm.example:8443/v1?key=abc#frag",
         "https://********@llm.example:8443/v1?********#********"},
        /* harmless: shown as they are */
        {"kafka.bootstrap.servers", "b1:9092,b2:9092", "b1:9092,b2:9092"},
        {"kafka.producer.linger.ms", "5", "5"},
        {"kafka.sasl.username", "retort", "retort"},
        {"kafka.ssl.key.location", "/etc/retort/key.pem", "/etc/retort/key.pem"},
        {"pricing.gpt-4o.input", "2.5", "2.5"},
        {"ratelimit.gpt-4o.rpm", "500", "500"},
        {"llm.model", "gpt-4o-mini", "gpt-4o-mini"},
        {"metrics.host", "127.0.0.1", "127.0.0.1"},
    };
    config *c = config_new();
    char err[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (config_set(c, cases[i].key, cases[i].value, err, sizeof(err))) fail_msg("%s", err);
    /* a URL without a scheme is masked whole; a plain one and an empty
     * value show as they are */
    config_set(c, "kafka.sasl.oauthbearer.token.endpoint.url", "no-scheme/with/path", err, sizeof(err));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_dump(c, f);
    fclose(f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char want[256];
        snprintf(want, sizeof(want), "\n%s=%s\n", cases[i].key, cases[i].shown);
        if (!strstr(buf, want)) fail_msg("no line %s in:\n%s", want + 1, buf);
    }
    static const char *const hidden[] = {"hunter2", "PRIVATE", "pw1", "pw2", "pw3", "s3cr3t",
                                         "password=\"x", "tok\n", "XXXXSECRET", "T000", "pa55", "abc",
                                         "frag", "with/path"};
    for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
        if (strstr(buf, hidden[i])) fail_msg("'%s' shown:\n%s", hidden[i], buf);
    assert_non_null(strstr(buf, "\nkafka.sasl.oauthbearer.token.endpoint.url=********\n"));
    assert_non_null(strstr(buf, "\nllm.ca_file=\n"));
    assert_non_null(strstr(buf, "\nredis.host=127.0.0.1\n"));
    /* one value as the dump shows it (for the logs), cut to the buffer */
    char one[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(config_get_masked(c, cases[i].key, one, sizeof(one)), cases[i].shown);
    char small[12];
    assert_string_equal(config_get_masked(c, "llm.base_url", small, sizeof(small)), "https://***");
    assert_string_equal(config_get_masked(c, "no.such.key", one, sizeof(one)), "");
    free(buf);
    config_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_set),
        cmocka_unit_test(test_out_of_memory_says_so),
        cmocka_unit_test(test_file_env_precedence),
        cmocka_unit_test(test_secret_masked),
        cmocka_unit_test(test_pricing_values),
        cmocka_unit_test(test_long_line),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
