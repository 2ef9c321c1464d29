/* jsonin.c - JSON text into a one-block cJSON tree; see jsonin.h. */
#include "jsonin.h"
#include "util.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define JSONIN_MAX_DEPTH 1000 /* cJSON's CJSON_NESTING_LIMIT */

typedef struct jparser {
    const unsigned char *p;   /* cursor */
    const unsigned char *end; /* end of the input */
    cJSON *nodes;             /* the block: nodes first, then strings */
    size_t nnodes, capnodes;
    char *sp;                 /* where the next string goes */
    int depth;
} jparser;

/* Bytes in w equal to c, as 0x80 in each such byte (exact, no carries
 * between bytes). */
static inline uint64_t bytes_eq(uint64_t w, uint64_t c)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
    uint64_t x = w ^ (c * 0x0101010101010101ull);
    return ~(((x & lo7) + lo7) | x | lo7);
}

/* Bytes of w below 0x20, as 0x80 in each such byte (exact). */
static inline uint64_t bytes_below_space(uint64_t w)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
    return ~(((w & lo7) + 0x6060606060606060ull) | w | lo7);
}

/* An upper bound on the nodes the text can hold: every node but the root
 * is announced by its own '[', '{' or ',' (the first element of a
 * container by the bracket, each further one by a comma).  Commas and
 * brackets inside strings only make the bound looser.  This pass reads
 * the whole text once more, so it goes 16 bytes at a time. */
static size_t node_bound(const unsigned char *s, size_t len)
{
    size_t n = 1, i = 0;
#if defined(__SSE2__)
    const __m128i comma = _mm_set1_epi8(','), bracket = _mm_set1_epi8('['), brace = _mm_set1_epi8('{');
    while (len - i >= 16) {
        /* byte counters, summed before any of them can pass 255 */
        __m128i acc = _mm_setzero_si128();
        size_t stop = len - i > 16 * 255 ? i + 16 * 255 : len;
        for (; stop - i >= 16; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, bracket)),
                                     _mm_cmpeq_epi8(v, brace));
            acc = _mm_sub_epi8(acc, m); /* a match is -1 */
        }
        __m128i sums = _mm_sad_epu8(acc, _mm_setzero_si128());
        n += (size_t)_mm_cvtsi128_si64(sums) + (size_t)_mm_extract_epi16(sums, 4);
    }
#else
    for (; len - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t m = bytes_eq(w, ',') | bytes_eq(w, '[') | bytes_eq(w, '{');
        n += (size_t)((m >> 7) * 0x0101010101010101ull >> 56); /* set bytes: at most 8 */
    }
#endif
    for (; i < len; i++)
        n += s[i] == ',' || s[i] == '[' || s[i] == '{';
    return n;
}

static inline void skip_ws(jparser *x)
{
    const unsigned char *p = x->p, *end = x->end;
    if (p < end && *p > ' ') /* most often: compact JSON */
        return;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    x->p = p;
}

static inline cJSON *node_new(jparser *x)
{
    if (x->nnodes == x->capnodes) /* cannot happen (node_bound); kept as a guard */
        return NULL;
    cJSON *n = &x->nodes[x->nnodes++];
    memset(n, 0, sizeof *n);
    return n;
}

/* The string at x->p (its opening quote) into the string area; *out
 * points at it.  The decoded bytes plus the NUL never take more room than
 * the quoted text did, which is what the block was sized for. */
static int parse_string(jparser *x, char **out)
{
    const unsigned char *q = x->p + 1, *end = x->end;
    char *d = x->sp;
    *out = d;
    for (;;) {
        /* Eight bytes at a time up to a quote, backslash or control
         * character.  Storing all eight stays inside the block: the text
         * still holds 8 bytes after q, and d trails q by at least the
         * opening quote. */
        while (end - q >= 8) {
            uint64_t w;
            memcpy(&w, q, 8);
            uint64_t m = bytes_eq(w, '"') | bytes_eq(w, '\\') | bytes_below_space(w);
            memcpy(d, &w, 8);
            if (m) {
                unsigned k = (unsigned)__builtin_ctzll(m) >> 3;
                d += k;
                q += k;
                break;
            }
            d += 8;
            q += 8;
        }
        while (q < end && *q != '"' && *q != '\\' && *q >= 0x20)
            *d++ = (char)*q++;
        if (q >= end || *q < 0x20) {
            x->p = q;
            return -1;
        }
        if (*q == '"')
            break;
        if (end - q < 2) {
            x->p = q;
            return -1;
        }
        switch (q[1]) {
        case '"': *d++ = '"'; break;
        case '\\': *d++ = '\\'; break;
        case '/': *d++ = '/'; break;
        case 'b': *d++ = '\b'; break;
        case 'f': *d++ = '\f'; break;
        case 'n': *d++ = '\n'; break;
        case 'r': *d++ = '\r'; break;
        case 't': *d++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (end - q < 6 || util_hex4((const char *)q + 2, &cp)) {
                x->p = q;
                return -1;
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) { /* a low surrogate first */
                x->p = q;
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* must be followed by its low half */
                if (end - q < 12 || q[6] != '\\' || q[7] != 'u' || util_hex4((const char *)q + 8, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF) {
                    x->p = q;
                    return -1;
                }
                cp = 0x10000 + ((cp & 0x3FF) << 10 | (lo & 0x3FF));
                q += 6;
            } else if (cp == 0) { /* see jsonin.h */
                x->p = q;
                return -1;
            }
            d += util_utf8_put(d, cp);
            q += 6;
            continue;
        }
        default:
            x->p = q;
            return -1;
        }
        q += 2;
    }
    *d++ = '\0';
    x->sp = d;
    x->p = q + 1;
    return 0;
}

static const double P10[] = { 1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                              1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };

/* Digits are taken into the mantissa while it is below this, so it stays
 * under 10^15 < 2^53: an exact double. */
#define MANT_LIMIT 100000000000000ull

static int parse_number(jparser *x, cJSON *n)
{
    const unsigned char *s = x->p, *q = s, *end = x->end;
    int neg = 0, exact = 1;
    uint64_t m = 0;
    long dexp = 0; /* m * 10^dexp, before the exponent part */
    if (*q == '-') {
        neg = 1;
        q++;
    }
    if (q >= end || *q < '0' || *q > '9')
        goto fail;
    if (*q == '0') {
        q++;
    } else {
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (m < MANT_LIMIT)
                m = m * 10 + (uint64_t)(*q - '0');
            else
                exact = 0;
        }
    }
    if (q < end && *q == '.') {
        q++;
        if (q >= end || *q < '0' || *q > '9')
            goto fail;
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (m < MANT_LIMIT) {
                m = m * 10 + (uint64_t)(*q - '0');
                dexp--;
            } else {
                exact = 0;
            }
        }
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = 0;
        long e = 0;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        if (q >= end || *q < '0' || *q > '9')
            goto fail;
        for (; q < end && *q >= '0' && *q <= '9'; q++)
            if (e < 100000)
                e = e * 10 + (*q - '0');
        dexp += eneg ? -e : e;
    }
    double v;
    if (exact && m == 0) {
        v = 0.0;
    } else if (exact && dexp >= -22 && dexp <= 22) {
        /* m and 10^|dexp| are exact doubles, so one correctly rounded
         * operation gives what strtod gives */
        v = dexp < 0 ? (double)m / P10[-dexp] : (double)m * P10[dexp];
    } else {
        /* strtod needs a terminated copy: the input need not end here */
        char buf[128], *t = buf;
        size_t l = (size_t)(q - s);
        if (l >= sizeof buf && !(t = malloc(l + 1)))
            goto fail;
        memcpy(t, s, l);
        t[l] = '\0';
        v = strtod(t, NULL);
        if (t != buf)
            free(t);
        neg = 0; /* strtod read the sign */
    }
    if (neg)
        v = -v;
    n->type = cJSON_Number;
    n->valuedouble = v;
    n->valueint = v >= INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v;
    /* The text as written (jsonin.h).  Room: k bytes of number take k + 1
     * here, the extra one paid by the byte after the number (a delimiter
     * or white space, which nothing else stores) or, at the very end of
     * the text, by the block's last byte; so the string area still never
     * runs ahead of the text before a string starts. */
    size_t l = (size_t)(q - s);
    memcpy(x->sp, s, l);
    x->sp[l] = '\0';
    n->valuestring = x->sp;
    x->sp += l + 1;
    x->p = q;
    return 0;
fail:
    x->p = q;
    return -1;
}

static int parse_value(jparser *x, cJSON *n);

/* '[' or '{' at x->p; elements until the closing bracket. */
static int parse_container(jparser *x, cJSON *n, int object)
{
    if (++x->depth > JSONIN_MAX_DEPTH)
        return -1;
    n->type = object ? cJSON_Object : cJSON_Array;
    unsigned char close = object ? '}' : ']';
    x->p++;
    skip_ws(x);
    if (x->p < x->end && *x->p == close) {
        x->p++;
        x->depth--;
        return 0;
    }
    cJSON *last = NULL;
    for (;;) {
        cJSON *c = node_new(x);
        if (!c)
            return -1;
        if (last) {
            last->next = c;
            c->prev = last;
        } else {
            n->child = c;
        }
        last = c;
        if (object) {
            if (x->p >= x->end || *x->p != '"' || parse_string(x, &c->string))
                return -1;
            skip_ws(x);
            if (x->p >= x->end || *x->p != ':')
                return -1;
            x->p++;
            skip_ws(x);
        }
        if (parse_value(x, c))
            return -1;
        skip_ws(x);
        if (x->p >= x->end)
            return -1;
        if (*x->p == ',') {
            x->p++;
            skip_ws(x);
            continue;
        }
        if (*x->p != close)
            return -1;
        x->p++;
        break;
    }
    n->child->prev = last; /* as cJSON links them: O(1) append */
    x->depth--;
    return 0;
}

static int literal(jparser *x, const char *word, size_t len)
{
    if ((size_t)(x->end - x->p) < len || memcmp(x->p, word, len) != 0)
        return -1;
    x->p += len;
    return 0;
}

static int parse_value(jparser *x, cJSON *n)
{
    if (x->p >= x->end)
        return -1;
    switch (*x->p) {
    case '{':
        return parse_container(x, n, 1);
    case '[':
        return parse_container(x, n, 0);
    case '"':
        n->type = cJSON_String;
        return parse_string(x, &n->valuestring);
    case 't':
        n->type = cJSON_True;
        n->valueint = 1;
        return literal(x, "true", 4);
    case 'f':
        n->type = cJSON_False;
        return literal(x, "false", 5);
    case 'n':
        n->type = cJSON_NULL;
        return literal(x, "null", 4);
    default:
        if (*x->p == '-' || (*x->p >= '0' && *x->p <= '9'))
            return parse_number(x, n);
        return -1;
    }
}

cJSON *jsonin_parse(const char *text, size_t len, const char **end, size_t *err_at)
{
    const unsigned char *s = (const unsigned char *)text;
    jparser x = { 0 };
    if (!text) {
        if (err_at)
            *err_at = 0;
        return NULL;
    }
    x.p = s;
    x.end = s + len;
    x.capnodes = node_bound(s, len);
    /* nodes, then every string with its NUL: no more than the text */
    if (x.capnodes > (SIZE_MAX - len - 1) / sizeof(cJSON))
        goto fail;
    x.nodes = malloc(x.capnodes * sizeof(cJSON) + len + 1);
    if (!x.nodes)
        goto fail;
    x.sp = (char *)(x.nodes + x.capnodes);
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        x.p += 3;
    skip_ws(&x);
    cJSON *root = node_new(&x);
    if (parse_value(&x, root))
        goto fail;
    if (end)
        *end = (const char *)x.p;
    return root;
fail:
    if (err_at)
        *err_at = (size_t)(x.p - s);
    free(x.nodes);
    return NULL;
}

cJSON *jsonin_parse_all(const char *text, size_t len, size_t *err_at)
{
    const char *end = NULL;
    cJSON *root = jsonin_parse(text, len, &end, err_at);
    if (!root)
        return NULL;
    jparser x = { .p = (const unsigned char *)end, .end = (const unsigned char *)text + len };
    skip_ws(&x);
    if (x.p != x.end) {
        if (err_at)
            *err_at = (size_t)((const char *)x.p - text);
        jsonin_free(root);
        return NULL;
    }
    return root;
}

int jsonin_nul_at(const char *text, size_t len, size_t err_at)
{
    return text && err_at <= len && len - err_at >= 6 && memcmp(text + err_at, "\\u0000", 6) == 0;
}

void jsonin_free(cJSON *root)
{
    free(root); /* the root is the block's first node */
}
