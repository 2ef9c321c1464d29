/* job_parse: a message is one JSON value (RFC 8259) that fits the
 * envelope; the parsed job keeps its document in one jsonin block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "job.h"
#include "util.h"

static schema *compile(const char *text)
{
    cJSON *doc = cJSON_Parse(text);
    char err[256];
    schema *s = schema_compile(NULL, doc, NULL, err, sizeof err);
    cJSON_Delete(doc);
    assert_non_null(s);
    return s;
}

static schema *envelope(void)
{
    return compile("{\"type\":\"object\",\"required\":[\"job_id\",\"schema\"],"
                   "\"properties\":{\"job_id\":{\"type\":\"string\",\"minLength\":1},"
                   "\"attempt\":{\"type\":\"integer\",\"minimum\":1}}}");
}

/* One that refuses members it does not name: its message names them. */
static schema *strict_envelope(void)
{
    return compile("{\"type\":\"object\",\"properties\":{\"job_id\":{},\"schema\":{}},\"additionalProperties\":false}");
}

/* rc of job_parse on text; err and the job id read into the buffers */
static int parse(const schema *env, const char *text, job *j, char *err, size_t errlen, char *id, size_t idlen)
{
    cJSON *violations = NULL;
    int rc = job_parse(text, strlen(text), env, 3, 10, j, &violations, id, idlen, err, errlen);
    cJSON_Delete(violations);
    return rc;
}

static void test_valid(void **s)
{
    (void)s;
    schema *env = envelope();
    job j;
    char err[256] = "", id[64];
    const char *text = " {\"job_id\":\"j-1\",\"schema\":\"product.v1\",\"prompt\":\"hi \\u00e9\",\"attempt\":2,"
                       "\"max_attempts\":50,\"metadata\":{\"k\":[1,2]},\"batch_id\":\"b\"}\n";
    assert_int_equal(parse(env, text, &j, err, sizeof err, id, sizeof id), 0);
    assert_string_equal(j.job_id, "j-1");
    assert_string_equal(id, "j-1");
    assert_string_equal(j.schema->valuestring, "product.v1");
    assert_string_equal(j.batch_id, "b");
    assert_int_equal(j.attempt, 2);
    assert_int_equal(j.max_attempts, 10); /* capped by the ceiling */
    assert_true(cJSON_IsObject(j.metadata));
    /* the retry job duplicates the document: nothing points into the block */
    char *retry = job_retry_value(&j, NULL);
    assert_non_null(retry);
    job_clear(&j);
    assert_non_null(strstr(retry, "\"attempt\":3"));
    assert_non_null(strstr(retry, "\"prompt\":\"hi \xc3\xa9\""));
    free(retry);
    schema_free(env);
}

/* Every member the job is read from, by its exact name, among names that
 * share a first letter or a prefix with them (a name twice is refused:
 * test_rejected); the defaults when a member is absent or of another
 * type. */
static void test_members(void **s)
{
    (void)s;
    schema *env = envelope();
    job j;
    char err[256] = "", id[64];
    const char *text = "{\"mod\":\"no\",\"models\":\"no\",\"model\":\"m-1\",\"modelx\":\"m-2\",\"job_id\":\"j\","
                       "\"schema\":{\"type\":\"object\"},\"runs\":7,\"run\":3,\"attempts\":9,\"attempt\":2,"
                       "\"max_attempt\":1,\"max_attempts\":5,\"meta\":1,\"metadata\":{\"a\":1},\"param\":0,"
                       "\"params\":{\"temperature\":0},\"reflect\":0,\"reflection\":{\"violations\":[]},"
                       "\"batch\":\"no\",\"batch_id\":\"b-1\",\"token\":1,\"token_budget\":900,"
                       "\"dead\":\"x\",\"deadline\":\"2026-01-01T00:00:01Z\",\"\":\"\",\"zzz\":[]}";
    assert_int_equal(parse(env, text, &j, err, sizeof err, id, sizeof id), 0);
    assert_string_equal(j.job_id, "j");
    assert_true(cJSON_IsObject(j.schema));
    assert_string_equal(j.model, "m-1");
    assert_string_equal(j.batch_id, "b-1");
    assert_int_equal(j.run, 3);
    assert_int_equal(j.attempt, 2);
    assert_int_equal(j.max_attempts, 5);
    assert_int_equal(j.max_attempts_set, 1);
    assert_true(cJSON_IsObject(j.metadata) && cJSON_GetObjectItem(j.metadata, "a"));
    assert_true(cJSON_IsObject(j.params) && cJSON_GetObjectItem(j.params, "temperature"));
    assert_true(cJSON_IsObject(j.reflection) && cJSON_GetObjectItem(j.reflection, "violations"));
    assert_true(j.token_budget == 900);
    assert_true(j.deadline_ms == 1767225601000LL);
    job_clear(&j);

    /* absent, or of another type: the defaults */
    text = "{\"job_id\":\"j\",\"schema\":\"x\",\"model\":1,\"batch_id\":[],\"run\":\"3\",\"max_attempts\":\"5\","
           "\"token_budget\":null}";
    assert_int_equal(parse(env, text, &j, err, sizeof err, id, sizeof id), 0);
    assert_null(j.model);
    assert_null(j.batch_id);
    assert_int_equal(j.run, 1);
    assert_int_equal(j.attempt, 1);
    assert_int_equal(j.max_attempts, 3);
    assert_int_equal(j.max_attempts_set, 0);
    assert_true(j.token_budget == 0);
    assert_null(j.params);
    assert_null(j.metadata);
    assert_null(j.reflection);
    assert_true(j.deadline_ms == 0);
    job_clear(&j);
    schema_free(env);
}

/* text is refused, with an error that begins with want */
static void expect_rejected(const schema *env, const char *text, const char *want)
{
    job j;
    char err[256] = "", id[64];
    assert_int_equal(parse(env, text, &j, err, sizeof err, id, sizeof id), -1);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("%s: \"%s\", expected \"%s...\"", text, err, want);
    assert_null(j.doc);
}

static void test_rejected(void **s)
{
    (void)s;
    schema *env = envelope();
    static const struct {
        const char *text, *err;
    } bad[] = {
        { "", "empty message" },
        { "{\"job_id\":\"a\",\"schema\":\"x\"} {}", "message is not JSON (error near byte 28)" },
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"n\":01}", "message is not JSON (error near byte 32)" },
        { "{\"job_id\":\"a\",\"schema\":\"x\"", "message is not JSON (error near byte 26)" },
        /* cut short at the NUL, the prompt would reach the model changed */
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"prompt\":\"ab\\u0000cd\"}",
          "message has \\u0000 (the NUL character) in a string at byte 39, which is not accepted" },
        { "{\"job_id\":\"a\",\"schema\":\"x\xff\"}", "message is not valid UTF-8" },
        { "{\"job_id\":\"\",\"schema\":\"x\"}", "not a valid job: /job_id: " },
        /* a deadline that does not exist is a dead letter that says why */
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"deadline\":\"2026-02-31T00:00:00Z\"}",
          "not a valid job: /deadline: '2026-02-31T00:00:00Z' is not an RFC 3339 date-time: "
          "day 31 does not exist in 2026-02 (28 days)" },
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"deadline\":\"2026-01-01T00:00:00+99:99\"}",
          "not a valid job: /deadline: '2026-01-01T00:00:00+99:99' is not an RFC 3339 date-time: "
          "offset +99:99 is out of range" },
        /* readers disagree on which copy counts, and a retry job replaced
         * only the first attempt: the next read the old number again */
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"attempt\":1,\"attempt\":1}",
          "not a valid job: member \"attempt\" appears more than once" },
        { "{\"job_id\":\"a\",\"batch_id\":\"b1\",\"schema\":\"x\",\"batch_id\":\"b2\"}",
          "not a valid job: member \"batch_id\" appears more than once" },
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"prompt\":\"p\",\"metadata\":{},\"prompt\":\"q\"}",
          "not a valid job: member \"prompt\" appears more than once" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_rejected(env, bad[i].text, bad[i].err);
    /* duplicates deeper down are the schema's business */
    job j;
    char err[256], id[64];
    assert_int_equal(parse(env, "{\"job_id\":\"a\",\"schema\":\"x\",\"metadata\":{\"k\":1,\"k\":2}}", &j, err,
                           sizeof err, id, sizeof id), 0);
    job_clear(&j);
    /* the reason cut at the buffer's end stays UTF-8: the dead letter
     * carries it, and an event must be UTF-8 */
    schema *strict = strict_envelope();
    char text[1024] = "{\"job_id\":\"a\",\"schema\":\"x\",\"";
    for (int i = 0; i < 150; i++) strcat(text, "\xc3\xa9");
    strcat(text, "\":1}");
    for (size_t len = 40; len < 120; len++) {
        assert_int_equal(parse(strict, text, &j, err, len, id, sizeof id), -1);
        if (!util_utf8_valid(err, strlen(err))) fail_msg("not UTF-8 at %zu: %s", len, err);
    }
    schema_free(strict);
    schema_free(env);
}

/* Numbers beyond int and long: schemas/job.schema.json refuses them (a
 * dead letter with the reason), and an envelope without those bounds (the
 * operator's own) gets them capped, never cast out of range, which is
 * undefined (the sanitized run aborts on it). */
static void test_number_bounds(void **s)
{
    (void)s;
    /* as the worker loads it: the directory as a registry, for its $refs */
    char err[256], id[64];
    schema_registry *reg = schema_registry_new();
    assert_int_equal(schema_registry_load_dir(reg, "schemas", "https://retort.dev/schemas/", err, sizeof err), 0);
    char *text = util_read_file("schemas/job.schema.json", NULL);
    assert_non_null(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    schema *real = schema_compile(reg, doc, NULL, err, sizeof err);
    cJSON_Delete(doc);
    if (!real) fail_msg("job.schema.json: %s", err);
    job j;
    static const struct {
        const char *text, *err;
    } bad[] = {
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"prompt\":\"p\",\"attempt\":10000000000}", "not a valid job: /attempt: " },
        { "{\"job_id\":\"a\",\"schema\":\"x\",\"prompt\":\"p\",\"token_budget\":1e30}", "not a valid job: /token_budget: " },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_rejected(real, bad[i].text, bad[i].err);
    const char *most = "{\"job_id\":\"a\",\"schema\":\"x\",\"prompt\":\"p\",\"attempt\":1000000,"
                       "\"token_budget\":1000000000000000}";
    assert_int_equal(parse(real, most, &j, err, sizeof err, id, sizeof id), 0);
    assert_int_equal(j.attempt, 1000000);
    assert_true(j.token_budget == 1000000000000000L);
    job_clear(&j);
    schema_free(real);
    schema_registry_free(reg);

    schema *env = envelope();
    const char *huge = "{\"job_id\":\"a\",\"schema\":\"x\",\"attempt\":1e10,\"run\":-1e12,"
                       "\"max_attempts\":4e9,\"token_budget\":1e30}";
    assert_int_equal(parse(env, huge, &j, err, sizeof err, id, sizeof id), 0);
    assert_int_equal(j.attempt, 1000000000);
    assert_int_equal(j.run, -1000000000);
    assert_true(j.token_budget == 1000000000000000L);
    job_clear(&j);
    schema_free(env);
}

/* A retry job replaces the reflection it came with, or drops it when the
 * worker has none to give (the attempt's record was lost): a fresh ask. */
static void test_retry_reflection(void **s)
{
    (void)s;
    schema *env = envelope();
    job j;
    char err[256] = "", id[64];
    const char *text = "{\"job_id\":\"j-2\",\"schema\":\"x\",\"prompt\":\"p\",\"attempt\":2,"
                       "\"reflection\":{\"attempt\":1,\"prompt\":\"old\"}}";
    assert_int_equal(parse(env, text, &j, err, sizeof err, id, sizeof id), 0);
    assert_true(cJSON_IsObject(j.reflection));
    cJSON *mine = cJSON_Parse("{\"attempt\":2,\"prompt\":\"new\"}");
    char *with = job_retry_value(&j, mine);
    char *without = job_retry_value(&j, NULL);
    job_clear(&j);
    cJSON_Delete(mine);
    cJSON *a = cJSON_Parse(with), *b = cJSON_Parse(without);
    assert_int_equal(cJSON_GetObjectItem(a, "attempt")->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "reflection"), "prompt")->valuestring, "new");
    assert_int_equal(cJSON_GetObjectItem(b, "attempt")->valueint, 3);
    assert_null(cJSON_GetObjectItem(b, "reflection"));
    assert_string_equal(cJSON_GetObjectItem(b, "prompt")->valuestring, "p");
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(with);
    free(without);
    schema_free(env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_members),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_retry_reflection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
