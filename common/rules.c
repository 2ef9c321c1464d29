/* rules.c - rule validators (see rules.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "rules.h"

#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Limits: ample for patterns written for real fields, small enough that a
 * catastrophic backtracking pattern gives up within milliseconds. */
#define RULES_MATCH_LIMIT 1000000u
#define RULES_DEPTH_LIMIT 10000u
#define RULES_HEAP_LIMIT_KIB 16384u

#define SNIPPET_MAX 200   /* bytes of an offending value copied into "actual" */
#define CONTEXT_BYTES 60  /* bytes either side of a forbidden phrase */

/* Options for every pattern: code points, tolerant of invalid UTF-8 in the
 * subject (invalid sequences never match), and no \C that could split a
 * code point. */
#define RE_OPTIONS (PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C)

typedef enum rule_type {
    RT_FORBID,
    RT_MATCH,
    RT_NOT_MATCH,
    RT_NOT_EMPTY,
    RT_LENGTH
} rule_type;

static const struct {
    const char *name;
    rule_type type;
    const char *fields[4]; /* allowed besides type, code, message, fixable */
} rule_types[] = {
    { "forbid_phrases", RT_FORBID, { "phrases", "pointer", "case_sensitive", NULL } },
    { "must_match", RT_MATCH, { "pointer", "regex", NULL } },
    { "must_not_match", RT_NOT_MATCH, { "pointer", "regex", NULL } },
    { "not_empty", RT_NOT_EMPTY, { "pointer", NULL } },
    { "length", RT_LENGTH, { "pointer", "min", "max", NULL } },
};

typedef struct phrase {
    char *text;
    pcre2_code *re;
} phrase;

typedef struct rule {
    rule_type type;
    const char *type_name; /* static */
    char *keyword;         /* "rules/<i>/<type>" */
    char *pointer;         /* as given; "" for the whole output */
    char *code;            /* override, or NULL */
    char *message;         /* override, or NULL */
    int fixable;
    phrase *phrases;
    size_t nphrases;
    pcre2_code *re;
    char *regex;
    long long min, max;
    int has_min, has_max;
} rule;

struct rules {
    rule *items;
    size_t n;
    pcre2_match_context *mctx; /* limits; read-only once built */
};

/* ---- JSON Pointer ------------------------------------------------------- */

static int pointer_valid(const char *p)
{
    if (!p[0])
        return 1;
    if (p[0] != '/')
        return 0;
    for (; *p; p++)
        if (*p == '~' && p[1] != '0' && p[1] != '1')
            return 0;
    return 1;
}

/* Decodes the reference token starting at p (after its '/') into tok;
 * returns the position of the next '/' or the end. */
static const char *pointer_token(const char *p, char *tok)
{
    size_t n = 0;
    while (*p && *p != '/') {
        if (*p == '~') {
            tok[n++] = p[1] == '1' ? '/' : '~';
            p += 2;
        } else {
            tok[n++] = *p++;
        }
    }
    tok[n] = '\0';
    return p;
}

/* Array index per RFC 6901: "0" or digits without a leading zero. */
static int array_index(const char *tok, size_t *out)
{
    if (!tok[0] || (tok[0] == '0' && tok[1]))
        return 0;
    size_t v = 0;
    for (const char *q = tok; *q; q++) {
        if (*q < '0' || *q > '9' || v > ((size_t)-1 - 9) / 10)
            return 0;
        v = v * 10 + (size_t)(*q - '0');
    }
    *out = v;
    return 1;
}

/* The array's element at the index token tok; NULL when tok is no index
 * or past the end. */
static const cJSON *array_item(const cJSON *arr, const char *tok)
{
    size_t idx;
    const cJSON *it = NULL;
    if (array_index(tok, &idx))
        for (it = arr->child; it && idx; it = it->next)
            idx--;
    return it;
}

int rules_code_valid(const char *code) {
    size_t n = 0;
    if (!code || !(code[0] >= 'A' && code[0] <= 'Z')) return 0;
    for (; code[n]; n++)
        if (!((code[n] >= 'A' && code[n] <= 'Z') || (code[n] >= '0' && code[n] <= '9') || code[n] == '_') ||
            n == RULES_CODE_MAX)
            return 0;
    return 1;
}

const cJSON *rules_pointer_get(const cJSON *doc, const char *pointer)
{
    if (!doc || !pointer || !pointer_valid(pointer))
        return NULL;
    char *tok = malloc(strlen(pointer) + 1);
    if (!tok)
        return NULL;
    const cJSON *cur = doc;
    const char *p = pointer;
    while (cur && *p == '/') {
        p = pointer_token(p + 1, tok);
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else if (cJSON_IsArray(cur)) {
            cur = array_item(cur, tok);
        } else {
            cur = NULL;
        }
    }
    free(tok);
    return cur;
}

/* Appends "/" + the escaped member name to a pointer being built. */
static void path_push_key(sbuf *b, const char *key)
{
    sbuf_puts(b, "/");
    for (const char *k = key ? key : ""; *k; k++) {
        if (*k == '~')
            sbuf_puts(b, "~0");
        else if (*k == '/')
            sbuf_puts(b, "~1");
        else
            sbuf_append(b, k, 1);
    }
}

static void path_pop(sbuf *b, size_t len)
{
    b->len = len;
    if (b->data)
        b->data[len] = '\0';
}

/* ---- text helpers ------------------------------------------------------- */

/* Decodes one UTF-8 sequence at s[*i]; returns the code point, or -1 for a
 * malformed sequence (one byte skipped). */
static long utf8_next(const unsigned char *s, size_t len, size_t *i)
{
    unsigned char c = s[*i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || *i + n > len) {
        (*i)++;
        return -1;
    }
    long cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; k++) {
        if ((s[*i + k] & 0xC0) != 0x80) {
            (*i)++;
            return -1;
        }
        cp = (cp << 6) | (s[*i + k] & 0x3F);
    }
    *i += n;
    return cp;
}

/* White space for not_empty: Unicode White_Space plus the invisible
 * zero-width characters a model may emit to pad an "answer". */
static int blank_cp(long cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           cp == 0x180E || (cp >= 0x2000 && cp <= 0x200D) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x2060 || cp == 0x3000 || cp == 0xFEFF;
}

static int blank_string(const char *s)
{
    size_t len = strlen(s), i = 0;
    while (i < len)
        if (!blank_cp(utf8_next((const unsigned char *)s, len, &i)))
            return 0;
    return 1;
}

/* Code points of s (malformed bytes count one each). */
static size_t cp_count(const char *s)
{
    size_t n = 0, len = strlen(s), i = 0;
    while (i < len) {
        utf8_next((const unsigned char *)s, len, &i);
        n++;
    }
    return n;
}

/* "actual" for an offending value: a copy, or a string holding the first
 * SNIPPET_MAX bytes of it (of its JSON text for non-strings) and "...". */
static cJSON *snippet(const cJSON *v)
{
    if (!v)
        return NULL;
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring);
        if (len <= SNIPPET_MAX)
            return cJSON_CreateString(v->valuestring);
        sbuf b = { 0 };
        sbuf_append(&b, v->valuestring, util_utf8_trim(v->valuestring, len, SNIPPET_MAX));
        sbuf_puts(&b, "...");
        cJSON *s = cJSON_CreateString(b.data ? b.data : "");
        sbuf_free(&b);
        return s;
    }
    char *text = cJSON_PrintUnformatted(v);
    if (!text)
        return NULL;
    size_t len = strlen(text);
    cJSON *out;
    if (len <= SNIPPET_MAX) {
        out = cJSON_Duplicate(v, 1);
    } else {
        sbuf b = { 0 };
        sbuf_append(&b, text, util_utf8_trim(text, len, SNIPPET_MAX));
        sbuf_puts(&b, "...");
        out = cJSON_CreateString(b.data ? b.data : "");
        sbuf_free(&b);
    }
    free(text);
    return out;
}

/* The text around s[so..eo) of a long string, cut at code point edges. */
static cJSON *excerpt(const char *s, size_t so, size_t eo)
{
    size_t len = strlen(s);
    if (len <= SNIPPET_MAX)
        return cJSON_CreateString(s);
    size_t start = so > CONTEXT_BYTES ? so - CONTEXT_BYTES : 0;
    while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80)
        start--;
    size_t end = eo + CONTEXT_BYTES < len ? eo + CONTEXT_BYTES : len;
    while (end < len && ((unsigned char)s[end] & 0xC0) == 0x80)
        end++;
    sbuf b = { 0 };
    if (start > 0)
        sbuf_puts(&b, "...");
    sbuf_append(&b, s + start, end - start);
    if (end < len)
        sbuf_puts(&b, "...");
    cJSON *out = cJSON_CreateString(b.data ? b.data : "");
    sbuf_free(&b);
    return out;
}

/* ---- compiling ---------------------------------------------------------- */

static void rule_clear(rule *ru)
{
    free(ru->keyword);
    free(ru->pointer);
    free(ru->code);
    free(ru->message);
    for (size_t i = 0; i < ru->nphrases; i++) {
        free(ru->phrases[i].text);
        pcre2_code_free(ru->phrases[i].re);
    }
    free(ru->phrases);
    pcre2_code_free(ru->re);
    free(ru->regex);
}

void rules_free(rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        rule_clear(&r->items[i]);
    free(r->items);
    pcre2_match_context_free(r->mctx);
    free(r);
}

size_t rules_count(const rules *r)
{
    return r ? r->n : 0;
}

static pcre2_code *re_compile(const char *pattern, uint32_t extra, char *msg, size_t msglen)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, RE_OPTIONS | extra, &code,
                                   &off, NULL);
    if (!re) {
        PCRE2_UCHAR buf[160];
        if (pcre2_get_error_message(code, buf, sizeof buf) < 0)
            snprintf((char *)buf, sizeof buf, "error %d", code);
        snprintf(msg, msglen, "%s at offset %zu", (const char *)buf, (size_t)off);
    }
    return re;
}

#define WORD_CLASS "[\\p{L}\\p{N}_]"

/* A phrase as a PCRE2 pattern: literal text where white space runs match
 * any white space run, an apostrophe also matches U+2019, and a phrase
 * edge that is a word character must be a word boundary in the subject.
 * The edge tests are conditionals so the phrase's own first/last character
 * decides, whatever its script. */
static char *phrase_pattern(const char *text)
{
    sbuf b = { 0 };
    sbuf_puts(&b, "(?(?=" WORD_CLASS ")(?<!" WORD_CLASS "))");
    for (const char *p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ' || (c >= '\t' && c <= '\r')) {
            while (p[1] == ' ' || (p[1] >= '\t' && p[1] <= '\r'))
                p++;
            sbuf_puts(&b, "[\\s\\p{Zs}]+");
        } else if (c == '\'') {
            sbuf_puts(&b, "['\\x{2019}]");
        } else if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            sbuf_append(&b, p, 1);
        } else if (c < 0x20 || c == 0x7F) {
            sbuf_printf(&b, "\\x{%02x}", c);
        } else {
            /* Any other ASCII punctuation: a backslash makes it literal. */
            sbuf_printf(&b, "\\%c", c);
        }
    }
    sbuf_puts(&b, "(?(?<=" WORD_CLASS ")(?!" WORD_CLASS "))");
    return sbuf_take(&b);
}

static int field_allowed(const char *const *fields, const char *name)
{
    static const char *const common[] = { "type", "code", "message", "fixable" };
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (!strcmp(common[i], name))
            return 1;
    for (; *fields; fields++)
        if (!strcmp(*fields, name))
            return 1;
    return 0;
}

static int compile_rule(rule *ru, const char *prefix, size_t i, const cJSON *spec, char *err, size_t errlen)
{
    char msg[200], at[96];
    int rc = -1, oom = 0;
    snprintf(at, sizeof at, "%s[%zu]", prefix, i);
    if (!cJSON_IsObject(spec)) {
        snprintf(err, errlen, "%s: must be an object", at);
        goto out;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec, "type");
    if (!cJSON_IsString(type)) {
        snprintf(err, errlen, "%s.type: missing or not a string", at);
        goto out;
    }
    size_t t;
    for (t = 0; t < sizeof rule_types / sizeof rule_types[0]; t++)
        if (!strcmp(rule_types[t].name, type->valuestring))
            break;
    if (t == sizeof rule_types / sizeof rule_types[0]) {
        snprintf(err, errlen,
                 "%s.type: unknown rule type \"%s\" (known: forbid_phrases, must_match, "
                 "must_not_match, not_empty, length)",
                 at, type->valuestring);
        goto out;
    }
    ru->type = rule_types[t].type;
    ru->type_name = rule_types[t].name;
    ru->fixable = 1;

    const cJSON *f;
    cJSON_ArrayForEach(f, spec) {
        const char *k = f->string ? f->string : "";
        if (!field_allowed(rule_types[t].fields, k)) {
            snprintf(err, errlen, "%s.%s: unknown field for a %s rule", at, k, ru->type_name);
            goto out;
        }
        /* Read by name, the first would win and the second go unseen. */
        for (const cJSON *g = spec->child; g != f; g = g->next)
            if (g->string && !strcmp(g->string, k)) {
                snprintf(err, errlen, "%s.%s: given twice", at, k);
                goto out;
            }
    }

    size_t kwlen = strlen(prefix) + strlen(ru->type_name) + 32;
    ru->keyword = malloc(kwlen);
    if (!ru->keyword) {
        oom = 1;
        goto out;
    }
    snprintf(ru->keyword, kwlen, "%s/%zu/%s", prefix, i, ru->type_name);

    f = cJSON_GetObjectItemCaseSensitive(spec, "code");
    if (f) {
        if (!cJSON_IsString(f) || !rules_code_valid(f->valuestring)) {
            snprintf(err, errlen, "%s.code: must be upper-case letters, digits and underscores (^[A-Z][A-Z0-9_]*$), "
                     "at most %d", at, RULES_CODE_MAX);
            goto out;
        }
        if (!(ru->code = strdup(f->valuestring))) {
            oom = 1;
            goto out;
        }
    }
    f = cJSON_GetObjectItemCaseSensitive(spec, "message");
    if (f) {
        if (!cJSON_IsString(f) || !f->valuestring[0]) {
            snprintf(err, errlen, "%s.message: must be a non-empty string", at);
            goto out;
        }
        if (!(ru->message = strdup(f->valuestring))) {
            oom = 1;
            goto out;
        }
    }
    f = cJSON_GetObjectItemCaseSensitive(spec, "fixable");
    if (f) {
        if (!cJSON_IsBool(f)) {
            snprintf(err, errlen, "%s.fixable: must be true or false", at);
            goto out;
        }
        ru->fixable = cJSON_IsTrue(f);
    }

    f = cJSON_GetObjectItemCaseSensitive(spec, "pointer");
    if (f) {
        if (!cJSON_IsString(f) || !pointer_valid(f->valuestring)) {
            snprintf(err, errlen,
                     "%s.pointer: must be a JSON Pointer (\"\" or starting with '/', '~' only "
                     "as ~0 or ~1)",
                     at);
            goto out;
        }
        ru->pointer = strdup(f->valuestring);
    } else if (ru->type == RT_FORBID) {
        ru->pointer = strdup("");
    } else {
        snprintf(err, errlen, "%s.pointer: required for a %s rule", at, ru->type_name);
        goto out;
    }
    if (!ru->pointer) {
        oom = 1;
        goto out;
    }

    switch (ru->type) {
    case RT_FORBID: {
        int ci = 1;
        f = cJSON_GetObjectItemCaseSensitive(spec, "case_sensitive");
        if (f) {
            if (!cJSON_IsBool(f)) {
                snprintf(err, errlen, "%s.case_sensitive: must be true or false", at);
                goto out;
            }
            ci = !cJSON_IsTrue(f);
        }
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(spec, "phrases");
        int n = cJSON_GetArraySize(ph);
        if (!cJSON_IsArray(ph) || n == 0) {
            snprintf(err, errlen, "%s.phrases: must be a non-empty array of strings", at);
            goto out;
        }
        ru->phrases = calloc((size_t)n, sizeof *ru->phrases);
        if (!ru->phrases) {
            oom = 1;
            goto out;
        }
        const cJSON *p;
        cJSON_ArrayForEach(p, ph) {
            size_t k = ru->nphrases;
            if (!cJSON_IsString(p) || blank_string(p->valuestring)) {
                snprintf(err, errlen, "%s.phrases[%zu]: must be a string with visible text", at, k);
                goto out;
            }
            phrase *dst = &ru->phrases[ru->nphrases++];
            dst->text = strdup(p->valuestring);
            char *pat = phrase_pattern(p->valuestring);
            if (!dst->text || !pat) {
                free(pat);
                oom = 1;
                goto out;
            }
            dst->re = re_compile(pat, ci ? PCRE2_CASELESS : 0, msg, sizeof msg);
            free(pat);
            if (!dst->re) {
                snprintf(err, errlen, "%s.phrases[%zu]: %s", at, k, msg);
                goto out;
            }
        }
        break;
    }
    case RT_MATCH:
    case RT_NOT_MATCH:
        f = cJSON_GetObjectItemCaseSensitive(spec, "regex");
        if (!cJSON_IsString(f)) {
            snprintf(err, errlen, "%s.regex: missing or not a string", at);
            goto out;
        }
        if (!(ru->regex = strdup(f->valuestring))) {
            oom = 1;
            goto out;
        }
        ru->re = re_compile(f->valuestring, 0, msg, sizeof msg);
        if (!ru->re) {
            snprintf(err, errlen, "%s.regex: %s", at, msg);
            goto out;
        }
        break;
    case RT_LENGTH: {
        const char *names[2] = { "min", "max" };
        long long *vals[2] = { &ru->min, &ru->max };
        int *has[2] = { &ru->has_min, &ru->has_max };
        for (int k = 0; k < 2; k++) {
            f = cJSON_GetObjectItemCaseSensitive(spec, names[k]);
            if (!f)
                continue;
            if (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 1e15 ||
                floor(f->valuedouble) != f->valuedouble) {
                snprintf(err, errlen, "%s.%s: must be a non-negative integer", at, names[k]);
                goto out;
            }
            *vals[k] = (long long)f->valuedouble;
            *has[k] = 1;
        }
        if (!ru->has_min && !ru->has_max) {
            snprintf(err, errlen, "%s.min: a length rule needs min, max or both", at);
            goto out;
        }
        if (ru->has_min && ru->has_max && ru->min > ru->max) {
            snprintf(err, errlen, "%s.max: %lld is less than min %lld", at, ru->max, ru->min);
            goto out;
        }
        break;
    }
    case RT_NOT_EMPTY:
        break;
    }
    rc = 0;
out:
    if (rc && oom)
        snprintf(err, errlen, "%s: out of memory", at);
    return rc;
}

rules *rules_compile(const cJSON *spec, char *err, size_t errlen)
{
    return rules_compile_prefix(spec, "rules", err, errlen);
}

rules *rules_compile_prefix(const cJSON *spec, const char *prefix, char *err, size_t errlen)
{
    rules *r = NULL;
    if (!prefix || !prefix[0])
        prefix = "rules";
    if (!cJSON_IsArray(spec)) {
        snprintf(err, errlen, "%s: must be an array of rule objects", prefix);
        goto fail;
    }
    r = calloc(1, sizeof *r);
    size_t n = (size_t)cJSON_GetArraySize(spec);
    if (!r || (n && !(r->items = calloc(n, sizeof *r->items))) ||
        !(r->mctx = pcre2_match_context_create(NULL))) {
        snprintf(err, errlen, "%s: out of memory", prefix);
        goto fail;
    }
    pcre2_set_match_limit(r->mctx, RULES_MATCH_LIMIT);
    pcre2_set_depth_limit(r->mctx, RULES_DEPTH_LIMIT);
    pcre2_set_heap_limit(r->mctx, RULES_HEAP_LIMIT_KIB);
    const cJSON *it;
    cJSON_ArrayForEach(it, spec) {
        size_t i = r->n++;
        if (compile_rule(&r->items[i], prefix, i, it, err, errlen))
            goto fail;
    }
    return r;
fail:
    rules_free(r);
    return NULL;
}

/* ---- checking ----------------------------------------------------------- */

typedef struct check_ctx {
    const rules *rs;
    cJSON *out;
    pcre2_match_data *md;
    size_t added;      /* over the whole call */
    size_t rule_added; /* for the rule being run */
} check_ctx;

/* 1 = match (offsets in *so, *eo), 0 = none, -1 = a limit was hit. */
static int re_search(check_ctx *c, const pcre2_code *re, const char *s, size_t *so, size_t *eo)
{
    if (!c->md)
        return -1;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, c->md, c->rs->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *so = ov[0];
    *eo = ov[1] >= ov[0] ? ov[1] : ov[0];
    return 1;
}

static const char *shown(const char *path)
{
    return path[0] ? path : "the answer";
}

/* Appends one violation; expected and actual are taken (may be NULL).  A
 * LIMIT_EXCEEDED violation keeps its own code and message and is never
 * fixable: the model cannot fix how long a match takes. */
static void add(check_ctx *c, const rule *ru, const char *path, const char *code, cJSON *expected,
                cJSON *actual, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(check_ctx *c, const rule *ru, const char *path, const char *code, cJSON *expected,
                cJSON *actual, const char *fmt, ...)
{
    cJSON *v = NULL;
    char *msg = NULL;
    if (c->rule_added >= RULES_MAX_PER_RULE)
        goto out;
    int limit = !strcmp(code, RULES_LIMIT_EXCEEDED);
    if (!limit && ru->message) {
        msg = strdup(ru->message);
    } else {
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
            msg = NULL;
        va_end(ap);
    }
    v = cJSON_CreateObject();
    if (!v || !msg)
        goto out;
    cJSON_AddStringToObject(v, "path", path);
    cJSON_AddStringToObject(v, "keyword", ru->keyword);
    cJSON_AddStringToObject(v, "code", !limit && ru->code ? ru->code : code);
    cJSON_AddStringToObject(v, "message", msg);
    cJSON_AddItemToObject(v, "expected", expected ? expected : cJSON_CreateNull());
    cJSON_AddItemToObject(v, "actual", actual ? actual : cJSON_CreateNull());
    cJSON_AddBoolToObject(v, "fixable", limit ? 0 : ru->fixable);
    expected = actual = NULL;
    cJSON_AddItemToArray(c->out, v);
    v = NULL;
    c->rule_added++;
    c->added++;
out:
    free(msg);
    cJSON_Delete(v);
    cJSON_Delete(expected);
    cJSON_Delete(actual);
}

static void limit_hit(check_ctx *c, const rule *ru, const char *path, const char *pattern)
{
    add(c, ru, path, RULES_LIMIT_EXCEEDED, NULL, NULL,
        "the check %s (pattern %s) hit its match limit on the value at %s", ru->keyword, pattern,
        shown(path));
}

static void forbid_string(check_ctx *c, const rule *ru, const char *path, const char *s)
{
    for (size_t k = 0; k < ru->nphrases; k++) {
        size_t so = 0, eo = 0;
        int m = re_search(c, ru->phrases[k].re, s, &so, &eo);
        if (m < 0)
            limit_hit(c, ru, path, ru->phrases[k].text);
        else if (m)
            add(c, ru, path, RULES_FORBIDDEN_PHRASE, NULL, excerpt(s, so, eo), "%s must not contain \"%s\"",
                shown(path), ru->phrases[k].text);
    }
}

static void forbid_walk(check_ctx *c, const rule *ru, const cJSON *v, sbuf *path)
{
    if (c->rule_added >= RULES_MAX_PER_RULE)
        return;
    if (cJSON_IsString(v) && v->valuestring) {
        forbid_string(c, ru, path->data ? path->data : "", v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        size_t saved = path->len, idx = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (cJSON_IsArray(v))
                sbuf_printf(path, "/%zu", idx++);
            else
                path_push_key(path, it->string);
            forbid_walk(c, ru, it, path);
            path_pop(path, saved);
        }
    }
}

static void check_regex(check_ctx *c, const rule *ru, const cJSON *v)
{
    const char *path = ru->pointer;
    if (!v)
        return;
    if (!cJSON_IsString(v) || !v->valuestring) {
        if (ru->type == RT_MATCH)
            add(c, ru, path, RULES_WRONG_TYPE, cJSON_CreateString(ru->regex), snippet(v),
                "%s must be a string matching the pattern %s", shown(path), ru->regex);
        return;
    }
    size_t so, eo;
    int m = re_search(c, ru->re, v->valuestring, &so, &eo);
    if (m < 0)
        limit_hit(c, ru, path, ru->regex);
    else if (ru->type == RT_MATCH && !m)
        add(c, ru, path, RULES_PATTERN_MISMATCH, cJSON_CreateString(ru->regex), snippet(v),
            "%s must match the pattern %s", shown(path), ru->regex);
    else if (ru->type == RT_NOT_MATCH && m)
        add(c, ru, path, RULES_FORBIDDEN_PATTERN, NULL, snippet(v), "%s must not match the pattern %s",
            shown(path), ru->regex);
}

static void check_not_empty(check_ctx *c, const rule *ru, const cJSON *v)
{
    const char *path = ru->pointer;
    if (!v) {
        add(c, ru, path, RULES_MISSING_FIELD, NULL, NULL, "%s is missing; it must be present and not empty",
            shown(path));
        return;
    }
    int empty = cJSON_IsNull(v) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) ||
                (cJSON_IsString(v) && (!v->valuestring || blank_string(v->valuestring)));
    if (empty)
        add(c, ru, path, RULES_EMPTY_VALUE, NULL, snippet(v), "%s must not be empty%s", shown(path),
            cJSON_IsString(v) && v->valuestring && v->valuestring[0] ? " or only white space" : "");
}

static void check_length(check_ctx *c, const rule *ru, const cJSON *v)
{
    const char *path = ru->pointer;
    if (!v)
        return;
    int is_str = cJSON_IsString(v) && v->valuestring;
    if (!is_str && !cJSON_IsArray(v)) {
        add(c, ru, path, RULES_WRONG_TYPE, NULL, snippet(v), "%s must be a string or an array",
            shown(path));
        return;
    }
    long long n = is_str ? (long long)cp_count(v->valuestring) : (long long)cJSON_GetArraySize(v);
    const char *unit = is_str ? "character" : "item";
    if (ru->has_min && n < ru->min)
        add(c, ru, path, RULES_TOO_SHORT, cJSON_CreateNumber((double)ru->min), snippet(v),
            "%s must have at least %lld %s%s (it has %lld)", shown(path), ru->min, unit,
            ru->min == 1 ? "" : "s", n);
    else if (ru->has_max && n > ru->max)
        add(c, ru, path, RULES_TOO_LONG, cJSON_CreateNumber((double)ru->max), snippet(v),
            "%s must have at most %lld %s%s (it has %lld)", shown(path), ru->max, unit,
            ru->max == 1 ? "" : "s", n);
}

/* Rule ru on v, the value at its pointer (NULL: none). */
static void check_value(check_ctx *c, const rule *ru, const cJSON *v, sbuf *path)
{
    switch (ru->type) {
    case RT_FORBID:
        if (v) {
            path_pop(path, 0);
            sbuf_puts(path, ru->pointer);
            forbid_walk(c, ru, v, path);
        }
        break;
    case RT_MATCH:
    case RT_NOT_MATCH:
        check_regex(c, ru, v);
        break;
    case RT_NOT_EMPTY:
        check_not_empty(c, ru, v);
        break;
    case RT_LENGTH:
        check_length(c, ru, v);
        break;
    }
}

/* Checks every value at the pointer whose decoded tokens, left of them,
 * start at toks (each NUL-terminated): a member named twice (jsonin keeps
 * both, as the schema checks both) is checked each time.  Checked once,
 * the first, a model could pass {"sku":"ok","sku":"TEST-1"} by a
 * must_not_match on /sku, and a consumer's JSON.parse keeps the last.
 * Returns how many values there were. */
static size_t check_each(check_ctx *c, const rule *ru, const cJSON *cur, const char *toks, int left, sbuf *path)
{
    if (!left) {
        check_value(c, ru, cur, path);
        return 1;
    }
    const char *next = toks + strlen(toks) + 1;
    size_t n = 0;
    if (cJSON_IsObject(cur)) {
        for (const cJSON *m = cur->child; m; m = m->next)
            if (m->string && !strcmp(m->string, toks))
                n += check_each(c, ru, m, next, left - 1, path);
    } else if (cJSON_IsArray(cur)) {
        const cJSON *it = array_item(cur, toks);
        if (it)
            n = check_each(c, ru, it, next, left - 1, path);
    }
    return n;
}

size_t rules_check(const rules *r, const cJSON *output, cJSON *violations)
{
    if (!r || !cJSON_IsArray(violations))
        return 0;
    check_ctx c = { r, violations, pcre2_match_data_create(1, NULL), 0, 0 };
    sbuf path = { 0 };
    for (size_t i = 0; i < r->n; i++) {
        const rule *ru = &r->items[i];
        c.rule_added = 0;
        /* the pointer's tokens, decoded, one after the other */
        char *toks = output ? malloc(strlen(ru->pointer) + 1) : NULL;
        int ntok = 0;
        if (toks) {
            char *w = toks;
            for (const char *p = ru->pointer; *p == '/'; ntok++) {
                p = pointer_token(p + 1, w);
                w += strlen(w) + 1;
            }
        }
        if (!toks || !check_each(&c, ru, output, toks, ntok, &path))
            check_value(&c, ru, NULL, &path);
        free(toks);
    }
    sbuf_free(&path);
    pcre2_match_data_free(c.md);
    return c.added;
}
