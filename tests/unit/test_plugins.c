/* test_plugins.c - unit tests for worker/plugins.c (cmocka).
 *
 * The group setup builds tests/plugins/example_plugin.c and a few
 * misbehaving plugins (generated below) into shared objects under
 * build/tests/plugins/ with `cc -shared -fPIC`, named with the process id
 * so that the plain and the ASan run never share a file; the teardown
 * removes them.  Run from the repository root (as `make unit` does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsonin.h"
#include "plugins.h"
#include "util.h"

#define DIR "build/tests/plugins"

/* One source, several misbehaving plugins: MODE picks the behaviour. */
static const char odd_source[] =
    "#include <stdio.h>\n"
    "#include \"retort_plugin.h\"\n"
    "#ifndef ABI\n#define ABI RETORT_PLUGIN_ABI_VERSION\n#endif\n"
    "int retort_plugin_abi(void) { return ABI; }\n"
    "const char *retort_plugin_name(void) { return NAME; }\n"
    "#if MODE != 0\n"
    "int retort_plugin_validate(const char *out, const char *job, retort_plugin_report_fn report, void *ctx) {\n"
    "#if MODE == 1 /* fails after reporting */\n"
    "    report(ctx, \"/a\", \"DROPPED\", \"should not be kept\", 1);\n"
    "    return -1;\n"
    "#elif MODE == 2 /* rejects without a word */\n"
    "    return 1;\n"
    "#elif MODE == 3 /* says ok but reports */\n"
    "    report(ctx, \"/b\", \"SNEAKY\", \"reported with 0\", 1);\n"
    "    return 0;\n"
    "#elif MODE == 4 /* floods, with NULLs and bad UTF-8 */\n"
    "    report(ctx, NULL, NULL, NULL, 0);\n"
    "    report(ctx, \"/x\", \"BAD_UTF8\", \"caf\\xc3 \\xff end\", 1);\n"
    "    for (int i = 0; i < 100; i++) report(ctx, \"/n\", \"MANY\", \"many\", 1);\n"
    "    return 1;\n"
    "#elif MODE == 5 /* echoes what it was given */\n"
    "    report(ctx, \"\", \"OUT\", out, 1);\n"
    "    report(ctx, \"\", \"JOB\", job, 1);\n"
    "    return 1;\n"
    "#elif MODE == 7 /* codes of every form */\n"
    "    report(ctx, \"/a\", \"GOOD_CODE_2\", \"kept\", 1);\n"
    "    report(ctx, \"/b\", \"price-too-high\", \"too dear\", 1);\n"
    "    report(ctx, \"/c\", \"E\\\"} 1\\nretort_up{dependency=\\\"x\", \"forged\", 1);\n"
    "    report(ctx, \"/d\", \"ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJKL\", \"66 bytes\", 1);\n"
    "    report(ctx, \"/e\", \"2BIG\", NULL, 1);\n"
    "    return 1;\n"
    "#else /* an undocumented return value */\n"
    "    (void)out; (void)job; (void)report; (void)ctx;\n"
    "    return 7;\n"
    "#endif\n"
    "}\n"
    "#endif\n";

static char example_so[256], nosym_so[256], badabi_so[256], badname_so[256], failing_so[256], silent_so[256],
    sneaky_so[256], flood_so[256], echo_so[256], weird_so[256], codes_so[256], odd_c[256];

static int build(const char *src, const char *out, const char *defs)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -Wall -Iworker %s -o %s %s -lcjson 2>&1", defs, out, src);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "failed (%d): %s\n", rc, cmd);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    if (system("mkdir -p " DIR) != 0)
        return -1;
    int pid = (int)getpid();
    snprintf(odd_c, sizeof odd_c, DIR "/odd_plugin.%d.c", pid);
    FILE *f = fopen(odd_c, "w");
    if (!f || fputs(odd_source, f) < 0 || fclose(f))
        return -1;
    struct {
        char *path;
        const char *stem, *defs;
    } builds[] = {
        { nosym_so, "nosym", "-DMODE=0 -DNAME='\"nosym\"'" },
        { badabi_so, "badabi", "-DMODE=2 -DNAME='\"badabi\"' -DABI=99" },
        { badname_so, "badname", "-DMODE=2 -DNAME='\"bad name!\"'" },
        { failing_so, "failing", "-DMODE=1 -DNAME='\"failing\"'" },
        { silent_so, "silent", "-DMODE=2 -DNAME='\"silent\"'" },
        { sneaky_so, "sneaky", "-DMODE=3 -DNAME='\"sneaky\"'" },
        { flood_so, "flood", "-DMODE=4 -DNAME='\"flood\"'" },
        { echo_so, "echo", "-DMODE=5 -DNAME='\"echo\"'" },
        { weird_so, "weird", "-DMODE=6 -DNAME='\"weird\"'" },
        { codes_so, "codes", "-DMODE=7 -DNAME='\"codes\"'" },
    };
    snprintf(example_so, sizeof example_so, DIR "/example_plugin.%d.so", pid);
    if (build("tests/plugins/example_plugin.c", example_so, ""))
        return -1;
    for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
        snprintf(builds[i].path, 256, DIR "/%s.%d.so", builds[i].stem, pid);
        if (build(odd_c, builds[i].path, builds[i].defs))
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *files[] = { example_so, nosym_so, badabi_so, badname_so, failing_so, silent_so,
                            sneaky_so, flood_so, echo_so, weird_so, codes_so, odd_c };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (files[i][0])
            unlink(files[i]);
    return 0;
}

static plugins *load(const char *paths)
{
    char err[512] = "";
    plugins *p = plugins_load(paths, err, sizeof err);
    if (!p)
        fail_msg("plugins_load(%s): %s", paths, err);
    return p;
}

/* Runs p on output_text with job_text (NULL: no job); caller frees. */
static cJSON *run(const plugins *p, const char *output_text, const char *job_text)
{
    cJSON *out = cJSON_Parse(output_text);
    cJSON *job = job_text ? cJSON_Parse(job_text) : NULL;
    assert_non_null(out);
    cJSON *v = cJSON_CreateArray();
    size_t n = plugins_check(p, out, job, v);
    assert_int_equal(n, (size_t)cJSON_GetArraySize(v));
    cJSON_Delete(out);
    cJSON_Delete(job);
    return v;
}

static const char *str(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static const cJSON *find(const cJSON *arr, const char *code)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (!strcmp(str(v, "code"), code))
            return v;
    }
    return NULL;
}

static void assert_violation(const cJSON *v, const char *path, const char *keyword, int fixable)
{
    assert_non_null(v);
    assert_int_equal(cJSON_GetArraySize(v), 7);
    assert_string_equal(str(v, "path"), path);
    assert_string_equal(str(v, "keyword"), keyword);
    assert_non_null(str(v, "message"));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "expected")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "actual")));
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "fixable");
    assert_true(cJSON_IsBool(f));
    assert_int_equal(cJSON_IsTrue(f), fixable);
}

static void test_example(void **state)
{
    (void)state;
    plugins *p = load(example_so);
    assert_int_equal(plugins_count(p), 1);
    assert_string_equal(plugins_name(p, 0), "example");
    assert_null(plugins_name(p, 1));

    cJSON *v = run(p, "{\"name\":\"Trail Shoe\",\"price\":89.9}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);

    v = run(p, "{\"name\":\"Trail Shoe\",\"price\":25000}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), 1);
    const cJSON *m = find(v, "PRICE_TOO_HIGH");
    assert_violation(m, "/price", "plugin/example", 1);
    assert_non_null(strstr(str(m, "message"), "at most 10000"));
    cJSON_Delete(v);

    v = run(p, "{\"name\":\"TODO\",\"price\":25000}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_violation(find(v, "PLACEHOLDER_NAME"), "/name", "plugin/example", 0);
    assert_non_null(find(v, "PRICE_TOO_HIGH"));
    cJSON_Delete(v);

    /* the job reaches the plugin: its metadata lowers the limit */
    v = run(p, "{\"name\":\"Mug\",\"price\":150}", "{\"job_id\":\"j1\",\"metadata\":{\"max_price\":100}}");
    assert_int_equal(cJSON_GetArraySize(v), 1);
    assert_non_null(strstr(str(find(v, "PRICE_TOO_HIGH"), "message"), "at most 100 "));
    cJSON_Delete(v);
    plugins_free(p);
}

static void test_load_errors(void **state)
{
    (void)state;
    char err[512];
    assert_null(plugins_load(DIR "/no-such-plugin.so", err, sizeof err));
    assert_non_null(strstr(err, "plugin " DIR "/no-such-plugin.so: cannot load"));

    assert_null(plugins_load(nosym_so, err, sizeof err));
    assert_non_null(strstr(err, nosym_so));
    assert_non_null(strstr(err, "missing symbol retort_plugin_validate"));

    /* not a plugin at all: a shared object without any of the symbols */
    assert_null(plugins_load("libcjson.so.1", err, sizeof err));
    assert_non_null(strstr(err, "missing symbol retort_plugin_abi"));

    assert_null(plugins_load(badabi_so, err, sizeof err));
    assert_non_null(strstr(err, badabi_so));
    assert_non_null(strstr(err, "ABI version 99"));

    assert_null(plugins_load(badname_so, err, sizeof err));
    assert_non_null(strstr(err, "retort_plugin_name"));

    /* a good plugin before a bad one: the whole load fails, naming the bad file */
    char list[600];
    snprintf(list, sizeof list, "%s,%s", example_so, badabi_so);
    assert_null(plugins_load(list, err, sizeof err));
    assert_non_null(strstr(err, badabi_so));

    snprintf(list, sizeof list, "%s,%s", example_so, example_so);
    assert_null(plugins_load(list, err, sizeof err));
    assert_non_null(strstr(err, "\"example\" is already used"));

    /* a small error buffer is cut, not overrun */
    char small[8];
    memset(small, 'Z', sizeof small);
    assert_null(plugins_load(nosym_so, small, 6));
    assert_int_equal(strlen(small), 5);
    assert_int_equal(small[7], 'Z');
}

static void test_list_parsing(void **state)
{
    (void)state;
    plugins *p = load(NULL);
    assert_int_equal(plugins_count(p), 0);
    cJSON *v = run(p, "{\"price\":1e9}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), 0);
    cJSON_Delete(v);
    plugins_free(p);
    p = load(" , ");
    assert_int_equal(plugins_count(p), 0);
    plugins_free(p);

    char list[600];
    snprintf(list, sizeof list, " %s , ,\t%s ", sneaky_so, example_so);
    p = load(list);
    assert_int_equal(plugins_count(p), 2);
    assert_string_equal(plugins_name(p, 0), "sneaky");
    assert_string_equal(plugins_name(p, 1), "example");
    /* violations come in load order */
    v = run(p, "{\"price\":20000}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_string_equal(str(cJSON_GetArrayItem(v, 0), "code"), "SNEAKY");
    assert_string_equal(str(cJSON_GetArrayItem(v, 1), "code"), "PRICE_TOO_HIGH");
    cJSON_Delete(v);
    plugins_free(p);
    plugins_free(NULL);
    assert_int_equal(plugins_count(NULL), 0);
}

static void test_misbehaving(void **state)
{
    (void)state;
    char list[1200];
    snprintf(list, sizeof list, "%s,%s,%s,%s", failing_so, silent_so, weird_so, example_so);
    plugins *p = load(list);
    cJSON *v = run(p, "{\"name\":\"TODO\"}", NULL);
    /* one PLUGIN_ERROR each for -1, 1 without reports, and 7; the example still runs */
    assert_int_equal(cJSON_GetArraySize(v), 4);
    assert_violation(cJSON_GetArrayItem(v, 0), "", "plugin/failing", 0);
    assert_string_equal(str(cJSON_GetArrayItem(v, 0), "code"), "PLUGIN_ERROR");
    assert_null(find(v, "DROPPED")); /* reports of a failed call are ignored */
    assert_violation(cJSON_GetArrayItem(v, 1), "", "plugin/silent", 0);
    assert_string_equal(str(cJSON_GetArrayItem(v, 1), "code"), "PLUGIN_ERROR");
    assert_violation(cJSON_GetArrayItem(v, 2), "", "plugin/weird", 0);
    assert_non_null(strstr(str(cJSON_GetArrayItem(v, 2), "message"), "returned 7"));
    assert_violation(cJSON_GetArrayItem(v, 3), "/name", "plugin/example", 0);
    cJSON_Delete(v);
    plugins_free(p);

    p = load(flood_so);
    v = run(p, "{}", NULL);
    assert_int_equal(cJSON_GetArraySize(v), PLUGINS_MAX_REPORTS);
    const cJSON *m = cJSON_GetArrayItem(v, 0);
    assert_violation(m, "", "plugin/flood", 0);
    assert_string_equal(str(m, "code"), "PLUGIN_VIOLATION");
    assert_non_null(strstr(str(m, "message"), "flood"));
    m = find(v, "BAD_UTF8");
    assert_violation(m, "/x", "plugin/flood", 1);
    assert_true(util_utf8_valid(str(m, "message"), strlen(str(m, "message"))));
    assert_non_null(strstr(str(m, "message"), "end"));
    cJSON_Delete(v);
    plugins_free(p);
}

/* A code not of the events' form (^[A-Z][A-Z0-9_]*$, at most 64 bytes)
 * is PLUGIN_VIOLATION, with what the plugin said leading the message: a
 * quote and a newline in one forged series on /metrics, and events
 * carrying it broke their schema. */
static void test_codes(void **state)
{
    (void)state;
    plugins *p = load(codes_so);
    cJSON *v = run(p, "{}", NULL);
    static const struct {
        const char *code, *message;
    } want[] = {
        { "GOOD_CODE_2", "kept" },
        { "PLUGIN_VIOLATION", "[price-too-high] too dear" },
        { "PLUGIN_VIOLATION", "[E\"} 1\nretort_up{dependency=\"x] forged" },
        { "PLUGIN_VIOLATION", "[ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJKLMNOPQRSTUVWXYZ_ABCDEFGHIJ] 66 bytes" }, /* cut to 64 */
        { "PLUGIN_VIOLATION", "[2BIG] rejected by the validator plugin codes" },
    };
    assert_int_equal(cJSON_GetArraySize(v), 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(str(cJSON_GetArrayItem(v, i), "code"), want[i].code);
        assert_string_equal(str(cJSON_GetArrayItem(v, i), "message"), want[i].message);
    }
    cJSON_Delete(v);
    plugins_free(p);
}

static void test_echo(void **state)
{
    (void)state;
    plugins *p = load(echo_so);
    const char *out = "{\"name\":\"Caf\xc3\xa9\",\"tags\":[\"a\",\"b\"],\"n\":{\"x\":null}}";
    const char *job = "{\"job_id\":\"j-7\",\"attempt\":2}";
    cJSON *v = run(p, out, job);
    assert_int_equal(cJSON_GetArraySize(v), 2);
    /* the plugin got exactly the compact JSON text of the output and the job */
    cJSON *o = cJSON_Parse(out), *j = cJSON_Parse(job);
    char *ot = cJSON_PrintUnformatted(o), *jt = cJSON_PrintUnformatted(j);
    assert_string_equal(str(find(v, "OUT"), "message"), ot);
    assert_string_equal(str(find(v, "JOB"), "message"), jt);
    free(ot);
    free(jt);
    cJSON_Delete(o);
    cJSON_Delete(j);
    cJSON_Delete(v);
    /* numbers as they were written (jsonin keeps their text), as the final
     * event carries them, not as the doubles cJSON would print */
    static const char big[] = "{\"id\":12345678901234567890,\"big\":1e400,\"p\":1.10}";
    cJSON *bo = jsonin_parse_all(big, strlen(big), NULL);
    assert_non_null(bo);
    cJSON *bv = cJSON_CreateArray();
    plugins_check(p, bo, NULL, bv);
    assert_string_equal(str(find(bv, "OUT"), "message"), big);
    cJSON_Delete(bv);
    jsonin_free(bo);
    /* no job: the plugin gets "null" */
    v = run(p, "[]", NULL);
    assert_string_equal(str(find(v, "JOB"), "message"), "null");
    cJSON_Delete(v);
    /* violations not an array: nothing appended, nothing called */
    cJSON *obj = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    assert_int_equal(plugins_check(p, arr, NULL, obj), 0);
    assert_int_equal(cJSON_GetArraySize(obj), 0);
    cJSON_Delete(obj);
    cJSON_Delete(arr);
    plugins_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example),     cmocka_unit_test(test_load_errors), cmocka_unit_test(test_list_parsing),
        cmocka_unit_test(test_misbehaving), cmocka_unit_test(test_echo),
        cmocka_unit_test(test_codes),
    };
    return cmocka_run_group_tests_name("plugins", tests, setup, teardown);
}
