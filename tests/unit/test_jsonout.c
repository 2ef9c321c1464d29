/* jsonout must print exactly what cJSON_PrintUnformatted prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "jsonout.h"

/* jsonout_print is cJSON_PrintUnformatted, jsonout_print_formatted is
 * cJSON_Print, byte for byte. */
static void same_as_cjson(const cJSON *v) {
    for (int fmt = 0; fmt < 2; fmt++) {
        char *want = fmt ? cJSON_Print(v) : cJSON_PrintUnformatted(v);
        char *got = fmt ? jsonout_print_formatted(v) : jsonout_print(v);
        assert_non_null(want);
        assert_non_null(got);
        size_t i = 0;
        while (want[i] && want[i] == got[i]) i++;
        if (want[i] != got[i])
            fail_msg("%s differs at %zu: cJSON \"%.40s\" jsonout \"%.40s\"", fmt ? "formatted" : "compact", i,
                     want + (i > 20 ? i - 20 : 0), got + (i > 20 ? i - 20 : 0));
        free(want);
        free(got);
    }
}

static void test_documents(void **s) {
    (void)s;
    static const char *const docs[] = {
        "null", "true", "false", "0", "-0", "1", "-1", "2147483647", "-2147483648", "2147483648",
        "123456789012345", "999999999999999", "1000000000000000", "1e300", "-1e-300", "0.1", "0.3",
        "19.99", "1999.99", "0.05", "3.141592653589793", "1.7976931348623157e308", "5e-324",
        "4.35", "1234.5678", "-0.000001", "1e21", "123456789.123456789",
        "\"\"", "\"plain\"", "\"q\\\"b\\\\s\\/\"", "\"\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\"",
        "\"h\\u00e9llo \\u4e16\\u754c \\ud83d\\ude00\"",
        "[]", "{}", "[[],[{}],{\"a\":[1,2,{\"b\":null}]}]", "{\"a\":{},\"b\":[],\"c\":{\"d\":{\"e\":[{\"f\":1},{}]}}}",
        "{\"\":1,\"a b\":\"c\",\"\\n\":[true,false],\"\\u00e9\":{\"x\":-2.5e-7}}",
        "{\"id\":\"123e4567\",\"items\":[{\"sku\":\"ABC-1\",\"price\":{\"amount\":1999.99,\"currency\":\"GBP\"},"
        "\"quantity\":500}],\"score\":0.93,\"weight_kg\":12.5}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        cJSON *v = cJSON_Parse(docs[i]);
        assert_non_null(v);
        same_as_cjson(v);
        cJSON_Delete(v);
    }
}

/* Random doubles of every magnitude, integral ones around the %d and
 * 1e15 boundaries, and values needing 17 digits. */
static void test_numbers(void **s) {
    (void)s;
    srand(7);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < 40000; i++) {
        double d;
        switch (i % 8) {
        case 5: d = (double)(rand() % 10000000) / 1000.0; break;
        case 6: d = (double)(rand() % 100000) / 1e8; break; /* around the 1e-4 boundary */
        case 7: d = (double)rand() * 1000.0 + (double)(rand() % 1000) / 1e3; break;
        case 0: d = (double)rand() / RAND_MAX * pow(10, rand() % 40 - 20); break;
        case 1: d = (double)(rand() % 2000001 - 1000000); break;
        case 2: d = ldexp((double)rand(), rand() % 120 - 60); break;
        case 3: d = 1e15 + (double)(rand() % 2001 - 1000); break;
        default: d = (double)(rand() % 100000) / 100.0; break;
        }
        if (rand() % 2) d = -d;
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(d));
    }
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(NAN));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(INFINITY));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(-0.0));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(2147483647.0));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(-2147483649.0));
    same_as_cjson(arr);
    cJSON_Delete(arr);
}

/* References (cJSON_AddItemReferenceTo*) print as the value they refer to,
 * and raw items as their text. */
static void test_references_and_raw(void **s) {
    (void)s;
    cJSON *target = cJSON_Parse("{\"a\":[1,2.5,\"x\"]}");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(o, "ref", target);
    cJSON *arr = cJSON_AddArrayToObject(o, "list");
    cJSON_AddItemReferenceToArray(arr, target);
    cJSON_AddItemReferenceToArray(arr, cJSON_GetObjectItem(target, "a"));
    cJSON_AddRawToObject(o, "raw", "{\"k\":1}");
    same_as_cjson(o);
    char *got = jsonout_print(o);
    assert_string_equal(got, "{\"ref\":{\"a\":[1,2.5,\"x\"]},\"list\":[{\"a\":[1,2.5,\"x\"]},[1,2.5,\"x\"]],"
                             "\"raw\":{\"k\":1}}");
    free(got);
    cJSON_Delete(o);
    cJSON_Delete(target);
    assert_null(jsonout_print(NULL));
}

/* Appending keeps what the buffer had. */
static void test_append(void **s) {
    (void)s;
    sbuf b = {0};
    sbuf_puts(&b, "x=");
    cJSON *v = cJSON_Parse("[0.1,\"\\u0000\"]");
    assert_int_equal(jsonout_value(&b, v), 0);
    assert_int_equal(jsonout_number(&b, 42), 0);
    assert_string_equal(b.data, "x=[0.1,\"\"]42");
    cJSON_Delete(v);
    sbuf_free(&b);
}

/* A value read at the reader's full depth (1,000) printed inside an
 * event a few levels down: jsonout counted from the printed root and
 * refused it (NULL, taken by the worker for out of memory), where cJSON
 * prints it. */
static void test_deep_value_inside_another(void **s) {
    (void)s;
    char text[2100];
    size_t n = 0;
    for (int i = 0; i < 999; i++) text[n++] = '[';
    for (int i = 0; i < 999; i++) text[n++] = ']';
    text[n] = '\0';
    cJSON *deep = cJSON_Parse(text);
    assert_non_null(deep);
    cJSON *ev = cJSON_CreateObject();
    cJSON *rec = cJSON_AddObjectToObject(cJSON_AddObjectToObject(ev, "history"), "attempt");
    cJSON_AddItemReferenceToObject(rec, "value", deep);
    char *got = jsonout_print(ev), *want = cJSON_PrintUnformatted(ev);
    assert_non_null(want);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
    free(want);
    cJSON_Delete(ev);
    cJSON_Delete(deep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_references_and_raw),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_deep_value_inside_another),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
