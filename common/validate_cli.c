/* validate_cli.c - `retort validate` (see validate_cli.h). */
#include "validate_cli.h"
#include "jsonin.h"
#include "jsonout.h"
#include "schema.h"
#include "schema_uri.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REF_DIRS 32
#define MAX_REF_FILES 256

static const char USAGE[] =
    "usage: retort validate [OPTIONS] SCHEMA [INSTANCE ...]\n"
    "\n"
    "Validates JSON instances (files, or stdin when none is given or for \"-\")\n"
    "against the JSON Schema in SCHEMA.  Violations are printed on stdout as\n"
    "JSON lines {\"instance\",\"path\",\"keyword\",\"code\",\"message\",\"expected\",\"actual\"}.\n"
    "\n"
    "options:\n"
    "  --draft 7|2020-12      dialect when the schema has no $schema (default 2020-12)\n"
    "  --format-assert        treat `format` as an assertion (default: annotation)\n"
    "  --ref-dir DIR          load every *.json below DIR for $ref (repeatable)\n"
    "  --ref-base URI         base URI of the preceding --ref-dir (default file://DIR/)\n"
    "  --max-violations N     report at most N violations per instance (default 32)\n"
    "  --help                 this text\n"
    "\n"
    "The schema's own file:// URI is its base, so with --ref-dir on its\n"
    "directory relative $refs between files work.  Nothing is fetched from\n"
    "the network.\n"
    "\n"
    "exit status: 0 all valid, 1 some invalid, 2 error\n";

/* Offset of the first invalid UTF-8 byte, or len when valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t need;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
        } else {
            return i;
        }
        for (size_t k = 1; k <= need; k++)
            if (i + k >= len || (s[i + k] & 0xC0) != 0x80)
                return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
            (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
            return i;
        i += need + 1;
    }
    return len;
}

static void line_col(const char *buf, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Parses text as one JSON document, as strictly as the worker reads
 * answers (jsonin.h).  NULL with a message in why; the tree is freed with
 * jsonin_free. */
static cJSON *parse_doc(const char *text, size_t len, char *why, size_t whylen)
{
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    int line, col;
    if (bad < len) {
        line_col(text, bad, &line, &col);
        snprintf(why, whylen, "not valid UTF-8 (byte %zu, line %d column %d)", bad, line, col);
        return NULL;
    }
    const char *end = NULL;
    size_t off = 0;
    cJSON *doc = jsonin_parse(text, len, &end, &off);
    if (!doc) {
        line_col(text, off, &line, &col);
        if (jsonin_nul_at(text, len, off))
            snprintf(why, whylen, "a string holds \\u0000, the NUL character, which is not supported "
                     "(line %d column %d)", line, col);
        else
            snprintf(why, whylen, "not valid JSON (line %d column %d)", line, col);
        return NULL;
    }
    while (end && end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end && end < text + len) {
        line_col(text, (size_t)(end - text), &line, &col);
        snprintf(why, whylen, "not valid JSON: unexpected data after the document (line %d column %d)",
                 line, col);
        jsonin_free(doc);
        return NULL;
    }
    return doc;
}

static void print_line(cJSON *o)
{
    char *s = jsonout_print(o); /* numbers of the instance as written */
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
}

/* "file://" + absolute path (+ "/" for directories), its '#', '?' and
 * '%' escaped (a schema in "a#b/" resolved its refs in "a"); caller
 * frees. */
static char *file_uri(const char *path, int dir)
{
    char abs[PATH_MAX + 1];
    if (!realpath(path, abs))
        return NULL;
    if (dir && abs[strlen(abs) - 1] != '/')
        strcat(abs, "/");
    return schema_uri_from_path("file://", abs);
}

typedef struct loaded {
    char *uris[MAX_REF_FILES];
    int n;
} loaded;

static int already(const loaded *l, const char *u)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->uris[i], u) == 0)
            return 1;
    return 0;
}

/* Registers the local files that $refs of doc name (file:// URIs), and
 * theirs, so relative refs between schema files work without --ref-dir.
 * Files already in the registry or unreadable are left to the compiler,
 * which reports an unresolvable $ref. */
static void load_file_refs(schema_registry *reg, const cJSON *doc, const char *base, loaded *l,
                           int depth)
{
    if (!doc || depth > 64)
        return;
    for (const cJSON *c = doc->child; c; c = c->next) {
        if (c->string && (strcmp(c->string, "$ref") == 0 || strcmp(c->string, "$dynamicRef") == 0) &&
            cJSON_IsString(c) && base) {
            char *abs = schema_uri_resolve(base, c->valuestring);
            if (!abs)
                continue;
            abs[schema_uri_base_len(abs)] = '\0';
            if (strncmp(abs, "file://", 7) == 0 && !already(l, abs) && l->n < MAX_REF_FILES) {
                l->uris[l->n++] = abs;
                /* Decoded on the heap (decoding never lengthens): the
                 * ref is the schema's text, of any length, and a path
                 * no file can have (too long, or a %00 inside) is left
                 * to the compiler's unresolvable $ref. */
                size_t ulen = strlen(abs + 7);
                char *path = malloc(ulen + 1);
                size_t plen = path ? schema_uri_percent_decode(abs + 7, ulen, path) : 0;
                size_t len = 0;
                char *text = path && plen < PATH_MAX && strlen(path) == plen
                                 ? util_read_file(path, &len) : NULL;
                free(path);
                cJSON *sub = text ? cJSON_ParseWithLength(text, len) : NULL;
                char err[256];
                if (sub && schema_registry_add(reg, abs, sub, err, sizeof err) == 0)
                    load_file_refs(reg, sub, abs, l, depth + 1);
                cJSON_Delete(sub);
                free(text);
                continue;
            }
            free(abs);
        } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            load_file_refs(reg, c, base, l, depth + 1);
        }
    }
}

/* Validates one instance.  Returns 0 valid, 1 invalid, 2 error. */
static int check_instance(const schema *s, const char *name)
{
    size_t len = 0;
    char *text = util_read_file(name, &len);
    if (!text) {
        fprintf(stderr, "retort validate: %s: %s\n", name, strerror(errno ? errno : EIO));
        return 2;
    }
    char why[256];
    cJSON *inst = parse_doc(text, len, why, sizeof why);
    free(text);
    if (!inst) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "instance", name);
        cJSON_AddStringToObject(o, "path", "");
        cJSON_AddStringToObject(o, "keyword", "");
        cJSON_AddStringToObject(o, "code", SCHEMA_NOT_JSON);
        cJSON_AddStringToObject(o, "message", why);
        cJSON_AddNullToObject(o, "expected");
        cJSON_AddNullToObject(o, "actual");
        print_line(o);
        cJSON_Delete(o);
        return 1;
    }
    schema_violations v = { 0 };
    int r = schema_validate(s, inst, &v);
    jsonin_free(inst);
    cJSON *arr = schema_violations_to_json(&v);
    for (cJSON *item = arr ? arr->child : NULL; item; item = item->next) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "instance", name);
        while (item->child) { /* move the fields over, keeping their order */
            cJSON *f = cJSON_DetachItemViaPointer(item, item->child);
            char *key = f->string;
            f->string = NULL;
            cJSON_AddItemToObject(o, key, f);
            free(key);
        }
        print_line(o);
        cJSON_Delete(o);
    }
    cJSON_Delete(arr);
    if (r == 1 && v.total > v.count)
        fprintf(stderr, "retort validate: %s: %zu more violations not shown\n", name,
                v.total - v.count);
    if (r < 0)
        fprintf(stderr, "retort validate: %s: %s\n", name,
                v.count ? v.items[0].message : "validation failed");
    schema_violations_clear(&v);
    fflush(stdout);
    return r == 0 ? 0 : r == 1 ? 1 : 2;
}

int validate_cli_main(int argc, char **argv)
{
    schema_options opts = { SCHEMA_DRAFT_2020_12, 0, 0 };
    const char *ref_dirs[MAX_REF_DIRS], *ref_bases[MAX_REF_DIRS];
    int nref = 0, status = 0;
    const char *schema_path = NULL;
    const char **insts = calloc((size_t)argc + 1, sizeof *insts);
    int ninst = 0;
    schema_registry *reg = NULL;
    schema *s = NULL;
    char *schema_text = NULL, *base = NULL;
    cJSON *doc = NULL;
    char err[1024];

    if (!insts) {
        fprintf(stderr, "retort validate: out of memory\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(USAGE, stdout);
            goto done;
        } else if (strcmp(a, "--format-assert") == 0) {
            opts.format_assert = 1;
        } else if (strcmp(a, "--draft") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "7") == 0 || strcmp(d, "draft-07") == 0 || strcmp(d, "draft7") == 0) {
                opts.default_draft = SCHEMA_DRAFT_7;
            } else if (strcmp(d, "2020-12") == 0 || strcmp(d, "draft2020-12") == 0) {
                opts.default_draft = SCHEMA_DRAFT_2020_12;
            } else {
                fprintf(stderr, "retort validate: --draft must be 7 or 2020-12\n");
                status = 2;
                goto done;
            }
        } else if (strcmp(a, "--ref-dir") == 0 && i + 1 < argc) {
            if (nref == MAX_REF_DIRS) {
                fprintf(stderr, "retort validate: too many --ref-dir (max %d)\n", MAX_REF_DIRS);
                status = 2;
                goto done;
            }
            ref_dirs[nref] = argv[++i];
            ref_bases[nref++] = NULL;
        } else if (strcmp(a, "--ref-base") == 0 && i + 1 < argc) {
            if (nref == 0 || ref_bases[nref - 1]) {
                fprintf(stderr, "retort validate: --ref-base must follow a --ref-dir\n");
                status = 2;
                goto done;
            }
            ref_bases[nref - 1] = argv[++i];
        } else if (strcmp(a, "--max-violations") == 0 && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n <= 0) {
                fprintf(stderr, "retort validate: --max-violations must be a positive number\n");
                status = 2;
                goto done;
            }
            opts.max_violations = (size_t)n;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "retort validate: unknown or incomplete option %s\n%s", a, USAGE);
            status = 2;
            goto done;
        } else if (!schema_path) {
            schema_path = a;
        } else {
            insts[ninst++] = a;
        }
    }
    if (!schema_path) {
        fputs(USAGE, stderr);
        status = 2;
        goto done;
    }
    /* Standard input is read once: a second "-" (or the instance's default
     * after a schema read from it) found it empty, and reported an
     * instance that was never given as NOT_JSON. */
    int stdin_uses = !strcmp(schema_path, "-") + (ninst == 0);
    for (int i = 0; i < ninst; i++)
        stdin_uses += !strcmp(insts[i], "-");
    if (stdin_uses > 1) {
        fprintf(stderr, "retort validate: standard input (-) can be read once: give the schema or the "
                        "instances as files\n");
        status = 2;
        goto done;
    }
    reg = schema_registry_new();
    if (!reg) {
        fprintf(stderr, "retort validate: out of memory\n");
        status = 2;
        goto done;
    }
    for (int i = 0; i < nref; i++) {
        char *b = ref_bases[i] ? NULL : file_uri(ref_dirs[i], 1);
        const char *use = ref_bases[i] ? ref_bases[i] : b;
        int rc = use ? schema_registry_load_dir(reg, ref_dirs[i], use, err, sizeof err) : -1;
        if (!use)
            snprintf(err, sizeof err, "%s: %s", ref_dirs[i], strerror(errno));
        free(b);
        if (rc != 0) {
            fprintf(stderr, "retort validate: --ref-dir %s\n", err);
            status = 2;
            goto done;
        }
    }
    size_t len = 0;
    schema_text = util_read_file(schema_path, &len);
    if (!schema_text) {
        fprintf(stderr, "retort validate: %s: %s\n", schema_path, strerror(errno ? errno : EIO));
        status = 2;
        goto done;
    }
    doc = parse_doc(schema_text, len, err, sizeof err);
    if (!doc) {
        fprintf(stderr, "retort validate: schema %s is %s\n", schema_path, err);
        status = 2;
        goto done;
    }
    base = strcmp(schema_path, "-") == 0 ? NULL : file_uri(schema_path, 0);
    if (base) {
        loaded l = { .n = 1 };
        l.uris[0] = base; /* the schema itself: not loaded again */
        load_file_refs(reg, doc, base, &l, 0);
        for (int i = 1; i < l.n; i++)
            free(l.uris[i]);
    }
    s = schema_compile_base(reg, doc, base, &opts, err, sizeof err);
    if (!s) {
        fprintf(stderr, "retort validate: invalid schema %s: %s\n", schema_path, err);
        status = 2;
        goto done;
    }
    if (ninst == 0)
        insts[ninst++] = "-";
    for (int i = 0; i < ninst; i++) {
        int r = check_instance(s, insts[i]);
        if (r > status)
            status = r;
    }
done:
    schema_free(s);
    jsonin_free(doc);
    free(schema_text);
    free(base);
    schema_registry_free(reg);
    free(insts);
    return status;
}
