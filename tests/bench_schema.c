/* bench_schema.c - throughput of schema.c on a realistic LLM output schema.
 *
 * usage: bench-schema [--format-assert] [SECONDS_PER_CASE]   (default 1.0)
 *        bench-schema --dump DIR
 *
 * The schema (about 30 properties, nested objects, arrays of objects,
 * enums, patterns, formats, $refs) and the instances are built in.  Prints
 * one JSON line:
 *   {"compile_us":..,"valid_ns":..,"valid_per_s":..,"valid_report_ns":..,
 *    "invalid_ns":..,"invalid_per_s":..,"invalid_report_ns":..,
 *    "invalid_report_per_s":..,"invalid_violations":..,
 *    "invalid_violations_total":..,"uneval_ns":..,"format_assert":0|1}
 * valid_ns / invalid_ns: schema_validate(..., NULL); *_report_ns: with a
 * violations list (what the worker does for a repair prompt).  Each is the
 * median of 5 rounds of SECONDS_PER_CASE / 5, the cases taking turns.
 * compile_us: schema_compile(NULL, doc, opts) on the parsed document.
 * --format-assert: compile with format_assert = 1; by default `format` is
 * an annotation (the 2020-12 default, and the worker's unless the config
 * sets schemas.format_assert).
 *
 * --dump DIR writes the built-in schema and instances to DIR, so that
 * other validators (tests/bench_validators.py) measure the same input:
 *   schema.json        the schema as built in (draft 2020-12)
 *   schema-draft7.json the same with "$schema" set to draft-07, for
 *                      validators without 2020-12.  Nothing else changes:
 *                      the schema uses no 2020-12-only keyword but $defs,
 *                      only ever reached by "$ref":"#/$defs/..." JSON
 *                      pointers, which resolve the same in draft-07; no
 *                      $ref has siblings (ignored in draft-07), `items` is
 *                      always a schema, and `format` is an annotation in
 *                      both.  The dump checks this: Retort must give the
 *                      same answers and violation counts for both files.
 *   valid.json, invalid.json
 * and prints one JSON line {"dir":..,"files":[..],"draft7_same":true,
 * "invalid_errors":["PATH KEYWORD",..]} (Retort's report on invalid.json).
 */
#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char SCHEMA[] =
    "{"
    "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
    "\"$defs\":{"
    " \"money\":{\"type\":\"object\",\"required\":[\"amount\",\"currency\"],\"additionalProperties\":false,"
    "  \"properties\":{\"amount\":{\"type\":\"number\",\"minimum\":0,\"multipleOf\":0.01},"
    "   \"currency\":{\"enum\":[\"EUR\",\"USD\",\"GBP\",\"JPY\",\"CHF\"]}}},"
    " \"address\":{\"type\":\"object\",\"required\":[\"street\",\"city\",\"country\"],"
    "  \"properties\":{\"street\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200},"
    "   \"city\":{\"type\":\"string\",\"minLength\":1},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9A-Z -]{3,10}$\"},"
    "   \"country\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\"}},\"additionalProperties\":false},"
    " \"item\":{\"type\":\"object\",\"required\":[\"sku\",\"name\",\"quantity\",\"price\"],\"additionalProperties\":false,"
    "  \"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4,8}$\"},"
    "   \"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":120},"
    "   \"quantity\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10000},"
    "   \"price\":{\"$ref\":\"#/$defs/money\"},"
    "   \"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":30},\"uniqueItems\":true,\"maxItems\":10}}}"
    "},"
    "\"type\":\"object\","
    "\"required\":[\"id\",\"status\",\"customer\",\"items\",\"total\",\"created_at\",\"channel\",\"priority\"],"
    "\"additionalProperties\":false,"
    "\"properties\":{"
    " \"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    " \"status\":{\"enum\":[\"new\",\"paid\",\"shipped\",\"delivered\",\"cancelled\",\"refunded\"]},"
    " \"channel\":{\"enum\":[\"web\",\"app\",\"phone\",\"store\"]},"
    " \"priority\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":5},"
    " \"created_at\":{\"type\":\"string\",\"format\":\"date-time\"},"
    " \"updated_at\":{\"type\":[\"string\",\"null\"],\"format\":\"date-time\"},"
    " \"customer\":{\"type\":\"object\",\"required\":[\"name\",\"email\"],\"additionalProperties\":false,"
    "  \"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":100},"
    "   \"email\":{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"^[^@ ]+@[^@ ]+$\"},"
    "   \"phone\":{\"type\":\"string\",\"pattern\":\"^\\\\+?[0-9 ()-]{6,20}$\"},"
    "   \"vip\":{\"type\":\"boolean\"},"
    "   \"billing\":{\"$ref\":\"#/$defs/address\"},\"shipping\":{\"$ref\":\"#/$defs/address\"}}},"
    " \"items\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":100,\"items\":{\"$ref\":\"#/$defs/item\"}},"
    " \"total\":{\"$ref\":\"#/$defs/money\"},"
    " \"discount\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/money\"}]},"
    " \"payment\":{\"oneOf\":["
    "  {\"type\":\"object\",\"required\":[\"method\",\"last4\"],\"properties\":{\"method\":{\"const\":\"card\"},\"last4\":{\"type\":\"string\",\"pattern\":\"^[0-9]{4}$\"}}},"
    "  {\"type\":\"object\",\"required\":[\"method\",\"iban\"],\"properties\":{\"method\":{\"const\":\"sepa\"},\"iban\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}$\"}}},"
    "  {\"type\":\"object\",\"required\":[\"method\"],\"properties\":{\"method\":{\"const\":\"cash\"}}}]},"
    " \"notes\":{\"type\":\"string\",\"maxLength\":2000},"
    " \"gift\":{\"type\":\"boolean\"},"
    " \"gift_message\":{\"type\":\"string\",\"maxLength\":300},"
    " \"language\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2}(-[A-Z]{2})?$\"},"
    " \"source\":{\"type\":\"string\",\"enum\":[\"organic\",\"ads\",\"email\",\"referral\",\"partner\"]},"
    " \"referrer\":{\"type\":[\"string\",\"null\"]},"
    " \"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
    " \"confidence\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1},"
    " \"flags\":{\"type\":\"array\",\"items\":{\"enum\":[\"fraud_check\",\"manual_review\",\"express\",\"fragile\"]},\"uniqueItems\":true},"
    " \"metadata\":{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z_]{1,32}$\"},\"additionalProperties\":{\"type\":[\"string\",\"number\",\"boolean\"]}},"
    " \"warehouse\":{\"type\":\"string\",\"pattern\":\"^WH-[0-9]{2}$\"},"
    " \"carrier\":{\"enum\":[\"dhl\",\"ups\",\"fedex\",\"post\",null]},"
    " \"tracking\":{\"type\":[\"string\",\"null\"],\"maxLength\":64},"
    " \"weight_kg\":{\"type\":\"number\",\"exclusiveMinimum\":0},"
    " \"dimensions\":{\"type\":\"object\",\"required\":[\"l\",\"w\",\"h\"],\"properties\":{\"l\":{\"type\":\"number\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}}},"
    " \"summary\":{\"type\":\"string\",\"minLength\":10,\"maxLength\":500}"
    "}}";

static const char VALID[] =
    "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"status\":\"paid\",\"channel\":\"web\",\"priority\":2,"
    "\"created_at\":\"2024-05-01T10:20:30Z\",\"updated_at\":null,"
    "\"customer\":{\"name\":\"Ada Lovelace\",\"email\":\"ada@example.com\",\"phone\":\"+44 20 7946 0958\",\"vip\":true,"
    " \"billing\":{\"street\":\"12 Analytical Row\",\"city\":\"London\",\"zip\":\"SW1A 1AA\",\"country\":\"GB\"},"
    " \"shipping\":{\"street\":\"12 Analytical Row\",\"city\":\"London\",\"country\":\"GB\"}},"
    "\"items\":["
    " {\"sku\":\"ABC-12345\",\"name\":\"Difference engine\",\"quantity\":1,\"price\":{\"amount\":1999.99,\"currency\":\"GBP\"},\"tags\":[\"brass\",\"gears\"]},"
    " {\"sku\":\"XYZ-0001\",\"name\":\"Punch cards\",\"quantity\":500,\"price\":{\"amount\":0.05,\"currency\":\"GBP\"}},"
    " {\"sku\":\"QQQ-9999\",\"name\":\"Oil can\",\"quantity\":2,\"price\":{\"amount\":4.5,\"currency\":\"GBP\"},\"tags\":[\"maintenance\"]}],"
    "\"total\":{\"amount\":2033.99,\"currency\":\"GBP\"},\"discount\":null,"
    "\"payment\":{\"method\":\"card\",\"last4\":\"4242\"},"
    "\"notes\":\"Leave at the door.\",\"gift\":false,\"language\":\"en-GB\",\"source\":\"organic\",\"referrer\":null,"
    "\"score\":0.93,\"confidence\":0.8,\"flags\":[\"express\",\"fragile\"],"
    "\"metadata\":{\"campaign\":\"spring\",\"visits\":3,\"returning\":true},"
    "\"warehouse\":\"WH-07\",\"carrier\":\"dhl\",\"tracking\":\"JD014600003828323\",\"weight_kg\":12.5,"
    "\"dimensions\":{\"l\":60,\"w\":40,\"h\":30},"
    "\"summary\":\"One engine, punch cards and an oil can, shipped express.\"}";

/* typical LLM mistakes: wrong enum, string number, missing field, bad
 * pattern, extra field, wrong oneOf branch */
static const char INVALID[] =
    "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"status\":\"Paid\",\"channel\":\"web\",\"priority\":\"2\","
    "\"created_at\":\"2024-05-01T10:20:30Z\","
    "\"customer\":{\"name\":\"Ada Lovelace\",\"email\":\"ada@example.com\","
    " \"billing\":{\"street\":\"12 Analytical Row\",\"city\":\"London\",\"country\":\"UK \"}},"
    "\"items\":["
    " {\"sku\":\"ABC-12345\",\"name\":\"Difference engine\",\"quantity\":1,\"price\":{\"amount\":1999.99,\"currency\":\"GBP\"}},"
    " {\"sku\":\"xyz-1\",\"name\":\"Punch cards\",\"quantity\":0,\"price\":{\"amount\":0.05}}],"
    "\"total\":{\"amount\":2033.99,\"currency\":\"GBP\"},"
    "\"payment\":{\"method\":\"sepa\",\"iban\":\"not an iban\"},"
    "\"confidence\":0,\"extra_field\":true,"
    "\"summary\":\"short\"}";

static const char UNEVAL_SCHEMA[] =
    "{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}}}],"
    "\"anyOf\":[{\"properties\":{\"kind\":{\"const\":\"x\"},\"x\":{\"type\":\"number\"}}},"
    "{\"properties\":{\"kind\":{\"const\":\"y\"},\"y\":{\"type\":\"number\"}}}],"
    "\"unevaluatedProperties\":false}";
static const char UNEVAL_INST[] = "{\"a\":\"s\",\"b\":1,\"kind\":\"y\",\"y\":2.5}";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define ROUNDS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of ROUNDS figures (sorts them) */
static double median(double *x)
{
    qsort(x, ROUNDS, sizeof *x, cmp_double);
    return x[ROUNDS / 2];
}

/* ns per call of schema_validate, over about `secs` seconds */
static double time_validate(const schema *s, const cJSON *inst, int report, double secs, int want,
                            size_t *nviol, size_t *nviol_total)
{
    long iters = 0;
    double t0 = now(), t;
    do {
        for (int k = 0; k < 1000; k++) {
            schema_violations v = { 0 };
            int r = schema_validate(s, inst, report ? &v : NULL);
            if (r != want) {
                fprintf(stderr, "bench: unexpected result %d (want %d)\n", r, want);
                exit(1);
            }
            if (nviol)
                *nviol = v.count;
            if (nviol_total)
                *nviol_total = v.total;
            schema_violations_clear(&v);
        }
        iters += 1000;
        t = now() - t0;
    } while (t < secs);
    return t * 1e9 / (double)iters;
}

static schema *compile_or_die(const char *text, const schema_options *opts, cJSON **doc_out)
{
    cJSON *doc = cJSON_Parse(text);
    char err[256];
    schema *s = doc ? schema_compile(NULL, doc, opts, err, sizeof err) : NULL;
    if (!s) {
        fprintf(stderr, "bench: compile failed: %s\n", doc ? err : "bad JSON");
        exit(1);
    }
    if (doc_out)
        *doc_out = doc;
    else
        cJSON_Delete(doc);
    return s;
}

/* 0 = ok; text gets a trailing newline */
static int write_file(const char *dir, const char *name, const char *text)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        fprintf(stderr, "bench: path too long: %s/%s\n", dir, name);
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
    if (fclose(f) != 0 || bad) {
        perror(path);
        return -1;
    }
    return 0;
}

/* result of schema_validate and the number of violations (full report);
 * when list is not NULL, appends "PATH KEYWORD" for each violation to it */
static void check_one(const schema *s, const char *inst_text, int *result, size_t *count,
                      cJSON *list)
{
    cJSON *inst = cJSON_Parse(inst_text);
    schema_violations v = { 0 };
    *result = inst ? schema_validate(s, inst, &v) : -1;
    *count = v.total;
    for (size_t i = 0; list && i < v.count; i++) {
        const char *kw = strrchr(v.items[i].keyword_location, '/');
        char line[512];
        snprintf(line, sizeof line, "%s %s", v.items[i].path, kw ? kw + 1 : v.items[i].keyword_location);
        cJSON_AddItemToArray(list, cJSON_CreateString(line));
    }
    schema_violations_clear(&v);
    cJSON_Delete(inst);
}

/* --dump DIR; see the top of the file.  Returns the exit status. */
static int dump(const char *dir)
{
    int rc = 1, same = 1;
    cJSON *d7 = cJSON_Parse(SCHEMA), *jdir = NULL, *errs = cJSON_CreateArray();
    char *d7_text = NULL, *jdir_text = NULL, *errs_text = NULL;
    schema *s20 = NULL, *s7 = NULL;
    const char *const insts[] = { VALID, INVALID };
    if (!d7 || !errs || !cJSON_ReplaceItemInObjectCaseSensitive(
                   d7, "$schema", cJSON_CreateString("http://json-schema.org/draft-07/schema#"))) {
        fprintf(stderr, "bench: cannot make the draft-07 schema\n");
        goto done;
    }
    d7_text = cJSON_PrintUnformatted(d7);
    if (!d7_text)
        goto done;
    s20 = compile_or_die(SCHEMA, NULL, NULL);
    s7 = compile_or_die(d7_text, NULL, NULL);
    /* The draft-07 file is only a fair stand-in if it means the same. */
    for (size_t i = 0; i < 2; i++) {
        int r20, r7;
        size_t n20, n7;
        check_one(s20, insts[i], &r20, &n20, i ? errs : NULL);
        check_one(s7, insts[i], &r7, &n7, NULL);
        if (r20 != r7 || n20 != n7) {
            fprintf(stderr, "bench: draft-07 variant differs on %s: %d/%zu vs %d/%zu\n",
                    i ? "invalid" : "valid", r20, n20, r7, n7);
            same = 0;
        }
    }
    if (write_file(dir, "schema.json", SCHEMA) || write_file(dir, "schema-draft7.json", d7_text) ||
        write_file(dir, "valid.json", VALID) || write_file(dir, "invalid.json", INVALID))
        goto done;
    jdir = cJSON_CreateString(dir);
    jdir_text = jdir ? cJSON_PrintUnformatted(jdir) : NULL;
    errs_text = cJSON_PrintUnformatted(errs);
    printf("{\"dir\":%s,\"files\":[\"schema.json\",\"schema-draft7.json\",\"valid.json\",\"invalid.json\"],"
           "\"draft7_same\":%s,\"invalid_errors\":%s}\n", jdir_text ? jdir_text : "null",
           same ? "true" : "false", errs_text ? errs_text : "null");
    rc = same ? 0 : 1;
done:
    cJSON_free(errs_text);
    cJSON_Delete(errs);
    cJSON_free(jdir_text);
    cJSON_Delete(jdir);
    schema_free(s7);
    schema_free(s20);
    cJSON_free(d7_text);
    cJSON_Delete(d7);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench-schema [--format-assert] [SECONDS_PER_CASE]\n"
                    "       bench-schema --dump DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    double secs = 1.0;
    schema_options opts = { 0 };
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dump") == 0) {
            if (i + 1 >= argc)
                return usage();
            return dump(argv[i + 1]);
        } else if (strcmp(argv[i], "--format-assert") == 0) {
            opts.format_assert = 1;
        } else if (argv[i][0] == '-') {
            return usage();
        } else {
            secs = atof(argv[i]);
        }
    }
    if (secs <= 0)
        secs = 1.0;
    cJSON *doc = NULL;
    schema *s = compile_or_die(SCHEMA, &opts, &doc);
    /* compile time */
    long n = 0;
    double t0 = now(), t;
    do {
        char err[256];
        schema *x = schema_compile(NULL, doc, &opts, err, sizeof err);
        schema_free(x);
        n++;
        t = now() - t0;
    } while (t < secs / 2);
    double compile_us = t * 1e6 / (double)n;

    cJSON *valid = cJSON_Parse(VALID), *invalid = cJSON_Parse(INVALID);
    if (!valid || !invalid) {
        fprintf(stderr, "bench: bad instance JSON\n");
        return 1;
    }
    /* ROUNDS rounds of every case in turn, each case secs / ROUNDS long;
     * the median round per case: a passing disturbance of the machine
     * weighs on every case alike (tests/bench_ajv.js does the same). */
    size_t nviol = 0, nviol_total = 0;
    double rt[4][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        rt[0][r] = time_validate(s, valid, 0, secs / ROUNDS, 0, NULL, NULL);
        rt[1][r] = time_validate(s, valid, 1, secs / ROUNDS, 0, NULL, NULL);
        rt[2][r] = time_validate(s, invalid, 0, secs / ROUNDS, 1, NULL, NULL);
        rt[3][r] = time_validate(s, invalid, 1, secs / ROUNDS, 1, &nviol, &nviol_total);
    }
    double v_ns = median(rt[0]), vr_ns = median(rt[1]), i_ns = median(rt[2]), ir_ns = median(rt[3]);

    schema *u = compile_or_die(UNEVAL_SCHEMA, NULL, NULL);
    cJSON *uinst = cJSON_Parse(UNEVAL_INST);
    double u_ns = time_validate(u, uinst, 0, secs / 2, 0, NULL, NULL);

    printf("{\"compile_us\":%.1f,\"valid_ns\":%.0f,\"valid_per_s\":%.0f,\"valid_report_ns\":%.0f,"
           "\"invalid_ns\":%.0f,\"invalid_per_s\":%.0f,\"invalid_report_ns\":%.0f,"
           "\"invalid_report_per_s\":%.0f,\"invalid_violations\":%zu,"
           "\"invalid_violations_total\":%zu,\"uneval_ns\":%.0f,\"format_assert\":%d}\n",
           compile_us, v_ns, 1e9 / v_ns, vr_ns, i_ns, 1e9 / i_ns, ir_ns, 1e9 / ir_ns, nviol,
           nviol_total, u_ns, opts.format_assert);
    cJSON_Delete(uinst);
    schema_free(u);
    cJSON_Delete(valid);
    cJSON_Delete(invalid);
    cJSON_Delete(doc);
    schema_free(s);
    return 0;
}
