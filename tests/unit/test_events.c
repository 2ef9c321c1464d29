/* The final event, written as text, carries what its history says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "events.h"
#include "jsonout.h"

static cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void test_final_from_history(void **s) {
    (void)s;
    job j = {0};
    j.doc = cJSON_Parse("{\"job_id\":\"id \\\"q\\\" \\u00e9\",\"metadata\":{\"k\":[1,2.5,\"x\"]},\"batch_id\":\"b1\"}");
    j.job_id = get(j.doc, "job_id")->valuestring;
    j.metadata = get(j.doc, "metadata");
    j.batch_id = get(j.doc, "batch_id")->valuestring;
    j.attempt = 2;
    cJSON *history = cJSON_Parse(
        "[{\"attempt\":1,\"outcome\":\"invalid\",\"violations\":[{\"code\":\"MISSING_FIELD\"},{\"code\":\"WRONG_TYPE\"},"
        "{\"nocode\":1}],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20},\"latency_ms\":12.345},"
        "{\"attempt\":2,\"outcome\":\"valid\",\"violations\":[],\"usage\":{\"prompt_tokens\":130,\"completion_tokens\":25},"
        "\"latency_ms\":7}]");
    /* The last record's value as the worker stores it: printed once, raw. */
    cJSON *raw = cJSON_CreateRaw("{\"price\":19.99,\"name\":\"caf\xc3\xa9\"}");
    cJSON_AddItemToObject(cJSON_GetArrayItem(history, 1), "value", raw);

    char *text = events_final(&j, "product.v1", "m-1", history, NULL, 1763776000123);
    assert_non_null(text);
    cJSON *ev = cJSON_Parse(text);
    assert_non_null(ev);
    assert_string_equal(get(ev, "job_id")->valuestring, j.job_id);
    assert_int_equal(get(ev, "attempt")->valueint, 2);
    assert_int_equal(get(ev, "attempts")->valueint, 2);
    assert_int_equal(get(get(ev, "usage"), "prompt_tokens")->valueint, 230);
    assert_int_equal(get(get(ev, "usage"), "completion_tokens")->valueint, 45);
    assert_int_equal(get(get(ev, "usage"), "total_tokens")->valueint, 275);
    assert_true(cJSON_Compare(get(ev, "metadata"), j.metadata, 1));
    assert_string_equal(get(ev, "batch_id")->valuestring, "b1");
    assert_string_equal(get(ev, "schema")->valuestring, "product.v1");
    assert_string_equal(get(ev, "model")->valuestring, "m-1");
    assert_string_equal(get(ev, "finished_at")->valuestring, "2025-11-22T01:46:40.123Z");
    cJSON *want = cJSON_Parse("{\"price\":19.99,\"name\":\"caf\\u00e9\"}");
    assert_true(cJSON_Compare(get(ev, "output"), want, 1));
    cJSON *sum = get(ev, "summary");
    assert_int_equal(cJSON_GetArraySize(sum), 2);
    cJSON *s0 = cJSON_GetArrayItem(sum, 0);
    assert_string_equal(get(s0, "outcome")->valuestring, "invalid");
    assert_int_equal(cJSON_GetArraySize(get(s0, "codes")), 2);
    assert_string_equal(cJSON_GetArrayItem(get(s0, "codes"), 1)->valuestring, "WRONG_TYPE");
    assert_true(get(s0, "latency_ms")->valuedouble == 12.345);
    /* Compact, as every other event: no whitespace outside strings. */
    char *again = jsonout_print(ev);
    assert_string_equal(again, text);
    free(again);
    free(text);
    cJSON_Delete(ev);

    /* No model, no batch, no metadata, no value. */
    j.batch_id = NULL;
    j.metadata = NULL;
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(history, 1), "value");
    text = events_final(&j, "inline", NULL, history, NULL, 0);
    ev = cJSON_Parse(text);
    assert_non_null(ev);
    assert_null(get(ev, "model"));
    assert_true(cJSON_IsNull(get(ev, "batch_id")));
    assert_true(cJSON_IsNull(get(ev, "metadata")));
    assert_true(cJSON_IsNull(get(ev, "output")));
    free(text);
    cJSON_Delete(ev);
    cJSON_Delete(want);
    cJSON_Delete(history);
    cJSON_Delete(j.doc);
}

/* The worker passes its last attempt as parts (its record is only text):
 * the event must be the same bytes as when that record is in history. */
static void test_final_last_as_parts(void **s) {
    (void)s;
    job j = {0};
    j.doc = cJSON_Parse("{\"job_id\":\"j-7\",\"metadata\":{\"t\":1}}");
    j.job_id = "j-7";
    j.metadata = get(j.doc, "metadata");
    const char *rec1 = "{\"attempt\":1,\"outcome\":\"invalid\",\"violations\":[{\"code\":\"MISSING_FIELD\"}],"
                       "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"cache_read_tokens\":60,"
                       "\"cache_write_tokens\":0},\"latency_ms\":3.25}";
    cJSON *violations = cJSON_Parse("[{\"code\":\"OUT_OF_RANGE\",\"path\":\"/a\"},{\"path\":\"/b\"}]");
    const char *value = "{\"a\":[1,2.5,\"x\\u0001\"],\"b\":null}";
    events_attempt last = {2, "valid", violations, 12.125, 130, 25, 100, 10, value, strlen(value)};
    /* The same attempt as a record. */
    cJSON *rec2 = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec2, "attempt", 2);
    cJSON_AddStringToObject(rec2, "outcome", "valid");
    cJSON_AddItemToObject(rec2, "value", cJSON_CreateRaw(value));
    cJSON_AddItemToObject(rec2, "violations", cJSON_Duplicate(violations, 1));
    cJSON *u = cJSON_AddObjectToObject(rec2, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", 130);
    cJSON_AddNumberToObject(u, "completion_tokens", 25);
    cJSON_AddNumberToObject(u, "cache_read_tokens", 100);
    cJSON_AddNumberToObject(u, "cache_write_tokens", 10);
    cJSON_AddNumberToObject(rec2, "latency_ms", 12.125);
    for (int before = 0; before <= 1; before++) {
        cJSON *earlier = cJSON_CreateArray();
        cJSON *all = cJSON_CreateArray();
        if (before) {
            cJSON_AddItemToArray(earlier, cJSON_Parse(rec1));
            cJSON_AddItemToArray(all, cJSON_Parse(rec1));
        }
        cJSON_AddItemReferenceToArray(all, rec2);
        char *want = events_final(&j, "s", "m", all, NULL, 1763776000123);
        char *got = events_final(&j, "s", "m", earlier, &last, 1763776000123);
        assert_non_null(want);
        assert_non_null(got);
        assert_string_equal(got, want);
        cJSON *ev = cJSON_Parse(got);
        assert_int_equal(get(ev, "attempts")->valueint, before + 1);
        assert_int_equal(get(get(ev, "usage"), "prompt_tokens")->valueint, before ? 230 : 130);
        /* the cached parts of the prompts, summed as the tree sums them */
        assert_int_equal(get(get(ev, "usage"), "cache_read_tokens")->valueint, before ? 160 : 100);
        assert_int_equal(get(get(ev, "usage"), "cache_write_tokens")->valueint, 10);
        cJSON *tree = events_usage_total(all);
        char *tree_text = cJSON_PrintUnformatted(tree), *ev_text = cJSON_PrintUnformatted(get(ev, "usage"));
        assert_string_equal(ev_text, tree_text);
        free(tree_text);
        free(ev_text);
        cJSON_Delete(tree);
        cJSON *sum = get(ev, "summary");
        cJSON *mine = cJSON_GetArrayItem(sum, before);
        assert_int_equal(cJSON_GetArraySize(get(mine, "codes")), 1);
        assert_true(get(mine, "latency_ms")->valuedouble == 12.125);
        cJSON_Delete(ev);
        free(want);
        free(got);
        cJSON_Delete(earlier);
        cJSON_Delete(all);
    }
    /* No history at all (NULL), no value, and no prompt cache: no cache
     * members (most events never have them). */
    last.value = NULL;
    last.cache_read_tokens = last.cache_write_tokens = 0;
    char *got = events_final(&j, "s", NULL, NULL, &last, 0);
    cJSON *ev = cJSON_Parse(got);
    assert_non_null(ev);
    assert_true(cJSON_IsNull(get(ev, "output")));
    assert_null(get(get(ev, "usage"), "cache_read_tokens"));
    assert_null(get(get(ev, "usage"), "cache_write_tokens"));
    assert_int_equal(get(ev, "attempts")->valueint, 1);
    assert_int_equal(get(ev, "attempt")->valueint, 2);
    cJSON_Delete(ev);
    free(got);
    cJSON_Delete(rec2);
    cJSON_Delete(violations);
    cJSON_Delete(j.doc);
}

/* ce_id: stable per job, attempt and kind; a later run's are its own. */
static void test_header_ids(void **s) {
    (void)s;
    static const struct {
        event_type type;
        int run, attempt;
        const char *id;
    } cases[] = {
        {EVENT_FINAL, 1, 1, "job-7:1:final"},
        {EVENT_RETRY, 1, 2, "job-7:2:retry"},
        {EVENT_ESCALATED, 1, 3, "job-7:3:escalated"},
        {EVENT_ESCALATED, 2, 3, "job-7:3:escalated:r2"},
        {EVENT_FINAL, 12, 1, "job-7:1:final:r12"},
        {EVENT_DEAD_LETTER, 1, 0, "job-7:0:dead_letter"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        events_headers h;
        events_headers_init(&h, cases[i].type, "job-7", cases[i].run, cases[i].attempt, "src", 0);
        assert_string_equal(h.id, cases[i].id);
        assert_string_equal(h.subject, "job-7");
        assert_string_equal(h.type, events_ce_type(cases[i].type));
        assert_string_equal(h.time, "1970-01-01T00:00:00.000Z");
    }
}

/* An event too large for a Kafka message loses its largest members,
 * largest first, until it fits, and names them with their sizes; small
 * members always stay, numbers keep their text, and a second fit (to a
 * lower limit) keeps the first one's note. */
static void test_fit(void **s) {
    (void)s;
    char *big = malloc(60001), *meta = malloc(3001);
    memset(big, 'x', 60000);
    big[60000] = '\0';
    memset(meta, 'm', 3000);
    meta[3000] = '\0';
    size_t cap = 70000;
    char *text = malloc(cap);
    snprintf(text, cap,
             "{\"job_id\":\"j-1\",\"attempt\":2,\"attempts\":2,\"output\":{\"text\":\"%s\"},"
             "\"usage\":{\"prompt_tokens\":12345678901234567890},\"metadata\":{\"note\":\"%s\"},"
             "\"summary\":[{\"attempt\":1}]}",
             big, meta);
    size_t out_bytes = strlen(big) + strlen("{\"text\":\"\"}"), meta_bytes = strlen(meta) + strlen("{\"note\":\"\"}");
    char *same = text;
    assert_int_equal(events_fit(&text, strlen(text)), 0); /* fits: untouched */
    assert_ptr_equal(text, same);

    assert_int_equal(events_fit(&text, 10000), 0);
    assert_true(strlen(text) <= 10000);
    cJSON *ev = cJSON_Parse(text);
    assert_non_null(ev);
    assert_null(get(ev, "output"));
    assert_non_null(get(ev, "metadata")); /* it fits once the output is out */
    assert_int_equal((size_t)get(get(ev, "omitted"), "output")->valuedouble, out_bytes);
    assert_string_equal(get(ev, "job_id")->valuestring, "j-1");
    assert_non_null(strstr(text, "\"prompt_tokens\":12345678901234567890"));
    cJSON_Delete(ev);

    /* lower still: the metadata goes too, the output's note stays */
    assert_int_equal(events_fit(&text, 1000), 0);
    assert_true(strlen(text) <= 1000);
    ev = cJSON_Parse(text);
    assert_null(get(ev, "metadata"));
    assert_int_equal((size_t)get(get(ev, "omitted"), "output")->valuedouble, out_bytes);
    assert_int_equal((size_t)get(get(ev, "omitted"), "metadata")->valuedouble, meta_bytes);
    assert_non_null(get(ev, "summary")); /* small: kept */
    assert_int_equal(cJSON_GetArraySize(get(ev, "omitted")), 2);
    cJSON_Delete(ev);

    /* what is left cannot be cut: refused, unchanged */
    same = text;
    assert_int_equal(events_fit(&text, 40), -1);
    assert_ptr_equal(text, same);
    free(text);
    free(big);
    free(meta);
}

/* A dead letter keeps the message's key: text as text, other bytes (an
 * integer serialized as 4 bytes holds zeros) in base64, no key as null. */
static void test_dead_letter_keys(void **s) {
    (void)s;
    static const char bin[] = {0, 0, 0, 42};
    struct {
        const char *key;
        size_t len;
        const char *text, *b64;
    } cases[] = {
        {"user-7", 6, "user-7", NULL},
        {bin, 4, NULL, "AAAAKg=="},
        {"\xff\xfe", 2, NULL, "//4="},
        {"", 0, "", NULL},
        {NULL, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *ev = events_dead_letter("not JSON", NULL, NULL, "retort.jobs", 3, 17, cases[i].key, cases[i].len,
                                       "{x", 2, 1763776000123);
        assert_non_null(ev);
        cJSON *k = get(ev, "key"), *k64 = get(ev, "key_base64");
        if (cases[i].text) {
            assert_true(cJSON_IsString(k));
            assert_string_equal(k->valuestring, cases[i].text);
            assert_null(k64);
        } else if (cases[i].b64) {
            assert_null(k);
            assert_true(cJSON_IsString(k64));
            assert_string_equal(k64->valuestring, cases[i].b64);
        } else {
            assert_true(cJSON_IsNull(k));
            assert_null(k64);
        }
        assert_string_equal(get(ev, "value")->valuestring, "{x");
        cJSON_Delete(ev);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_ids),
        cmocka_unit_test(test_final_from_history),
        cmocka_unit_test(test_final_last_as_parts),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_dead_letter_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
