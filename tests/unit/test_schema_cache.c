/* schema_cache: one compile per distinct inline schema, held entries
 * never evicted, least recently used out first, bounded by entries and by
 * the memory the compiled schemas hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_cache.h"

static const char *const A = "{\"type\":\"object\",\"required\":[\"a\"]}";
static const char *const B = "{\"type\":\"object\",\"required\":[\"b\"]}";
static const char *const C = "{\"type\":\"object\",\"required\":[\"c\"]}";

/* get the schema of text (which must compile) */
static schema_cache_entry *get(schema_cache *c, const char *text)
{
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    char err[256] = "";
    schema_cache_entry *e = schema_cache_get(c, doc, err, sizeof err);
    cJSON_Delete(doc); /* the entry keeps nothing of the document */
    if (!e)
        fail_msg("%s: %s", text, err);
    return e;
}

/* whether e's schema is text's: {"x":1} passes only the schema requiring x */
static void is_schema(const schema_cache_entry *e, const char *text, char field)
{
    assert_string_equal(e->text, text);
    assert_int_equal(e->text_len, strlen(text));
    char inst[16];
    snprintf(inst, sizeof inst, "{\"%c\":1}", field);
    cJSON *ok = cJSON_Parse(inst), *bad = cJSON_Parse("{\"z\":1}");
    assert_int_equal(schema_validate(e->compiled, ok, NULL), 0);
    assert_int_equal(schema_validate(e->compiled, bad, NULL), 1);
    cJSON_Delete(ok);
    cJSON_Delete(bad);
}

static void expect_stats(const schema_cache *c, uint64_t hits, uint64_t misses, size_t entries)
{
    schema_cache_stats st;
    schema_cache_get_stats(c, &st);
    assert_int_equal(st.hits, hits);
    assert_int_equal(st.misses, misses);
    assert_int_equal(st.entries, entries);
}

static void test_compiled_once(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 8, NULL);
    schema_cache_entry *a1 = get(c, A);
    /* the same schema written with other spacing prints the same */
    schema_cache_entry *a2 = get(c, "{ \"type\": \"object\", \"required\": [ \"a\" ] }");
    schema_cache_entry *b = get(c, B);
    assert_ptr_equal(a1, a2);
    assert_ptr_not_equal(a1, b);
    is_schema(a1, A, 'a');
    is_schema(b, B, 'b');
    expect_stats(c, 1, 2, 2);
    schema_cache_release(c, a1);
    schema_cache_release(c, a2);
    schema_cache_release(c, b);
    /* released, still kept */
    schema_cache_release(c, get(c, A));
    expect_stats(c, 2, 2, 2);
    schema_cache_free(c);
}

static void test_least_recently_used_out_first(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 2, NULL);
    schema_cache_release(c, get(c, A));
    schema_cache_release(c, get(c, B));
    schema_cache_release(c, get(c, A)); /* A used after B */
    schema_cache_release(c, get(c, C)); /* B goes */
    expect_stats(c, 1, 3, 2);
    schema_cache_release(c, get(c, A));
    schema_cache_release(c, get(c, C));
    expect_stats(c, 3, 3, 2);
    schema_cache_release(c, get(c, B)); /* compiled again; A, the oldest, goes */
    expect_stats(c, 3, 4, 2);
    schema_cache_release(c, get(c, A));
    expect_stats(c, 3, 5, 2);
    schema_cache_free(c);
}

/* A, B and C held at once by a cache with room for one: all three stay
 * valid, and the released ones go, least recently used first. */
static void held_entries_stay(schema_cache *c)
{
    schema_cache_entry *a = get(c, A), *b = get(c, B), *c1 = get(c, C);
    expect_stats(c, 0, 3, 3); /* over the bound while held */
    is_schema(a, A, 'a');
    is_schema(b, B, 'b');
    schema_cache_release(c, b);
    expect_stats(c, 0, 3, 2);
    schema_cache_release(c, a);
    expect_stats(c, 0, 3, 1);
    /* the one left is the one still held */
    assert_ptr_equal(get(c, C), c1);
    is_schema(c1, C, 'c');
    schema_cache_release(c, c1);
    schema_cache_release(c, c1);
    expect_stats(c, 1, 3, 1);
}

static void test_held_entries_stay(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 1, NULL);
    held_entries_stay(c);
    schema_cache_free(c);
}

static void test_no_cache(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 0, NULL);
    schema_cache_entry *a1 = get(c, A), *a2 = get(c, A);
    assert_ptr_not_equal(a1, a2);
    is_schema(a2, A, 'a');
    expect_stats(c, 0, 2, 0);
    schema_cache_release(c, a1); /* freed here (the sanitizer checks) */
    schema_cache_release(c, a2);
    schema_cache_release(c, NULL);
    schema_cache_free(c);
    schema_cache_free(NULL);
}

/* An inline schema over the limit is refused, not compiled: a compiled
 * schema can take a few hundred times its text. */
static void test_max_bytes(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 4, NULL);
    schema_cache_set_max_bytes(c, strlen("{\"type\":\"object\",\"required\":[\"a\"]}"));
    schema_cache_release(c, get(c, A)); /* at the limit (compact text): compiled */
    cJSON *doc = cJSON_Parse("{\"type\":\"object\",\"required\":[\"ab\"]}");
    char err[256] = "";
    assert_null(schema_cache_get(c, doc, err, sizeof err));
    assert_non_null(strstr(err, "over schemas.inline_max_bytes"));
    cJSON_Delete(doc);
    expect_stats(c, 0, 1, 1);
    schema_cache_free(c);
}

static void test_compile_error(void **state)
{
    (void)state;
    schema_cache *c = schema_cache_new(NULL, NULL, 4, NULL);
    cJSON *doc = cJSON_Parse("{\"type\":\"objekt\"}");
    char err[256] = "";
    for (int i = 0; i < 2; i++) {
        assert_null(schema_cache_get(c, doc, err, sizeof err));
        assert_non_null(strstr(err, "/type: must be a type name"));
    }
    expect_stats(c, 0, 0, 0);
    cJSON_Delete(doc);
    schema_cache_free(c);
}

/* $refs resolve against the registry the cache was made with */
static void test_registry(void **state)
{
    (void)state;
    schema_registry *reg = schema_registry_new();
    cJSON *def = cJSON_Parse("{\"type\":\"integer\"}");
    char err[256];
    assert_int_equal(schema_registry_add(reg, "https://example.com/int.json", def, err, sizeof err), 0);
    schema_cache *c = schema_cache_new(reg, NULL, 4, NULL);
    schema_cache_entry *e = get(c, "{\"$ref\":\"https://example.com/int.json\"}");
    cJSON *one = cJSON_Parse("1"), *str = cJSON_Parse("\"1\"");
    assert_int_equal(schema_validate(e->compiled, one, NULL), 0);
    assert_int_equal(schema_validate(e->compiled, str, NULL), 1);
    schema_cache_release(c, e);
    schema_cache_free(c);
    schema_registry_free(reg);
    cJSON_Delete(def);
    cJSON_Delete(one);
    cJSON_Delete(str);
}

static int freed;
static void count_free(void *user)
{
    freed++;
    free(user);
}

/* an entry's user data lives as long as the entry */
static void test_user_data(void **state)
{
    (void)state;
    freed = 0;
    schema_cache *c = schema_cache_new(NULL, NULL, 1, count_free);
    schema_cache_entry *a = get(c, A);
    assert_null(a->user);
    a->user = strdup("a");
    schema_cache_release(c, a);
    a = get(c, A);
    assert_string_equal(a->user, "a");
    schema_cache_release(c, a);
    schema_cache_entry *b = get(c, B); /* A goes, with its data */
    assert_int_equal(freed, 1);
    b->user = strdup("b");
    schema_cache_release(c, b);
    schema_cache_free(c); /* and B's */
    assert_int_equal(freed, 2);
    c = schema_cache_new(NULL, NULL, 0, count_free);
    a = get(c, A);
    a->user = strdup("a");
    schema_cache_release(c, a);
    assert_int_equal(freed, 3);
    schema_cache_free(c);
}

/* what one entry of A, B or C holds (they differ in one letter) */
static size_t mem_of_one(void)
{
    schema_cache *c = schema_cache_new(NULL, NULL, 4, NULL);
    schema_cache_release(c, get(c, A));
    schema_cache_stats st;
    schema_cache_get_stats(c, &st);
    schema_cache_free(c);
    assert_true(st.mem_bytes > 0);
    return st.mem_bytes;
}

static void expect_mem(const schema_cache *c, size_t mem)
{
    schema_cache_stats st;
    schema_cache_get_stats(c, &st);
    assert_int_equal(st.mem_bytes, mem);
}

/* {"prefixItems":[{},...]} of n: a few hundred times its text compiled */
static char *big_text(size_t n)
{
    cJSON *doc = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(doc, "prefixItems");
    assert_non_null(items);
    for (size_t i = 0; i < n; i++)
        assert_true(cJSON_AddItemToArray(items, cJSON_CreateObject()));
    char *t = cJSON_PrintUnformatted(doc);
    assert_non_null(t);
    cJSON_Delete(doc);
    return t;
}

/* With room for two schemas' memory and for many entries, a third pushes
 * out the least recently used: the bound on bytes holds where the bound
 * on entries would not have. */
static void test_max_mem_evicts_oldest(void **state)
{
    (void)state;
    size_t one = mem_of_one();
    schema_cache *c = schema_cache_new(NULL, NULL, 64, NULL);
    schema_cache_set_max_mem(c, 2 * one + one / 2);
    schema_cache_release(c, get(c, A));
    schema_cache_release(c, get(c, B));
    expect_stats(c, 0, 2, 2);
    expect_mem(c, 2 * one);
    schema_cache_release(c, get(c, A)); /* A used after B */
    schema_cache_release(c, get(c, C)); /* B goes */
    expect_stats(c, 1, 3, 2);
    expect_mem(c, 2 * one);
    schema_cache_release(c, get(c, A));
    schema_cache_release(c, get(c, C));
    expect_stats(c, 3, 3, 2);
    schema_cache_release(c, get(c, B)); /* compiled again; A goes */
    expect_stats(c, 3, 4, 2);
    /* a lower bound takes effect at once */
    schema_cache_set_max_mem(c, one);
    expect_stats(c, 3, 4, 1);
    expect_mem(c, one);
    schema_cache_release(c, get(c, B)); /* the most recent stayed */
    expect_stats(c, 4, 4, 1);
    schema_cache_free(c);
}

/* A schema holding more than the whole bound is its job's alone: handed
 * out, not kept (it would push out every other schema), freed at its
 * release (ASan checks both: no leak, no use after free). */
static void test_over_max_mem_not_kept(void **state)
{
    (void)state;
    size_t one = mem_of_one();
    char *big = big_text(2000); /* 6 KB of text, about 1.5 MB compiled */
    schema_cache *c = schema_cache_new(NULL, NULL, 64, NULL);
    schema_cache_set_max_mem(c, 10 * one); /* one: about 17 KB (an arena block) */
    schema_cache_release(c, get(c, A));
    schema_cache_entry *b1 = get(c, big), *b2 = get(c, big);
    assert_ptr_not_equal(b1, b2); /* compiled for each job */
    expect_stats(c, 0, 3, 1);
    expect_mem(c, one);
    cJSON *inst = cJSON_Parse("[1,2,3]");
    assert_int_equal(schema_validate(b1->compiled, inst, NULL), 0);
    schema_cache_release(c, b1);
    assert_int_equal(schema_validate(b2->compiled, inst, NULL), 0);
    assert_string_equal(b2->text, big);
    schema_cache_release(c, b2);
    cJSON_Delete(inst);
    /* A was not pushed out for it */
    schema_cache_release(c, get(c, A));
    expect_stats(c, 1, 3, 1);
    free(big);
    schema_cache_free(c);
}

/* Entries jobs hold stay valid while the bound on bytes is exceeded, and
 * go, least recently used first, once released. */
static void test_max_mem_held_entries_stay(void **state)
{
    (void)state;
    size_t one = mem_of_one();
    schema_cache *c = schema_cache_new(NULL, NULL, 64, NULL);
    schema_cache_set_max_mem(c, one + one / 2);
    held_entries_stay(c);
    expect_mem(c, one);
    schema_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compiled_once),
        cmocka_unit_test(test_least_recently_used_out_first),
        cmocka_unit_test(test_held_entries_stay),
        cmocka_unit_test(test_no_cache),
        cmocka_unit_test(test_compile_error),
        cmocka_unit_test(test_max_bytes),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_user_data),
        cmocka_unit_test(test_max_mem_evicts_oldest),
        cmocka_unit_test(test_over_max_mem_not_kept),
        cmocka_unit_test(test_max_mem_held_entries_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
