/* jsts_runner.c - runs the official JSON Schema Test Suite against schema.c.
 *
 * usage: jsts-runner SUITE_DIR [-v] [-k KNOWN_FAILURES] [--fuzz-corpus DIR]
 *
 * SUITE_DIR holds tests/draft2020-12, tests/draft7 and remotes/ (loaded as
 * http://localhost:1234/).  Required tests are the .json files of tests/<draft>;
 * optional/ and optional/format/ (the latter with format assertion on) are
 * reported separately and never fail the run.  Every test is validated
 * twice, without and with a violations list; both answers must agree and an
 * invalid answer must carry at least one violation.
 *
 * Last line: "N passed, N failed" over the required tests.  Exit status 1
 * when a required test fails that tests/jsts-known-failures.txt (lines
 * "draft/file.json|group description|test description") does not list.
 *
 * --fuzz-corpus DIR also writes every test as a seed input for
 * tests/fuzz_schema.c (FLAGS SCHEMA NUL INSTANCE) into DIR.
 */
#include "schema.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct counts {
    int pass, fail;
} counts;

static int g_verbose;
static const char *g_corpus;
static unsigned g_corpus_n;

static void write_seed(const cJSON *sch, const cJSON *data, int flags)
{
    char *a = cJSON_PrintUnformatted(sch), *b = cJSON_PrintUnformatted(data);
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%05u", g_corpus, g_corpus_n++);
    FILE *f = a && b ? fopen(path, "wb") : NULL;
    if (f) {
        fputc(flags, f);
        fputs(a, f);
        fputc('\0', f);
        fputs(b, f);
        fclose(f);
    }
    free(a);
    free(b);
}
static char **g_known;
static size_t g_nknown;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted *.json names in dir; NULL-terminated, caller frees. */
static char **list_json(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    size_t n = 0, cap = 16;
    char **v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        if (n + 2 > cap) {
            cap *= 2;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (!v)
        return NULL;
    qsort(v, n, sizeof *v, cmp_str);
    v[n] = NULL;
    return v;
}

static void free_list(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int is_known(const char *id)
{
    for (size_t i = 0; i < g_nknown; i++)
        if (strcmp(g_known[i], id) == 0)
            return 1;
    return 0;
}

static void load_known(const char *path)
{
    size_t len;
    char *text = slurp(path, &len);
    if (!text)
        return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!line[0] || line[0] == '#')
            continue;
        char **nk = realloc(g_known, (g_nknown + 1) * sizeof *nk);
        if (!nk)
            break;
        g_known = nk;
        g_known[g_nknown++] = strdup(line);
    }
    free(text);
}

/* Runs one test file.  unknown_fail counts required failures not listed
 * as known. */
static void run_file(schema_registry *reg, const char *path, const char *label,
                     schema_draft draft, int format_assert, counts *cnt, int *unknown_fail)
{
    size_t len;
    char *text = slurp(path, &len);
    cJSON *groups = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!cJSON_IsArray(groups)) {
        fprintf(stderr, "%s: cannot read test file\n", path);
        cJSON_Delete(groups);
        return;
    }
    counts local = { 0, 0 };
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        const char *gdesc = cJSON_GetStringValue(cJSON_GetObjectItem(g, "description"));
        const cJSON *sch = cJSON_GetObjectItem(g, "schema");
        const cJSON *tests = cJSON_GetObjectItem(g, "tests");
        schema_options opts = { draft, format_assert, 0 };
        char err[512];
        schema *s = schema_compile(reg, sch, &opts, err, sizeof err);
        const cJSON *t;
        cJSON_ArrayForEach(t, tests) {
            const char *tdesc = cJSON_GetStringValue(cJSON_GetObjectItem(t, "description"));
            int want = cJSON_IsTrue(cJSON_GetObjectItem(t, "valid"));
            const cJSON *data = cJSON_GetObjectItem(t, "data");
            if (g_corpus)
                write_seed(sch, data, (draft == SCHEMA_DRAFT_7 ? 1 : 0) | (format_assert ? 2 : 0));
            int ok = 0;
            char why[600] = "";
            if (!s) {
                snprintf(why, sizeof why, "compile error: %s", err);
            } else {
                int r1 = schema_validate(s, data, NULL);
                schema_violations v = { 0 };
                int r2 = schema_validate(s, data, &v);
                if (r1 != r2)
                    snprintf(why, sizeof why, "inconsistent: %d without / %d with violations", r1, r2);
                else if (r1 < 0)
                    snprintf(why, sizeof why, "error: %s",
                             v.count ? v.items[0].message : "?");
                else if (r1 == 1 && v.count == 0)
                    snprintf(why, sizeof why, "invalid without violations");
                else if ((r1 == 0) != want)
                    snprintf(why, sizeof why, "got %s%s%s", r1 == 0 ? "valid" : "invalid: ",
                             r1 && v.count ? v.items[0].keyword_location : "",
                             r1 && v.count ? "" : "");
                else
                    ok = 1;
                if (!ok && r1 == 1 && v.count && g_verbose) {
                    size_t l = strlen(why);
                    snprintf(why + l, sizeof why - l, " (%s)", v.items[0].message);
                }
                schema_violations_clear(&v);
            }
            if (ok) {
                local.pass++;
                continue;
            }
            local.fail++;
            char id[2048];
            snprintf(id, sizeof id, "%s|%s|%s", label, gdesc ? gdesc : "", tdesc ? tdesc : "");
            int known = is_known(id);
            if (unknown_fail && !known)
                (*unknown_fail)++;
            if (g_verbose || !unknown_fail || !known)
                printf("  FAIL %s%s: %s\n", id,
                       !unknown_fail ? " (optional)" : known ? " (known)" : "", why);
        }
        schema_free(s);
    }
    cJSON_Delete(groups);
    if (g_verbose || local.fail)
        printf("  %-50s %d/%d\n", label, local.pass, local.pass + local.fail);
    cnt->pass += local.pass;
    cnt->fail += local.fail;
}

static void run_dir(schema_registry *reg, const char *suite, const char *draftdir, const char *sub,
                    schema_draft draft, int format_assert, counts *cnt, int *unknown_fail)
{
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/tests/%s%s%s", suite, draftdir, sub[0] ? "/" : "", sub);
    char **files = list_json(dir);
    for (size_t i = 0; files && files[i]; i++) {
        char path[4096], label[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(label, sizeof label, "%s/%s%s%s", draftdir, sub, sub[0] ? "/" : "", files[i]);
        run_file(reg, path, label, draft, format_assert, cnt, unknown_fail);
    }
    free_list(files);
}

int main(int argc, char **argv)
{
    const char *suite = NULL;
    const char *known = "tests/jsts-known-failures.txt";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            g_verbose = 1;
        else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc)
            known = argv[++i];
        else if (strcmp(argv[i], "--fuzz-corpus") == 0 && i + 1 < argc)
            g_corpus = argv[++i];
        else
            suite = argv[i];
    }
    if (!suite) {
        fprintf(stderr, "usage: %s SUITE_DIR [-v] [-k KNOWN_FAILURES] [--fuzz-corpus DIR]\n", argv[0]);
        return 2;
    }
    load_known(known);
    schema_registry *reg = schema_registry_new();
    char err[512], remotes[2048];
    snprintf(remotes, sizeof remotes, "%s/remotes", suite);
    if (!reg || schema_registry_load_dir(reg, remotes, "http://localhost:1234/", err, sizeof err) != 0) {
        fprintf(stderr, "loading remotes: %s\n", reg ? err : "out of memory");
        schema_registry_free(reg);
        return 2;
    }
    static const struct {
        const char *dir;
        schema_draft draft;
    } drafts[] = { { "draft2020-12", SCHEMA_DRAFT_2020_12 }, { "draft7", SCHEMA_DRAFT_7 } };
    counts req_total = { 0, 0 };
    int unknown_fail = 0;
    for (size_t d = 0; d < sizeof drafts / sizeof drafts[0]; d++) {
        counts req = { 0, 0 }, opt = { 0, 0 }, fmt = { 0, 0 };
        run_dir(reg, suite, drafts[d].dir, "", drafts[d].draft, 0, &req, &unknown_fail);
        run_dir(reg, suite, drafts[d].dir, "optional", drafts[d].draft, 0, &opt, NULL);
        run_dir(reg, suite, drafts[d].dir, "optional/format", drafts[d].draft, 1, &fmt, NULL);
        printf("%s: required %d/%d, optional %d/%d, format %d/%d\n", drafts[d].dir, req.pass,
               req.pass + req.fail, opt.pass, opt.pass + opt.fail, fmt.pass, fmt.pass + fmt.fail);
        req_total.pass += req.pass;
        req_total.fail += req.fail;
    }
    schema_registry_free(reg);
    for (size_t i = 0; i < g_nknown; i++)
        free(g_known[i]);
    free(g_known);
    printf("%d passed, %d failed\n", req_total.pass, req_total.fail);
    return unknown_fail ? 1 : 0;
}
