/* The cJSON block cache: blocks are reused, plain free() of cJSON memory
 * stays valid, large blocks are not kept, and trees come out the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "jsonmem.h"

#if defined(__SANITIZE_ADDRESS__)
#define CACHE_ON 0
#else
#define CACHE_ON 1
#endif

static const char DOC[] =
    "{\"id\":\"job-1\",\"schema\":\"person.v1\",\"prompt\":\"Give a person\","
    "\"params\":{\"temperature\":0.2,\"max_tokens\":512},\"tags\":[\"a\",\"bb\",\"ccc\"],"
    "\"long\":\"" "0123456789012345678901234567890123456789012345678901234567890123456789"
    "0123456789012345678901234567890123456789012345678901234567890123456789"
    "0123456789012345678901234567890123456789012345678901234567890123456789"
    "0123456789012345678901234567890123456789012345678901234567890123456789\"}";

static void test_blocks_are_reused(void **s) {
    (void)s;
    size_t before = jsonmem_cached();
    cJSON *a = cJSON_Parse(DOC);
    assert_non_null(a);
    char *want = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    size_t after_free = jsonmem_cached();
    if (CACHE_ON) assert_true(after_free > before);
    else assert_int_equal(after_free, 0);
    /* The same tree again takes its blocks from the cache. */
    cJSON *b = cJSON_Parse(DOC);
    assert_non_null(b);
    if (CACHE_ON) assert_true(jsonmem_cached() < after_free);
    char *got = cJSON_PrintUnformatted(b);
    assert_string_equal(got, want);
    /* cJSON memory may be freed with plain free(). */
    free(got);
    cJSON_free(want);
    cJSON_Delete(b);
}

static void test_a_freed_node_is_the_next_node(void **s) {
    (void)s;
    cJSON *n = cJSON_CreateNull();
    void *p = n;
    cJSON_Delete(n);
    cJSON *m = cJSON_CreateNull();
    if (CACHE_ON) assert_ptr_equal(m, p);
    cJSON_Delete(m);
}

static void test_large_blocks_go_back_to_free(void **s) {
    (void)s;
    size_t before = jsonmem_cached();
    char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    /* cJSON_CreateString copies the value: one node and one 2 KB string. */
    cJSON *str = cJSON_CreateString(big);
    assert_non_null(str);
    cJSON_Delete(str);
    /* The node came from the cache and went back; the string is not kept. */
    if (CACHE_ON) assert_int_equal(jsonmem_cached(), before);
    else assert_int_equal(jsonmem_cached(), 0);
}

static void test_plain_malloc_blocks_may_be_freed_through_cjson(void **s) {
    (void)s;
    /* Blocks from before the hooks (or from malloc) can be cJSON_free'd. */
    void *p = malloc(64);
    assert_non_null(p);
    cJSON_free(p);
    void *q = malloc(5000);
    assert_non_null(q);
    cJSON_free(q);
}

int main(void) {
    jsonmem_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_are_reused),
        cmocka_unit_test(test_a_freed_node_is_the_next_node),
        cmocka_unit_test(test_large_blocks_go_back_to_free),
        cmocka_unit_test(test_plain_malloc_blocks_may_be_freed_through_cjson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
