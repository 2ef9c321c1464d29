/* schema.c - JSON Schema compiler and validator (see schema.h).
 *
 * Compile: every document involved (the root, registry documents, the
 * embedded metaschemas) is first *indexed*: each schema position gets its
 * base URI (resource), dialect and location, and every $id / $anchor /
 * $dynamicAnchor URI is recorded.  Nodes are then compiled on demand into a
 * tree with keyword arrays in document order; $ref targets are resolved
 * after the tree is built (cycles are plain pointers).  Nothing compiled
 * points into the cJSON input: enum/const values are duplicated.
 *
 * Validate: a recursive walk with bounded depth.  A first pass runs without
 * collecting violations and short-circuits (eval_quiet: leaf schemas are
 * checked all at once by instance type, `required` alongside `properties`);
 * only when the instance is invalid and the caller wants violations is a
 * second, reporting pass made (eval_full, keywords in schema order).  Its
 * violations live in scratch memory until the kept ones are copied into one
 * block for the caller; anyOf/oneOf branches are compared on sketches (code
 * and depth, no text) and only the closest one is walked again with full
 * reports.  Annotations for unevaluated* are bitsets over the members/items
 * of the instance, created only by nodes that use unevaluated*.
 */
#include "schema.h"
#include "jsonin.h"
#include "schema_format.h"
#include "schema_meta.h"
#include "schema_regex.h"
#include "schema_uri.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

/* Keyword checks are kept out of eval() so that its frame, which is on
 * the recursion path once per nesting level, stays small. */
#define COLD __attribute__((noinline, cold))
#define NOINLINE __attribute__((noinline))

#define MAX_COMPILE_DEPTH 512
#define MAX_EVAL_DEPTH 512
#define SNIPPET_MAX 200
#define DEFAULT_MAX_VIOLATIONS 32
#define DEFAULT_BASE_URI "https://retort.invalid/root.json"

/* ------------------------------------------------------------------ */
/* arena                                                                */

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    max_align_t data[];
} arena_blk;

typedef struct arena {
    arena_blk *head;
} arena;

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > 16384 ? n : 16384;
        arena_blk *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = (unsigned char *)a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

static char *arena_strndup(arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static char *arena_strdup(arena *a, const char *s)
{
    return arena_strndup(a, s, strlen(s));
}

static void arena_free(arena *a)
{
    arena_blk *b = a->head;
    while (b) {
        arena_blk *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------ */
/* hashing and maps                                                     */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

/* Hash and length of a property name (hot path: the instance's keys that
 * are not where the schema order expects them): 8 bytes a step rather
 * than one. */
static uint64_t hash_cstr(const char *s, size_t *len)
{
    const uint64_t mul = 0xff51afd7ed558ccdull;
    size_t n = strlen(s);
    *len = n;
    const unsigned char *p = (const unsigned char *)s;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * mul;
        h ^= h >> 32;
    }
    if (n >= 4) { /* two overlapping words: every byte counts */
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        w = (uint64_t)a << 32 | b;
    } else {
        w = n ? (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16 : 0;
    }
    h = (h ^ w) * mul;
    return h ^ (h >> 31);
}

static uint64_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* string -> pointer; keys are not copied (callers keep them alive) */
typedef struct smap_ent {
    const char *key;
    uint64_t h;
    void *val;
} smap_ent;

typedef struct smap {
    smap_ent *e;
    size_t cap, n;
} smap;

static void *smap_get(const smap *m, const char *key)
{
    if (!m->cap)
        return NULL;
    uint64_t h = hash_bytes(key, strlen(key));
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].key)
            return NULL;
        if (m->e[i].h == h && strcmp(m->e[i].key, key) == 0)
            return m->e[i].val;
    }
}

static int smap_grow(smap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    smap_ent *ne = calloc(ncap, sizeof *ne);
    if (!ne)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].key)
            continue;
        size_t j = m->e[i].h & (ncap - 1);
        while (ne[j].key)
            j = (j + 1) & (ncap - 1);
        ne[j] = m->e[i];
    }
    free(m->e);
    m->e = ne;
    m->cap = ncap;
    return 0;
}

/* 0 inserted, 1 already present (not replaced), -1 out of memory */
static int smap_put(smap *m, const char *key, void *val)
{
    if ((m->n + 1) * 2 > m->cap && smap_grow(m) < 0)
        return -1;
    uint64_t h = hash_bytes(key, strlen(key));
    size_t i = h & (m->cap - 1);
    while (m->e[i].key) {
        if (m->e[i].h == h && strcmp(m->e[i].key, key) == 0)
            return 1;
        i = (i + 1) & (m->cap - 1);
    }
    m->e[i] = (smap_ent){ key, h, val };
    m->n++;
    return 0;
}

static void smap_free(smap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* pointer -> pointer */
typedef struct pmap_ent {
    const void *key;
    void *val;
} pmap_ent;

typedef struct pmap {
    pmap_ent *e;
    size_t cap, n;
} pmap;

static void *pmap_get(const pmap *m, const void *key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = hash_ptr(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].key)
            return NULL;
        if (m->e[i].key == key)
            return m->e[i].val;
    }
}

static int pmap_put(pmap *m, const void *key, void *val)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 64;
        pmap_ent *ne = calloc(ncap, sizeof *ne);
        if (!ne)
            return -1;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->e[i].key)
                continue;
            size_t j = hash_ptr(m->e[i].key) & (ncap - 1);
            while (ne[j].key)
                j = (j + 1) & (ncap - 1);
            ne[j] = m->e[i];
        }
        free(m->e);
        m->e = ne;
        m->cap = ncap;
    }
    size_t i = hash_ptr(key) & (m->cap - 1);
    while (m->e[i].key) {
        if (m->e[i].key == key) {
            m->e[i].val = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->e[i] = (pmap_ent){ key, val };
    m->n++;
    return 0;
}

static void pmap_free(pmap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ */
/* JSON helpers: equality, hashing, bounded printing, numbers           */

static int json_equal(const cJSON *a, const cJSON *b);

/* inline type tests (the cJSON_Is* functions are out-of-line calls) */
#define JT(v) ((v)->type & 0xFF)
#define IS_OBJECT(v) (JT(v) == cJSON_Object)
#define IS_ARRAY(v) (JT(v) == cJSON_Array)
#define IS_STRING(v) (JT(v) == cJSON_String)
#define IS_NUMBER(v) (JT(v) == cJSON_Number)

static int json_type(const cJSON *v)
{
    return v->type & 0xFF;
}

static size_t json_count(const cJSON *v)
{
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next)
        n++;
    return n;
}

/* Equality of two NUL-terminated strings, inline (the enum values and
 * string consts compared on the hot path are short). */
static inline int str_eq(const char *a, const char *b)
{
    while (*a == *b) {
        if (!*a)
            return 1;
        a++;
        b++;
    }
    return 0;
}

static const cJSON *json_member(const cJSON *obj, const char *key)
{
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0)
            return c;
    return NULL;
}

static int member_cmp(const void *p, const void *q)
{
    return strcmp((*(const cJSON *const *)p)->string, (*(const cJSON *const *)q)->string);
}

/* Objects of n members each, keys in another order: both sorted by key,
 * then compared in step.  A lookup per member was quadratic: an answer of
 * two 20,000-member objects took 0.7 s against uniqueItems. */
static int obj_equal_unordered(const cJSON *a, const cJSON *b, size_t n)
{
    const cJSON **m = malloc(2 * n * sizeof *m);
    int eq = 1;
    if (!m) {
        for (const cJSON *x = a->child; x && eq; x = x->next) {
            const cJSON *y = json_member(b, x->string);
            eq = y && json_equal(x, y);
        }
        return eq;
    }
    size_t i = 0;
    for (const cJSON *x = a->child; x; x = x->next)
        m[i++] = x;
    for (const cJSON *y = b->child; y; y = y->next)
        m[i++] = y;
    qsort(m, n, sizeof *m, member_cmp);
    qsort(m + n, n, sizeof *m, member_cmp);
    for (i = 0; i < n && eq; i++)
        eq = strcmp(m[i]->string, m[n + i]->string) == 0 && json_equal(m[i], m[n + i]);
    free(m);
    return eq;
}

static int json_equal(const cJSON *a, const cJSON *b)
{
    int t = json_type(a);
    if (t != json_type(b))
        return 0;
    switch (t) {
    case cJSON_Number:
        return a->valuedouble == b->valuedouble;
    case cJSON_String:
        return str_eq(a->valuestring, b->valuestring);
    case cJSON_Array: {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return 0;
        return !x && !y;
    }
    case cJSON_Object: {
        size_t n = json_count(a);
        if (n != json_count(b))
            return 0;
        /* same key order (the usual case) is linear */
        const cJSON *x = a->child, *y = b->child;
        for (; x && strcmp(x->string, y->string) == 0; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return 0;
        return x ? obj_equal_unordered(a, b, n) : 1;
    }
    default:
        return 1;
    }
}

/* Consistent with json_equal: 1 and 1.0 hash alike, key order ignored. */
static uint64_t json_hash(const cJSON *v)
{
    int t = json_type(v);
    uint64_t h = (uint64_t)t * 0x9E3779B97F4A7C15ull;
    switch (t) {
    case cJSON_Number: {
        double d = v->valuedouble;
        if (d == 0)
            d = 0; /* -0 == 0 */
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return h ^ hash_ptr((void *)(uintptr_t)bits);
    }
    case cJSON_String:
        return h ^ hash_bytes(v->valuestring, strlen(v->valuestring));
    case cJSON_Array:
        for (const cJSON *c = v->child; c; c = c->next)
            h = (h ^ json_hash(c)) * 0x100000001b3ull;
        return h;
    case cJSON_Object: {
        uint64_t sum = 0;
        /* a sum (key order does not count) of each member's key and
         * value mixed together: a sum of the keys' and the values'
         * hashes was the same for every object whose values were
         * swapped between keys, and those all met in one run */
        for (const cJSON *c = v->child; c; c = c->next)
            sum += hash_ptr((void *)(uintptr_t)(hash_bytes(c->string, strlen(c->string)) * 31 + json_hash(c)));
        return h ^ sum;
    }
    default:
        return h;
    }
}

/* d is a finite integer (floor() is a library call on baseline x86-64,
 * and this is asked for every number checked against "integer"). */
static inline int is_integral(double d)
{
    if (!(fabs(d) < 9007199254740992.0)) /* 2^53: from there on, all are */
        return isfinite(d);
    return (double)(long long)d == d;
}

/* Shortest representation of d that reads back as d. */
static void fmt_num(double d, char *buf, size_t n)
{
    if (!isfinite(d)) {
        snprintf(buf, n, "%s", isnan(d) ? "NaN" : (d > 0 ? "1e999" : "-1e999"));
        return;
    }
    if (is_integral(d) && fabs(d) < 1e17 && n >= 24) {
        /* integers (most numbers in practice) without printf */
        long long v = (long long)d;
        char digits[24];
        size_t nd = 0, o = 0;
        unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        do {
            digits[nd++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0 || (v == 0 && signbit(d)))
            buf[o++] = '-';
        while (nd)
            buf[o++] = digits[--nd];
        buf[o] = '\0';
        return;
    }
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* A text of known length: a piece of a report's message, or a text made
 * at compile time that reports point at. */
typedef struct mpart {
    const char *s;
    size_t l;
} mpart;
#define MPL(lit) ((mpart){ (lit), sizeof(lit) - 1 })

/* The text of number v: as written when the reader kept it (jsonin keeps
 * it in valuestring, which cJSON leaves NULL for numbers), so that
 * 12345678901234567890 or 1e400 read in a violation as in the answer,
 * unless longer than an `actual` may be; else the double's shortest text,
 * written into buf (n bytes). */
static mpart num_text_of(const cJSON *v, char *buf, size_t n)
{
    if (v->valuestring) {
        size_t l = strlen(v->valuestring);
        if (l <= SNIPPET_MAX)
            return (mpart){ v->valuestring, l };
    }
    fmt_num(v->valuedouble, buf, n);
    return (mpart){ buf, strlen(buf) };
}

typedef struct jw {
    char *buf;
    size_t len, cap;
    int full;
} jw;

static void jw_put(jw *w, const char *s, size_t n)
{
    if (w->full)
        return;
    if (w->len + n > w->cap) {
        size_t k = w->cap - w->len;
        /* do not cut a UTF-8 sequence in half */
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        w->full = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* 1 for the bytes a JSON string holds as they are (not NUL, a control
 * character, '"' or '\\') */
static const uint8_t JSON_PLAIN[256] = {
#define R16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
    R16(0), R16(0),
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* '"' */
    R16(1), R16(1),
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* '\\' */
    R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1),
#undef R16
};

static void jw_string(jw *w, const char *s)
{
    /* the usual case, nothing to escape and room for all of it: at once
     * (the scan stops where the room ends: a long string is cut anyway) */
    size_t n = 0, room = w->full ? 0 : w->cap - w->len;
    while (n + 2 < room && JSON_PLAIN[(unsigned char)s[n]])
        n++;
    if (!s[n] && n + 2 <= room) {
        char *o = w->buf + w->len;
        o[0] = '"';
        memcpy(o + 1, s, n);
        o[n + 1] = '"';
        w->len += n + 2;
        return;
    }
    jw_put(w, "\"", 1);
    const char *run = s;
    for (; *s && !w->full; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        jw_put(w, run, (size_t)(s - run));
        char esc[8];
        switch (ch) {
        case '"': jw_put(w, "\\\"", 2); break;
        case '\\': jw_put(w, "\\\\", 2); break;
        case '\n': jw_put(w, "\\n", 2); break;
        case '\r': jw_put(w, "\\r", 2); break;
        case '\t': jw_put(w, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            jw_put(w, esc, 6);
        }
        run = s + 1;
    }
    jw_put(w, run, (size_t)(s - run));
    jw_put(w, "\"", 1);
}

static void jw_value(jw *w, const cJSON *v, int depth)
{
    if (w->full)
        return;
    if (depth > 64) {
        jw_put(w, "...", 3);
        return;
    }
    char num[40];
    switch (json_type(v)) {
    case cJSON_NULL: jw_put(w, "null", 4); break;
    case cJSON_True: jw_put(w, "true", 4); break;
    case cJSON_False: jw_put(w, "false", 5); break;
    case cJSON_Number: {
        mpart t = num_text_of(v, num, sizeof num);
        jw_put(w, t.s, t.l);
        break;
    }
    case cJSON_String: jw_string(w, v->valuestring); break;
    case cJSON_Array:
        jw_put(w, "[", 1);
        for (const cJSON *c = v->child; c && !w->full; c = c->next) {
            jw_value(w, c, depth + 1);
            if (c->next)
                jw_put(w, ",", 1);
        }
        jw_put(w, "]", 1);
        break;
    case cJSON_Object:
        jw_put(w, "{", 1);
        for (const cJSON *c = v->child; c && !w->full; c = c->next) {
            jw_string(w, c->string);
            jw_put(w, ":", 1);
            jw_value(w, c, depth + 1);
            if (c->next)
                jw_put(w, ",", 1);
        }
        jw_put(w, "}", 1);
        break;
    default:
        jw_put(w, "null", 4);
    }
}

/* JSON string of s into buf (SNIPPET_MAX + 1 bytes), cut without "..."
 * (the `expected` text of a property name); returns its length. */
static size_t str_json(const char *s, char *buf)
{
    cJSON tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.type = cJSON_String;
    tmp.valuestring = (char *)s;
    jw w = { buf, 0, SNIPPET_MAX, 0 };
    jw_value(&w, &tmp, 0);
    buf[w.len] = '\0';
    return w.len;
}

/* JSON text of v, at most ~max bytes ("..." appended when cut); malloc'd. */
static char *json_snippet(const cJSON *v, size_t max)
{
    char *buf = malloc(max + 4);
    if (!buf)
        return NULL;
    jw w = { buf, 0, max, 0 };
    jw_value(&w, v, 0);
    if (w.full) {
        memcpy(buf + w.len, "...", 3);
        w.len += 3;
    }
    buf[w.len] = '\0';
    return buf;
}

/* Exact decimal value of a double as mant * 10^exp (mant without trailing
 * zeros), from its shortest round-trip representation: this is the number
 * as the JSON text most likely wrote it (0.1 stays 1e-1). */
typedef struct decimal {
    uint64_t mant;
    int exp;
} decimal;

static int decimal_of(double d, decimal *out)
{
    if (!isfinite(d))
        return -1;
    d = fabs(d);
    if (d == 0) {
        out->mant = 0;
        out->exp = 0;
        return 0;
    }
    char buf[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    uint64_t m = 0;
    int digits = 0;
    const char *s = buf;
    for (; *s && *s != 'e'; s++) {
        if (*s >= '0' && *s <= '9') {
            m = m * 10 + (uint64_t)(*s - '0');
            digits++;
        }
    }
    int e = *s == 'e' ? atoi(s + 1) : 0;
    e -= digits - 1;
    while (m && m % 10 == 0) {
        m /= 10;
        e++;
    }
    out->mant = m;
    out->exp = e;
    return 0;
}

/* Same result as decimal_of without printing: the smallest k with
 * round(x * 10^k) / 10^k == x gives the shortest decimal.  -1 when x is
 * out of the exact range (then use decimal_of). */
static int decimal_fast(double x, decimal *out)
{
    static const double P10[] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
                                  1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17 };
    x = fabs(x);
    for (int k = 0; k < 18; k++) {
        double y = x * P10[k];
        if (y >= 9007199254740992.0)
            return -1;
        /* nearbyint(y) for 0 <= y < 2^53, without the library call */
        double r = y >= 4503599627370496.0 ? y : (y + 4503599627370496.0) - 4503599627370496.0;
        if (r / P10[k] == x) {
            uint64_t m = (uint64_t)r;
            int e = -k;
            while (m && m % 10 == 0) {
                m /= 10;
                e++;
            }
            out->mant = m;
            out->exp = e;
            return 0;
        }
    }
    return -1;
}

/* 10^e mod m */
static unsigned __int128 pow10_mod(unsigned long long e, uint64_t m)
{
    unsigned __int128 base = 10 % m, acc = 1 % m;
    while (e) {
        if (e & 1)
            acc = acc * base % m;
        base = base * base % m;
        e >>= 1;
    }
    return acc;
}

/* Is the number written as text (JSON's grammar, any number of digits) a
 * multiple of md, exactly?  -1 when text is no such number. */
static int multiple_of_text(const char *text, const decimal *md)
{
    if (!md->mant)
        return -1;
    const char *p = text + (*text == '-');
    unsigned __int128 r = 0; /* the digits but trailing zeros, mod mant */
    long long exp = 0, zeros = 0;
    int dot = 0, digits = 0;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            dot = 1;
            continue;
        }
        if (*p < '0' || *p > '9')
            return -1;
        digits++;
        exp -= dot;
        if (*p == '0') {
            zeros++;
            continue;
        }
        for (; zeros; zeros--)
            r = r * 10 % md->mant;
        r = (r * 10 + (unsigned)(*p - '0')) % md->mant;
    }
    if (!digits)
        return -1;
    exp += zeros; /* trailing zeros: a power of ten */
    if (*p) {
        int neg = p[1] == '-';
        const char *q = p + 1 + (p[1] == '-' || p[1] == '+');
        long long e = 0;
        if (!*q)
            return -1;
        for (; *q; q++) {
            if (*q < '0' || *q > '9')
                return -1;
            if (e < 1000000000)
                e = e * 10 + (*q - '0');
        }
        exp += neg ? -e : e;
    }
    long long e = exp - md->exp;
    if (e < 0)
        return 0; /* the digits end in no 0, so 10^-e divides them not */
    return r * pow10_mod((unsigned long long)e, md->mant) % md->mant == 0;
}

/* Is x an integer multiple of m (m given as decimal too)?  text: x as
 * written, or NULL. */
NOINLINE static int is_multiple(double x, const char *text, double m, const decimal *md)
{
    if (x == 0)
        return 1;
    if (is_integral(x) && is_integral(m) && fabs(x) < 9e15 && m < 9e15)
        return fmod(x, m) == 0;
    if (!(fabs(x) < 9e15)) {
        /* Past 2^53 the double is not the number written: its shortest
         * decimal made 2^60, written in full, 1152921504606847e3, which no
         * 16 divides.  The text as written, exactly. */
        int r = text ? multiple_of_text(text, md) : -1;
        if (r >= 0)
            return r;
        if (is_integral(x) && is_integral(m))
            return fmod(x, m) == 0; /* exact for doubles */
    }
    if (md->mant == 1 && md->exp < 0 && md->exp >= -17) {
        /* m = 10^-K (0.01): when x * 10^K rounds back to x, the shortest
         * decimal of x (what decimal_fast finds) has at most K decimals */
        static const double P10[] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
                                      1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17 };
        double y = fabs(x) * P10[-md->exp];
        if (y < 4503599627370496.0 && ((y + 4503599627370496.0) - 4503599627370496.0) / P10[-md->exp] == fabs(x))
            return 1;
    }
    decimal xd;
    if (decimal_fast(x, &xd) < 0 && decimal_of(x, &xd) < 0)
        return 0;
    if (md->mant == 0)
        return 0;
    int e = xd.exp - md->exp;
    if (e < 0)
        return 0; /* xd.mant has no factor 10, so it cannot absorb 10^-e */
    if (md->mant == 1)
        return 1; /* m is a power of ten (0.01): x has no more decimals */
    unsigned __int128 r = xd.mant % md->mant;
    return r * pow10_mod((unsigned long long)e, md->mant) % md->mant == 0;
}

/* UTF-8: validates and counts code points.  -1 when invalid. */
static inline long long utf8_count(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    /* ASCII (most strings): one OR over the bytes, word by word (the last
     * word overlapping), then the count is the length */
    if (len >= 8) {
        uint64_t acc = 0, w;
        for (size_t k = 0; k + 8 <= len; k += 8) {
            memcpy(&w, s + k, 8);
            acc |= w;
        }
        memcpy(&w, s + len - 8, 8);
        if (!((acc | w) & 0x8080808080808080ull))
            return (long long)len;
    } else if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + len - 4, 4);
        if (!((a | b) & 0x80808080u))
            return (long long)len;
    } else {
        unsigned x = 0;
        for (size_t k = 0; k < len; k++)
            x |= s[k];
        if (!(x & 0x80))
            return (long long)len;
    }
    size_t i = 0;
    long long n = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
            n += 8;
        }
        if (i >= len)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= len || (s[i + 1] & 0xC0) != 0x80)
                return -1;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return -1;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F))
                return -1;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return -1;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
                return -1;
            i += 4;
        } else {
            return -1;
        }
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ */
/* dialects and keywords                                                */

enum draft { D2020 = 0, D2019 = 1, D7 = 2 };

enum vocab {
    V_CORE = 1, V_APPLICATOR = 2, V_UNEVAL = 4, V_VALIDATION = 8,
    V_FORMAT = 16, V_FORMAT_ASSERT = 32, V_CONTENT = 64, V_META = 128
};
#define V_ALL (V_CORE | V_APPLICATOR | V_UNEVAL | V_VALIDATION | V_FORMAT | V_CONTENT | V_META)

typedef struct dialect {
    int draft;
    int vocab;
} dialect;

enum kw_id {
    K_NONE = 0,
    K_REF, K_DYNREF, K_TYPE, K_ENUM, K_CONST,
    K_MULTIPLE_OF, K_MAXIMUM, K_MINIMUM, K_XMAXIMUM, K_XMINIMUM,
    K_MAX_LENGTH, K_MIN_LENGTH, K_PATTERN, K_FORMAT,
    K_ITEMS, K_CONTAINS, K_MAX_ITEMS, K_MIN_ITEMS, K_UNIQUE,
    K_PROPS, K_REQUIRED, K_DEP_REQUIRED, K_DEP_SCHEMAS, K_PROPERTY_NAMES,
    K_MAX_PROPS, K_MIN_PROPS,
    K_ALL_OF, K_ANY_OF, K_ONE_OF, K_NOT, K_IF,
    K_UNEVAL_ITEMS, K_UNEVAL_PROPS, K_CONTENT,
    K__COUNT
};

/* ------------------------------------------------------------------ */
/* compiled form                                                        */

#define KB(k) (1ull << (k))
/* assertion keywords by the instance type they apply to */
#define KM_STR (KB(K_MAX_LENGTH) | KB(K_MIN_LENGTH) | KB(K_PATTERN) | KB(K_FORMAT))
#define KM_NUM (KB(K_MULTIPLE_OF) | KB(K_MAXIMUM) | KB(K_MINIMUM) | KB(K_XMAXIMUM) | KB(K_XMINIMUM))
#define KM_CNT (KB(K_MAX_ITEMS) | KB(K_MIN_ITEMS) | KB(K_MAX_PROPS) | KB(K_MIN_PROPS))
#define KM_FAST (KB(K_TYPE) | KB(K_ENUM) | KB(K_CONST) | KM_STR | KM_NUM | KM_CNT)
/* keywords whose reports take their fixed texts from node.kt */
#define KM_TEXTS (KM_FAST | KB(K_REQUIRED))

enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_STRING = 32, T_INTEGER = 64 };
enum { B_NONE = 0, B_TRUE = 1, B_FALSE = 2 };
enum { UE_ITEMS = 1, UE_PROPS = 2 };

typedef struct node node;

/* a keyword name and its length, as report_p() takes them */
#define KWL(lit) (lit), (sizeof(lit) - 1)

/* What a report of a keyword says whatever the instance, made once at
 * compile time (report_texts) so that its violations point at it instead
 * of copying it: the keyword's location, its `expected` text and, where it
 * is constant (enum, const, pattern), the whole message.  NUL-terminated;
 * s NULL = none. */
typedef struct ktext {
    mpart kloc, expected, msg;
} ktext;

typedef struct rres { /* runtime resource, for the dynamic scope */
    const char *uri;
    size_t ndyn;
    const char **dyn_names;
    node **dyn_nodes;
} rres;

typedef struct prop_ent { /* one cache line */
    const char *name; /* NULL = empty slot; iname when it fits there */
    uint64_t h;
    size_t len;
    node *schema;     /* from properties, or NULL */
    uint64_t reqbit;  /* 1 << req when 0 <= req < 64, else 0 */
    int32_t req;      /* index in required, or -1 */
    uint32_t ord : 31;   /* index in node.ordv, when schema != NULL */
    uint32_t plain : 1;  /* no '~' or '/' in name: a path takes it as it is */
    char iname[16];   /* short names in place: one memory access less */
} prop_ent;

typedef struct patprop {
    schema_regex *re;
    node *schema;
} patprop;

typedef struct dep_req {
    const char *name;
    const char *kw; /* "dependentRequired/x" or "dependencies/x" */
    const char **names;
    size_t n;
} dep_req;

typedef struct dep_sch {
    const char *name;
    node *schema;
} dep_sch;

/* A discriminated union: anyOf/oneOf whose every branch holds member
 * `name` to a `const` (or a one-value enum) of its own.  An object with
 * that member fails every branch but the one whose value it has. */
typedef struct discrim {
    const char *name;
    const cJSON **vals; /* by branch */
} discrim;

struct node {
    /* Hot fields first (evaluation touches the first few cache lines of a
     * node; the rest is for reports and rarer keywords). */
    uint8_t boolean;
    uint8_t types;
    uint8_t leaf;         /* only assertion keywords (no subschemas) */
    uint8_t fast;         /* leaf whose keywords leaf_fast() checks */
    uint8_t norder;
    uint8_t uneval;
    uint8_t req_in_props; /* fast pass checks required inside kw_props */
    uint8_t fmt;
    uint64_t kwmask;      /* KB() of every keyword in order */
    uint8_t order[K__COUNT];
    /* objects */
    prop_ent *ordv;       /* entries of `properties` in schema order (copies) */
    size_t n_props;
    prop_ent *props;      /* open addressing, mask + 1 slots */
    size_t props_mask;
    node *additional;
    size_t n_pats;
    uint64_t req_all;     /* req_in_props: the reqbit of every required name */
    size_t n_required;
    /* strings */
    uint64_t max_length, min_length;
    schema_regex *pattern;
    const char **enum_strs; /* the string members of enum (copies) */
    size_t n_enum_strs;
    size_t n_enum;
    cJSON *enum_vals;
    cJSON *const_val;
    /* numbers */
    double maximum, minimum, xmaximum, xminimum, multiple_of;
    decimal multiple_dec;
    /* arrays */
    node *items;
    node **prefix;
    size_t n_prefix;
    uint64_t max_items, min_items;
    /* the rest */
    const char *loc; /* "" (root), "/properties/a", "uri#/defs/x" */
    size_t loc_len;  /* strlen(loc): a report copies it without measuring */
    const rres *res;
    uint8_t unique;
    uint8_t content_b64, content_json;
    const char *type_text, *enum_text, *const_text, *pattern_text; /* kt[].expected */
    /* texts of reports, made once by report_texts() */
    mpart type_msg;   /* "expected string or null, got " */
    ktext *kt;         /* the keywords of KM_TEXTS present, in K_ order: kt_of() */
    mpart *req_text;   /* the JSON text of each required name */
    mpart *req_msg;    /* "missing required property \"name\"" for each */
    uint64_t *enum_h;
    uint64_t max_props, min_props;
    uint64_t min_contains, max_contains;
    int has_max_contains;
    const char *prefix_kw, *items_kw;
    node *contains;
    const prop_ent **ordered; /* entries of `properties` in schema order (compile) */
    patprop *pats;
    const char **required;
    dep_req *dreq;
    size_t n_dreq;
    dep_sch *dsch;
    size_t n_dsch;
    const char *dsch_kw;
    node *property_names;
    node **all_of, **any_of, **one_of;
    size_t n_all_of, n_any_of, n_one_of;
    const struct discrim *any_disc, *one_disc; /* see find_discrim() */
    node *not_, *if_, *then_, *else_;
    node *ref;
    node *dynref;
    const char *dyn_name; /* non-NULL: $dynamicRef is dynamic */
    node *uneval_items, *uneval_props;
};

/* The fixed texts of keyword k (in KM_TEXTS and present at n). */
static inline const ktext *kt_of(const node *n, int k)
{
    return &n->kt[__builtin_popcountll(n->kwmask & KM_TEXTS & (KB(k) - 1))];
}

typedef struct res_list {
    schema_regex *re;
    struct res_list *next;
} res_list;

struct schema {
    arena a;
    node *root;
    size_t max_violations;
    int dynamic;
    schema_regex **regexes;
    size_t n_regexes, cap_regexes;
    cJSON **jsons;
    size_t n_jsons, cap_jsons;
};

/* ------------------------------------------------------------------ */
/* registry                                                             */

typedef struct regdoc {
    char *uri;
    cJSON *doc;
    struct regdoc *next;
} regdoc;

struct schema_registry {
    arena a;
    smap map; /* resource URI -> regdoc */
    regdoc *docs;
};

static const char *const SUBSCHEMA_SINGLE[] = {
    "additionalProperties", "propertyNames", "contains", "not", "if", "then", "else",
    "unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema", "items", NULL
};
static const char *const SUBSCHEMA_ARRAY[] = { "allOf", "anyOf", "oneOf", "prefixItems", "items", NULL };
static const char *const SUBSCHEMA_MAP[] = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies", NULL
};

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

/* Records every $id of doc (dialect-agnostic) as a key to rd. */
/* Registers the $ids below js (in rd's document) under their absolute
 * URIs.  0 = ok; -1 with the reason in err: out of memory, or an $id
 * another document declares (or that is another document's URI), which
 * would make a $ref to it resolve to whichever was loaded first. */
static int reg_scan(schema_registry *reg, regdoc *rd, const cJSON *js, const char *base, int depth, char *err,
                    size_t errlen)
{
    if (!cJSON_IsObject(js) || depth > MAX_COMPILE_DEPTH)
        return 0;
    char *own = NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(js, "$id");
    if (cJSON_IsString(id) && id->valuestring[0] != '#') {
        own = schema_uri_resolve(base, id->valuestring);
        char *key = own ? (own[schema_uri_base_len(own)] = '\0', arena_strdup(&reg->a, own)) : NULL;
        int put = key ? smap_put(&reg->map, key, rd) : -1;
        const regdoc *other = put == 1 ? smap_get(&reg->map, key) : NULL;
        if (put < 0 || (other && other != rd)) {
            if (put < 0)
                snprintf(err, errlen, "out of memory");
            else
                snprintf(err, errlen, "%s: $id %s is taken already, by %s", rd->uri, own, other->uri);
            free(own);
            return -1;
        }
        base = own;
    }
    int rc = 0;
    for (const cJSON *m = js->child; m && rc == 0; m = m->next) {
        if (in_list(SUBSCHEMA_SINGLE, m->string) && cJSON_IsObject(m))
            rc = reg_scan(reg, rd, m, base, depth + 1, err, errlen);
        if (in_list(SUBSCHEMA_ARRAY, m->string) && cJSON_IsArray(m))
            for (const cJSON *c = m->child; c && rc == 0; c = c->next)
                rc = reg_scan(reg, rd, c, base, depth + 1, err, errlen);
        if (in_list(SUBSCHEMA_MAP, m->string) && cJSON_IsObject(m))
            for (const cJSON *c = m->child; c && rc == 0; c = c->next)
                rc = reg_scan(reg, rd, c, base, depth + 1, err, errlen);
    }
    free(own);
    return rc;
}

schema_registry *schema_registry_new(void)
{
    return calloc(1, sizeof(schema_registry));
}

void schema_registry_free(schema_registry *reg)
{
    if (!reg)
        return;
    for (regdoc *d = reg->docs; d; d = d->next)
        cJSON_Delete(d->doc);
    smap_free(&reg->map);
    arena_free(&reg->a);
    free(reg);
}

int schema_registry_add(schema_registry *reg, const char *uri, const cJSON *doc, char *err,
                        size_t errlen)
{
    int rc = -1;
    char *norm = NULL;
    if (!reg || !uri || !doc) {
        snprintf(err, errlen, "schema_registry_add: NULL argument");
        goto done;
    }
    norm = schema_uri_resolve(uri, "");
    if (!norm)
        goto oom;
    norm[schema_uri_base_len(norm)] = '\0';
    const regdoc *old = smap_get(&reg->map, norm);
    if (old) {
        /* the same document again (validate's --ref-dir, then a $ref to
         * a file in it) changes nothing; another would be found or not
         * by the order of loading */
        if (old->uri && !strcmp(old->uri, norm) && cJSON_Compare(old->doc, doc, 1)) {
            rc = 0;
        } else {
            snprintf(err, errlen, "%s is taken already, by %s", norm, old->uri);
        }
        goto done;
    }
    regdoc *rd = arena_alloc(&reg->a, sizeof *rd);
    if (!rd)
        goto oom;
    rd->uri = arena_strdup(&reg->a, norm);
    rd->doc = cJSON_Duplicate(doc, 1);
    if (!rd->uri || !rd->doc) {
        cJSON_Delete(rd->doc);
        goto oom;
    }
    rd->next = reg->docs;
    reg->docs = rd;
    if (smap_put(&reg->map, rd->uri, rd) < 0)
        goto oom;
    rc = reg_scan(reg, rd, rd->doc, rd->uri, 0, err, errlen);
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
done:
    free(norm);
    return rc;
}

static int load_dir_rec(schema_registry *reg, const char *dir, const char *base_uri,
                        const char *rel, int depth, char *err, size_t errlen)
{
    if (depth > 32)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", dir, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "cannot open directory %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char relp[4096], full[8200];
        snprintf(relp, sizeof relp, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", dir, relp);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            rc = load_dir_rec(reg, dir, base_uri, relp, depth + 1, err, errlen);
            continue;
        }
        size_t nl = strlen(e->d_name);
        if (nl < 5 || strcmp(e->d_name + nl - 5, ".json") != 0)
            continue;
        size_t len = 0;
        char *text = util_read_file(full, &len);
        if (!text) {
            snprintf(err, errlen, "cannot read %s", full);
            rc = -1;
            break;
        }
        cJSON *doc = cJSON_ParseWithLength(text, len);
        free(text);
        if (!doc)
            continue; /* not JSON, so not a schema: a $ref to it fails later */
        char *uri = schema_uri_from_path(base_uri, relp); /* "a#b.json" is no fragment */
        rc = uri ? schema_registry_add(reg, uri, doc, err, errlen) : -1;
        if (!uri)
            snprintf(err, errlen, "out of memory");
        free(uri);
        cJSON_Delete(doc);
    }
    closedir(d);
    return rc;
}

int schema_registry_load_dir(schema_registry *reg, const char *dir, const char *base_uri,
                             char *err, size_t errlen)
{
    if (!reg || !dir || !base_uri) {
        snprintf(err, errlen, "schema_registry_load_dir: NULL argument");
        return -1;
    }
    return load_dir_rec(reg, dir, base_uri, "", 0, err, errlen);
}

/* The embedded metaschemas: one immutable registry for the process. */
static schema_registry *g_builtin;
static pthread_once_t g_builtin_once = PTHREAD_ONCE_INIT;

static void builtin_init(void)
{
    schema_registry *reg = schema_registry_new();
    if (!reg)
        return;
    char err[128];
    for (size_t i = 0; i < schema_meta_count(); i++) {
        cJSON *doc = cJSON_Parse(schema_meta_text(i));
        if (doc)
            (void)schema_registry_add(reg, schema_meta_uri(i), doc, err, sizeof err);
        cJSON_Delete(doc);
    }
    g_builtin = reg;
}

static regdoc *registry_find(const schema_registry *reg, const char *uri)
{
    regdoc *rd = reg ? smap_get(&reg->map, uri) : NULL;
    if (!rd) {
        pthread_once(&g_builtin_once, builtin_init);
        if (g_builtin)
            rd = smap_get(&g_builtin->map, uri);
    }
    return rd;
}

/* ------------------------------------------------------------------ */
/* compile context                                                      */

typedef struct cres {
    const char *uri;
    rres *rt;
    size_t ndyn, dyn_cap; /* every $dynamicAnchor of the resource: past */
    const char **dyn_names; /* a fixed 16, the 17th on were ignored, and */
    const cJSON **dyn_js;   /* a $dynamicRef to one took its static target */
    struct cres *next;
} cres;

typedef struct cinfo {
    const cJSON *js;
    cres *res;
    dialect d;
    const char *ptr;
} cinfo;

typedef struct pending {
    node **slot;
    const char *uri;
    dialect d;
    const char *loc;
    int dynamic;
    const char **dyn_name_slot;
    struct pending *next;
} pending;

typedef struct cctx {
    schema *s;
    arena tmp;
    const schema_registry *reg;
    const schema_options *opts;
    smap uris;  /* absolute URI (+ "#anchor") -> cinfo */
    pmap infos; /* cJSON* -> cinfo */
    pmap memo;  /* cJSON* -> node */
    pmap docs;  /* regdoc -> indexed */
    pending *pend;
    cres *resources;
    int depth;
    int failed;
    char *err;
    size_t errlen;
    /* Each node keeps its location, a JSON pointer, whole (and each
     * keyword's): long property names nested over many nodes made a
     * 64 KB schema 250 MB compiled.  The pointers indexed are bounded by
     * the names they are made of (loc_bytes against name_bytes). */
    size_t loc_bytes, name_bytes;
} cctx;

/* Locations may take LOC_RATIO times the bytes of the names they are
 * made of, past LOC_SLACK: the bytes of a location over those of its own
 * name are about its depth, and a schema 60 deep stays within it. */
#define LOC_SLACK (8u << 20)
#define LOC_RATIO 64

static void cfail(cctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cfail(cctx *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = 1;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
        util_utf8_cut_end(c->err); /* cut inside a name, it was no UTF-8 */
    }
}

static void *calloc_or_fail(cctx *c, size_t n)
{
    void *p = arena_alloc(&c->s->a, n);
    if (!p)
        cfail(c, "out of memory");
    return p;
}

static char *tmp_printf(cctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *tmp_printf(cctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = arena_alloc(&c->tmp, (size_t)n + 1);
    if (!p) {
        cfail(c, "out of memory");
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

/* JSON Pointer escaping of one token into the tmp arena. */
/* Counts a location of len bytes made by a name of name_len bytes: 0, or
 * -1 (failed) past the bound. */
static int loc_count(cctx *c, size_t len, size_t name_len)
{
    c->loc_bytes += len;
    c->name_bytes += name_len + 8; /* its quotes, colon, braces */
    if (c->loc_bytes > LOC_SLACK && c->loc_bytes / LOC_RATIO > c->name_bytes) {
        cfail(c, "schema too large compiled: the locations (JSON pointers) of its subschemas take %zu MB "
                 "for %zu KB of names (long property names nested under many subschemas)",
              c->loc_bytes >> 20, c->name_bytes >> 10);
        return -1;
    }
    return 0;
}

static char *ptr_join(cctx *c, const char *base, const char *tok)
{
    size_t bl = strlen(base), extra = 0;
    for (const char *t = tok; *t; t++)
        extra += (*t == '~' || *t == '/') ? 2 : 1;
    if (loc_count(c, bl + extra + 2, strlen(tok)))
        return NULL;
    char *p = arena_alloc(&c->tmp, bl + extra + 2);
    if (!p) {
        cfail(c, "out of memory");
        return NULL;
    }
    memcpy(p, base, bl);
    char *w = p + bl;
    *w++ = '/';
    for (const char *t = tok; *t; t++) {
        if (*t == '~') {
            *w++ = '~';
            *w++ = '0';
        } else if (*t == '/') {
            *w++ = '~';
            *w++ = '1';
        } else {
            *w++ = *t;
        }
    }
    *w = '\0';
    return p;
}

static int dialect_of_uri(cctx *c, const char *uri, dialect cur, dialect *out, int depth);

static cres *new_res(cctx *c, const char *uri)
{
    cres *r = arena_alloc(&c->tmp, sizeof *r);
    if (!r) {
        cfail(c, "out of memory");
        return NULL;
    }
    r->uri = arena_strdup(&c->tmp, uri);
    r->next = c->resources;
    c->resources = r;
    return r;
}

static cinfo *add_info(cctx *c, const cJSON *js, cres *res, dialect d, const char *ptr)
{
    cinfo *i = arena_alloc(&c->tmp, sizeof *i);
    if (!i || pmap_put(&c->infos, js, i) < 0) {
        cfail(c, "out of memory");
        return NULL;
    }
    i->js = js;
    i->res = res;
    i->d = d;
    i->ptr = ptr;
    return i;
}

static void put_uri(cctx *c, const char *uri, cinfo *info)
{
    char *k = arena_strdup(&c->tmp, uri);
    if (!k || smap_put(&c->uris, k, info) < 0)
        cfail(c, "out of memory");
}

static int index_node(cctx *c, const cJSON *js, cres *res, dialect d, const char *ptr, int is_root,
                      int depth)
{
    if (c->failed)
        return -1;
    if (depth > MAX_COMPILE_DEPTH) {
        cfail(c, "%s: schema nesting too deep (limit %d)", ptr, MAX_COMPILE_DEPTH);
        return -1;
    }
    if (pmap_get(&c->infos, js))
        return 0;
    if (cJSON_IsBool(js)) {
        if (is_root)
            put_uri(c, res->uri, add_info(c, js, res, d, ptr));
        else
            add_info(c, js, res, d, ptr);
        return c->failed ? -1 : 0;
    }
    if (!cJSON_IsObject(js))
        return 0;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(js, "$id");
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(js, "$schema");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(js, "$ref");
    /* Each $ref is resolved against its resource's URI, copied a few times
     * over: a $id of 500 KB and 4,000 "$ref": "#" took 4 GB. */
    static const char *const uri_kws[] = { "$id", "$schema", "$ref", "$dynamicRef", "$recursiveRef",
                                           "$anchor", "$dynamicAnchor" };
    for (size_t k = 0; k < sizeof uri_kws / sizeof uri_kws[0]; k++) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(js, uri_kws[k]);
        if (cJSON_IsString(u) && strlen(u->valuestring) > SCHEMA_URI_MAX) {
            cfail(c, "%s/%s: longer than %d bytes", ptr[0] ? ptr : "", uri_kws[k], SCHEMA_URI_MAX);
            return -1;
        }
    }
    if (cJSON_IsString(sch) && (is_root || cJSON_IsString(id))) {
        if (dialect_of_uri(c, sch->valuestring, d, &d, 0) < 0)
            return -1;
    }
    if (d.draft == D7 && ref) {
        cinfo *ci = add_info(c, js, res, d, ptr);
        if (is_root && ci)
            put_uri(c, res->uri, ci);
        return c->failed ? -1 : 0;
    }
    char *anchor_d7 = NULL;
    if (cJSON_IsString(id)) {
        if (d.draft == D7 && id->valuestring[0] == '#') {
            anchor_d7 = tmp_printf(c, "%s%s", res->uri, id->valuestring);
        } else {
            char *abs = schema_uri_resolve(res->uri, id->valuestring);
            if (!abs) {
                cfail(c, "out of memory");
                return -1;
            }
            size_t bl = schema_uri_base_len(abs);
            if (d.draft == D7 && abs[bl] == '#' && abs[bl + 1])
                anchor_d7 = tmp_printf(c, "%s", abs);
            abs[bl] = '\0';
            if (strcmp(abs, res->uri) != 0 || !is_root) {
                cres *nr = new_res(c, abs);
                if (nr)
                    res = nr;
            }
            free(abs);
            if (anchor_d7 && res) {
                /* "http://x/y#foo" in draft 7: anchor foo in resource x/y */
                const char *h = strchr(anchor_d7, '#');
                anchor_d7 = tmp_printf(c, "%s%s", res->uri, h);
            }
        }
    }
    if (c->failed)
        return -1;
    cinfo *ci = add_info(c, js, res, d, ptr);
    if (!ci)
        return -1;
    if (is_root || cJSON_IsString(id)) {
        if (!smap_get(&c->uris, res->uri))
            put_uri(c, res->uri, ci);
    }
    if (anchor_d7)
        put_uri(c, anchor_d7, ci);
    if (d.draft != D7) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(js, "$anchor");
        if (cJSON_IsString(a))
            put_uri(c, tmp_printf(c, "%s#%s", res->uri, a->valuestring), ci);
        a = cJSON_GetObjectItemCaseSensitive(js, "$dynamicAnchor");
        if (d.draft == D2020 && cJSON_IsString(a)) {
            char *u = tmp_printf(c, "%s#%s", res->uri, a->valuestring);
            if (u && !smap_get(&c->uris, u))
                put_uri(c, u, ci);
            if (res->ndyn == res->dyn_cap) {
                size_t cap = res->dyn_cap ? res->dyn_cap * 2 : 16;
                const char **names = arena_alloc(&c->tmp, cap * sizeof *names);
                const cJSON **jss = arena_alloc(&c->tmp, cap * sizeof *jss);
                if (!names || !jss) {
                    cfail(c, "out of memory");
                    return -1;
                }
                if (res->ndyn) {
                    memcpy(names, res->dyn_names, res->ndyn * sizeof *names);
                    memcpy(jss, res->dyn_js, res->ndyn * sizeof *jss);
                }
                res->dyn_names = names;
                res->dyn_js = jss;
                res->dyn_cap = cap;
            }
            res->dyn_names[res->ndyn] = arena_strdup(&c->tmp, a->valuestring);
            res->dyn_js[res->ndyn++] = js;
        }
    }
    for (const cJSON *m = js->child; m && !c->failed; m = m->next) {
        const char *k = m->string;
        if (d.draft == D7 && (strcmp(k, "$defs") == 0 || strncmp(k, "unevaluated", 11) == 0))
            continue;
        if (in_list(SUBSCHEMA_SINGLE, k) && (cJSON_IsObject(m) || cJSON_IsBool(m))) {
            index_node(c, m, res, d, ptr_join(c, ptr, k), 0, depth + 1);
        } else if (in_list(SUBSCHEMA_ARRAY, k) && cJSON_IsArray(m)) {
            char *p = ptr_join(c, ptr, k);
            int i = 0;
            for (const cJSON *e = m->child; e && p && !c->failed; e = e->next, i++) {
                char *ep = tmp_printf(c, "%s/%d", p, i);
                if (ep && !loc_count(c, strlen(ep), 0))
                    index_node(c, e, res, d, ep, 0, depth + 1);
            }
        } else if (in_list(SUBSCHEMA_MAP, k) && cJSON_IsObject(m)) {
            char *p = ptr_join(c, ptr, k);
            for (const cJSON *e = m->child; e && p; e = e->next)
                index_node(c, e, res, d, ptr_join(c, p, e->string), 0, depth + 1);
        }
    }
    return c->failed ? -1 : 0;
}

static const char *const VOCAB_URIS[] = {
    "https://json-schema.org/draft/2020-12/vocab/core",
    "https://json-schema.org/draft/2020-12/vocab/applicator",
    "https://json-schema.org/draft/2020-12/vocab/unevaluated",
    "https://json-schema.org/draft/2020-12/vocab/validation",
    "https://json-schema.org/draft/2020-12/vocab/format-annotation",
    "https://json-schema.org/draft/2020-12/vocab/format-assertion",
    "https://json-schema.org/draft/2020-12/vocab/content",
    "https://json-schema.org/draft/2020-12/vocab/meta-data",
};

static int dialect_of_uri(cctx *c, const char *uri, dialect cur, dialect *out, int depth)
{
    size_t n = schema_uri_base_len(uri);
    char u[512];
    if (n >= sizeof u) {
        *out = cur;
        return 0;
    }
    memcpy(u, uri, n);
    u[n] = '\0';
    if (strcmp(u, "https://json-schema.org/draft/2020-12/schema") == 0) {
        *out = (dialect){ D2020, V_ALL };
        return 0;
    }
    if (strcmp(u, "https://json-schema.org/draft/2019-09/schema") == 0) {
        *out = (dialect){ D2019, V_ALL };
        return 0;
    }
    if (strstr(u, "json-schema.org/draft-0") || strstr(u, "json-schema.org/schema")) {
        *out = (dialect){ D7, V_ALL };
        return 0;
    }
    regdoc *rd = depth < 8 ? registry_find(c->reg, u) : NULL;
    if (!rd || !cJSON_IsObject(rd->doc)) {
        *out = cur; /* unknown metaschema: keep the current dialect */
        return 0;
    }
    dialect base = cur;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rd->doc, "$schema");
    if (cJSON_IsString(ms) && strcmp(ms->valuestring, u) != 0)
        if (dialect_of_uri(c, ms->valuestring, cur, &base, depth + 1) < 0)
            return -1;
    const cJSON *voc = cJSON_GetObjectItemCaseSensitive(rd->doc, "$vocabulary");
    if (cJSON_IsObject(voc)) {
        int v = V_CORE;
        for (const cJSON *m = voc->child; m; m = m->next) {
            size_t i;
            for (i = 0; i < sizeof VOCAB_URIS / sizeof VOCAB_URIS[0]; i++)
                if (strcmp(m->string, VOCAB_URIS[i]) == 0)
                    break;
            if (i < sizeof VOCAB_URIS / sizeof VOCAB_URIS[0]) {
                v |= 1 << i;
            } else if (cJSON_IsTrue(m)) {
                cfail(c, "metaschema %s requires unsupported vocabulary %s", u, m->string);
                return -1;
            }
        }
        base.vocab = v;
    }
    *out = base;
    return 0;
}

/* Indexes a registry document (once) so that its URIs become known. */
static int load_regdoc(cctx *c, const char *uri, dialect d)
{
    regdoc *rd = registry_find(c->reg, uri);
    if (!rd || pmap_get(&c->docs, rd))
        return 0;
    if (pmap_put(&c->docs, rd, rd) < 0) {
        cfail(c, "out of memory");
        return -1;
    }
    cres *r = new_res(c, rd->uri);
    if (!r)
        return -1;
    if (index_node(c, rd->doc, r, d, tmp_printf(c, "%s#", rd->uri), 1, 0) < 0)
        return -1;
    /* the retrieval URI names the document even when its $id differs */
    cinfo *root = pmap_get(&c->infos, rd->doc);
    if (root && !smap_get(&c->uris, rd->uri))
        put_uri(c, rd->uri, root);
    return 1;
}

static const cinfo *walk_pointer(cctx *c, const cinfo *start, const char *frag, const char *uri)
{
    size_t fl = strlen(frag);
    char *dec = arena_alloc(&c->tmp, fl + 1);
    if (!dec) {
        cfail(c, "out of memory");
        return NULL;
    }
    if (schema_uri_percent_decode(frag, fl, dec) != strlen(dec)) {
        /* a %00: the pointer went on as cut there */
        cfail(c, "unresolvable $ref %s: JSON pointer holds %%00", uri);
        return NULL;
    }
    const cJSON *cur = start->js;
    const cinfo *last = start;
    char *ptr = (char *)start->ptr;
    const char *p = dec;
    while (*p == '/') {
        p++;
        const char *e = strchr(p, '/');
        size_t tl = e ? (size_t)(e - p) : strlen(p);
        char *tok = arena_alloc(&c->tmp, tl + 1);
        if (!tok) {
            cfail(c, "out of memory");
            return NULL;
        }
        size_t o = 0;
        for (size_t i = 0; i < tl; i++) {
            if (p[i] == '~' && i + 1 < tl && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[o++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[o++] = p[i];
            }
        }
        tok[o] = '\0';
        p += tl;
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else if (cJSON_IsArray(cur)) {
            /* RFC 6901: digits, no leading 0 (strtol took "+0" and " 0",
             * and the cast to int made 4294967296 element 0) */
            long idx = 0;
            const char *d = tok;
            for (; *d >= '0' && *d <= '9' && idx <= INT_MAX; d++)
                idx = idx * 10 + (*d - '0');
            if (!*tok || *d || idx > INT_MAX || (tok[0] == '0' && tok[1]))
                cur = NULL;
            else
                cur = cJSON_GetArrayItem(cur, (int)idx);
        } else {
            cur = NULL;
        }
        if (!cur) {
            cfail(c, "unresolvable $ref %s: JSON pointer does not exist", uri);
            return NULL;
        }
        ptr = ptr_join(c, ptr, tok);
        const cinfo *ci = pmap_get(&c->infos, cur);
        if (ci) {
            last = ci;
            ptr = (char *)ci->ptr;
        }
    }
    if (cur == last->js)
        return last;
    /* Under an unknown keyword: index the subtree from here. */
    if (index_node(c, cur, last->res, last->d, ptr, 0, 0) < 0)
        return NULL;
    const cinfo *ci = pmap_get(&c->infos, cur);
    if (!ci)
        cfail(c, "$ref %s does not point to a schema", uri);
    return ci;
}

static const cinfo *resolve_uri(cctx *c, const char *abs, dialect d)
{
    size_t bl = schema_uri_base_len(abs);
    char *base = arena_strndup(&c->tmp, abs, bl);
    const char *frag = abs[bl] == '#' ? abs + bl + 1 : "";
    if (!base) {
        cfail(c, "out of memory");
        return NULL;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (frag[0] == '\0' || frag[0] == '/') {
            const cinfo *ci = smap_get(&c->uris, base);
            if (ci)
                return frag[0] ? walk_pointer(c, ci, frag, abs) : ci;
        } else {
            const cinfo *ci = smap_get(&c->uris, abs);
            if (ci)
                return ci;
        }
        if (attempt == 0 && load_regdoc(c, base, d) <= 0)
            break;
    }
    if (!c->failed)
        cfail(c, "unresolvable $ref %s", abs);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* node compilation                                                     */

static node *compile_node(cctx *c, const cinfo *ci);

static rres *runtime_res(cctx *c, cres *r)
{
    if (!r->rt) {
        r->rt = calloc_or_fail(c, sizeof *r->rt);
        if (r->rt)
            r->rt->uri = arena_strdup(&c->s->a, r->uri);
    }
    return r->rt;
}

static node *compile_child(cctx *c, const cinfo *parent, const cJSON *js, const char *ptr)
{
    if (c->failed || !ptr)
        return NULL;
    const cinfo *ci = pmap_get(&c->infos, js);
    if (!ci) {
        if (index_node(c, js, parent->res, parent->d, ptr, 0, 0) < 0)
            return NULL;
        ci = pmap_get(&c->infos, js);
        if (!ci) {
            cfail(c, "%s: schema must be an object or a boolean", ptr[0] ? ptr : "/");
            return NULL;
        }
    }
    return compile_node(c, ci);
}

static void add_order(node *n, int k)
{
    for (int i = 0; i < n->norder; i++)
        if (n->order[i] == k)
            return;
    n->order[n->norder++] = (uint8_t)k;
}

static const char *loc_of(const cinfo *ci)
{
    return ci->ptr[0] ? ci->ptr : "/";
}

static int get_count(cctx *c, const cinfo *ci, const cJSON *v, const char *kw, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        cfail(c, "%s/%s: must be a non-negative integer", ci->ptr, kw);
        return -1;
    }
    *out = v->valuedouble >= 1.8e19 ? UINT64_MAX : (uint64_t)v->valuedouble;
    return 0;
}

static int get_number(cctx *c, const cinfo *ci, const cJSON *v, const char *kw, double *out)
{
    if (!cJSON_IsNumber(v)) {
        cfail(c, "%s/%s: must be a number", ci->ptr, kw);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static void keep_regex(cctx *c, schema_regex *re)
{
    schema *s = c->s;
    if (s->n_regexes == s->cap_regexes) {
        size_t nc = s->cap_regexes ? s->cap_regexes * 2 : 8;
        schema_regex **nr = realloc(s->regexes, nc * sizeof *nr);
        if (!nr) {
            schema_regex_free(re);
            cfail(c, "out of memory");
            return;
        }
        s->regexes = nr;
        s->cap_regexes = nc;
    }
    s->regexes[s->n_regexes++] = re;
}

static cJSON *keep_json(cctx *c, const cJSON *v)
{
    schema *s = c->s;
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d) {
        cfail(c, "out of memory");
        return NULL;
    }
    if (s->n_jsons == s->cap_jsons) {
        size_t nc = s->cap_jsons ? s->cap_jsons * 2 : 8;
        cJSON **nj = realloc(s->jsons, nc * sizeof *nj);
        if (!nj) {
            cJSON_Delete(d);
            cfail(c, "out of memory");
            return NULL;
        }
        s->jsons = nj;
        s->cap_jsons = nc;
    }
    s->jsons[s->n_jsons++] = d;
    return d;
}

static schema_regex *compile_regex(cctx *c, const cinfo *ci, const char *src, const char *kw)
{
    char err[200];
    schema_regex *re = schema_regex_compile(src, 0, err, sizeof err);
    if (!re) {
        cfail(c, "%s/%s: invalid regular expression \"%s\": %s", ci->ptr, kw, src, err);
        return NULL;
    }
    keep_regex(c, re);
    return c->failed ? NULL : re;
}

static char *snippet_in_arena(cctx *c, const cJSON *v)
{
    char *s = json_snippet(v, SNIPPET_MAX);
    if (!s) {
        cfail(c, "out of memory");
        return NULL;
    }
    char *a = arena_strdup(&c->s->a, s);
    free(s);
    if (!a)
        cfail(c, "out of memory");
    return a;
}

static prop_ent *prop_slot(node *n, const char *name, size_t len, uint64_t h)
{
    size_t i = h & n->props_mask;
    while (n->props[i].name && (n->props[i].h != h || n->props[i].len != len ||
                                memcmp(n->props[i].name, name, len) != 0))
        i = (i + 1) & n->props_mask;
    return &n->props[i];
}

/* Allocates the name table for the names of properties and required. */
static int build_props(cctx *c, node *n, const cJSON *props, const cJSON *req)
{
    size_t want = (props ? json_count(props) : 0) + (req ? json_count(req) : 0);
    size_t cap = 8;
    while (cap < want * 2 + 2)
        cap *= 2;
    n->props = calloc_or_fail(c, cap * sizeof *n->props);
    if (!n->props)
        return -1;
    n->props_mask = cap - 1;
    return 0;
}

static prop_ent *props_add(cctx *c, node *n, const char *name)
{
    size_t len;
    uint64_t h = hash_cstr(name, &len);
    prop_ent *e = prop_slot(n, name, len, h);
    if (!e->name) {
        if (len < sizeof e->iname) {
            memcpy(e->iname, name, len + 1);
            e->name = e->iname;
        } else {
            e->name = arena_strdup(&c->s->a, name);
        }
        e->h = h;
        e->len = len;
        e->req = -1;
        e->plain = strpbrk(name, "~/") == NULL;
    }
    return e;
}

static int parse_type(cctx *c, const cinfo *ci, node *n, const cJSON *v)
{
    static const struct { const char *name; int bit; } names[] = {
        { "null", T_NULL }, { "boolean", T_BOOLEAN }, { "object", T_OBJECT },
        { "array", T_ARRAY }, { "number", T_NUMBER | T_INTEGER }, { "string", T_STRING },
        { "integer", T_INTEGER },
    };
    const cJSON *one = v;
    const cJSON *it = cJSON_IsArray(v) ? v->child : NULL;
    if (cJSON_IsArray(v) && !it) {
        n->types = 0;
        n->type_text = "[]";
        return 0;
    }
    for (;;) {
        const cJSON *t = cJSON_IsArray(v) ? it : one;
        size_t i;
        if (!cJSON_IsString(t))
            goto bad;
        for (i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(t->valuestring, names[i].name) == 0)
                break;
        if (i == sizeof names / sizeof names[0])
            goto bad;
        n->types |= (uint8_t)names[i].bit;
        if (!cJSON_IsArray(v) || !(it = it->next))
            break;
    }
    n->type_text = snippet_in_arena(c, v);
    return 0;
bad:
    cfail(c, "%s/type: must be a type name or an array of type names", ci->ptr);
    return -1;
}

static node **compile_array(cctx *c, const cinfo *ci, const cJSON *v, const char *kw, size_t *count,
                            int allow_empty)
{
    if (!cJSON_IsArray(v) || (!allow_empty && !v->child)) {
        cfail(c, "%s/%s: must be a%s array of schemas", ci->ptr, kw, allow_empty ? "n" : " non-empty");
        return NULL;
    }
    size_t n = json_count(v);
    node **arr = calloc_or_fail(c, (n ? n : 1) * sizeof *arr);
    if (!arr)
        return NULL;
    size_t i = 0;
    char *p = ptr_join(c, ci->ptr, kw);
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        arr[i] = compile_child(c, ci, e, tmp_printf(c, "%s/%zu", p ? p : "", i));
        if (c->failed)
            return NULL;
    }
    *count = n;
    return arr;
}

static void add_pending(cctx *c, node **slot, const char *uri, dialect d, const char *loc,
                        int dynamic, const char **name_slot)
{
    pending *p = arena_alloc(&c->tmp, sizeof *p);
    if (!p) {
        cfail(c, "out of memory");
        return;
    }
    *p = (pending){ slot, uri, d, loc, dynamic, name_slot, c->pend };
    c->pend = p;
}

static int parse_ref(cctx *c, const cinfo *ci, node *n, const cJSON *v, int dynamic)
{
    const char *kw = dynamic ? "$dynamicRef" : "$ref";
    if (!cJSON_IsString(v)) {
        cfail(c, "%s/%s: must be a string", ci->ptr, kw);
        return -1;
    }
    char *abs = schema_uri_resolve(ci->res->uri, v->valuestring);
    if (!abs) {
        cfail(c, "out of memory");
        return -1;
    }
    char *u = arena_strdup(&c->tmp, abs);
    free(abs);
    if (!u) {
        cfail(c, "out of memory");
        return -1;
    }
    add_order(n, dynamic ? K_DYNREF : K_REF);
    add_pending(c, dynamic ? &n->dynref : &n->ref, u, ci->d, ci->ptr, dynamic,
                dynamic ? &n->dyn_name : NULL);
    if (dynamic)
        c->s->dynamic = 1;
    return 0;
}

typedef struct kwdef {
    const char *name;
    int vocab;
    int drafts; /* bit (1 << draft) */
} kwdef;

#define DR_ALL 7
#define DR_NEW 3 /* 2020-12 and 2019-09 */

static const kwdef KWDEFS[] = {
    { "$ref", V_CORE, DR_ALL },
    { "$dynamicRef", V_CORE, 1 << D2020 },
    { "type", V_VALIDATION, DR_ALL },
    { "enum", V_VALIDATION, DR_ALL },
    { "const", V_VALIDATION, DR_ALL },
    { "multipleOf", V_VALIDATION, DR_ALL },
    { "maximum", V_VALIDATION, DR_ALL },
    { "minimum", V_VALIDATION, DR_ALL },
    { "exclusiveMaximum", V_VALIDATION, DR_ALL },
    { "exclusiveMinimum", V_VALIDATION, DR_ALL },
    { "maxLength", V_VALIDATION, DR_ALL },
    { "minLength", V_VALIDATION, DR_ALL },
    { "pattern", V_VALIDATION, DR_ALL },
    { "format", V_FORMAT | V_FORMAT_ASSERT, DR_ALL },
    { "prefixItems", V_APPLICATOR, 1 << D2020 },
    { "items", V_APPLICATOR, DR_ALL },
    { "additionalItems", V_APPLICATOR, DR_ALL },
    { "contains", V_APPLICATOR, DR_ALL },
    { "maxContains", V_VALIDATION, DR_NEW },
    { "minContains", V_VALIDATION, DR_NEW },
    { "maxItems", V_VALIDATION, DR_ALL },
    { "minItems", V_VALIDATION, DR_ALL },
    { "uniqueItems", V_VALIDATION, DR_ALL },
    { "properties", V_APPLICATOR, DR_ALL },
    { "patternProperties", V_APPLICATOR, DR_ALL },
    { "additionalProperties", V_APPLICATOR, DR_ALL },
    { "required", V_VALIDATION, DR_ALL },
    { "dependentRequired", V_VALIDATION, DR_NEW },
    { "dependentSchemas", V_APPLICATOR, DR_NEW },
    { "dependencies", V_APPLICATOR, DR_ALL },
    { "propertyNames", V_APPLICATOR, DR_ALL },
    { "maxProperties", V_VALIDATION, DR_ALL },
    { "minProperties", V_VALIDATION, DR_ALL },
    { "allOf", V_APPLICATOR, DR_ALL },
    { "anyOf", V_APPLICATOR, DR_ALL },
    { "oneOf", V_APPLICATOR, DR_ALL },
    { "not", V_APPLICATOR, DR_ALL },
    { "if", V_APPLICATOR, DR_ALL },
    { "unevaluatedItems", V_UNEVAL, DR_NEW },
    { "unevaluatedProperties", V_UNEVAL, DR_NEW },
    /* draft-07 lets content keywords assert; 2020-12 makes them annotations */
    { "contentEncoding", V_CONTENT, 1 << D7 },
    { "contentMediaType", V_CONTENT, 1 << D7 },
};

static int kw_enabled(const char *name, dialect d)
{
    for (size_t i = 0; i < sizeof KWDEFS / sizeof KWDEFS[0]; i++) {
        if (strcmp(KWDEFS[i].name, name) == 0)
            return (KWDEFS[i].drafts & (1 << d.draft)) && (KWDEFS[i].vocab & d.vocab);
    }
    return 0;
}

static int compile_keywords(cctx *c, const cinfo *ci, node *n)
{
    const cJSON *js = ci->js;
    dialect d = ci->d;
    const cJSON *v;
    const char *P = ci->ptr;
#define KW(name) ((v = cJSON_GetObjectItemCaseSensitive(js, name)) != NULL && kw_enabled(name, d))

    if (d.draft == D7 && cJSON_GetObjectItemCaseSensitive(js, "$ref")) {
        /* draft-07: $ref siblings are ignored */
        return parse_ref(c, ci, n, cJSON_GetObjectItemCaseSensitive(js, "$ref"), 0);
    }
    const cJSON *props = NULL, *req = NULL;
    if (KW("properties"))
        props = v;
    if (KW("required"))
        req = v;
    if (props && !cJSON_IsObject(props)) {
        cfail(c, "%s/properties: must be an object", P);
        return -1;
    }
    if (req) {
        if (!cJSON_IsArray(req)) {
            cfail(c, "%s/required: must be an array of strings", P);
            return -1;
        }
        for (const cJSON *e = req->child; e; e = e->next)
            if (!cJSON_IsString(e)) {
                cfail(c, "%s/required: must be an array of strings", P);
                return -1;
            }
    }
    if (props || (req && req->child)) {
        if (build_props(c, n, props, req) < 0)
            return -1;
    }

    for (const cJSON *m = js->child; m && !c->failed; m = m->next) {
        const char *k = m->string;
        if (!kw_enabled(k, d))
            continue;
        if (cJSON_GetObjectItemCaseSensitive(js, k) != m)
            continue; /* duplicate key in the schema: the first one counts */
        v = m;
        if (strcmp(k, "$ref") == 0) {
            parse_ref(c, ci, n, v, 0);
        } else if (strcmp(k, "$dynamicRef") == 0) {
            parse_ref(c, ci, n, v, 1);
        } else if (strcmp(k, "type") == 0) {
            if (parse_type(c, ci, n, v) == 0)
                add_order(n, K_TYPE);
        } else if (strcmp(k, "enum") == 0) {
            if (!cJSON_IsArray(v)) {
                cfail(c, "%s/enum: must be an array", P);
                break;
            }
            n->enum_vals = keep_json(c, v);
            if (!n->enum_vals)
                break;
            n->n_enum = json_count(v);
            n->enum_h = calloc_or_fail(c, (n->n_enum + 1) * sizeof *n->enum_h);
            if (!n->enum_h)
                break;
            size_t i = 0, ns = 0;
            for (const cJSON *e = n->enum_vals->child; e; e = e->next) {
                n->enum_h[i++] = json_hash(e);
                ns += IS_STRING(e);
            }
            n->enum_strs = calloc_or_fail(c, (ns + 1) * sizeof *n->enum_strs);
            if (!n->enum_strs)
                break;
            /* copied next to each other, not where cJSON put them */
            for (const cJSON *e = n->enum_vals->child; e && !c->failed; e = e->next)
                if (IS_STRING(e) &&
                    !(n->enum_strs[n->n_enum_strs++] = arena_strdup(&c->s->a, e->valuestring)))
                    cfail(c, "out of memory");
            n->enum_text = snippet_in_arena(c, v);
            add_order(n, K_ENUM);
        } else if (strcmp(k, "const") == 0) {
            n->const_val = keep_json(c, v);
            n->const_text = snippet_in_arena(c, v);
            add_order(n, K_CONST);
        } else if (strcmp(k, "multipleOf") == 0) {
            if (get_number(c, ci, v, k, &n->multiple_of) < 0)
                break;
            if (n->multiple_of <= 0 || decimal_of(n->multiple_of, &n->multiple_dec) < 0) {
                cfail(c, "%s/multipleOf: must be a number greater than 0", P);
                break;
            }
            add_order(n, K_MULTIPLE_OF);
        } else if (strcmp(k, "maximum") == 0) {
            if (get_number(c, ci, v, k, &n->maximum) == 0)
                add_order(n, K_MAXIMUM);
        } else if (strcmp(k, "minimum") == 0) {
            if (get_number(c, ci, v, k, &n->minimum) == 0)
                add_order(n, K_MINIMUM);
        } else if (strcmp(k, "exclusiveMaximum") == 0) {
            if (get_number(c, ci, v, k, &n->xmaximum) == 0)
                add_order(n, K_XMAXIMUM);
        } else if (strcmp(k, "exclusiveMinimum") == 0) {
            if (get_number(c, ci, v, k, &n->xminimum) == 0)
                add_order(n, K_XMINIMUM);
        } else if (strcmp(k, "maxLength") == 0) {
            if (get_count(c, ci, v, k, &n->max_length) == 0)
                add_order(n, K_MAX_LENGTH);
        } else if (strcmp(k, "minLength") == 0) {
            if (get_count(c, ci, v, k, &n->min_length) == 0)
                add_order(n, K_MIN_LENGTH);
        } else if (strcmp(k, "pattern") == 0) {
            if (!cJSON_IsString(v)) {
                cfail(c, "%s/pattern: must be a string", P);
                break;
            }
            n->pattern = compile_regex(c, ci, v->valuestring, k);
            n->pattern_text = snippet_in_arena(c, v);
            add_order(n, K_PATTERN);
        } else if (strcmp(k, "format") == 0) {
            if (!cJSON_IsString(v)) {
                cfail(c, "%s/format: must be a string", P);
                break;
            }
            int assert = (d.vocab & V_FORMAT_ASSERT) || (c->opts && c->opts->format_assert);
            n->fmt = (uint8_t)schema_format_id(v->valuestring);
            if (assert && n->fmt)
                add_order(n, K_FORMAT);
        } else if (strcmp(k, "prefixItems") == 0) {
            n->prefix = compile_array(c, ci, v, k, &n->n_prefix, 0);
            n->prefix_kw = "prefixItems";
            add_order(n, K_ITEMS);
        } else if (strcmp(k, "items") == 0) {
            if (cJSON_IsArray(v) && d.draft != D2020) {
                n->prefix = compile_array(c, ci, v, k, &n->n_prefix, 1);
                n->prefix_kw = "items";
                const cJSON *ai = cJSON_GetObjectItemCaseSensitive(js, "additionalItems");
                if (ai) {
                    n->items = compile_child(c, ci, ai, ptr_join(c, P, "additionalItems"));
                    n->items_kw = "additionalItems";
                }
            } else if (cJSON_IsArray(v)) {
                /* 2020-12 has no array form; accept it as prefixItems
                 * rather than rejecting older-style schemas */
                if (!n->prefix) {
                    n->prefix = compile_array(c, ci, v, k, &n->n_prefix, 1);
                    n->prefix_kw = "items";
                }
            } else {
                n->items = compile_child(c, ci, v, ptr_join(c, P, k));
                n->items_kw = "items";
            }
            add_order(n, K_ITEMS);
        } else if (strcmp(k, "contains") == 0) {
            n->contains = compile_child(c, ci, v, ptr_join(c, P, k));
            n->min_contains = 1;
            const cJSON *mc;
            if (d.draft != D7 && (mc = cJSON_GetObjectItemCaseSensitive(js, "minContains")) &&
                kw_enabled("minContains", d))
                get_count(c, ci, mc, "minContains", &n->min_contains);
            if (d.draft != D7 && (mc = cJSON_GetObjectItemCaseSensitive(js, "maxContains")) &&
                kw_enabled("maxContains", d)) {
                get_count(c, ci, mc, "maxContains", &n->max_contains);
                n->has_max_contains = 1;
            }
            add_order(n, K_CONTAINS);
        } else if (strcmp(k, "maxItems") == 0) {
            if (get_count(c, ci, v, k, &n->max_items) == 0)
                add_order(n, K_MAX_ITEMS);
        } else if (strcmp(k, "minItems") == 0) {
            if (get_count(c, ci, v, k, &n->min_items) == 0)
                add_order(n, K_MIN_ITEMS);
        } else if (strcmp(k, "uniqueItems") == 0) {
            if (!cJSON_IsBool(v)) {
                cfail(c, "%s/uniqueItems: must be a boolean", P);
                break;
            }
            if (cJSON_IsTrue(v)) {
                n->unique = 1;
                add_order(n, K_UNIQUE);
            }
        } else if (strcmp(k, "properties") == 0) {
            char *pp = ptr_join(c, P, k);
            n->ordered = calloc_or_fail(c, (json_count(v) + 1) * sizeof *n->ordered);
            for (const cJSON *e = v->child; e && n->ordered && !c->failed; e = e->next) {
                prop_ent *pe = props_add(c, n, e->string);
                if (!pe->name) {
                    cfail(c, "out of memory");
                    break;
                }
                if (pe->schema)
                    continue; /* duplicate key: the first one counts */
                pe->schema = compile_child(c, ci, e, ptr_join(c, pp ? pp : "", e->string));
                pe->ord = (uint32_t)n->n_props;
                n->ordered[n->n_props++] = pe;
            }
            add_order(n, K_PROPS);
        } else if (strcmp(k, "patternProperties") == 0) {
            if (!cJSON_IsObject(v)) {
                cfail(c, "%s/patternProperties: must be an object", P);
                break;
            }
            size_t np = json_count(v), i = 0;
            n->pats = calloc_or_fail(c, (np ? np : 1) * sizeof *n->pats);
            char *pp = ptr_join(c, P, k);
            for (const cJSON *e = v->child; e && n->pats && !c->failed; e = e->next, i++) {
                n->pats[i].re = compile_regex(c, ci, e->string, "patternProperties");
                n->pats[i].schema = compile_child(c, ci, e, ptr_join(c, pp ? pp : "", e->string));
            }
            n->n_pats = np;
            add_order(n, K_PROPS);
        } else if (strcmp(k, "additionalProperties") == 0) {
            n->additional = compile_child(c, ci, v, ptr_join(c, P, k));
            add_order(n, K_PROPS);
        } else if (strcmp(k, "required") == 0) {
            size_t nr = json_count(v), i = 0;
            if (!nr)
                continue;
            n->required = calloc_or_fail(c, nr * sizeof *n->required);
            for (const cJSON *e = v->child; e && n->required; e = e->next) {
                prop_ent *pe = props_add(c, n, e->valuestring);
                if (!pe->name) {
                    cfail(c, "out of memory");
                    break;
                }
                if (pe->req >= 0)
                    continue; /* duplicate name */
                pe->req = (int32_t)i;
                pe->reqbit = i < 64 ? 1ull << i : 0;
                n->required[i++] = pe->name;
            }
            n->n_required = i;
            add_order(n, K_REQUIRED);
        } else if (strcmp(k, "dependentRequired") == 0 || strcmp(k, "dependentSchemas") == 0 ||
                   strcmp(k, "dependencies") == 0) {
            if (!cJSON_IsObject(v)) {
                cfail(c, "%s/%s: must be an object", P, k);
                break;
            }
            size_t nd = json_count(v);
            dep_req *dr = calloc_or_fail(c, (n->n_dreq + nd + 1) * sizeof *dr);
            dep_sch *ds = calloc_or_fail(c, (n->n_dsch + nd + 1) * sizeof *ds);
            if (!dr || !ds)
                break;
            if (n->n_dreq)
                memcpy(dr, n->dreq, n->n_dreq * sizeof *dr);
            if (n->n_dsch)
                memcpy(ds, n->dsch, n->n_dsch * sizeof *ds);
            n->dreq = dr;
            n->dsch = ds;
            char *pp = ptr_join(c, P, k);
            for (const cJSON *e = v->child; e && !c->failed; e = e->next) {
                int as_req = strcmp(k, "dependentRequired") == 0 ||
                             (strcmp(k, "dependencies") == 0 && cJSON_IsArray(e));
                if (as_req) {
                    if (!cJSON_IsArray(e)) {
                        cfail(c, "%s/%s/%s: must be an array of strings", P, k, e->string);
                        break;
                    }
                    dep_req *q = &n->dreq[n->n_dreq++];
                    q->name = arena_strdup(&c->s->a, e->string);
                    q->kw = arena_strdup(&c->s->a, ptr_join(c, k, e->string));
                    q->n = json_count(e);
                    q->names = calloc_or_fail(c, (q->n + 1) * sizeof *q->names);
                    size_t i = 0;
                    for (const cJSON *x = e->child; x && q->names; x = x->next) {
                        if (!cJSON_IsString(x)) {
                            cfail(c, "%s/%s/%s: must be an array of strings", P, k, e->string);
                            break;
                        }
                        q->names[i++] = arena_strdup(&c->s->a, x->valuestring);
                    }
                    add_order(n, K_DEP_REQUIRED);
                } else {
                    dep_sch *q = &n->dsch[n->n_dsch++];
                    q->name = arena_strdup(&c->s->a, e->string);
                    q->schema = compile_child(c, ci, e, ptr_join(c, pp ? pp : "", e->string));
                    add_order(n, K_DEP_SCHEMAS);
                }
            }
        } else if (strcmp(k, "propertyNames") == 0) {
            n->property_names = compile_child(c, ci, v, ptr_join(c, P, k));
            add_order(n, K_PROPERTY_NAMES);
        } else if (strcmp(k, "maxProperties") == 0) {
            if (get_count(c, ci, v, k, &n->max_props) == 0)
                add_order(n, K_MAX_PROPS);
        } else if (strcmp(k, "minProperties") == 0) {
            if (get_count(c, ci, v, k, &n->min_props) == 0)
                add_order(n, K_MIN_PROPS);
        } else if (strcmp(k, "allOf") == 0) {
            n->all_of = compile_array(c, ci, v, k, &n->n_all_of, 0);
            add_order(n, K_ALL_OF);
        } else if (strcmp(k, "anyOf") == 0) {
            n->any_of = compile_array(c, ci, v, k, &n->n_any_of, 0);
            add_order(n, K_ANY_OF);
        } else if (strcmp(k, "oneOf") == 0) {
            n->one_of = compile_array(c, ci, v, k, &n->n_one_of, 0);
            add_order(n, K_ONE_OF);
        } else if (strcmp(k, "not") == 0) {
            n->not_ = compile_child(c, ci, v, ptr_join(c, P, k));
            add_order(n, K_NOT);
        } else if (strcmp(k, "if") == 0) {
            n->if_ = compile_child(c, ci, v, ptr_join(c, P, k));
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(js, "then");
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(js, "else");
            if (t)
                n->then_ = compile_child(c, ci, t, ptr_join(c, P, "then"));
            if (e)
                n->else_ = compile_child(c, ci, e, ptr_join(c, P, "else"));
            add_order(n, K_IF);
        } else if (strcmp(k, "contentEncoding") == 0 || strcmp(k, "contentMediaType") == 0) {
            if (!cJSON_IsString(v)) {
                cfail(c, "%s/%s: must be a string", P, k);
                break;
            }
            if (strcmp(k, "contentEncoding") == 0 && strcmp(v->valuestring, "base64") == 0)
                n->content_b64 = 1;
            else if (strcmp(k, "contentMediaType") == 0 && strncasecmp(v->valuestring, "application/json", 16) == 0 &&
                     strchr("; \t", v->valuestring[16])) /* parameters may follow; "application/jsonx" is not it */
                n->content_json = 1;
            else
                continue;
            add_order(n, K_CONTENT);
        } else if (strcmp(k, "unevaluatedItems") == 0) {
            n->uneval_items = compile_child(c, ci, v, ptr_join(c, P, k));
            n->uneval |= UE_ITEMS;
        } else if (strcmp(k, "unevaluatedProperties") == 0) {
            n->uneval_props = compile_child(c, ci, v, ptr_join(c, P, k));
            n->uneval |= UE_PROPS;
        }
    }
    {
        int hp = 0, hr = 0;
        for (int i = 0; i < n->norder; i++) {
            hp |= n->order[i] == K_PROPS;
            hr |= n->order[i] == K_REQUIRED;
        }
        n->req_in_props = hp && hr && n->n_required <= 64;
        n->req_all = n->n_required >= 64 ? ~0ull : (1ull << n->n_required) - 1;
    }
    n->leaf = !n->uneval;
    for (int i = 0; i < n->norder; i++) {
        switch (n->order[i]) {
        case K_REF: case K_DYNREF: case K_ITEMS: case K_CONTAINS: case K_PROPS:
        case K_DEP_SCHEMAS: case K_PROPERTY_NAMES: case K_ALL_OF: case K_ANY_OF:
        case K_ONE_OF: case K_NOT: case K_IF: case K_UNEVAL_ITEMS: case K_UNEVAL_PROPS:
            n->leaf = 0;
            break;
        default:
            break;
        }
    }
    for (int i = 0; i < n->norder; i++)
        n->kwmask |= KB(n->order[i]);
    n->fast = n->leaf && (n->kwmask & ~KM_FAST) == 0;
    /* a schema object without any (enabled) keyword accepts everything,
     * like `true` (and produces no annotations) */
    if (n->norder == 0 && !n->uneval)
        n->boolean = B_TRUE;
    /* unevaluated* see the annotations of every other keyword: last */
    if (n->uneval & UE_ITEMS)
        add_order(n, K_UNEVAL_ITEMS);
    if (n->uneval & UE_PROPS)
        add_order(n, K_UNEVAL_PROPS);
#undef KW
    return c->failed ? -1 : 0;
}

static node *compile_node(cctx *c, const cinfo *ci)
{
    node *n = pmap_get(&c->memo, ci->js);
    if (n || c->failed)
        return n;
    if (++c->depth > MAX_COMPILE_DEPTH) {
        cfail(c, "%s: schema nesting too deep (limit %d)", loc_of(ci), MAX_COMPILE_DEPTH);
        c->depth--;
        return NULL;
    }
    n = calloc_or_fail(c, sizeof *n);
    if (!n || pmap_put(&c->memo, ci->js, n) < 0) {
        cfail(c, "out of memory");
        goto done;
    }
    n->loc = arena_strdup(&c->s->a, ci->ptr);
    n->loc_len = n->loc ? strlen(n->loc) : 0;
    n->res = runtime_res(c, ci->res);
    if (cJSON_IsBool(ci->js)) {
        n->boolean = cJSON_IsTrue(ci->js) ? B_TRUE : B_FALSE;
        goto done;
    }
    if (!cJSON_IsObject(ci->js)) {
        cfail(c, "%s: schema must be an object or a boolean", loc_of(ci));
        goto done;
    }
    compile_keywords(c, ci, n);
done:
    c->depth--;
    return n;
}

static void resolve_pending(cctx *c)
{
    while (c->pend && !c->failed) {
        pending *p = c->pend;
        c->pend = p->next;
        const cinfo *ci = resolve_uri(c, p->uri, p->d);
        if (!ci) {
            if (c->err && strncmp(c->err, "unresolvable", 12) == 0) {
                char tmp[512];
                snprintf(tmp, sizeof tmp, "%s", c->err);
                snprintf(c->err, c->errlen, "%s/%s: %s", p->loc, p->dynamic ? "$dynamicRef" : "$ref",
                         tmp);
            }
            return;
        }
        *p->slot = compile_node(c, ci);
        if (p->dynamic) {
            /* dynamic only when the fragment is a name that the initial
             * target declares with $dynamicAnchor */
            const char *h = strchr(p->uri, '#');
            const cJSON *da = cJSON_IsObject(ci->js)
                                  ? cJSON_GetObjectItemCaseSensitive(ci->js, "$dynamicAnchor")
                                  : NULL;
            if (h && h[1] && h[1] != '/' && cJSON_IsString(da) && strcmp(da->valuestring, h + 1) == 0)
                *p->dyn_name_slot = arena_strdup(&c->s->a, h + 1);
        }
    }
}

/* For $dynamicRef: every resource that can be on the dynamic scope gets
 * its dynamic anchors compiled. */
static void compile_dynamic_anchors(cctx *c)
{
    int changed = 1;
    while (changed && !c->failed) {
        changed = 0;
        for (cres *r = c->resources; r && !c->failed; r = r->next) {
            if (!r->rt || !r->ndyn || r->rt->ndyn)
                continue;
            rres *rt = r->rt;
            node **nodes = calloc_or_fail(c, r->ndyn * sizeof *nodes);
            const char **names = calloc_or_fail(c, r->ndyn * sizeof *names);
            if (!nodes || !names)
                return;
            for (size_t i = 0; i < r->ndyn && !c->failed; i++) {
                const cinfo *ci = pmap_get(&c->infos, r->dyn_js[i]);
                names[i] = arena_strdup(&c->s->a, r->dyn_names[i]);
                nodes[i] = ci ? compile_node(c, ci) : NULL;
            }
            resolve_pending(c);
            rt->dyn_names = names;
            rt->dyn_nodes = nodes;
            rt->ndyn = r->ndyn;
            changed = 1;
        }
    }
}

/* A node that is only a $ref adds an evaluation step and nothing else:
 * point its users at the target.  Not with $dynamicRef, whose scope needs
 * every resource on the way.  Chains of pure refs that loop stay as they
 * are (the runtime depth limit reports them). */
static node *skip_refs(node *x)
{
    for (int hops = 0; x && hops < 64; hops++) {
        if (x->boolean || x->norder != 1 || x->order[0] != K_REF || x->uneval || !x->ref)
            return x;
        x = x->ref;
    }
    return x;
}

static void collapse_refs(schema *s, const pmap *memo)
{
    if (s->dynamic)
        return;
    for (size_t i = 0; i < memo->cap; i++) {
        node *n = memo->e[i].key ? memo->e[i].val : NULL;
        if (!n || n->boolean)
            continue;
        for (size_t k = 0; k < n->n_prefix; k++)
            n->prefix[k] = skip_refs(n->prefix[k]);
        for (size_t k = 0; k < n->n_all_of; k++)
            n->all_of[k] = skip_refs(n->all_of[k]);
        for (size_t k = 0; k < n->n_any_of; k++)
            n->any_of[k] = skip_refs(n->any_of[k]);
        for (size_t k = 0; k < n->n_one_of; k++)
            n->one_of[k] = skip_refs(n->one_of[k]);
        for (size_t k = 0; n->props && k <= n->props_mask; k++)
            if (n->props[k].schema)
                n->props[k].schema = skip_refs(n->props[k].schema);
        for (size_t k = 0; k < n->n_pats; k++)
            n->pats[k].schema = skip_refs(n->pats[k].schema);
        for (size_t k = 0; k < n->n_dsch; k++)
            n->dsch[k].schema = skip_refs(n->dsch[k].schema);
        node **single[] = { &n->items, &n->contains, &n->additional, &n->property_names,
                            &n->not_, &n->if_, &n->then_, &n->else_, &n->ref,
                            &n->uneval_items, &n->uneval_props };
        for (size_t k = 0; k < sizeof single / sizeof single[0]; k++)
            if (*single[k])
                *single[k] = skip_refs(*single[k]);
    }
    s->root = skip_refs(s->root);
}

static void type_list(int types, char *buf, size_t n);

static mpart arena_text(cctx *c, const char *s, size_t l)
{
    mpart t = { arena_strndup(&c->s->a, s, l), l };
    if (!t.s) {
        cfail(c, "out of memory");
        t.l = 0;
    }
    return t;
}

/* s and its length (NULL: none) */
static mpart text_part(const char *s)
{
    return (mpart){ s, s ? strlen(s) : 0 };
}

/* the n parts one after the other, NUL-terminated, in the schema's arena */
static mpart arena_join(cctx *c, const mpart *parts, int n)
{
    size_t l = 0;
    for (int i = 0; i < n; i++)
        l += parts[i].l;
    mpart t = { arena_alloc(&c->s->a, l + 1), l };
    if (!t.s) {
        cfail(c, "out of memory");
        t.l = 0;
        return t;
    }
    char *w = (char *)t.s;
    for (int i = 0; i < n; i++) {
        memcpy(w, parts[i].s, parts[i].l);
        w += parts[i].l;
    }
    *w = '\0';
    return t;
}

/* The texts of reports that do not depend on the instance, made here once
 * (reports point at them): the start of the `type` message, node.kt (each
 * keyword's location, `expected` text, whole message where constant) and
 * the names of
 * `required` as JSON and as messages. */
static void report_texts(cctx *c, node *n)
{
    if (n->kwmask & KB(K_TYPE)) {
        char list[128], msg[160];
        type_list(n->types, list, sizeof list);
        int l = snprintf(msg, sizeof msg, "expected %s, got ", list);
        n->type_msg = arena_text(c, msg, (size_t)l);
    }
    uint64_t present = n->kwmask & KM_TEXTS;
    if (present) {
        n->kt = arena_alloc(&c->s->a, (size_t)__builtin_popcountll(present) * sizeof *n->kt);
        if (!n->kt) {
            cfail(c, "out of memory");
            return;
        }
        ktext *t = n->kt;
        for (int k = 0; k < K__COUNT; k++) {
            static const char *const names[K__COUNT] = {
                [K_TYPE] = "type", [K_ENUM] = "enum", [K_CONST] = "const",
                [K_MULTIPLE_OF] = "multipleOf", [K_MAXIMUM] = "maximum", [K_MINIMUM] = "minimum",
                [K_XMAXIMUM] = "exclusiveMaximum", [K_XMINIMUM] = "exclusiveMinimum",
                [K_MAX_LENGTH] = "maxLength", [K_MIN_LENGTH] = "minLength", [K_PATTERN] = "pattern",
                [K_FORMAT] = "format", [K_MAX_ITEMS] = "maxItems", [K_MIN_ITEMS] = "minItems",
                [K_MAX_PROPS] = "maxProperties", [K_MIN_PROPS] = "minProperties",
                [K_REQUIRED] = "required",
            };
            if (!(present & KB(k)))
                continue;
            memset(t, 0, sizeof *t);
            mpart kl[3] = { { n->loc, n->loc_len }, MPL("/"), { names[k], strlen(names[k]) } };
            t->kloc = arena_join(c, kl, 3);
            double v = 0;
            int bound = 1;
            mpart head = { NULL, 0 }; /* of a constant message: head, expected */
            switch (k) {
            case K_MULTIPLE_OF: v = n->multiple_of; break;
            case K_MAXIMUM: v = n->maximum; break;
            case K_MINIMUM: v = n->minimum; break;
            case K_XMAXIMUM: v = n->xmaximum; break;
            case K_XMINIMUM: v = n->xminimum; break;
            case K_MAX_LENGTH: v = (double)n->max_length; break;
            case K_MIN_LENGTH: v = (double)n->min_length; break;
            case K_MAX_ITEMS: v = (double)n->max_items; break;
            case K_MIN_ITEMS: v = (double)n->min_items; break;
            case K_MAX_PROPS: v = (double)n->max_props; break;
            case K_MIN_PROPS: v = (double)n->min_props; break;
            default:
                bound = 0;
                if (k == K_ENUM) {
                    t->expected = text_part(n->enum_text);
                    head = MPL("value must be one of ");
                } else if (k == K_CONST) {
                    t->expected = text_part(n->const_text);
                    head = MPL("value must be ");
                } else if (k == K_PATTERN) {
                    t->expected = text_part(n->pattern_text);
                    head = MPL("string does not match the pattern ");
                } else if (k == K_TYPE) {
                    t->expected = text_part(n->type_text);
                }
                break;
            }
            if (bound) {
                char buf[40];
                fmt_num(v, buf, sizeof buf);
                t->expected = arena_text(c, buf, strlen(buf));
            } else if (head.s && t->expected.s) {
                mpart m[2] = { head, t->expected };
                t->msg = arena_join(c, m, 2);
            }
            t++;
        }
    }
    if (n->n_required) {
        n->req_text = arena_alloc(&c->s->a, n->n_required * sizeof *n->req_text);
        n->req_msg = arena_alloc(&c->s->a, n->n_required * sizeof *n->req_msg);
        if (!n->req_text || !n->req_msg) {
            cfail(c, "out of memory");
            return;
        }
        for (size_t i = 0; i < n->n_required; i++) {
            char buf[SNIPPET_MAX + 8];
            size_t l = str_json(n->required[i], buf);
            n->req_text[i] = arena_text(c, buf, l);
            mpart m[3] = { MPL("missing required property \""),
                           { n->required[i], strlen(n->required[i]) }, MPL("\"") };
            n->req_msg[i] = arena_join(c, m, 3);
        }
    }
}

static const prop_ent *prop_find(const node *n, const char *name);

/* The value branch b requires of member `name`: the const (or one-value
 * enum) of its `properties` entry, on b or on what its $refs lead to (all
 * of them apply); NULL when there is none. */
static const cJSON *branch_const(const node *b, const char *name)
{
    for (int hops = 0; b && !b->boolean && hops < 8; hops++) {
        const prop_ent *pe = prop_find(b, name);
        const node *x = pe ? pe->schema : NULL;
        if (x && !x->boolean) {
            if (x->kwmask & KB(K_CONST))
                return x->const_val;
            if ((x->kwmask & KB(K_ENUM)) && x->n_enum == 1)
                return x->enum_vals->child;
        }
        b = (b->kwmask & KB(K_REF)) ? b->ref : NULL;
    }
    return NULL;
}

/* A discriminator of the branches br[0..nb), or NULL: the first member
 * of the first branch's properties that every branch holds to a value of
 * its own, no two alike.  Evaluation then goes straight to the branch an
 * object names: the others fail on that member whatever the rest is. */
static const discrim *find_discrim(cctx *c, node *const *br, size_t nb)
{
    if (nb < 2 || nb > 64 || br[0]->boolean)
        return NULL;
    const cJSON *vals[64];
    for (const node *b0 = br[0]; b0; b0 = (b0->kwmask & KB(K_REF)) ? b0->ref : NULL) {
        for (size_t p = 0; p < b0->n_props; p++) {
            const char *name = b0->ordered[p]->name;
            size_t i = 0;
            for (; i < nb; i++) {
                vals[i] = br[i]->boolean ? NULL : branch_const(br[i], name);
                /* A discriminator names its branch with a scalar.  Consts of
                 * arrays or objects were compared whole, for each property
                 * of each anyOf: a 100 KB schema took 8 s to compile. */
                if (!vals[i] || IS_ARRAY(vals[i]) || IS_OBJECT(vals[i]))
                    break;
                size_t j = 0;
                while (j < i && vals[j] != vals[i] && !json_equal(vals[j], vals[i]))
                    j++;
                if (j < i)
                    break;
            }
            if (i < nb)
                continue;
            discrim *d = calloc_or_fail(c, sizeof *d);
            const cJSON **v = calloc_or_fail(c, nb * sizeof *v);
            if (!d || !v)
                return NULL;
            memcpy(v, vals, nb * sizeof *v);
            d->name = name;
            d->vals = v;
            return d;
        }
    }
    return NULL;
}

/* Last step of a compile: the copies that evaluation reads (after
 * collapse_refs has settled the schema pointers). */
static void finish_nodes(cctx *c)
{
    for (size_t i = 0; i < c->memo.cap && !c->failed; i++) {
        node *n = c->memo.e[i].key ? c->memo.e[i].val : NULL;
        if (!n)
            continue;
        report_texts(c, n);
        if (!n->boolean) {
            n->any_disc = find_discrim(c, n->any_of, n->n_any_of);
            n->one_disc = find_discrim(c, n->one_of, n->n_one_of);
        }
        if (!n->n_props)
            continue;
        n->ordv = calloc_or_fail(c, n->n_props * sizeof *n->ordv);
        for (size_t k = 0; n->ordv && k < n->n_props; k++) {
            n->ordv[k] = *n->ordered[k];
            if (n->ordered[k]->name == n->ordered[k]->iname)
                n->ordv[k].name = n->ordv[k].iname;
        }
    }
}

void schema_free(schema *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_regexes; i++)
        schema_regex_free(s->regexes[i]);
    free(s->regexes);
    for (size_t i = 0; i < s->n_jsons; i++)
        cJSON_Delete(s->jsons[i]);
    free(s->jsons);
    arena_free(&s->a);
    free(s);
}

/* v, its siblings after it and their members, as cJSON_Duplicate made
 * them (nesting as deep as that recursion went). */
static size_t json_mem_bytes(const cJSON *v)
{
    size_t b = 0;
    for (; v; v = v->next) {
        b += util_heap_bytes(sizeof *v);
        if (v->string && !(v->type & cJSON_StringIsConst))
            b += util_heap_bytes(strlen(v->string) + 1);
        if (v->valuestring)
            b += util_heap_bytes(strlen(v->valuestring) + 1);
        b += json_mem_bytes(v->child);
    }
    return b;
}

size_t schema_mem_bytes(const schema *s)
{
    if (!s)
        return 0;
    size_t b = util_heap_bytes(sizeof *s);
    for (const arena_blk *k = s->a.head; k; k = k->next)
        b += util_heap_bytes(sizeof *k + k->cap);
    if (s->regexes)
        b += util_heap_bytes(s->cap_regexes * sizeof *s->regexes);
    for (size_t i = 0; i < s->n_regexes; i++)
        b += schema_regex_mem_bytes(s->regexes[i]);
    if (s->jsons)
        b += util_heap_bytes(s->cap_jsons * sizeof *s->jsons);
    for (size_t i = 0; i < s->n_jsons; i++)
        b += json_mem_bytes(s->jsons[i]);
    return b;
}

schema *schema_compile(schema_registry *reg, const cJSON *doc, const schema_options *opts,
                       char *err, size_t errlen)
{
    return schema_compile_base(reg, doc, NULL, opts, err, errlen);
}

schema *schema_compile_base(schema_registry *reg, const cJSON *doc, const char *base_uri,
                            const schema_options *opts, char *err, size_t errlen)
{
    cctx c;
    memset(&c, 0, sizeof c);
    c.reg = reg;
    c.opts = opts;
    c.err = err;
    c.errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
    if (!doc) {
        cfail(&c, "schema_compile: NULL document");
        return NULL;
    }
    c.s = calloc(1, sizeof *c.s);
    if (!c.s) {
        cfail(&c, "out of memory");
        return NULL;
    }
    c.s->max_violations = opts && opts->max_violations ? opts->max_violations : DEFAULT_MAX_VIOLATIONS;
    dialect d = { (opts && opts->default_draft == SCHEMA_DRAFT_7) ? D7 : D2020, V_ALL };
    char *base = schema_uri_resolve(base_uri ? base_uri : DEFAULT_BASE_URI, "");
    if (!base) {
        cfail(&c, "out of memory");
        schema_free(c.s);
        return NULL;
    }
    base[schema_uri_base_len(base)] = '\0';
    cres *r = new_res(&c, base);
    free(base);
    if (r && index_node(&c, doc, r, d, "", 1, 0) == 0) {
        cinfo *ci = pmap_get(&c.infos, doc);
        /* the retrieval URI names the root too, whatever its $id says */
        if (ci && !smap_get(&c.uris, r->uri))
            put_uri(&c, r->uri, ci);
        if (!ci)
            cfail(&c, "/: schema must be an object or a boolean");
        else
            c.s->root = compile_node(&c, ci);
        resolve_pending(&c);
        if (c.s->dynamic)
            compile_dynamic_anchors(&c);
        if (!c.failed)
            collapse_refs(c.s, &c.memo);
        finish_nodes(&c);
    }
    smap_free(&c.uris);
    pmap_free(&c.infos);
    pmap_free(&c.memo);
    pmap_free(&c.docs);
    arena_free(&c.tmp);
    if (c.failed) {
        schema_free(c.s);
        return NULL;
    }
    return c.s;
}

/* ------------------------------------------------------------------ */
/* validation                                                           */

typedef struct evset {
    uint64_t *w;
    size_t n;
    uint64_t inl;
} evset;

static int ev_init(evset *e, size_t n)
{
    e->n = n;
    e->inl = 0;
    if (n <= 64) {
        e->w = &e->inl;
        return 0;
    }
    e->w = calloc((n + 63) / 64, sizeof *e->w);
    return e->w ? 0 : -1;
}

static void ev_free(evset *e)
{
    if (e->w != &e->inl)
        free(e->w);
}

static void ev_set(evset *e, size_t i)
{
    if (i < e->n)
        e->w[i >> 6] |= 1ull << (i & 63);
}

static int ev_get(const evset *e, size_t i)
{
    return i < e->n && (e->w[i >> 6] >> (i & 63)) & 1;
}

static void ev_or(evset *dst, const evset *src)
{
    size_t words = (dst->n + 63) / 64;
    for (size_t i = 0; i < words; i++)
        dst->w[i] |= src->w[i];
}

typedef struct vrec {
    schema_violation v;
    size_t depth;
    size_t blen; /* the strings of v lie in [v.path, v.path + blen) */
    size_t plen, klen; /* strlen of v.path and v.keyword_location */
} vrec;

typedef struct pathseg {
    const char *key; /* NULL: array index */
    size_t idx;      /* key: its length + 1 when known to need no escaping, else 0 */
    size_t end; /* where its text ends in vctx.pbuf, once rendered */
} pathseg;

typedef struct vchunk {
    struct vchunk *next;
    max_align_t data[];
} vchunk;

typedef struct vctx {
    const schema *s;
    int record;
    int depth;
    size_t npath;
    size_t prend; /* path[0 .. prend) are rendered in pbuf (see path_render) */
    size_t nscope;
    vrec *recs; /* recs_inl, or malloc'd when more are found */
    size_t nrec, caprec, dropped, store_cap;
    char *sp;       /* scratch memory: next free byte */
    size_t sleft;   /* bytes left at sp */
    vchunk *chunks; /* heap chunks of the scratch memory */
    char *blk;      /* reporting pass: the caller's output block (see out_block_open) */
    const cJSON *str_inst; /* cache: last string checked */
    const char *str_ptr;
    long long str_cps;
    size_t str_len;
    char ebuf[SNIPPET_MAX + 8]; /* `expected` text of the report being made */
    unsigned rx_calls;
    long long rx_start_ms; /* coarse clock at the first regex match */
    unsigned long evals;   /* (sub)schemas evaluated: see SCHEMA_EVAL_MAX */
    const schema_regex *rx_miss_re; /* cache: the last failed match */
    const char *rx_miss_str;
    char limit_msg[200];
    pathseg path[MAX_EVAL_DEPTH + 4];
    char pbuf[1024]; /* the instance path as text, up to path[prend - 1] */
    const rres *scope[MAX_EVAL_DEPTH + 4];
    vrec recs_inl[32];
    max_align_t scratch_inl[4096 / sizeof(max_align_t)];
} vctx;

static int eval_full(vctx *c, const node *n, const cJSON *inst, evset *ev);
static int eval_quiet(vctx *c, const node *n, const cJSON *inst);

/* Evaluates n on inst: 1 valid, 0 invalid, -1 limit.  ev: annotations of
 * the evaluated members/items, or NULL when nobody needs them.  The first
 * pass (no reports, no annotations) takes a leaner walk. */
static inline int eval(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    return (!ev && !c->record) ? eval_quiet(c, n, inst) : eval_full(c, n, inst, ev);
}


/* The instance path is only needed for reports: without reporting it is
 * not maintained.  (Reporting is never switched on inside a region where
 * it is off, so pushes and pops stay paired.)  key NULL: array index idx;
 * else idx is the key's length + 1 when it needs no escaping, or 0. */
static inline void push_seg(vctx *c, const char *key, size_t idx)
{
    if (c->record) {
        if (c->prend > c->npath) /* the rendered text of this level is stale */
            c->prend = c->npath;
        c->path[c->npath].key = key;
        c->path[c->npath++].idx = idx;
    }
}

static inline void push_key(vctx *c, const char *key)
{
    push_seg(c, key, 0);
}

/* push_key for a member matched by a `properties` entry: its name's
 * length and escaping are known from the schema, so rendering the path
 * does not scan the key. */
static inline void push_prop(vctx *c, const char *key, const prop_ent *pe)
{
    push_seg(c, key, pe->plain ? pe->len + 1 : 0);
}

static inline void push_idx(vctx *c, size_t i)
{
    push_seg(c, NULL, i);
}

static inline void pop_path(vctx *c)
{
    if (c->record)
        c->npath--;
}

/* memcpy for the short pieces reports are made of (keys, keywords,
 * message parts: mostly under 16 bytes), without a library call each:
 * two overlapping loads cover any length from 4 to 16. */
static inline void copy_short(char *d, const char *s, size_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        memcpy(d, s, n);
    }
}

/* Writes the instance path as a JSON Pointer into buf (cap bytes);
 * returns the length it needs (without the NUL). */
static size_t path_into(const vctx *c, char *buf, size_t cap)
{
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < cap) buf[o] = (ch); o++; } while (0)
    for (size_t i = 0; i < c->npath; i++) {
        PUT('/');
        if (c->path[i].key) {
            const char *key = c->path[i].key;
            size_t kl = strcspn(key, "~/");
            if (!key[kl]) { /* nothing to escape (the usual case) */
                if (o < cap)
                    memcpy(buf + o, key, o + kl < cap ? kl : cap - o);
                o += kl;
                continue;
            }
            for (const char *k = key; *k; k++) {
                if (*k == '~') {
                    PUT('~');
                    PUT('0');
                } else if (*k == '/') {
                    PUT('~');
                    PUT('1');
                } else {
                    PUT(*k);
                }
            }
        } else {
            char digits[24];
            size_t nd = 0, v = c->path[i].idx;
            do {
                digits[nd++] = (char)('0' + v % 10);
                v /= 10;
            } while (v);
            while (nd) { /* PUT evaluates its argument only when it fits */
                nd--;
                PUT(digits[nd]);
            }
        }
    }
#undef PUT
    if (cap)
        buf[o < cap ? o : cap - 1] = '\0';
    return o;
}

/* Decimal digits of u into buf (24 bytes, no NUL); returns their count. */
static size_t fmt_u(char *buf, unsigned long long u)
{
    char digits[24];
    size_t nd = 0;
    do {
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (size_t i = 0; i < nd; i++)
        buf[i] = digits[nd - 1 - i];
    return nd;
}

/* The instance path as text in c->pbuf, rendering only the levels pushed
 * since the last call: sibling violations (/items/1/sku, /items/1/price)
 * share the text of their parents.  Returns its length, or (size_t)-1
 * when it does not fit pbuf (then path_into() writes it). */
static size_t path_render(vctx *c)
{
    size_t i = c->prend < c->npath ? c->prend : c->npath; /* pops leave prend above */
    size_t o = i ? c->path[i - 1].end : 0;
    const size_t cap = sizeof c->pbuf;
    for (; i < c->npath; i++) {
        pathseg *s = &c->path[i];
        if (o + 1 >= cap)
            goto too_long;
        c->pbuf[o++] = '/';
        if (s->key) {
            const char *key = s->key;
            size_t kl = 0; /* keys are short: no strcspn call */
            if (s->idx)
                kl = s->idx - 1;
            else
                while (key[kl] && key[kl] != '~' && key[kl] != '/')
                    kl++;
            if (!key[kl]) { /* nothing to escape (the usual case) */
                if (o + kl >= cap)
                    goto too_long;
                copy_short(c->pbuf + o, key, kl);
                o += kl;
            } else {
                for (const char *k = key; *k; k++) {
                    if (o + 2 >= cap)
                        goto too_long;
                    if (*k == '~' || *k == '/') {
                        c->pbuf[o++] = '~';
                        c->pbuf[o++] = *k == '~' ? '0' : '1';
                    } else {
                        c->pbuf[o++] = *k;
                    }
                }
            }
        } else {
            char digits[24];
            size_t nd = fmt_u(digits, s->idx);
            if (o + nd >= cap)
                goto too_long;
            memcpy(c->pbuf + o, digits, nd);
            o += nd;
        }
        s->end = o;
    }
    c->prend = i;
    return o;
too_long:
    c->prend = i;
    return (size_t)-1;
}

/* Scratch memory of a reporting pass: the strings of the violations found
 * so far (bump-allocated, first from the context itself, then from heap
 * chunks), released all at once when the validation ends.  The kept
 * violations are copied into one block for the caller. */
static void *scratch_alloc(vctx *c, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > c->sleft) {
        size_t cap = n > 16384 ? n : 16384;
        vchunk *k = malloc(sizeof *k + cap);
        if (!k)
            return NULL;
        k->next = c->chunks;
        c->chunks = k;
        c->sp = (char *)k->data;
        c->sleft = cap;
    }
    void *p = c->sp;
    c->sp += n;
    c->sleft -= n;
    return p;
}

static void scratch_free(vctx *c)
{
    vchunk *k = c->chunks;
    while (k) {
        vchunk *next = k->next;
        free(k);
        k = next;
    }
    c->chunks = NULL;
    free(c->blk); /* NULL once handed to the caller */
    c->blk = NULL;
    if (c->recs != c->recs_inl)
        free(c->recs);
    c->recs = NULL;
}

/* Fills v from the pieces (copied into the scratch memory).  kw may be
 * NULL (location = loc).  -1 when out of memory. */
/* The keyword location: loc, then "/" kw when lk (strlen(kw) + 1, or 0 for
 * no keyword), NUL-terminated at b.  Returns the bytes written. */
static inline size_t kloc_put(char *b, const char *loc, size_t ll, const char *kw, size_t lk)
{
    copy_short(b, loc, ll);
    if (lk) {
        b[ll] = '/';
        copy_short(b + ll + 1, kw, lk);
    } else {
        b[ll] = '\0';
    }
    return ll + lk + 1;
}

static int pack_violation(vctx *c, vrec *r, const char *code, const char *path,
                          size_t lp, const char *loc, const char *kw, const char *msg, size_t lm,
                          const char *expected, const char *actual, size_t la)
{
    schema_violation *v = &r->v;
    size_t ll = strlen(loc), lk = kw && *kw ? strlen(kw) + 1 : 0;
    size_t le = expected ? strlen(expected) + 1 : 0;
    size_t lal = actual ? la + 1 : 0;
    r->blen = lp + 1 + ll + lk + 1 + lm + 1 + le + lal;
    r->plen = lp;
    r->klen = ll + lk;
    char *b = scratch_alloc(c, r->blen);
    memset(v, 0, sizeof *v);
    if (!b)
        return -1;
    v->code = code;
    v->path = b;
    memcpy(b, path, lp);
    b[lp] = '\0';
    b += lp + 1;
    v->keyword_location = b;
    b += kloc_put(b, loc, ll, kw, lk);
    v->message = b;
    memcpy(b, msg, lm);
    b[lm] = '\0';
    b += lm + 1;
    if (expected) {
        v->expected = b;
        memcpy(b, expected, le);
        b += le;
    }
    if (actual) {
        v->actual = b;
        memcpy(b, actual, la);
        b[la] = '\0';
    }
    return 0;
}

static vrec *rec_grow(vctx *c);

/* The slot of the next record (c->nrec < c->store_cap), growing the list
 * when full.  NULL when out of memory. */
static inline vrec *rec_slot(vctx *c)
{
    return c->nrec < c->caprec ? &c->recs[c->nrec] : rec_grow(c);
}

COLD static vrec *rec_grow(vctx *c)
{
    size_t nc = c->caprec * 2;
    vrec *nr = c->recs == c->recs_inl ? malloc(nc * sizeof *nr)
                                      : realloc(c->recs, nc * sizeof *nr);
    if (!nr)
        return NULL;
    if (c->recs == c->recs_inl)
        memcpy(nr, c->recs_inl, c->nrec * sizeof *nr);
    c->recs = nr;
    c->caprec = nc;
    return &c->recs[c->nrec];
}

static int push_rec(vctx *c, const vrec *r)
{
    vrec *slot = c->nrec < c->store_cap ? rec_slot(c) : NULL;
    if (!slot) {
        c->dropped++;
        return 0;
    }
    *slot = *r;
    c->nrec++;
    return 0;
}

static inline size_t mput(char *buf, size_t cap, size_t o, const char *p, size_t l)
{
    if (o < cap)
        memcpy(buf + o, p, o + l < cap ? l : cap - o);
    return o + l;
}

/* vsnprintf for the conversions the messages use (%s %d %zu %llu %lld
 * %%), without the stdio machinery, which costs more than the rest of a
 * report.  Returns the length needed, or (size_t)-1 for any other
 * conversion (the caller then uses vsnprintf). */
static size_t msg_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    size_t o = 0;
#define MPUT(ch) do { if (o + 1 < cap) buf[o] = (ch); o++; } while (0)
#define MPUTS(p, l) (o = mput(buf, cap, o, (p), (l)))
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            const char *e = strchrnul(f, '%');
            MPUTS(f, (size_t)(e - f));
            f = e - 1;
            continue;
        }
        unsigned long long u;
        int neg = 0;
        f++;
        if (f[0] == 's') {
            const char *s = va_arg(ap, const char *);
            if (!s)
                s = "(null)";
            MPUTS(s, strlen(s));
            continue;
        } else if (f[0] == '%') {
            MPUT('%');
            continue;
        } else if (f[0] == 'd') {
            int v = va_arg(ap, int);
            neg = v < 0;
            u = neg ? 0ull - (unsigned long long)(long long)v : (unsigned long long)v;
        } else if (f[0] == 'z' && f[1] == 'u') {
            u = va_arg(ap, size_t);
            f++;
        } else if (f[0] == 'l' && f[1] == 'l' && f[2] == 'u') {
            u = va_arg(ap, unsigned long long);
            f += 2;
        } else if (f[0] == 'l' && f[1] == 'l' && f[2] == 'd') {
            long long v = va_arg(ap, long long);
            neg = v < 0;
            u = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
            f += 2;
        } else {
            return (size_t)-1;
        }
        char digits[24];
        size_t nd = fmt_u(digits, u);
        if (neg)
            MPUT('-');
        for (size_t i = 0; i < nd; i++) { /* MPUT evaluates its argument only when it fits */
            MPUT(digits[i]);
        }
    }
#undef MPUT
#undef MPUTS
    if (cap)
        buf[o < cap ? o : cap - 1] = '\0';
    return o;
}

/* Violation codes are the static strings of schema.h: usually one
 * pointer, compared as text in case the compiler kept copies (the first
 * letter tells most of them apart). */
static inline int code_is(const char *a, const char *b)
{
    return a == b || (a[0] == b[0] && strcmp(a, b) == 0);
}

/* What a report borrows (points at) instead of copying: report_p's kw is
 * the keyword's whole location, its expected or its only message part (a
 * NUL-terminated text of the compiled schema, or a literal). */
enum { RB_KLOC = 1, RB_EXPECTED = 2, RB_MESSAGE = 4 };

/* A sketch of a violation: what report_branches() looks at (code, depth,
 * expected), no text.  le: strlen(expected). */
static int report_sketch(vctx *c, const char *code, const char *expected, size_t le, unsigned rb)
{
    const char *e = (rb & RB_EXPECTED) ? expected : NULL;
    if (expected && !e) {
        char *x;
        e = x = scratch_alloc(c, le + 1);
        if (!x) {
            c->dropped++;
            return 0;
        }
        memcpy(x, expected, le + 1);
    }
    vrec *r = rec_slot(c);
    if (!r) {
        c->dropped++;
        return 0;
    }
    memset(r, 0, sizeof *r);
    r->depth = c->npath;
    r->v.code = code;
    r->v.expected = e;
    c->nrec++;
    return 0;
}

/* Records a violation (reporting pass only), its strings written straight
 * into the scratch memory and the record straight into the list.  kw: the
 * keyword (NULL = none: the location is n->loc) and its length; expected
 * (NULL = none) and its length; the message is the concatenation of the
 * nmp parts; actual: the text of inst when the caller has it already (a
 * number it formatted), else NULL (inst is then written as a snippet).
 * rb: RB_ flags, what the violation points at instead of copying (texts
 * that live as long as the schema).  Returns 0 so callers can `return
 * report_p(...)`.  c->record: 1 full reports, 2 sketches (while
 * anyOf/oneOf branches are being compared). */
static int report_p(vctx *c, const node *n, const char *kw, size_t lk, const char *code,
                    const cJSON *inst, const mpart *actual, const char *expected, size_t le,
                    const mpart *mp, int nmp, unsigned rb)
{
    if (!c->record)
        return 0;
    if (c->nrec >= c->store_cap) {
        c->dropped++;
        return 0;
    }
    if (c->record == 2) /* report_branches() reads `expected` of these only */
        return report_sketch(c, code,
                             code_is(code, SCHEMA_WRONG_TYPE) || code_is(code, SCHEMA_CONST_MISMATCH) ||
                                     code_is(code, SCHEMA_ENUM_MISMATCH)
                                 ? expected : NULL,
                             le, rb);
    size_t ml = 0;
    if (!(rb & RB_MESSAGE))
        for (int i = 0; i < nmp; i++)
            ml += mp[i].l;
    size_t pl = path_render(c);
    int cached = pl != (size_t)-1;
    if (!cached)
        pl = path_into(c, NULL, 0);
    /* the keyword location: borrowed (kw itself, or n->loc when there is
     * no keyword) or written here (n->loc "/" kw) */
    int own_kloc = kw && lk && !(rb & RB_KLOC);
    size_t ll = n->loc_len, lkk = own_kloc ? lk + 1 : 0;
    size_t lee = expected && !(rb & RB_EXPECTED) ? le + 1 : 0;
    size_t need = pl + 1 + (own_kloc ? ll + lkk + 1 : 0) + (rb & RB_MESSAGE ? 0 : ml + 1) + lee +
                  (inst ? SNIPPET_MAX + 4 : 0);
    char *b0 = need <= c->sleft ? c->sp : NULL;
    if (!b0) {
        /* a fresh chunk; what is left of this one stays unused */
        b0 = scratch_alloc(c, need);
        if (!b0) {
            c->dropped++;
            return 0;
        }
        c->sp = b0;
        c->sleft += (need + 7) & ~(size_t)7;
    }
    vrec *r = rec_slot(c);
    if (!r) {
        c->dropped++;
        return 0;
    }
    char *b = b0;
    if (cached)
        copy_short(b, c->pbuf, pl);
    else
        path_into(c, b, pl + 1);
    b[pl] = '\0';
    b += pl + 1;
    if (own_kloc) {
        r->v.keyword_location = b;
        b += kloc_put(b, n->loc, ll, kw, lkk);
        r->klen = ll + lkk;
    } else if (kw && lk) {
        r->v.keyword_location = kw;
        r->klen = lk;
    } else {
        r->v.keyword_location = n->loc;
        r->klen = ll;
    }
    if (rb & RB_MESSAGE) {
        r->v.message = mp[0].s;
    } else {
        char *m = b;
        for (int i = 0; i < nmp; i++) {
            copy_short(b, mp[i].s, mp[i].l);
            b += mp[i].l;
        }
        *b++ = '\0';
        r->v.message = m;
    }
    r->v.expected = expected;
    if (expected && !(rb & RB_EXPECTED)) {
        r->v.expected = b;
        copy_short(b, expected, le);
        b[le] = '\0';
        b += le + 1;
    }
    r->v.actual = NULL;
    if (inst) {
        size_t al;
        if (actual) {
            copy_short(b, actual->s, actual->l);
            al = actual->l;
        } else {
            jw w = { b, 0, SNIPPET_MAX, 0 };
            jw_value(&w, inst, 0);
            if (w.full) {
                memcpy(b + w.len, "...", 3);
                w.len += 3;
            }
            al = w.len;
        }
        b[al] = '\0';
        r->v.actual = b;
        b += al + 1;
    }
    r->v.code = code;
    r->v.path = b0;
    r->depth = c->npath;
    r->blen = (size_t)(b - b0);
    r->plen = pl;
    size_t used = (r->blen + 7) & ~(size_t)7;
    c->sp += used;
    c->sleft -= used;
    c->nrec++;
    return 0;
}

/* report_p() with a printf-style message (%s %d %zu %llu %lld %%, or
 * anything vsnprintf takes), for the rarer reports. */
static int report(vctx *c, const node *n, const char *kw, const char *code, const cJSON *inst,
                  const char *expected, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int report(vctx *c, const node *n, const char *kw, const char *code, const cJSON *inst,
                  const char *expected, const char *fmt, ...)
{
    if (!c->record)
        return 0;
    if (c->record != 1 || c->nrec >= c->store_cap)
        return report_p(c, n, kw, 0, code, inst, NULL, expected, expected ? strlen(expected) : 0,
                        NULL, 0, 0);
    char mbuf[512];
    char *msg = mbuf;
    va_list ap;
    va_start(ap, fmt);
    size_t ml = msg_vformat(mbuf, sizeof mbuf, fmt, ap);
    va_end(ap);
    if (ml == (size_t)-1) {
        va_start(ap, fmt);
        int r = vsnprintf(mbuf, sizeof mbuf, fmt, ap);
        va_end(ap);
        ml = r < 0 ? 0 : (size_t)r;
        if (ml >= sizeof mbuf && (msg = scratch_alloc(c, ml + 1)) != NULL) {
            va_start(ap, fmt);
            vsnprintf(msg, ml + 1, fmt, ap);
            va_end(ap);
        }
    } else if (ml >= sizeof mbuf && (msg = scratch_alloc(c, ml + 1)) != NULL) {
        va_start(ap, fmt);
        msg_vformat(msg, ml + 1, fmt, ap);
        va_end(ap);
    }
    mpart m = { msg ? msg : "", msg ? ml : 0 };
    return report_p(c, n, kw, kw ? strlen(kw) : 0, code, inst, NULL, expected,
                    expected ? strlen(expected) : 0, &m, 1, 0);
}

/* `expected` texts built in the context's scratch buffer */
static const char *num_text(vctx *c, double d)
{
    fmt_num(d, c->ebuf, sizeof c->ebuf);
    return c->ebuf;
}

static const char *str_text(vctx *c, const char *s)
{
    str_json(s, c->ebuf);
    return c->ebuf;
}

static int limit(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int limit(vctx *c, const char *fmt, ...)
{
    if (!c->limit_msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->limit_msg, sizeof c->limit_msg, fmt, ap);
        va_end(ap);
        /* cut at its buffer inside a name or a pattern's character, the
         * message made the violation, and the event, no UTF-8 */
        util_utf8_cut_end(c->limit_msg);
    }
    return -1;
}

/* Every regex match goes through here: 1 match, 0 no match, -1 the match
 * or the time budget of this validation hit a limit (message set). */
static int rx_match(vctx *c, const schema_regex *re, const char *s, size_t len, const node *n,
                    const char *kw)
{
    if ((c->rx_calls++ & 15) == 0) {
        /* coarse clock (about 10 ns); checked every 16 matches */
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
        long long now = (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
        if (!c->rx_start_ms)
            c->rx_start_ms = now;
        else if (now - c->rx_start_ms > SCHEMA_REGEX_BUDGET_MS)
            return limit(c, "regular expressions took more than %d ms in this validation (at %s/%s)",
                         SCHEMA_REGEX_BUDGET_MS, n->loc, kw);
    }
    int r = schema_regex_match(re, s, len);
    if (r < 0)
        return limit(c, "regular expression %s hit its match limit at %s/%s",
                     schema_regex_source(re), n->loc, kw);
    if (r == 0) {
        /* the ordered walk that reports a failed `pattern` (after
         * str_fast() found it) need not match again */
        c->rx_miss_re = re;
        c->rx_miss_str = s;
    }
    return r;
}

static int inst_types(const cJSON *v)
{
    switch (json_type(v)) {
    case cJSON_NULL: return T_NULL;
    case cJSON_True:
    case cJSON_False: return T_BOOLEAN;
    case cJSON_Object: return T_OBJECT;
    case cJSON_Array: return T_ARRAY;
    case cJSON_String: return T_STRING;
    case cJSON_Number:
        return is_integral(v->valuedouble)
                   ? (T_NUMBER | T_INTEGER) : T_NUMBER;
    default: return 0;
    }
}

static const char *inst_type_name(const cJSON *v)
{
    int t = inst_types(v);
    if (t & T_INTEGER)
        return "integer";
    switch (t) {
    case T_NULL: return "null";
    case T_BOOLEAN: return "boolean";
    case T_OBJECT: return "object";
    case T_ARRAY: return "array";
    case T_STRING: return "string";
    default: return "number";
    }
}

static void type_list(int types, char *buf, size_t n)
{
    static const struct { int bit; const char *name; } names[] = {
        { T_STRING, "string" }, { T_NUMBER, "number" }, { T_INTEGER, "integer" },
        { T_OBJECT, "object" }, { T_ARRAY, "array" }, { T_BOOLEAN, "boolean" }, { T_NULL, "null" },
    };
    const char *items[8];
    size_t k = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(types & names[i].bit))
            continue;
        if (names[i].bit == T_INTEGER && (types & T_NUMBER))
            continue;
        items[k++] = names[i].name;
    }
    buf[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < k; i++) {
        const char *sep = i == 0 ? "" : (i + 1 == k ? " or " : ", ");
        size_t ls = strlen(sep), li = strlen(items[i]);
        if (len + ls + li >= n)
            break; /* an item fits whole or not at all */
        memcpy(buf + len, sep, ls);
        memcpy(buf + len + ls, items[i], li + 1);
        len += ls + li;
    }
    if (k == 0)
        snprintf(buf, n, "nothing");
}

static int string_info(vctx *c, const cJSON *inst, size_t *len, long long *cps)
{
    if (c->str_inst != inst || c->str_ptr != inst->valuestring) {
        c->str_inst = inst;
        c->str_ptr = inst->valuestring;
        c->str_len = strlen(inst->valuestring);
        c->str_cps = utf8_count(inst->valuestring, c->str_len);
    }
    *len = c->str_len;
    *cps = c->str_cps;
    return c->str_cps >= 0;
}

static int bad_utf8(vctx *c, const node *n, const char *kw)
{
    return report(c, n, kw, SCHEMA_INVALID_VALUE, NULL, NULL, "string is not valid UTF-8");
}

/* "value X <mid> BOUND" for a number that is out of the bound of keyword
 * k; the value's text is its `actual` text too. */
static int report_bound(vctx *c, const node *n, int k, const char *code, const cJSON *inst,
                        mpart mid)
{
    char xs[40];
    mpart x = { xs, 0 };
    if (c->record == 1)
        x = num_text_of(inst, xs, sizeof xs);
    const ktext *t = kt_of(n, k);
    mpart m[4] = { MPL("value "), x, mid, t->expected };
    return report_p(c, n, t->kloc.s, t->kloc.l, code, inst, &x, t->expected.s, t->expected.l, m, 4,
                    RB_KLOC | RB_EXPECTED);
}

/* "<head>COUNT<mid>BOUND" for a length or count out of the bound of
 * keyword k (its `expected` text made at compile time). */
static int report_count(vctx *c, const node *n, int k, const char *code, const cJSON *inst,
                        mpart head, uint64_t cnt, mpart mid, uint64_t bound)
{
    char a[24], b[24];
    mpart m[4] = { head, { a, fmt_u(a, cnt) }, mid, { b, fmt_u(b, bound) } };
    const ktext *t = kt_of(n, k);
    return report_p(c, n, t->kloc.s, t->kloc.l, code, inst, NULL, t->expected.s, t->expected.l, m, 4,
                    RB_KLOC | RB_EXPECTED);
}

NOINLINE static int kw_numbers(vctx *c, const node *n, int k, const cJSON *inst)
{
    if (!IS_NUMBER(inst))
        return 1;
    double x = inst->valuedouble;
    switch (k) {
    case K_MINIMUM:
        if (x >= n->minimum)
            return 1;
        return report_bound(c, n, k, SCHEMA_OUT_OF_RANGE, inst,
                            MPL(" is less than the minimum "));
    case K_MAXIMUM:
        if (x <= n->maximum)
            return 1;
        return report_bound(c, n, k, SCHEMA_OUT_OF_RANGE, inst,
                            MPL(" is greater than the maximum "));
    case K_XMINIMUM:
        if (x > n->xminimum)
            return 1;
        return report_bound(c, n, k, SCHEMA_OUT_OF_RANGE, inst,
                            MPL(" must be greater than "));
    case K_XMAXIMUM:
        if (x < n->xmaximum)
            return 1;
        return report_bound(c, n, k, SCHEMA_OUT_OF_RANGE, inst,
                            MPL(" must be less than "));
    default: /* K_MULTIPLE_OF */
        if (is_multiple(x, inst->valuestring, n->multiple_of, &n->multiple_dec))
            return 1;
        return report_bound(c, n, k, SCHEMA_NOT_MULTIPLE, inst,
                            MPL(" is not a multiple of "));
    }
}

NOINLINE static int kw_strings(vctx *c, const node *n, int k, const cJSON *inst)
{
    if (!IS_STRING(inst))
        return 1;
    size_t len;
    long long cps;
    switch (k) {
    case K_MIN_LENGTH:
        if (!string_info(c, inst, &len, &cps))
            return bad_utf8(c, n, "minLength");
        if ((uint64_t)cps >= n->min_length)
            return 1;
        return report_count(c, n, k, SCHEMA_TOO_SHORT, inst, MPL("string has "),
                            (uint64_t)cps, cps == 1 ? MPL(" character, fewer than the minimum length ")
                                                    : MPL(" characters, fewer than the minimum length "),
                            n->min_length);
    case K_MAX_LENGTH:
        if (!string_info(c, inst, &len, &cps))
            return bad_utf8(c, n, "maxLength");
        if ((uint64_t)cps <= n->max_length)
            return 1;
        return report_count(c, n, k, SCHEMA_TOO_LONG, inst, MPL("string has "),
                            (uint64_t)cps, MPL(" characters, more than the maximum length "), n->max_length);
    case K_PATTERN: {
        if (!string_info(c, inst, &len, &cps))
            return bad_utf8(c, n, "pattern");
        int r = c->rx_miss_re == n->pattern && c->rx_miss_str == inst->valuestring
                    ? 0 : rx_match(c, n->pattern, inst->valuestring, len, n, "pattern");
        if (r < 0)
            return -1;
        if (r)
            return 1;
        const ktext *t = kt_of(n, K_PATTERN);
        return report_p(c, n, t->kloc.s, t->kloc.l, SCHEMA_PATTERN_MISMATCH, inst, NULL,
                        t->expected.s, t->expected.l, &t->msg, 1, RB_KLOC | RB_EXPECTED | RB_MESSAGE);
    }
    default: { /* K_FORMAT */
        if (!string_info(c, inst, &len, &cps))
            return bad_utf8(c, n, "format");
        if (schema_format_check(n->fmt, inst->valuestring, len))
            return 1;
        return report(c, n, "format", SCHEMA_FORMAT_MISMATCH, inst,
                      str_text(c, schema_format_name(n->fmt)), "string is not a valid %s",
                      schema_format_name(n->fmt));
    }
    }
}

static int b64_val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* RFC 4648 base64 (padding optional); decoded bytes in *out (malloc). */
static int b64_decode(const char *s, size_t n, char **out, size_t *outlen)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return -1;
    char *buf = malloc(n * 3 / 4 + 4);
    if (!buf)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) {
            free(buf);
            return -1;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (char)((acc >> bits) & 0xFF);
        }
    }
    buf[o] = '\0';
    *out = buf;
    *outlen = o;
    return 0;
}

NOINLINE static int kw_content(vctx *c, const node *n, const cJSON *inst)
{
    if (!IS_STRING(inst))
        return 1;
    const char *text = inst->valuestring;
    size_t len = strlen(text);
    char *dec = NULL;
    if (n->content_b64) {
        if (b64_decode(text, len, &dec, &len) < 0)
            return report(c, n, "contentEncoding", SCHEMA_INVALID_VALUE, inst, "\"base64\"",
                          "string is not valid base64");
        text = dec;
    }
    int ok = 1;
    if (n->content_json) {
        /* as strictly as an answer is read: cJSON took "{} trailing" */
        size_t err_at;
        cJSON *doc = util_utf8_valid(text, len) ? jsonin_parse_all(text, len, &err_at) : NULL;
        ok = doc != NULL;
        jsonin_free(doc);
    }
    free(dec);
    if (ok)
        return 1;
    return report(c, n, "contentMediaType", SCHEMA_INVALID_VALUE, inst,
                  "\"application/json\"", "string content is not a valid JSON document");
}

static int kw_enum_const(vctx *c, const node *n, int k, const cJSON *inst);
static int kw_counts(vctx *c, const node *n, int k, const cJSON *inst);
static int kw_unique(vctx *c, const node *n, const cJSON *inst);
static int kw_required(vctx *c, const node *n, const cJSON *inst);
static int kw_dep_required(vctx *c, const node *n, const cJSON *inst);

COLD static void report_type(vctx *c, const node *n, const cJSON *inst)
{
    if (!c->record)
        return;
    const char *got = inst_type_name(inst);
    mpart m[2] = { n->type_msg, { got, strlen(got) } };
    const ktext *t = kt_of(n, K_TYPE);
    report_p(c, n, t->kloc.s, t->kloc.l, SCHEMA_WRONG_TYPE, inst, NULL, t->expected.s, t->expected.l,
             m, 2, RB_KLOC | RB_EXPECTED);
}

/* cJSON type (one bit) -> T_ bit; integers are told apart separately */
static const uint8_t JT_TYPE[256] = {
    [cJSON_False] = T_BOOLEAN, [cJSON_True] = T_BOOLEAN, [cJSON_NULL] = T_NULL,
    [cJSON_Number] = T_NUMBER, [cJSON_String] = T_STRING, [cJSON_Array] = T_ARRAY,
    [cJSON_Object] = T_OBJECT,
};

static inline int type_ok(int types, const cJSON *v)
{
    int t = JT_TYPE[JT(v)];
    if (types & t)
        return 1;
    return t == T_NUMBER && (types & T_INTEGER) && is_integral(v->valuedouble);
}

static int enum_has(const node *n, const cJSON *inst)
{
    if (IS_STRING(inst) && n->n_enum_strs <= 32) {
        /* a string equals only a string member: compare those directly */
        const char *x = inst->valuestring;
        for (size_t i = 0; i < n->n_enum_strs; i++)
            if (n->enum_strs[i][0] == x[0] && str_eq(n->enum_strs[i], x))
                return 1;
        return 0;
    }
    if (n->n_enum <= 8) {
        for (const cJSON *e = n->enum_vals->child; e; e = e->next)
            if (json_equal(inst, e))
                return 1;
        return 0;
    }
    uint64_t h = json_hash(inst);
    size_t i = 0;
    for (const cJSON *e = n->enum_vals->child; e; e = e->next, i++)
        if (n->enum_h[i] == h && json_equal(inst, e))
            return 1;
    return 0;
}

NOINLINE static int str_fast(vctx *c, const node *n, uint64_t m, const cJSON *inst)
{
    size_t len = strlen(inst->valuestring);
    long long cps = utf8_count(inst->valuestring, len);
    if (cps < 0)
        goto fail;
    if ((m & KB(K_MIN_LENGTH)) && (uint64_t)cps < n->min_length)
        goto fail;
    if ((m & KB(K_MAX_LENGTH)) && (uint64_t)cps > n->max_length)
        goto fail;
    if ((m & KB(K_FORMAT)) && !schema_format_check(n->fmt, inst->valuestring, len))
        goto fail;
    if (m & KB(K_PATTERN)) /* a miss is remembered by rx_match() */
        return rx_match(c, n->pattern, inst->valuestring, len, n, "pattern");
    return 1;
fail:
    /* the ordered walk that reports the failure measures the string
     * again: let it find the answer here */
    c->str_inst = inst;
    c->str_ptr = inst->valuestring;
    c->str_len = len;
    c->str_cps = cps;
    return 0;
}

static inline int num_fast(const node *n, uint64_t m, const cJSON *inst)
{
    double x = inst->valuedouble;
    if ((m & KB(K_MAXIMUM)) && !(x <= n->maximum))
        return 0;
    if ((m & KB(K_MINIMUM)) && !(x >= n->minimum))
        return 0;
    if ((m & KB(K_XMAXIMUM)) && !(x < n->xmaximum))
        return 0;
    if ((m & KB(K_XMINIMUM)) && !(x > n->xminimum))
        return 0;
    if ((m & KB(K_MULTIPLE_OF)) && !is_multiple(x, inst->valuestring, n->multiple_of, &n->multiple_dec))
        return 0;
    return 1;
}

static inline int cnt_fast(const node *n, uint64_t m, const cJSON *inst)
{
    uint64_t cnt = json_count(inst);
    if (IS_ARRAY(inst))
        return !((m & KB(K_MIN_ITEMS)) && cnt < n->min_items) &&
               !((m & KB(K_MAX_ITEMS)) && cnt > n->max_items);
    return !((m & KB(K_MIN_PROPS)) && cnt < n->min_props) &&
           !((m & KB(K_MAX_PROPS)) && cnt > n->max_props);
}

/* All keywords of a `fast` leaf at once, by instance type rather than in
 * keyword order, and without reporting.  1 when every one holds; -1 when
 * the pattern (checked last, so everything else held and the ordered walk
 * would have come to it too) hit a limit; 0 otherwise: the caller then
 * takes the ordered walk, which finds and reports the failures. */
static inline __attribute__((always_inline)) int leaf_fast(vctx *c, const node *n,
                                                            const cJSON *inst)
{
    uint64_t m = n->kwmask;
    if ((m & KB(K_TYPE)) && !type_ok(n->types, inst))
        return 0;
    if ((m & KB(K_CONST)) && !json_equal(inst, n->const_val))
        return 0;
    if ((m & KB(K_ENUM)) && !enum_has(n, inst))
        return 0;
    switch (JT(inst)) {
    case cJSON_String: return (m & KM_STR) ? str_fast(c, n, m, inst) : 1;
    case cJSON_Number: return (m & KM_NUM) ? num_fast(n, m, inst) : 1;
    case cJSON_Array:
    case cJSON_Object: return (m & KM_CNT) ? cnt_fast(n, m, inst) : 1;
    default: return 1;
    }
}

/* Keywords that only assert on the instance itself (no subschema). */
static inline __attribute__((always_inline)) int assert_kw(vctx *c, const node *n, int k,
                                                            const cJSON *inst)
{
    int r;
    switch (k) {
    case K_TYPE:
        r = type_ok(n->types, inst);
        if (!r)
            report_type(c, n, inst);
        return r;
    case K_ENUM:
    case K_CONST: return kw_enum_const(c, n, k, inst);
    /* bounds: the passing case inline, reporting out of line */
    case K_MAXIMUM:
        return (!IS_NUMBER(inst) || inst->valuedouble <= n->maximum) ? 1 : kw_numbers(c, n, k, inst);
    case K_MINIMUM:
        return (!IS_NUMBER(inst) || inst->valuedouble >= n->minimum) ? 1 : kw_numbers(c, n, k, inst);
    case K_XMAXIMUM:
        return (!IS_NUMBER(inst) || inst->valuedouble < n->xmaximum) ? 1 : kw_numbers(c, n, k, inst);
    case K_XMINIMUM:
        return (!IS_NUMBER(inst) || inst->valuedouble > n->xminimum) ? 1 : kw_numbers(c, n, k, inst);
    case K_MULTIPLE_OF: return kw_numbers(c, n, k, inst);
    case K_MAX_LENGTH:
    case K_MIN_LENGTH:
    case K_PATTERN:
    case K_FORMAT: return IS_STRING(inst) ? kw_strings(c, n, k, inst) : 1;
    case K_MAX_ITEMS:
    case K_MIN_ITEMS:
    case K_MAX_PROPS:
    case K_MIN_PROPS: return kw_counts(c, n, k, inst);
    case K_UNIQUE: return kw_unique(c, n, inst);
    case K_REQUIRED:
        /* without reporting, kw_props checks required in its pass */
        return (n->req_in_props && !c->record) ? 1 : kw_required(c, n, inst);
    case K_DEP_REQUIRED: return kw_dep_required(c, n, inst);
    case K_CONTENT: return kw_content(c, n, inst);
    default: return 1;
    }
}


/* A schema of assertions only: no recursion, scope or annotations to
 * manage.  Shared by eval and eval_child. */
static inline __attribute__((always_inline)) int eval_leaf(vctx *c, const node *n, const cJSON *inst)
{
    if (n->fast) {
        int r = leaf_fast(c, n, inst);
        if (r)
            return r;
    }
    int ok = 1;
    for (int i = 0; i < n->norder; i++) {
        int r = assert_kw(c, n, n->order[i], inst);
        if (r <= 0) {
            if (r < 0)
                return -1;
            ok = 0;
            if (!c->record)
                return 0;
        }
    }
    return ok;
}

/* eval() of a child instance: schemas with assertions only are checked
 * here without a call (most property and item schemas are like that). */
static inline __attribute__((always_inline)) int eval_child(vctx *c, const node *n,
                                                             const cJSON *inst)
{
    if (n->leaf)
        return eval_leaf(c, n, inst);
    return eval(c, n, inst, NULL);
}

NOINLINE static int kw_items(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    if (!IS_ARRAY(inst))
        return 1;
    int ok = 1;
    size_t i = 0;
    for (const cJSON *it = inst->child; it; it = it->next, i++) {
        const node *sub;
        if (i < n->n_prefix)
            sub = n->prefix[i];
        else if (n->items)
            sub = n->items;
        else
            break;
        if (sub->boolean == B_FALSE && i >= n->n_prefix) {
            size_t cnt = i;
            for (const cJSON *x = it; x; x = x->next)
                cnt++;
            report(c, sub, NULL, SCHEMA_TOO_MANY_ITEMS, NULL, NULL,
                   "array has %zu items, but only %zu are allowed", cnt, n->n_prefix);
            return 0;
        }
        push_idx(c, i);
        int r = eval_child(c, sub, it);
        pop_path(c);
        if (r < 0)
            return -1;
        if (r == 0) {
            ok = 0;
            if (!c->record)
                return 0;
        }
        if (ev)
            ev_set(ev, i);
    }
    return ok;
}

NOINLINE static int kw_contains(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    if (!IS_ARRAY(inst))
        return 1;
    uint64_t count = 0;
    size_t i = 0;
    int saved = c->record;
    c->record = 0;
    for (const cJSON *it = inst->child; it; it = it->next, i++) {
        int r = eval(c, n->contains, it, NULL);
        if (r < 0) {
            c->record = saved;
            return -1;
        }
        if (r) {
            count++;
            if (ev)
                ev_set(ev, i);
            else if (!n->has_max_contains && count >= n->min_contains)
                break;
            else if (n->has_max_contains && count > n->max_contains)
                break;
        }
    }
    c->record = saved;
    if (count < n->min_contains) {
        if (count == 0)
            return report(c, n, "contains", SCHEMA_NO_MATCH, NULL, NULL,
                          "array has no item that matches the contains schema");
        return report(c, n, "minContains", SCHEMA_NO_MATCH, NULL, num_text(c, (double)n->min_contains),
                      "array has %llu items that match the contains schema, fewer than %llu",
                      (unsigned long long)count, (unsigned long long)n->min_contains);
    }
    if (n->has_max_contains && count > n->max_contains)
        return report(c, n, "maxContains", SCHEMA_TOO_MANY_ITEMS, NULL,
                      num_text(c, (double)n->max_contains),
                      "array has %llu items that match the contains schema, more than %llu",
                      (unsigned long long)count, (unsigned long long)n->max_contains);
    return 1;
}

typedef struct hidx {
    uint64_t h;
    size_t i;
    const cJSON *v;
} hidx;

static int cmp_hidx(const void *a, const void *b)
{
    const hidx *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

NOINLINE static int kw_unique(vctx *c, const node *n, const cJSON *inst)
{
    if (!IS_ARRAY(inst))
        return 1;
    size_t cnt = json_count(inst);
    if (cnt < 2)
        return 1;
    if (cnt <= 8) {
        /* small arrays: pairwise, in the order that finds the same pair as
         * the sorted scan below (the smallest second index, then the
         * smallest first one) */
        size_t b = 1;
        for (const cJSON *y = inst->child->next; y; y = y->next, b++) {
            size_t a = 0;
            for (const cJSON *x = inst->child; x != y; x = x->next, a++)
                if (json_equal(x, y))
                    return report(c, n, "uniqueItems", SCHEMA_NOT_UNIQUE, NULL, NULL,
                                  "array items %zu and %zu are equal; items must be unique", a, b);
        }
        return 1;
    }
    hidx inl[32];
    hidx *hs = cnt <= 32 ? inl : malloc(cnt * sizeof *hs);
    if (!hs)
        return limit(c, "out of memory checking uniqueItems");
    size_t i = 0;
    for (const cJSON *a = inst->child; a; a = a->next, i++)
        hs[i] = (hidx){ json_hash(a), i, a };
    /* sorted by hash, equal values are neighbours within a run of equal
     * hashes: n log n instead of n^2 on hostile input */
    qsort(hs, cnt, sizeof *hs, cmp_hidx);
    size_t dup_a = 0, dup_b = SIZE_MAX;
    for (size_t r = 0; r < cnt;) {
        size_t e = r + 1;
        while (e < cnt && hs[e].h == hs[r].h)
            e++;
        for (size_t x = r; x < e; x++)
            for (size_t y = x + 1; y < e; y++)
                if (hs[y].i < dup_b && json_equal(hs[x].v, hs[y].v)) {
                    dup_a = hs[x].i < hs[y].i ? hs[x].i : hs[y].i;
                    dup_b = hs[x].i < hs[y].i ? hs[y].i : hs[x].i;
                }
        if (dup_b != SIZE_MAX && !c->record)
            break;
        r = e;
    }
    if (hs != inl)
        free(hs);
    if (dup_b == SIZE_MAX)
        return 1;
    return report(c, n, "uniqueItems", SCHEMA_NOT_UNIQUE, NULL, NULL,
                  "array items %zu and %zu are equal; items must be unique", dup_a, dup_b);
}

static const prop_ent *prop_find(const node *n, const char *name)
{
    if (!n->props)
        return NULL;
    size_t len;
    uint64_t h = hash_cstr(name, &len);
    size_t i = h & n->props_mask;
    while (n->props[i].name) {
        const prop_ent *e = &n->props[i];
        if (e->h == h && e->len == len && memcmp(e->name, name, len) == 0)
            return e;
        i = (i + 1) & n->props_mask;
    }
    return NULL;
}

/* Whether `name` (an instance's member name) is e's name.  A name of
 * fewer than 16 bytes is compared as two 8-byte words against the copy in
 * e->iname, without a branch on where the names differ: the byte loop's
 * exit, at a different length for every member, was mispredicted about
 * once a member, and the name comparison was a third of the walk over an
 * object.  The words of `name` may reach past its NUL (the bytes there
 * are masked off) but not past its page: a name too close to the end of
 * one takes the byte loop.  AddressSanitizer would report the read past
 * the string's allocation, so it does not look at this function. */
__attribute__((no_sanitize_address)) static inline int ent_name_eq(const prop_ent *e, const char *name)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (e->len < 16 && ((uintptr_t)name & 4095) <= 4096 - 16) {
        uint64_t a0, a1, b0, b1;
        memcpy(&a0, e->iname, 8);
        memcpy(&a1, e->iname + 8, 8);
        memcpy(&b0, name, 8);
        memcpy(&b1, name + 8, 8);
        size_t k = e->len + 1; /* with the NUL */
        uint64_t m0 = k >= 8 ? ~0ull : (1ull << (k * 8)) - 1;
        uint64_t m1 = k <= 8 ? 0 : k >= 16 ? ~0ull : (1ull << ((k - 8) * 8)) - 1;
        return (((a0 ^ b0) & m0) | ((a1 ^ b1) & m1)) == 0;
    }
#endif
    return str_eq(e->name, name);
}

/* The entry of member `name` of an instance object.  *cur: the entry
 * expected next in schema order (LLMs mostly emit keys in that order, and
 * one comparison is cheaper than hashing the name). */
static inline const prop_ent *member_ent(const node *n, const char *name, size_t *cur)
{
    size_t k = *cur;
    if (k < n->n_props) {
        const prop_ent *e = &n->ordv[k];
        if (ent_name_eq(e, name)) {
            *cur = k + 1;
            return e;
        }
        /* the instance left an optional property out: the one after */
        if (k + 1 < n->n_props && e[1].name[0] == name[0] && ent_name_eq(e + 1, name)) {
            *cur = k + 2;
            return e + 1;
        }
    }
    const prop_ent *pe = prop_find(n, name);
    if (pe && pe->schema)
        *cur = pe->ord + 1;
    return pe;
}

static int unexpected(vctx *c, const node *sub, const cJSON *m)
{
    if (!c->record)
        return 0;
    push_key(c, m->string);
    mpart p[3] = { MPL("property \""), { m->string, c->record == 1 ? strlen(m->string) : 0 },
                   MPL("\" is not allowed") };
    report_p(c, sub, NULL, 0, SCHEMA_UNEXPECTED_FIELD, m, NULL, NULL, 0, p, 3, 0);
    pop_path(c);
    return 0;
}

static int key_utf8_ok(const char *k)
{
    return utf8_count(k, strlen(k)) >= 0;
}

/* req_out: when not NULL, req_out[0] receives the reqbit of every member
 * and req_out[1] 1, when the walk reaches the end (left alone otherwise). */
NOINLINE static int kw_props(vctx *c, const node *n, const cJSON *inst, evset *ev,
                             uint64_t *req_out)
{
    if (!IS_OBJECT(inst))
        return 1;
    uint64_t req_mask = 0;
    int ok = 1;
    size_t i = 0;
    uint64_t req_seen = 0;
    size_t req_found = 0;
    int check_req = n->req_in_props && !c->record;
    size_t cur = 0;
    for (const cJSON *m = inst->child; m; m = m->next, i++) {
        int matched = 0;
        if (n->props) {
            const prop_ent *pe = member_ent(n, m->string, &cur);
            if (pe)
                req_mask |= pe->reqbit;
            if (check_req && pe && pe->req >= 0 && !(req_seen & (1ull << pe->req))) {
                req_seen |= 1ull << pe->req;
                req_found++;
            }
            if (pe && pe->schema) {
                matched = 1;
                int r;
                if (pe->schema->boolean == B_TRUE) {
                    r = 1;
                } else if (pe->schema->boolean == B_FALSE) {
                    r = unexpected(c, pe->schema, m);
                } else {
                    push_prop(c, m->string, pe);
                    r = eval_child(c, pe->schema, m);
                    pop_path(c);
                }
                if (r < 0)
                    return -1;
                if (!r) {
                    ok = 0;
                    if (!c->record)
                        return 0;
                }
            }
        }
        if (n->n_pats) {
            if (!key_utf8_ok(m->string)) {
                push_key(c, m->string);
                report(c, n, "patternProperties", SCHEMA_INVALID_VALUE, NULL, NULL,
                       "property name is not valid UTF-8");
                pop_path(c);
                return 0;
            }
            for (size_t p = 0; p < n->n_pats; p++) {
                int mr = rx_match(c, n->pats[p].re, m->string, strlen(m->string), n,
                                  "patternProperties");
                if (mr < 0)
                    return -1;
                if (!mr)
                    continue;
                matched = 1;
                int r;
                if (n->pats[p].schema->boolean == B_FALSE) {
                    r = unexpected(c, n->pats[p].schema, m);
                } else {
                    push_key(c, m->string);
                    r = eval_child(c, n->pats[p].schema, m);
                    pop_path(c);
                }
                if (r < 0)
                    return -1;
                if (!r) {
                    ok = 0;
                    if (!c->record)
                        return 0;
                }
            }
        }
        if (!matched && n->additional) {
            matched = 1;
            int r;
            if (n->additional->boolean == B_FALSE) {
                r = unexpected(c, n->additional, m);
            } else {
                push_key(c, m->string);
                r = eval_child(c, n->additional, m);
                pop_path(c);
            }
            if (r < 0)
                return -1;
            if (!r) {
                ok = 0;
                if (!c->record)
                    return 0;
            }
        }
        if (matched && ev)
            ev_set(ev, i);
    }
    if (check_req && ok && req_found != n->n_required)
        return 0;
    if (req_out) {
        req_out[0] = req_mask;
        req_out[1] = 1;
    }
    return ok;
}

/* kw_props for a reporting pass over a node without patternProperties
 * whose annotations nobody collects: kw_props_quiet's walk, going on after
 * a failure and keeping the instance path.  req_out as for kw_props. */
NOINLINE static int kw_props_rec(vctx *c, const node *n, const cJSON *inst, uint64_t *req_out)
{
    if (!IS_OBJECT(inst))
        return 1;
    uint64_t req_mask = 0;
    int ok = 1;
    size_t cur = 0;
    for (const cJSON *m = inst->child; m; m = m->next) {
        const prop_ent *pe = n->props ? member_ent(n, m->string, &cur) : NULL;
        const node *sub = NULL;
        if (pe) {
            req_mask |= pe->reqbit;
            sub = pe->schema;
        }
        if (!sub) {
            pe = NULL; /* additionalProperties: the key as the instance has it */
            sub = n->additional;
            if (!sub)
                continue;
        }
        int r;
        if (sub->boolean == B_TRUE)
            continue;
        if (sub->boolean == B_FALSE) {
            r = unexpected(c, sub, m);
        } else {
            if (pe)
                push_prop(c, m->string, pe);
            else
                push_key(c, m->string);
            r = eval_child(c, sub, m);
            pop_path(c);
        }
        if (r < 0)
            return -1;
        ok &= r;
    }
    if (req_out) {
        req_out[0] = req_mask;
        req_out[1] = 1;
    }
    return ok;
}

/* kw_props for the first pass (no reporting, no annotations) of a node
 * without patternProperties: the same answer with less bookkeeping. */
NOINLINE static int kw_props_quiet(vctx *c, const node *n, const cJSON *inst)
{
    uint64_t req_seen = 0;
    size_t cur = 0;
    for (const cJSON *m = inst->child; m; m = m->next) {
        const node *sub = NULL;
        if (n->props) {
            const prop_ent *pe = member_ent(n, m->string, &cur);
            if (pe) {
                req_seen |= pe->reqbit;
                sub = pe->schema;
            }
        }
        if (!sub) {
            sub = n->additional;
            if (!sub)
                continue;
        }
        /* a false schema fails in eval() as it does in unexpected() */
        int r = eval_child(c, sub, m);
        if (r != 1)
            return r;
    }
    if (n->req_in_props && req_seen != n->req_all)
        return 0;
    return 1;
}

static void report_missing(vctx *c, const node *n, size_t i)
{
    /* The path names the missing member, where the fix goes (a repair
     * prompt reads "/name: MISSING_FIELD"); the keyword location still
     * points at `required`. */
    push_key(c, n->required[i]);
    /* a sketch keeps `expected` only for what report_branches() reads:
     * types and const/enum values */
    const ktext *t = kt_of(n, K_REQUIRED);
    report_p(c, n, t->kloc.s, t->kloc.l, SCHEMA_MISSING_FIELD, NULL, NULL,
             c->record == 2 ? NULL : n->req_text[i].s, n->req_text[i].l, &n->req_msg[i], 1,
             RB_KLOC | RB_EXPECTED | RB_MESSAGE);
    pop_path(c);
}

NOINLINE static int kw_required(vctx *c, const node *n, const cJSON *inst)
{
    if (!IS_OBJECT(inst))
        return 1;
    evset seen;
    if (ev_init(&seen, n->n_required) < 0)
        return limit(c, "out of memory checking required");
    size_t found = 0, cur = 0;
    for (const cJSON *m = inst->child; m && found < n->n_required; m = m->next) {
        const prop_ent *pe = member_ent(n, m->string, &cur);
        if (pe && pe->req >= 0 && !ev_get(&seen, (size_t)pe->req)) {
            ev_set(&seen, (size_t)pe->req);
            found++;
        }
    }
    int ok = found == n->n_required;
    if (!ok && c->record) {
        for (size_t i = 0; i < n->n_required; i++)
            if (!ev_get(&seen, i))
                report_missing(c, n, i);
    }
    ev_free(&seen);
    return ok;
}

NOINLINE static int kw_dep_required(vctx *c, const node *n, const cJSON *inst)
{
    if (!IS_OBJECT(inst))
        return 1;
    int ok = 1;
    for (size_t d = 0; d < n->n_dreq; d++) {
        const dep_req *q = &n->dreq[d];
        if (!json_member(inst, q->name))
            continue;
        for (size_t i = 0; i < q->n; i++) {
            if (json_member(inst, q->names[i]))
                continue;
            ok = 0;
            if (!c->record)
                return 0;
            push_key(c, q->names[i]);
            report(c, n, q->kw, SCHEMA_MISSING_FIELD, NULL, str_text(c, q->names[i]),
                   "missing property \"%s\", required when \"%s\" is present", q->names[i], q->name);
            pop_path(c);
        }
    }
    return ok;
}

NOINLINE static int kw_dep_schemas(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    if (!IS_OBJECT(inst))
        return 1;
    int ok = 1;
    for (size_t d = 0; d < n->n_dsch; d++) {
        if (!json_member(inst, n->dsch[d].name))
            continue;
        int r = eval(c, n->dsch[d].schema, inst, ev);
        if (r < 0)
            return -1;
        if (!r) {
            ok = 0;
            if (!c->record)
                return 0;
        }
    }
    return ok;
}

NOINLINE static int kw_property_names(vctx *c, const node *n, const cJSON *inst)
{
    if (!IS_OBJECT(inst))
        return 1;
    int ok = 1;
    for (const cJSON *m = inst->child; m; m = m->next) {
        cJSON key;
        memset(&key, 0, sizeof key);
        key.type = cJSON_String;
        key.valuestring = m->string;
        size_t mark = c->nrec;
        push_key(c, m->string);
        int r = eval(c, n->property_names, &key, NULL);
        pop_path(c);
        if (r < 0)
            return -1;
        if (r)
            continue;
        ok = 0;
        if (!c->record)
            return 0;
        for (size_t i = mark; i < c->nrec && c->record == 1; i++) {
            /* the other strings stay where they are (scratch memory) */
            schema_violation *v = &c->recs[i].v;
            size_t lk = strlen(m->string), lm = strlen(v->message);
            char *msg = scratch_alloc(c, lk + lm + 20);
            if (!msg)
                continue;
            memcpy(msg, "property name \"", 15);
            memcpy(msg + 15, m->string, lk);
            memcpy(msg + 15 + lk, "\": ", 3);
            memcpy(msg + 18 + lk, v->message, lm + 1);
            v->message = msg;
            c->recs[i].blen = 0; /* no longer in one piece */
        }
    }
    return ok;
}

NOINLINE static int kw_counts(vctx *c, const node *n, int k, const cJSON *inst)
{
    if (k == K_MAX_ITEMS || k == K_MIN_ITEMS) {
        if (!IS_ARRAY(inst))
            return 1;
        uint64_t cnt = json_count(inst);
        if (k == K_MIN_ITEMS && cnt < n->min_items)
            return report_count(c, n, k, SCHEMA_TOO_FEW_ITEMS, NULL, MPL("array has "), cnt,
                                MPL(" item(s), fewer than the minimum "), n->min_items);
        if (k == K_MAX_ITEMS && cnt > n->max_items)
            return report_count(c, n, k, SCHEMA_TOO_MANY_ITEMS, NULL, MPL("array has "), cnt,
                                MPL(" items, more than the maximum "), n->max_items);
        return 1;
    }
    if (!IS_OBJECT(inst))
        return 1;
    uint64_t cnt = json_count(inst);
    if (k == K_MIN_PROPS && cnt < n->min_props)
        return report_count(c, n, k, SCHEMA_TOO_FEW_PROPERTIES, NULL, MPL("object has "),
                            cnt, MPL(" property(ies), fewer than the minimum "), n->min_props);
    if (k == K_MAX_PROPS && cnt > n->max_props)
        return report_count(c, n, k, SCHEMA_TOO_MANY_PROPERTIES, NULL, MPL("object has "),
                            cnt, MPL(" properties, more than the maximum "), n->max_props);
    return 1;
}

NOINLINE static int kw_enum_const(vctx *c, const node *n, int k, const cJSON *inst)
{
    if (k == K_CONST) {
        if (json_equal(inst, n->const_val))
            return 1;
        const ktext *t = kt_of(n, K_CONST);
        return report_p(c, n, t->kloc.s, t->kloc.l, SCHEMA_CONST_MISMATCH, inst, NULL, t->expected.s,
                        t->expected.l, &t->msg, 1, RB_KLOC | RB_EXPECTED | RB_MESSAGE);
    }
    if (enum_has(n, inst))
        return 1;
    const ktext *t = kt_of(n, K_ENUM);
    return report_p(c, n, t->kloc.s, t->kloc.l, SCHEMA_ENUM_MISMATCH, inst, NULL, t->expected.s,
                    t->expected.l, &t->msg, 1, RB_KLOC | RB_EXPECTED | RB_MESSAGE);
}

static void drop_recs(vctx *c, size_t from)
{
    c->nrec = from; /* their strings go with the scratch memory */
}

/* Adds the names of a `type` expected text to a type bitmask. */
static int types_of_text(const char *text)
{
    int t = 0;
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *e = IS_ARRAY(j) ? j->child : j;
    for (; e; e = IS_ARRAY(j) ? e->next : NULL) {
        if (!IS_STRING(e))
            continue;
        const char *s = e->valuestring;
        t |= !strcmp(s, "null") ? T_NULL : !strcmp(s, "boolean") ? T_BOOLEAN
           : !strcmp(s, "object") ? T_OBJECT : !strcmp(s, "array") ? T_ARRAY
           : !strcmp(s, "number") ? T_NUMBER | T_INTEGER : !strcmp(s, "string") ? T_STRING
           : !strcmp(s, "integer") ? T_INTEGER : 0;
        if (!IS_ARRAY(j))
            break;
    }
    cJSON_Delete(j);
    return t;
}

static char *types_json(int types)
{
    static const struct { int bit; const char *name; } names[] = {
        { T_STRING, "string" }, { T_NUMBER, "number" }, { T_INTEGER, "integer" },
        { T_OBJECT, "object" }, { T_ARRAY, "array" }, { T_BOOLEAN, "boolean" }, { T_NULL, "null" },
    };
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < sizeof names / sizeof names[0]; i++) {
        if (!(types & names[i].bit) || (names[i].bit == T_INTEGER && (types & T_NUMBER)))
            continue;
        cJSON_AddItemToArray(a, cJSON_CreateString(names[i].name));
    }
    char *s = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return s;
}

/* The NO_MATCH heading the closest branch's reports. kw: "anyOf"/"oneOf". */
static void report_no_match(vctx *c, const node *n, const char *kw, size_t nb, size_t best)
{
    char a[24], b[24];
    size_t kwl = strlen(kw);
    mpart m[7] = { MPL("value matches none of the "), { a, fmt_u(a, nb) },
                   MPL(" alternatives of "), { kw, kwl }, MPL("; the closest is #"),
                   { b, fmt_u(b, best) }, MPL(", whose errors follow") };
    report_p(c, n, kw, kwl, SCHEMA_NO_MATCH, NULL, NULL, NULL, 0, m, 7, 0);
}

/* 1 when the records [from, to) of a branch walked at path depth depth0
 * rule it out as the closest: a wrong type or a failed const/enum on the
 * value itself, or a failed const/enum on a direct property (a
 * discriminator such as "kind"). */
static int disqualified(const vctx *c, size_t from, size_t to, size_t depth0)
{
    for (size_t j = from; j < to; j++) {
        const vrec *r = &c->recs[j];
        const char *code = r->v.code;
        int disc = code_is(code, SCHEMA_CONST_MISMATCH) || code_is(code, SCHEMA_ENUM_MISMATCH);
        if ((r->depth == depth0 && (disc || code_is(code, SCHEMA_WRONG_TYPE))) ||
            (r->depth == depth0 + 1 && disc))
            return 1;
    }
    return 0;
}

/* After every branch of anyOf/oneOf failed in the reporting pass: keep the
 * most useful report.  Branches [starts[i], starts[i+1]) of c->recs.
 * sketch: the branch records are sketches (see report()); then the closest
 * branch is not kept but returned, for the caller to evaluate again with
 * full reports.  -1 when no branch is to be evaluated again. */
static long report_branches(vctx *c, const node *n, const char *kw, const cJSON *inst, size_t base,
                            const size_t *ends, size_t nb, int sketch)
{
    size_t depth0 = c->npath;
    /* 1. every branch failed on just the type, or just a const/enum:
     *    merge into one violation ("expected string or null") */
    int all_type = 1, all_const = 1;
    for (size_t i = 0; i < nb; i++) {
        size_t s = i ? ends[i - 1] : base, e = ends[i];
        if (e - s != 1 || c->recs[s].depth != depth0) {
            all_type = all_const = 0;
            break;
        }
        const char *code = c->recs[s].v.code;
        if (!code_is(code, SCHEMA_WRONG_TYPE))
            all_type = 0;
        if (!code_is(code, SCHEMA_CONST_MISMATCH) && !code_is(code, SCHEMA_ENUM_MISMATCH))
            all_const = 0;
    }
    char kwbuf[16];
    size_t kwl = strnlen(kw, sizeof kwbuf - 1);
    memcpy(kwbuf, kw, kwl);
    kwbuf[kwl] = '\0';
    if (all_type && nb > 0) {
        int types = 0;
        for (size_t i = 0; i < nb; i++)
            types |= types_of_text(c->recs[i ? ends[i - 1] : base].v.expected);
        drop_recs(c, base);
        char list[128];
        type_list(types, list, sizeof list);
        char *tj = types_json(types);
        report(c, n, kwbuf, SCHEMA_WRONG_TYPE, inst, tj, "expected %s, got %s", list,
               inst_type_name(inst));
        free(tj);
        return -1;
    }
    cJSON *vals = all_const && nb > 0 ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; vals && i < nb; i++) {
        const schema_violation *v = &c->recs[i ? ends[i - 1] : base].v;
        cJSON *x = v->expected ? cJSON_Parse(v->expected) : NULL;
        if (v->expected && !x) {
            /* a value cut to its snippet ("..."): merged without it, the
             * list told the model the others were all there were */
            cJSON_Delete(vals);
            vals = NULL;
        } else if (x && strcmp(v->code, SCHEMA_ENUM_MISMATCH) == 0 && IS_ARRAY(x)) {
            while (x->child)
                cJSON_AddItemToArray(vals, cJSON_DetachItemViaPointer(x, x->child));
            cJSON_Delete(x);
        } else if (x) {
            cJSON_AddItemToArray(vals, x);
        }
    }
    if (vals) {
        drop_recs(c, base);
        char *text = vals ? json_snippet(vals, SNIPPET_MAX) : NULL;
        cJSON_Delete(vals);
        report(c, n, kwbuf, SCHEMA_ENUM_MISMATCH, inst, text, "value must be one of %s",
               text ? text : "the listed values");
        free(text);
        return -1;
    }
    /* 2. the closest branch: not disqualified by a wrong type or a failed
     *    const/enum discriminator (on the value or a direct property),
     *    then the fewest violations, then document order */
    size_t best = 0;
    int best_dq = 2;
    size_t best_cnt = SIZE_MAX;
    for (size_t i = 0; i < nb; i++) {
        size_t s = i ? ends[i - 1] : base, e = ends[i];
        int dq = disqualified(c, s, e, depth0);
        size_t cnt = e - s;
        if (dq < best_dq || (dq == best_dq && cnt < best_cnt)) {
            best = i;
            best_dq = dq;
            best_cnt = cnt;
        }
    }
    size_t bs = best ? ends[best - 1] : base, be = ends[best];
    size_t nkeep = sketch ? 0 : be - bs;
    vrec *keep = nkeep ? scratch_alloc(c, nkeep * sizeof *keep) : NULL;
    if (nkeep && !keep) {
        drop_recs(c, base);
        return -1;
    }
    if (nkeep)
        memcpy(keep, c->recs + bs, nkeep * sizeof *keep);
    drop_recs(c, base);
    report_no_match(c, n, kw, nb, best);
    for (size_t j = 0; j < nkeep; j++)
        push_rec(c, &keep[j]);
    return sketch ? (long)best : -1;
}

static void move_recs_front(vctx *c, size_t from, size_t mid);

/* The branch of discriminator d that object inst names, or -1. */
static long discrim_pick(const discrim *d, size_t nb, const cJSON *inst)
{
    for (const cJSON *m = inst->child; m; m = m->next) {
        if (!str_eq(m->string, d->name))
            continue;
        for (size_t i = 0; i < nb; i++)
            if (json_equal(m, d->vals[i]))
                return (long)i;
        return -1;
    }
    return -1;
}

/* anyOf/oneOf when inst names branch k through the discriminator: every
 * other branch fails, so the answer is branch k's.  While reporting, a
 * failed k is the closest branch report_branches() would pick whenever
 * nothing but the discriminator disqualifies a branch; otherwise (k
 * failed on a type or another const/enum too) 2 is returned, everything
 * undone, and the caller compares all branches. */
static int branch_named(vctx *c, const node *n, const char *kw, size_t nb, const node *b, long k,
                        const cJSON *inst, evset *ev)
{
    evset t;
    if (ev && ev_init(&t, ev->n) < 0)
        return limit(c, "out of memory");
    size_t base = c->nrec, dropped0 = c->dropped, cap0 = c->store_cap, depth0 = c->npath;
    char lim0 = c->limit_msg[0];
    if (c->record && cap0 > base)
        c->store_cap = cap0 - 1; /* room for NO_MATCH, which goes in front */
    int r = eval(c, b, inst, ev ? &t : NULL);
    c->store_cap = cap0;
    if (ev) {
        if (r == 1)
            ev_or(ev, &t);
        ev_free(&t);
    }
    if (r != 0 || !c->record)
        return r;
    if (disqualified(c, base, c->nrec, depth0)) {
        drop_recs(c, base);
        c->dropped = dropped0;
        c->limit_msg[0] = lim0;
        return 2;
    }
    size_t mid = c->nrec;
    report_no_match(c, n, kw, nb, (size_t)k);
    if (c->nrec > mid && mid > base)
        move_recs_front(c, base, mid);
    return 0;
}

NOINLINE static int kw_branches(vctx *c, const node *n, int one, const cJSON *inst, evset *ev)
{
    node *const *br = one ? n->one_of : n->any_of;
    size_t nb = one ? n->n_one_of : n->n_any_of;
    const char *kw = one ? "oneOf" : "anyOf";
    const discrim *d = one ? n->one_disc : n->any_disc;
    if (d && IS_OBJECT(inst) && c->record != 2) {
        long k = discrim_pick(d, nb, inst);
        if (k >= 0) {
            int r = branch_named(c, n, kw, nb, br[k], k, inst, ev);
            if (r != 2)
                return r;
        }
    }
    if (c->record == 1 && !ev && nb <= 8) {
        /* Reporting: the sketches answer valid/invalid too, so walk the
         * branches once with sketches instead of quietly and then again
         * with sketches.  Should they hit a limit or the store cap (where
         * the quiet walk, stopping early, might not), everything is undone
         * and the usual way below is taken. */
        size_t ends[8], base = c->nrec, dropped0 = c->dropped, nvalid = 0, v1 = 0, v2 = 0;
        char lim0 = c->limit_msg[0];
        int r = 1;
        c->record = 2;
        for (size_t i = 0; i < nb; i++) {
            r = eval(c, br[i], inst, NULL);
            if (r < 0)
                break;
            ends[i] = c->nrec;
            if (r) {
                if (nvalid == 0)
                    v1 = i;
                else if (nvalid == 1)
                    v2 = i;
                nvalid++;
            }
        }
        c->record = 1;
        if (r >= 0 && c->dropped == dropped0) {
            if (nvalid) {
                drop_recs(c, base);
                if (!one || nvalid == 1)
                    return 1;
                return report(c, n, kw, SCHEMA_NO_MATCH, NULL, NULL,
                              "value matches more than one alternative of oneOf (#%zu and #%zu); exactly one must match",
                              v1, v2);
            }
            long again = report_branches(c, n, kw, inst, base, ends, nb, 1);
            if (again >= 0 && eval(c, br[again], inst, NULL) < 0)
                return -1;
            return 0;
        }
        drop_recs(c, base);
        c->dropped = dropped0;
        c->limit_msg[0] = lim0;
    }
    int saved = c->record;
    c->record = 0;
    size_t nvalid = 0, v1 = 0, v2 = 0;
    for (size_t i = 0; i < nb; i++) {
        evset t;
        evset *tp = NULL;
        if (ev) {
            if (ev_init(&t, ev->n) < 0) {
                c->record = saved;
                return limit(c, "out of memory");
            }
            tp = &t;
        }
        int r = eval(c, br[i], inst, tp);
        if (r < 0) {
            if (tp)
                ev_free(tp);
            c->record = saved;
            return -1;
        }
        if (r) {
            if (nvalid == 0)
                v1 = i;
            else if (nvalid == 1)
                v2 = i;
            nvalid++;
            if (tp)
                ev_or(ev, tp);
        }
        if (tp)
            ev_free(tp);
        if (r && !ev && (!one || nvalid >= 2))
            break;
    }
    c->record = saved;
    if (one ? nvalid == 1 : nvalid >= 1)
        return 1;
    if (!c->record)
        return 0;
    if (one && nvalid >= 2)
        return report(c, n, kw, SCHEMA_NO_MATCH, NULL, NULL,
                      "value matches more than one alternative of oneOf (#%zu and #%zu); exactly one must match",
                      v1, v2);
    size_t ends_inl[8];
    size_t *ends = nb <= 8 ? ends_inl : malloc(nb * sizeof *ends);
    if (!ends)
        return limit(c, "out of memory");
    size_t base = c->nrec, dropped0 = c->dropped;
    /* Most of what the branches report is thrown away: with full reports
     * on, the branches are first walked with sketches only (what the
     * choice needs), then the chosen one again with full reports.  Should
     * the sketches hit a limit or the store cap, the plain way is taken,
     * so that the outcome is always the same. */
    int sketch = c->record == 1;
    for (;;) {
        if (sketch)
            c->record = 2;
        int r = 1;
        for (size_t i = 0; i < nb; i++) {
            r = eval(c, br[i], inst, NULL);
            if (r < 0)
                break;
            ends[i] = c->nrec;
        }
        if (sketch)
            c->record = 1;
        if (sketch && (r < 0 || c->dropped != dropped0)) {
            drop_recs(c, base);
            c->dropped = dropped0;
            sketch = 0;
            continue;
        }
        if (r < 0) {
            if (ends != ends_inl)
                free(ends);
            return -1;
        }
        break;
    }
    long again = report_branches(c, n, kw, inst, base, ends, nb, sketch);
    if (ends != ends_inl)
        free(ends);
    if (again >= 0 && eval(c, br[again], inst, NULL) < 0)
        return -1;
    return 0;
}

NOINLINE static int kw_not(vctx *c, const node *n, const cJSON *inst)
{
    int saved = c->record;
    c->record = 0;
    int r = eval(c, n->not_, inst, NULL);
    c->record = saved;
    if (r < 0)
        return -1;
    if (!r)
        return 1;
    return report_p(c, n, KWL("not"), SCHEMA_NO_MATCH, inst, NULL, NULL, 0,
                    &MPL("value must not match the schema in \"not\""), 1, RB_MESSAGE);
}

NOINLINE static int kw_if(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    evset t;
    evset *tp = NULL;
    if (ev) {
        if (ev_init(&t, ev->n) < 0)
            return limit(c, "out of memory");
        tp = &t;
    }
    int saved = c->record;
    c->record = 0;
    int r = eval(c, n->if_, inst, tp);
    c->record = saved;
    if (r > 0 && tp)
        ev_or(ev, tp);
    if (tp)
        ev_free(tp);
    if (r < 0)
        return -1;
    const node *next = r ? n->then_ : n->else_;
    if (!next)
        return 1;
    return eval(c, next, inst, ev);
}

NOINLINE static int kw_uneval(vctx *c, const node *n, int k, const cJSON *inst, evset *ev)
{
    int ok = 1;
    size_t i = 0;
    if (k == K_UNEVAL_PROPS) {
        if (!IS_OBJECT(inst) || !ev)
            return 1;
        for (const cJSON *m = inst->child; m; m = m->next, i++) {
            if (ev_get(ev, i))
                continue;
            int r;
            if (n->uneval_props->boolean == B_FALSE) {
                r = unexpected(c, n->uneval_props, m);
            } else {
                push_key(c, m->string);
                r = eval(c, n->uneval_props, m, NULL);
                pop_path(c);
            }
            if (r < 0)
                return -1;
            if (!r) {
                ok = 0;
                if (!c->record)
                    return 0;
            }
            ev_set(ev, i);
        }
        return ok;
    }
    if (!IS_ARRAY(inst) || !ev)
        return 1;
    for (const cJSON *it = inst->child; it; it = it->next, i++) {
        if (ev_get(ev, i))
            continue;
        int r;
        push_idx(c, i);
        if (n->uneval_items->boolean == B_FALSE)
            r = report(c, n->uneval_items, NULL, SCHEMA_TOO_MANY_ITEMS, it, NULL,
                       "item %zu is not allowed (not evaluated by any other keyword)", i);
        else
            r = eval(c, n->uneval_items, it, NULL);
        pop_path(c);
        if (r < 0)
            return -1;
        if (!r) {
            ok = 0;
            if (!c->record)
                return 0;
        }
        ev_set(ev, i);
    }
    return ok;
}

NOINLINE static int kw_dynref(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    const node *target = n->dynref;
    if (n->dyn_name) {
        for (size_t i = 0; i < c->nscope; i++) {
            const rres *r = c->scope[i];
            for (size_t j = 0; r && j < r->ndyn; j++) {
                if (r->dyn_nodes[j] && strcmp(r->dyn_names[j], n->dyn_name) == 0) {
                    target = r->dyn_nodes[j];
                    goto found;
                }
            }
        }
    }
found:
    return eval(c, target, inst, ev);
}


/* Moves recs [mid, nrec) in front of [from, mid); nrec - mid <= 64. */
NOINLINE static void move_recs_front(vctx *c, size_t from, size_t mid)
{
    vrec tmp[64];
    size_t nr = c->nrec - mid;
    memcpy(tmp, c->recs + mid, nr * sizeof *tmp);
    memmove(c->recs + from + nr, c->recs + from, (mid - from) * sizeof *tmp);
    memcpy(c->recs + from, tmp, nr * sizeof *tmp);
}

/* `required` immediately followed by the properties group, while
 * reporting (inst an object, n->req_in_props): the properties walk finds
 * the required members too, so the members are looked up once; the
 * missing ones are then reported and moved in front of what the walk
 * reported, where `required` puts them.  The walk runs with the store cap
 * lowered by the number of required names: when nothing is dropped so,
 * nothing would have been dropped in keyword order either.  On a limit,
 * an early stop or a drop, all of it is undone and the two keywords run
 * one after the other. */
NOINLINE static int props_with_required(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    size_t mark = c->nrec, dropped0 = c->dropped, cap0 = c->store_cap;
    char lim0 = c->limit_msg[0];
    if (cap0 > mark + n->n_required) {
        uint64_t seen[2] = { 0, 0 };
        c->store_cap = cap0 - n->n_required;
        int rp = !ev && !n->n_pats ? kw_props_rec(c, n, inst, seen) : kw_props(c, n, inst, ev, seen);
        if (rp >= 0 && seen[1] && c->dropped == dropped0) {
            if (seen[0] == n->req_all) {
                c->store_cap = cap0;
                return rp;
            }
            size_t mid = c->nrec;
            for (size_t i = 0; i < n->n_required; i++)
                if (!(seen[0] & (1ull << i)))
                    report_missing(c, n, i);
            c->store_cap = cap0;
            if (c->dropped == dropped0) {
                if (mid > mark)
                    move_recs_front(c, mark, mid);
                return 0;
            }
        }
        c->store_cap = cap0;
        drop_recs(c, mark);
        c->dropped = dropped0;
        c->limit_msg[0] = lim0;
    }
    int rr = kw_required(c, n, inst);
    if (rr < 0)
        return -1;
    int rp = kw_props(c, n, inst, ev, NULL);
    if (rp < 0)
        return -1;
    return rr && rp;
}

/* -1 (a limit) once this pass has evaluated SCHEMA_EVAL_MAX schemas. */
static int eval_budget(vctx *c, const node *n)
{
    /* The reporting pass (an invalid value's) costs some ten times more
     * an evaluation, in time and in the memory of the violations it keeps
     * along the way: a tenth of the budget. */
    unsigned long max = c->record ? SCHEMA_EVAL_MAX / 10 : SCHEMA_EVAL_MAX;
    if (++c->evals <= max)
        return 0;
    return limit(c, "validation gave up after %lu schema evaluations (at %s): the schema applies its "
                 "subschemas too many times over to this value", max, n->loc[0] ? n->loc : "/");
}

static int eval_full(vctx *c, const node *n, const cJSON *inst, evset *ev)
{
    if (eval_budget(c, n))
        return -1;
    if (n->boolean) {
        if (n->boolean == B_TRUE)
            return 1;
        return report_p(c, n, NULL, 0, SCHEMA_INVALID_VALUE, inst, NULL, NULL, 0,
                        &MPL("no value is allowed here"), 1, RB_MESSAGE);
    }
    if (n->leaf)
        return eval_leaf(c, n, inst);
    if (c->depth >= MAX_EVAL_DEPTH)
        return limit(c, "validation depth limit (%d) exceeded at %s", MAX_EVAL_DEPTH,
                     n->loc[0] ? n->loc : "/");
    c->depth++;
    int pushed = 0;
    if (c->s->dynamic && (c->nscope == 0 || c->scope[c->nscope - 1] != n->res)) {
        c->scope[c->nscope++] = n->res;
        pushed = 1;
    }
    evset local;
    evset *use = ev;
    int tracking = 0;
    if (n->uneval) {
        if (((n->uneval & UE_PROPS) && IS_OBJECT(inst)) ||
            ((n->uneval & UE_ITEMS) && IS_ARRAY(inst))) {
            if (ev_init(&local, json_count(inst)) < 0) {
                c->depth--;
                if (pushed)
                    c->nscope--;
                return limit(c, "out of memory");
            }
            tracking = 1;
            use = &local;
        }
    }
    int ok = 1;
    for (int i = 0; i < n->norder; i++) {
        int k = n->order[i], r;
        switch (k) {
        case K_REF: r = eval(c, n->ref, inst, use); break;
        case K_DYNREF: r = kw_dynref(c, n, inst, use); break;
        case K_ITEMS: r = kw_items(c, n, inst, use); break;
        case K_CONTAINS: r = kw_contains(c, n, inst, use); break;
        case K_PROPS:
            if (!IS_OBJECT(inst))
                r = 1;
            else if (!use && !n->n_pats)
                r = c->record ? kw_props_rec(c, n, inst, NULL) : kw_props_quiet(c, n, inst);
            else
                r = kw_props(c, n, inst, use, NULL);
            break;
        case K_DEP_SCHEMAS: r = kw_dep_schemas(c, n, inst, use); break;
        case K_PROPERTY_NAMES: r = kw_property_names(c, n, inst); break;
        case K_REQUIRED:
            if (c->record && n->req_in_props && i + 1 < n->norder && n->order[i + 1] == K_PROPS &&
                IS_OBJECT(inst)) {
                r = props_with_required(c, n, inst, use);
                i++;
            } else {
                r = assert_kw(c, n, k, inst);
            }
            break;
        case K_ALL_OF: {
            r = 1;
            for (size_t j = 0; j < n->n_all_of; j++) {
                int rr = eval(c, n->all_of[j], inst, use);
                if (rr < 0) {
                    r = -1;
                    break;
                }
                if (!rr) {
                    r = 0;
                    if (!c->record)
                        break;
                }
            }
            break;
        }
        case K_ANY_OF: r = kw_branches(c, n, 0, inst, use); break;
        case K_ONE_OF: r = kw_branches(c, n, 1, inst, use); break;
        case K_NOT: r = kw_not(c, n, inst); break;
        case K_IF: r = kw_if(c, n, inst, use); break;
        case K_UNEVAL_ITEMS:
        case K_UNEVAL_PROPS: r = kw_uneval(c, n, k, inst, tracking ? use : NULL); break;
        default: r = assert_kw(c, n, k, inst); break;
        }
        if (r < 0) {
            ok = -1;
            break;
        }
        if (!r) {
            ok = 0;
            if (!c->record)
                break;
        }
    }
    if (tracking) {
        if (ok == 1 && ev)
            ev_or(ev, &local);
        ev_free(&local);
    }
    if (pushed)
        c->nscope--;
    c->depth--;
    return ok;
}

/* eval_full() without reports or annotations, for the usual nodes (no
 * unevaluated*, no dynamic scope): the same answer with less to carry. */
static int eval_quiet(vctx *c, const node *n, const cJSON *inst)
{
    if (eval_budget(c, n))
        return -1;
    if (n->leaf) {
        if (n->fast) {
            int r = leaf_fast(c, n, inst);
            if (r)
                return r;
        }
        for (int i = 0; i < n->norder; i++) {
            int r = assert_kw(c, n, n->order[i], inst);
            if (r <= 0)
                return r;
        }
        return 1;
    }
    if (n->boolean || n->uneval || c->s->dynamic || c->depth >= MAX_EVAL_DEPTH)
        return eval_full(c, n, inst, NULL);
    c->depth++;
    int r = 1;
    for (int i = 0; i < n->norder && r == 1; i++) {
        int k = n->order[i];
        switch (k) {
        case K_TYPE: r = type_ok(n->types, inst); break;
        case K_REF: r = eval_quiet(c, n->ref, inst); break;
        case K_DYNREF: r = kw_dynref(c, n, inst, NULL); break;
        case K_ITEMS: r = kw_items(c, n, inst, NULL); break;
        case K_CONTAINS: r = kw_contains(c, n, inst, NULL); break;
        case K_PROPS:
            if (!IS_OBJECT(inst))
                r = 1;
            else
                r = n->n_pats ? kw_props(c, n, inst, NULL, NULL) : kw_props_quiet(c, n, inst);
            break;
        case K_DEP_SCHEMAS: r = kw_dep_schemas(c, n, inst, NULL); break;
        case K_PROPERTY_NAMES: r = kw_property_names(c, n, inst); break;
        case K_ALL_OF:
            for (size_t j = 0; j < n->n_all_of && r == 1; j++)
                r = eval_quiet(c, n->all_of[j], inst);
            break;
        case K_ANY_OF: r = kw_branches(c, n, 0, inst, NULL); break;
        case K_ONE_OF: r = kw_branches(c, n, 1, inst, NULL); break;
        case K_NOT: r = kw_not(c, n, inst); break;
        case K_IF: r = kw_if(c, n, inst, NULL); break;
        default: r = assert_kw(c, n, k, inst); break;
        }
    }
    c->depth--;
    return r;
}

static void vctx_init(vctx *c, const schema *s, int record)
{
    c->s = s;
    c->record = record;
    c->depth = 0;
    c->npath = 0;
    c->prend = 0;
    c->nscope = 0;
    c->recs = c->recs_inl;
    c->nrec = c->dropped = 0;
    c->caprec = sizeof c->recs_inl / sizeof c->recs_inl[0];
    c->store_cap = s->max_violations * 8 + 256;
    c->sp = (char *)c->scratch_inl;
    c->sleft = sizeof c->scratch_inl;
    c->chunks = NULL;
    c->blk = NULL;
    c->str_inst = NULL;
    c->rx_miss_re = NULL;
    c->rx_calls = 0;
    c->rx_start_ms = 0;
    c->evals = 0;
    c->limit_msg[0] = '\0';
}

/* p, moved to `to` when it lies in the piece of r (at r->v.path) */
static const char *moved(const char *p, const vrec *r, char *to)
{
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)r->v.path;
    return p && a >= base && a < base + r->blen ? to + (a - base) : p;
}

static size_t opt_len(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

/* Copies the violations of recs into one allocation: the items, then all
 * their strings (so schema_violations_clear frees one block).  NULL when
 * out of memory. */
static schema_violation *pack_output(const vrec *recs, size_t n)
{
    size_t bytes = n * sizeof(schema_violation);
    for (size_t i = 0; i < n; i++) {
        const schema_violation *x = &recs[i].v;
        bytes += recs[i].blen ? recs[i].blen
                              : opt_len(x->path) + opt_len(x->keyword_location) + opt_len(x->message) +
                                    opt_len(x->expected) + opt_len(x->actual);
    }
    schema_violation *items = malloc(bytes);
    if (!items)
        return NULL;
    char *b = (char *)(items + n);
    for (size_t i = 0; i < n; i++) {
        const schema_violation *x = &recs[i].v;
        schema_violation *y = &items[i];
        y->code = x->code;
        if (recs[i].blen) {
            /* one piece: copy it and move the pointers into it along
             * (those into the schema stay) */
            memcpy(b, x->path, recs[i].blen);
            y->path = b;
            y->keyword_location = moved(x->keyword_location, &recs[i], b);
            y->message = moved(x->message, &recs[i], b);
            y->expected = moved(x->expected, &recs[i], b);
            y->actual = moved(x->actual, &recs[i], b);
            b += recs[i].blen;
            continue;
        }
        const char **dst[5] = { &y->path, &y->keyword_location, &y->message, &y->expected, &y->actual };
        const char *src[5] = { x->path, x->keyword_location, x->message, x->expected, x->actual };
        for (int k = 0; k < 5; k++) {
            if (!src[k]) {
                *dst[k] = NULL;
                continue;
            }
            size_t l = strlen(src[k]) + 1;
            memcpy(b, src[k], l);
            *dst[k] = b;
            b += l;
        }
    }
    return items;
}

/* The output block: a reporting pass writes the strings of its violations
 * straight into the block it hands to the caller, after room for the
 * items, instead of copying them there at the end.  Records undone while
 * comparing anyOf/oneOf branches leave unused bytes behind; a pass whose
 * strings outgrow the block (or that keeps more items than it has room
 * for) goes on in heap chunks and is copied by pack_output() as before. */
#define OUT_ITEMS_MAX 32
#define OUT_BLOCK_BYTES 6144

static size_t out_items_room(const vctx *c)
{
    return c->s->max_violations < OUT_ITEMS_MAX ? c->s->max_violations : OUT_ITEMS_MAX;
}

static void out_block_open(vctx *c)
{
    size_t res = out_items_room(c) * sizeof(schema_violation);
    c->blk = malloc(OUT_BLOCK_BYTES);
    if (!c->blk)
        return; /* the scratch memory in the context does */
    c->sp = c->blk + res;
    c->sleft = OUT_BLOCK_BYTES - res;
}

/* The caller's items: the block when every string is in it, else a copy
 * (scratch_free() then frees the block).  NULL when out of memory. */
static schema_violation *out_block_close(vctx *c, size_t keep)
{
    if (!c->blk)
        return pack_output(c->recs, keep);
    if (c->chunks || keep > out_items_room(c))
        return pack_output(c->recs, keep);
    schema_violation *items = (schema_violation *)(void *)c->blk;
    for (size_t i = 0; i < keep; i++)
        items[i] = c->recs[i].v;
    c->blk = NULL;
    return items;
}

static void set_limit_violation(schema_violations *out, const char *msg)
{
    schema_violations_clear(out);
    vrec r;
    memset(&r, 0, sizeof r); /* blen 0: strings anywhere */
    r.v.code = SCHEMA_LIMIT_EXCEEDED;
    r.v.path = "";
    r.v.keyword_location = "";
    r.v.message = (char *)(msg[0] ? msg : "validation limit exceeded");
    out->items = pack_output(&r, 1);
    if (out->items)
        out->count = out->total = 1;
}

int schema_validate(const schema *s, const cJSON *instance, schema_violations *out)
{
    if (!s || !instance) {
        if (out)
            set_limit_violation(out, "schema_validate: NULL argument");
        return -1;
    }
    vctx c;
    vctx_init(&c, s, 0);
    int r = eval(&c, s->root, instance, NULL);
    if (r == 1)
        return 0;
    if (!out)
        return r < 0 ? -1 : 1;
    if (r < 0) {
        set_limit_violation(out, c.limit_msg);
        return -1;
    }
    vctx_init(&c, s, 1);
    out_block_open(&c);
    r = eval(&c, s->root, instance, NULL);
    if (r < 0) {
        /* The first pass proved the instance invalid before reaching the
         * limit; reporting went further.  Keep what was found and say why
         * the list may be incomplete. */
        vrec lim;
        lim.depth = 0;
        const char *msg = c.limit_msg[0] ? c.limit_msg : "validation limit exceeded";
        if (pack_violation(&c, &lim, SCHEMA_LIMIT_EXCEEDED, "", 0, "", NULL, msg, strlen(msg),
                           NULL, NULL, 0) == 0) {
            c.store_cap = SIZE_MAX;
            push_rec(&c, &lim);
        }
    }
    /* The same violation can be found twice (two $refs to one schema, a
     * schema re-entering itself): report it once. */
    size_t u = 0;
    uint64_t seen_len = 0; /* bits of (plen, klen) of the records kept */
    for (size_t i = 0; i < c.nrec; i++) {
        const schema_violation *x = &c.recs[i].v;
        int dup = 0;
        uint64_t bit = 1ull << ((c.recs[i].plen * 7 + c.recs[i].klen) & 63);
        size_t upto = seen_len & bit ? u : 0; /* no match possible otherwise */
        seen_len |= bit;
        for (size_t j = 0; j < upto && !dup; j++) {
            const schema_violation *y = &c.recs[j].v;
            dup = c.recs[i].plen == c.recs[j].plen && c.recs[i].klen == c.recs[j].klen &&
                  (x->code == y->code || strcmp(x->code, y->code) == 0) &&
                  memcmp(x->path, y->path, c.recs[i].plen) == 0 &&
                  memcmp(x->keyword_location, y->keyword_location, c.recs[i].klen) == 0;
        }
        if (!dup) {
            if (u != i)
                c.recs[u] = c.recs[i];
            u++;
        }
    }
    c.nrec = u;
    size_t keep = c.nrec < s->max_violations ? c.nrec : s->max_violations;
    /* a limit note explains an incomplete list: never cut it off */
    if (keep && keep < c.nrec && strcmp(c.recs[c.nrec - 1].v.code, SCHEMA_LIMIT_EXCEEDED) == 0) {
        vrec tmp = c.recs[keep - 1];
        c.recs[keep - 1] = c.recs[c.nrec - 1];
        c.recs[c.nrec - 1] = tmp;
    }
    schema_violations_clear(out);
    out->items = keep ? out_block_close(&c, keep) : NULL;
    if (keep && !out->items)
        keep = 0;
    out->count = keep;
    out->total = c.nrec + c.dropped;
    scratch_free(&c);
    return 1;
}

void schema_violations_clear(schema_violations *v)
{
    if (!v)
        return;
    free(v->items); /* the strings are in the same block */
    memset(v, 0, sizeof *v);
}

static void add_json_text(cJSON *o, const char *key, const char *text)
{
    if (!text) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    /* read with jsonin, which keeps each number's text (jsonout prints
     * it), then copied into nodes of cJSON's own: an answer's
     * 12345678901234567890 or 1e400 stays as written (cJSON_Parse gave
     * 1.2345678901234567e+19 and null) */
    size_t err_at = 0;
    cJSON *t = jsonin_parse_all(text, strlen(text), &err_at);
    cJSON *j = t ? cJSON_Duplicate(t, 1) : NULL;
    jsonin_free(t);
    if (j)
        cJSON_AddItemToObject(o, key, j);
    else
        cJSON_AddStringToObject(o, key, text);
}

cJSON *schema_violations_to_json(const schema_violations *v)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr || !v)
        return arr;
    for (size_t i = 0; i < v->count; i++) {
        const schema_violation *x = &v->items[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "path", x->path ? x->path : "");
        cJSON_AddStringToObject(o, "keyword", x->keyword_location ? x->keyword_location : "");
        cJSON_AddStringToObject(o, "code", x->code ? x->code : "");
        cJSON_AddStringToObject(o, "message", x->message ? x->message : "");
        add_json_text(o, "expected", x->expected);
        add_json_text(o, "actual", x->actual);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
