/* pgo_train.c - the training run of the validator's profile-guided build.
 *
 * usage: pgo-train [-r DIR BASE_URI] [-n ROUNDS] SCHEMA CORPUS.jsonl [[-n ROUNDS] SCHEMA CORPUS.jsonl ...]
 *
 * Linked with the instrumented (-fprofile-generate) objects of
 * common/schema*.c; what it runs becomes the profile that `make` compiles
 * the validator with (see the Makefile).  It does with each schema what
 * the worker does: compile it (a few times), then validate every JSON
 * line of the corpus many times, each with a violations list (as the
 * worker does with an answer) and without one (the "is it valid?" callers),
 * turning the list into JSON as for a repair prompt now and then; `format`
 * an annotation, one round in eight an assertion.  -r loads DIR into the
 * registry as BASE_URI for `$ref`s (the job envelope refers to
 * events/violation.schema.json).  -n sets the rounds of the pairs after it
 * (default 400): a corpus there only so that its code counts as run, not
 * to weigh on the layout of the paths every answer takes, gets few.  Exit
 * status 1 when a file cannot be
 * read, a schema does not compile or a corpus has no invalid line: a
 * broken corpus must fail the build rather than train on nothing.
 */
#include "schema.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Compiles stay few: a profile dominated by the compiler would leave the
 * validation paths below the compiler's "hot" threshold. */
#define COMPILES 10
#define ROUNDS 400 /* default */
#define MAX_LINES 256

static int train(schema_registry *reg, int rounds, const char *schema_path,
                 const char *corpus_path)
{
    int rc = 1;
    char err[512];
    char *schema_text = NULL, *corpus = NULL;
    cJSON *doc = NULL;
    cJSON *inst[MAX_LINES];
    size_t ninst = 0, len;
    schema *s[2] = { NULL, NULL };
    long invalid = 0;

    if (!(schema_text = util_read_file(schema_path, &len)) || !(doc = cJSON_Parse(schema_text))) {
        fprintf(stderr, "pgo-train: %s: cannot read or parse\n", schema_path);
        goto out;
    }
    if (!(corpus = util_read_file(corpus_path, &len))) {
        fprintf(stderr, "pgo-train: %s: cannot read\n", corpus_path);
        goto out;
    }
    size_t lineno = 0;
    for (char *line = corpus, *nl; *line; line = nl + 1) {
        lineno++;
        nl = strchr(line, '\n');
        if (!nl)
            nl = line + strlen(line) - 1;
        if (nl == line && *line == '\n')
            continue; /* a blank line */
        if (ninst == MAX_LINES) {
            fprintf(stderr, "pgo-train: %s: more than %d lines\n", corpus_path, MAX_LINES);
            goto out;
        }
        if (!(inst[ninst] = cJSON_ParseWithLength(line, (size_t)(nl - line + 1)))) {
            fprintf(stderr, "pgo-train: %s: line %zu is not JSON\n", corpus_path, lineno);
            goto out;
        }
        ninst++;
    }
    for (int f = 0; f < 2; f++) {
        schema_options opts = { .format_assert = f };
        for (int i = 0; i < COMPILES; i++) {
            schema_free(s[f]);
            if (!(s[f] = schema_compile(reg, doc, &opts, err, sizeof err))) {
                fprintf(stderr, "pgo-train: %s: %s\n", schema_path, err);
                goto out;
            }
        }
    }
    for (int r = 0; r < rounds; r++) {
        const schema *use = s[r % 8 == 7];
        for (size_t i = 0; i < ninst; i++) {
            schema_validate(use, inst[i], NULL);
            schema_violations v = { 0 };
            invalid += schema_validate(use, inst[i], &v) == 1;
            if (r % 8 == 0)
                cJSON_Delete(schema_violations_to_json(&v));
            schema_violations_clear(&v);
        }
    }
    printf("pgo-train: %s: %zu lines x %d rounds, %ld reports of invalid lines\n", corpus_path,
           ninst, rounds, invalid);
    rc = invalid > 0 ? 0 : 1;
    if (rc)
        fprintf(stderr, "pgo-train: %s: no invalid line: nothing trains the report\n", corpus_path);
out:
    while (ninst)
        cJSON_Delete(inst[--ninst]);
    schema_free(s[0]);
    schema_free(s[1]);
    cJSON_Delete(doc);
    free(corpus);
    free(schema_text);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 2, a = 1, rounds = ROUNDS;
    char err[512];
    schema_registry *reg = schema_registry_new();
    if (!reg)
        return 1;
    while (a + 2 < argc && strcmp(argv[a], "-r") == 0) {
        if (schema_registry_load_dir(reg, argv[a + 1], argv[a + 2], err, sizeof err) != 0) {
            fprintf(stderr, "pgo-train: %s: %s\n", argv[a + 1], err);
            rc = 1;
            goto out;
        }
        a += 3;
    }
    int pairs = 0;
    rc = 0;
    while (a < argc && !rc) {
        if (strcmp(argv[a], "-n") == 0 && a + 1 < argc && atoi(argv[a + 1]) > 0) {
            rounds = atoi(argv[a + 1]);
            a += 2;
            continue;
        }
        if (a + 1 >= argc) {
            rc = 2;
            break;
        }
        rc = train(reg, rounds, argv[a], argv[a + 1]);
        a += 2;
        pairs++;
    }
    if (rc == 2 || !pairs) {
        fprintf(stderr, "usage: %s [-r DIR BASE_URI] [-n ROUNDS] SCHEMA CORPUS.jsonl "
                        "[[-n ROUNDS] SCHEMA CORPUS.jsonl ...]\n", argv[0]);
        rc = 2;
    }
out:
    schema_registry_free(reg);
    return rc;
}
