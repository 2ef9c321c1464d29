/* schema_regex.c - ECMA-262 regexes on PCRE2 (see schema_regex.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "schema_regex.h"
#include "util.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits: generous for real patterns on real strings, small enough that a
 * catastrophic backtracking pattern gives up within milliseconds. */
#define REGEX_MATCH_LIMIT 1000000u /* about 4 ms of backtracking */
#define REGEX_DEPTH_LIMIT 20000u
#define REGEX_HEAP_LIMIT_KIB 16384u
/* The JIT's stack, a thread's, grown as needed up to this.  PCRE2's own
 * (32 KiB) ran out on linear patterns such as ^([^<>]|<br>)*$ past some
 * 10,000 characters, and the interpreter then stopped at its depth
 * limit: a valid answer failed as LIMIT_EXCEEDED after 3 ms.  The match
 * limit and the validation's time budget still bound the time. */
#define REGEX_JIT_STACK_MAX (8u << 20)

/* The built-in matcher: a sequence of ASCII classes with repeat counts. */
#define SIMPLE_MAX 32

typedef struct simple_el {
    uint64_t bits[2]; /* ASCII members */
    int nonascii;     /* any code point >= 0x80 matches (negated classes) */
    unsigned min, max;
} simple_el;

typedef struct simple_re {
    int n;
    int anchored_end; /* pattern ends with $ */
    simple_el el[SIMPLE_MAX];
    uint32_t tab[256]; /* bit k: the byte is in the class of el[k] (bytes
                          >= 0x80 are in none: see nonascii) */
} simple_re;

struct schema_regex {
    pcre2_code *code;
    char *source;
    int jit; /* JIT-compiled: pcre2_jit_match can be used */
    simple_re *simple;
};

/* ECMA-262 WhiteSpace and LineTerminator code points: \t \n \v \f \r, the
 * Zs category (space, NBSP, U+1680, U+2000-200A, U+202F, U+205F, U+3000),
 * U+2028, U+2029 and the BOM.  Spelled out rather than \p{Zs}, so that
 * ECMA_NOT_WS is its exact complement whatever PCRE2's Unicode version. */
#define ECMA_WS "\\t\\n\\x{0b}\\f\\r\\x{20}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}" \
                "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}"
/* Every other code point: \S inside a class, where a complement cannot be
 * spelled as [^...].  (PCRE2's own \S there is ASCII-only: [\S] matched
 * U+3000, and [^\S\r\n] missed U+2003.)  \D and \W need nothing: ECMA's
 * \d and \w are ASCII-only, as PCRE2's are without PCRE2_UCP. */
#define ECMA_NOT_WS "\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{9f}\\x{a1}-\\x{167f}" \
                    "\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}\\x{202a}-\\x{202e}"   \
                    "\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{fefe}"   \
                    "\\x{ff00}-\\x{10ffff}"

/* The translated pattern: util's buffer, with a failure that sticks so
 * that translate checks once, at the end, rather than at every append. */
typedef struct pat_buf {
    sbuf s;
    int oom;
} pat_buf;

static void sb_add(pat_buf *b, const char *s, size_t n)
{
    if (!b->oom && sbuf_append(&b->s, s, n))
        b->oom = 1;
}

static void sb_str(pat_buf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_fmt(pat_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(pat_buf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static int hexdig(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads exactly 4 hex digits at p; -1 if not. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hexdig((unsigned char)p[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* ECMA-262 accepts long General_Category names; PCRE2 10.42 only the
 * short ones. */
static const char *const GC_LONG[][2] = {
    { "Letter", "L" }, { "Cased_Letter", "L&" }, { "Uppercase_Letter", "Lu" },
    { "Lowercase_Letter", "Ll" }, { "Titlecase_Letter", "Lt" }, { "Modifier_Letter", "Lm" },
    { "Other_Letter", "Lo" }, { "Mark", "M" }, { "Combining_Mark", "M" },
    { "Nonspacing_Mark", "Mn" }, { "Spacing_Mark", "Mc" }, { "Enclosing_Mark", "Me" },
    { "Number", "N" }, { "Decimal_Number", "Nd" }, { "digit", "Nd" }, { "Letter_Number", "Nl" },
    { "Other_Number", "No" }, { "Punctuation", "P" }, { "punct", "P" },
    { "Connector_Punctuation", "Pc" }, { "Dash_Punctuation", "Pd" }, { "Open_Punctuation", "Ps" },
    { "Close_Punctuation", "Pe" }, { "Initial_Punctuation", "Pi" }, { "Final_Punctuation", "Pf" },
    { "Other_Punctuation", "Po" }, { "Symbol", "S" }, { "Math_Symbol", "Sm" },
    { "Currency_Symbol", "Sc" }, { "Modifier_Symbol", "Sk" }, { "Other_Symbol", "So" },
    { "Separator", "Z" }, { "Space_Separator", "Zs" }, { "Line_Separator", "Zl" },
    { "Paragraph_Separator", "Zp" }, { "Other", "C" }, { "Control", "Cc" }, { "cntrl", "Cc" },
    { "Format", "Cf" }, { "Surrogate", "Cs" }, { "Private_Use", "Co" }, { "Unassigned", "Cn" },
};

static void add_gc(pat_buf *b, const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof GC_LONG / sizeof GC_LONG[0]; i++) {
        if (strlen(GC_LONG[i][0]) == n && memcmp(GC_LONG[i][0], name, n) == 0) {
            sb_str(b, GC_LONG[i][1]);
            return;
        }
    }
    sb_add(b, name, n);
}

/* \p{...} / \P{...}: ECMA spells General_Category=X, gc=X, Script=X, sc=X,
 * Script_Extensions=X, scx=X; PCRE2 wants X, X, sc:X / X, scx:X. */
static int translate_property(pat_buf *b, const char *p, char neg, size_t *used)
{
    if (p[0] != '{')
        return -1;
    const char *end = strchr(p, '}');
    if (!end)
        return -1;
    const char *body = p + 1;
    size_t n = (size_t)(end - body);
    const char *eq = memchr(body, '=', n);
    sb_fmt(b, "\\%c{", neg);
    if (eq) {
        size_t kn = (size_t)(eq - body);
        const char *val = eq + 1;
        size_t vn = n - kn - 1;
        if ((kn == 16 && memcmp(body, "General_Category", 16) == 0) ||
            (kn == 2 && memcmp(body, "gc", 2) == 0)) {
            add_gc(b, val, vn);
        } else if ((kn == 6 && memcmp(body, "Script", 6) == 0) ||
                   (kn == 2 && memcmp(body, "sc", 2) == 0)) {
            sb_str(b, "sc:");
            sb_add(b, val, vn);
        } else if ((kn == 17 && memcmp(body, "Script_Extensions", 17) == 0) ||
                   (kn == 3 && memcmp(body, "scx", 3) == 0)) {
            sb_str(b, "scx:");
            sb_add(b, val, vn);
        } else {
            return -1;
        }
    } else {
        add_gc(b, body, n);
    }
    sb_str(b, "}");
    *used = n + 2;
    return 0;
}

/* Reads a \u escape's code point, p after the "\u": XXXX (two of them
 * for a surrogate pair) or {X...}.  Returns the characters read, or 0
 * when it is no such escape; *cp may be a lone surrogate. */
static size_t unicode_escape(const char *p, long *cp)
{
    if (p[0] == '{') {
        size_t j = 1;
        *cp = 0;
        while (hexdig((unsigned char)p[j]) >= 0 && *cp <= 0x10FFFF)
            *cp = *cp * 16 + hexdig((unsigned char)p[j++]);
        return j == 1 || p[j] != '}' || *cp > 0x10FFFF ? 0 : j + 1;
    }
    *cp = hex4(p);
    if (*cp < 0)
        return 0;
    if (*cp >= 0xD800 && *cp <= 0xDBFF && p[4] == '\\' && p[5] == 'u') {
        long lo = hex4(p + 6);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            return 10;
        }
    }
    return 4;
}

/* Group names.  PCRE2 10.42 takes a name of at most 32 code units, of
 * letters, digits and '_'; ECMA-262 any identifier, of any length ('$',
 * combining marks, ZWJ, \u escapes).  So each distinct name is given to
 * PCRE2 as n<id>, id its rank in order of first appearance, and each
 * \k<name> names the same (the source pattern keeps the user's names). */
typedef struct group_name {
    char *name;  /* its string value (\u escapes decoded): UTF-8, len bytes */
    size_t len;
    size_t last; /* offset of the '(' of its latest group so far */
} group_name;

/* A group open at the scan's point, or the pattern itself: where its
 * alternatives begin (for duplicate names). */
typedef struct group_frame {
    size_t open;     /* offset + 1 of its '(' (0: the pattern) */
    size_t last_bar; /* offset + 1 of its latest own '|' (0: none yet) */
} group_frame;

/* What translate needs to know of the whole pattern before it starts (a
 * backreference may come before its group). */
typedef struct group_info {
    unsigned long ngroups; /* ECMA-262's NcapturingParens */
    int named;             /* some group is named */
    int rename;            /* names become n<id> (0: passed as written) */
    int dupnames;          /* a name is shared by groups in different
                              alternatives (ES2025) */
    size_t clash;          /* offset + 1 of a group sharing its name with
                              one that might take part too (0: none) */
    group_name *names;     /* by first appearance: names[k] is n<k+1> */
    size_t *sorted;        /* indexes into names, ordered by name */
    size_t nnames, cap;
    group_frame *frames;   /* [0..depth]: the pattern, open groups */
    size_t depth, fcap;
    sbuf tmp;              /* the name being read */
} group_info;

static void group_info_free(group_info *gi)
{
    for (size_t k = 0; k < gi->nnames; k++)
        free(gi->names[k].name);
    free(gi->names);
    free(gi->sorted);
    free(gi->frames);
    sbuf_free(&gi->tmp);
}

/* The length of a named group's opening at p (a '('): "(?<" that opens
 * no lookbehind, and PCRE2's "(?P<" and "(?'" (strict mode refuses them
 * in translate); 0 if none.  *close: the character that ends the name. */
static size_t name_open(const char *p, char *close)
{
    *close = '>';
    if (p[1] != '?')
        return 0;
    if (p[2] == '<' && p[3] != '=' && p[3] != '!')
        return 3;
    if (p[2] == 'P' && p[3] == '<')
        return 4;
    *close = '\'';
    return p[2] == '\'' ? 3 : 0;
}

/* How much of the name at p, up to close, an error message shows: the
 * user's spelling, not n<id>. */
static int name_shown(const char *p, char close)
{
    const char *e = strchr(p, close);
    size_t n = e ? (size_t)(e - p) : strlen(p);
    return n < 200 ? (int)n : 200;
}

static int ident_valid(const char *s, size_t n);

/* Reads the group name at p, up to close, into gi->tmp as its string
 * value, by which ECMA-262 compares names ((?<\u0061>x) is \k<a>'s
 * group).  Returns 0 with *used (close included), 1 when it is no valid
 * name (unterminated, an escape other than \u, a lone surrogate, not an
 * identifier), -1 when out of memory. */
static int read_name(group_info *gi, const char *p, char close, size_t *used)
{
    sbuf *s = &gi->tmp;
    size_t j = 0;
    s->len = 0;
    while (p[j] != close) {
        if (!p[j])
            return 1;
        if (p[j] == '\\') {
            long cp = 0;
            size_t n = p[j + 1] == 'u' ? unicode_escape(p + j + 2, &cp) : 0;
            char u[4];
            if (!n || (cp >= 0xD800 && cp <= 0xDFFF))
                return 1;
            if (sbuf_append(s, u, util_utf8_put(u, (uint32_t)cp)))
                return -1;
            j += 2 + n;
        } else {
            if (sbuf_append(s, p + j, 1))
                return -1;
            j++;
        }
    }
    *used = j + 1;
    int valid = ident_valid(s->data, s->len);
    return valid < 0 ? -1 : !valid;
}

/* Where name s[0..n) is in gi->sorted (*found), or would go. */
static size_t name_slot(const group_info *gi, const char *s, size_t n, int *found)
{
    size_t lo = 0, hi = gi->nnames;
    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const group_name *g = &gi->names[gi->sorted[mid]];
        int c = memcmp(g->name, s, g->len < n ? g->len : n);
        if (c == 0)
            c = (g->len > n) - (g->len < n);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Records the name in gi->tmp for the group whose '(' is at offset at.
 * A name given before is ES2025's duplicate, allowed when no two of its
 * groups might both take part: when they are in different alternatives,
 * i.e. a '|' of the innermost group around both stands between them.
 * Checking against the name's latest group is enough: two groups are in
 * different alternatives when a group between them is so with both.
 * Returns 0, or -1 when out of memory. */
static int add_name(group_info *gi, size_t at)
{
    int found;
    size_t slot = name_slot(gi, gi->tmp.data, gi->tmp.len, &found);
    if (found) {
        group_name *g = &gi->names[gi->sorted[slot]];
        size_t f = gi->depth;
        while (gi->frames[f].open > g->last) /* frames[0].open is 0 */
            f--;
        if (gi->frames[f].last_bar > g->last)
            gi->dupnames = 1;
        else if (!gi->clash)
            gi->clash = at + 1;
        g->last = at;
        return 0;
    }
    if (gi->nnames == gi->cap) {
        size_t nc = gi->cap ? gi->cap * 2 : 8;
        group_name *nn = realloc(gi->names, nc * sizeof *nn);
        if (!nn)
            return -1;
        gi->names = nn;
        size_t *ns = realloc(gi->sorted, nc * sizeof *ns);
        if (!ns)
            return -1;
        gi->sorted = ns;
        gi->cap = nc;
    }
    char *copy = malloc(gi->tmp.len);
    if (!copy)
        return -1;
    memcpy(copy, gi->tmp.data, gi->tmp.len);
    gi->names[gi->nnames] = (group_name){ copy, gi->tmp.len, at };
    memmove(gi->sorted + slot + 1, gi->sorted + slot, (gi->nnames - slot) * sizeof *gi->sorted);
    gi->sorted[slot] = gi->nnames++;
    return 0;
}

/* Reads the groups of the whole pattern into gi: their number, their
 * names, where each group's alternatives are.  In lenient mode, a pattern
 * with PCRE2's own syntax that may refer to a name (\k'n' \k{n} \g{n}
 * (?P=n) (?&n) (?(<n>)...) ...) or hide one's text ((?#...) (?x) \Q)
 * keeps its names as written (gi->rename 0), so it compiles and matches
 * as it always did: it was written for PCRE-like engines, whose names
 * PCRE2 takes, and renaming in it would take translating all of that
 * syntax, where one form missed would break a working pattern.  Returns
 * 0, or -1 when out of memory. */
static int scan_groups(const char *p, int strict, group_info *gi)
{
    int in_cls = 0, pcre_only = 0;
    gi->fcap = 16;
    gi->frames = calloc(gi->fcap, sizeof *gi->frames);
    if (!gi->frames)
        return -1;
    for (size_t i = 0; p[i]; i++) {
        if (p[i] == '\\') {
            if ((p[i + 1] == 'k' && p[i + 2] != '<') || p[i + 1] == 'g' || p[i + 1] == 'Q')
                pcre_only = 1;
            if (p[i + 1])
                i++;
        } else if (in_cls) {
            in_cls = p[i] != ']';
        } else if (p[i] == '[') {
            /* [] and [^] hold no ']' (translate reads them so too) */
            if (p[i + 1] == ']')
                i++;
            else if (p[i + 1] == '^' && p[i + 2] == ']')
                i += 2;
            else
                in_cls = 1;
        } else if (p[i] == '(') {
            char close;
            size_t k = name_open(p + i, &close), used;
            if (p[i + 1] != '?' || k)
                gi->ngroups++;
            if (k) {
                gi->named = 1;
                /* an invalid name is not recorded: translate says so
                 * where it stands */
                int r = read_name(gi, p + i + k, close, &used);
                if (r < 0 || (r == 0 && add_name(gi, i) < 0))
                    return -1;
            } else if (p[i + 1] == '?' && p[i + 2] != ':' && p[i + 2] != '=' && p[i + 2] != '!' &&
                       p[i + 2] != '<') {
                pcre_only = 1;
            }
            if (gi->depth + 1 == gi->fcap) {
                group_frame *nf = realloc(gi->frames, 2 * gi->fcap * sizeof *nf);
                if (!nf)
                    return -1;
                gi->frames = nf;
                gi->fcap *= 2;
            }
            gi->frames[++gi->depth] = (group_frame){ i + 1, 0 };
        } else if (p[i] == ')') {
            if (gi->depth)
                gi->depth--;
        } else if (p[i] == '|') {
            gi->frames[gi->depth].last_bar = i + 1;
        }
    }
    gi->rename = strict || !pcre_only;
    return 0;
}

/* The id of the group name at p, up to close: 0 with *id and *used, or
 * -1 with a message in err (what is wrong, with the user's spelling).
 * ref: a \k<name>, whose name may be no group's. */
static int name_id(group_info *gi, const char *p, char close, int ref, size_t *used, size_t *id,
                   char *err, size_t errlen)
{
    int found = 0, r = read_name(gi, p, close, used);
    size_t slot = r == 0 ? name_slot(gi, gi->tmp.data, gi->tmp.len, &found) : 0;
    if (r == 0 && found) {
        *id = gi->sorted[slot] + 1;
        return 0;
    }
    if (r < 0)
        snprintf(err, errlen, "out of memory");
    else if (r > 0 && !strchr(p, close))
        snprintf(err, errlen, "group name '%.*s' without its closing %c", name_shown(p, close), p, close);
    else if (r > 0)
        snprintf(err, errlen, "invalid group name '%.*s'", name_shown(p, close), p);
    else
        snprintf(err, errlen, ref ? "backreference \\k<%.*s> to a group that does not exist"
                                  : "group name '%.*s' not found", name_shown(p, close), p);
    util_utf8_cut_end(err); /* the name may be cut inside a character */
    return -1;
}

/* Annex B: \N (at pat[i], after the backslash) that is no backreference
 * is a legacy octal escape, up to \377, and \8 or \9 the digit itself.
 * Returns the index after it. */
static size_t legacy_octal(const char *pat, size_t i, pat_buf *b)
{
    unsigned d = (unsigned)(pat[i] - '0');
    if (d > 7) {
        sb_add(b, pat + i, 1);
        return i + 1;
    }
    size_t k = 1, max = d <= 3 ? 3 : 2;
    for (; k < max && pat[i + k] >= '0' && pat[i + k] <= '7'; k++)
        d = d * 8 + (unsigned)(pat[i + k] - '0');
    sb_fmt(b, "\\x{%x}", d);
    return i + k;
}

/* \d \D \w \W \s \S \p{} \P{}: a set, which cannot bound a range */
static int class_escape(const char *p)
{
    return p[0] == '\\' && p[1] && strchr("dDwWsSpP", p[1]);
}

/* Where a character class stands, for its '-': a range operator only
 * between two atoms, the first not the end of a range. */
typedef struct cls_state {
    int range_left; /* the last atom may begin a range */
    int left_set;   /* the last atom is a class escape */
    int closing;    /* the next atom ends a range */
} cls_state;

static void cls_atom(cls_state *c, int set)
{
    c->range_left = !c->closing;
    c->closing = 0;
    c->left_set = set;
}

/* Translates an ECMA-262 pattern to PCRE2 syntax, its groups read into gi
 * by scan_groups.  Returns 0, or -1 with a message in err. */
static int translate(const char *pat, int strict, group_info *gi, pat_buf *b, char *err,
                     size_t errlen)
{
    int in_class = 0;
    unsigned long ngroups = gi->ngroups;
    cls_state cs = { 0, 0, 0 };
    size_t i = 0;
    while (pat[i]) {
        char ch = pat[i];
        if (ch == '\\') {
            char e = pat[i + 1];
            if (!e) {
                snprintf(err, errlen, "pattern ends with a lone backslash");
                return -1;
            }
            i += 2;
            switch (e) {
            case 'd': case 'D': case 'w': case 'W':
            case 't': case 'n': case 'f': case 'r':
            case 'b': case 'B':
                sb_fmt(b, "\\%c", e);
                break;
            case 's':
                sb_str(b, in_class ? ECMA_WS : "[" ECMA_WS "]");
                break;
            case 'S':
                sb_str(b, in_class ? ECMA_NOT_WS : "[^" ECMA_WS "]");
                break;
            case 'v':
                sb_str(b, "\\x{0b}");
                break;
            case '0':
                if (pat[i] >= '0' && pat[i] <= '9') {
                    if (strict) {
                        snprintf(err, errlen, "octal escapes are not allowed");
                        return -1;
                    }
                    sb_str(b, "\\0");
                } else {
                    sb_str(b, "\\x{0}");
                }
                break;
            case 'c':
                if ((pat[i] >= 'a' && pat[i] <= 'z') || (pat[i] >= 'A' && pat[i] <= 'Z')) {
                    sb_fmt(b, "\\x{%x}", (unsigned)(pat[i] % 32));
                    i++;
                } else if (strict) {
                    snprintf(err, errlen, "invalid control escape \\c");
                    return -1;
                } else {
                    sb_str(b, "\\\\c");
                }
                break;
            case 'x': {
                int h = hexdig((unsigned char)pat[i]);
                int l = h >= 0 ? hexdig((unsigned char)pat[i + 1]) : -1;
                if (h >= 0 && l >= 0) {
                    sb_fmt(b, "\\x{%x}", (unsigned)(h * 16 + l));
                    i += 2;
                } else if (strict) {
                    snprintf(err, errlen, "invalid \\x escape");
                    return -1;
                } else {
                    sb_str(b, "x");
                }
                break;
            }
            case 'u': {
                long cp;
                size_t n = unicode_escape(pat + i, &cp);
                if (!n) {
                    snprintf(err, errlen, pat[i] == '{' ? "invalid \\u{...} escape" : "invalid \\u escape");
                    return -1;
                }
                i += n;
                if (cp >= 0xD800 && cp <= 0xDFFF) {
                    snprintf(err, errlen, "lone surrogate \\u%04lx is not supported", cp);
                    return -1;
                }
                sb_fmt(b, "\\x{%lx}", cp);
                break;
            }
            case 'p': case 'P': {
                size_t used = 0;
                if (translate_property(b, pat + i, e, &used) < 0) {
                    snprintf(err, errlen, "invalid \\%c{...} property escape", e);
                    return -1;
                }
                i += used;
                break;
            }
            case 'k': {
                /* Annex B: in a pattern without named groups \k is the
                 * letter (\k<a> matches "k<a>") */
                const char *gt = pat[i] == '<' ? strchr(pat + i, '>') : NULL;
                size_t used, id;
                if (!gi->named && !strict) {
                    sb_str(b, "k");
                } else if (gi->rename && pat[i] != '<') {
                    /* strict mode: ECMA's \k takes <name> only (lenient
                     * mode renames nothing in a pattern with PCRE2's
                     * \k'name' or \k{name}: scan_groups) */
                    snprintf(err, errlen, "\\k without a <name>");
                    return -1;
                } else if (gi->rename) {
                    /* \k<name> in a group of its own, as \N below: PCRE2
                     * 10.42's JIT never matched a quantified one to a
                     * group that took no part */
                    if (name_id(gi, pat + i + 1, '>', 1, &used, &id, err, errlen) < 0)
                        return -1;
                    sb_fmt(b, "(?:\\k<n%zu>)", id);
                    i += 1 + used;
                } else if (gt) {
                    /* the same, the name as written */
                    sb_str(b, "(?:\\k");
                    sb_add(b, pat + i, (size_t)(gt - (pat + i)) + 1);
                    sb_str(b, ")");
                    i = (size_t)(gt - pat) + 1;
                } else {
                    sb_str(b, "\\k");
                }
                break;
            }
            case '1': case '2': case '3': case '4': case '5':
            case '6': case '7': case '8': case '9': {
                /* the whole number: \12 is group 12 when there are 12 */
                unsigned long num = 0;
                size_t j = i - 1;
                while (pat[j] >= '0' && pat[j] <= '9' && num <= ngroups)
                    num = num * 10 + (unsigned long)(pat[j++] - '0');
                while (pat[j] >= '0' && pat[j] <= '9')
                    j++;
                if (!in_class && num <= ngroups) {
                    /* \g{N}: a backreference for PCRE2 too, which takes
                     * \N for octal when fewer groups come before it; in a
                     * group of its own, as PCRE2 10.42's JIT never matched
                     * a quantified one to a group that took no part (ECMA
                     * and its interpreter match it to "") */
                    sb_fmt(b, "(?:\\g{%lu})", num);
                    i = j;
                } else if (strict) {
                    snprintf(err, errlen, in_class ? "invalid escape \\%c in a character class"
                                                   : "backreference \\%c... to a group that does not exist", e);
                    return -1;
                } else {
                    i = legacy_octal(pat, i - 1, b);
                }
                break;
            }
            case '^': case '$': case '\\': case '.': case '*': case '+':
            case '?': case '(': case ')': case '[': case ']': case '{':
            case '}': case '|': case '/': case '-':
                sb_fmt(b, "\\%c", e);
                break;
            default:
                if (strict) {
                    snprintf(err, errlen, "invalid escape \\%c", e);
                    return -1;
                }
                /* Lenient mode keeps PCRE2 meaning (\A, \Z, ...): schemas
                 * written for other engines still work. */
                sb_fmt(b, "\\%c", e);
                break;
            }
            if (in_class)
                cls_atom(&cs, strchr("dDwWsSpP", e) != NULL);
            continue;
        }
        if (in_class) {
            if (ch == ']') {
                in_class = 0;
                sb_str(b, "]");
            } else if (ch == '-' && cs.range_left && pat[i + 1] && pat[i + 1] != ']') {
                if (cs.left_set || class_escape(pat + i + 1)) {
                    /* [\s-a]: Annex B takes the three atoms; PCRE2 refused
                     * them (after \s's last code point, a range out of
                     * order) */
                    if (strict) {
                        snprintf(err, errlen, "a character class escape cannot bound a range");
                        return -1;
                    }
                    sb_str(b, "\\-");
                } else {
                    sb_str(b, "-");
                }
                cs.range_left = cs.left_set = 0;
                cs.closing = 1;
            } else {
                /* an atom: a '-' here is literal, and said so (PCRE2 might
                 * read it next to a class escape as a range) */
                if (ch == '-')
                    sb_str(b, "\\-");
                else if (ch == '[')
                    sb_str(b, "\\["); /* ECMA: literal; PCRE2: POSIX class */
                else
                    sb_add(b, &ch, 1);
                /* a character of several bytes is one atom */
                while (((unsigned char)pat[i + 1] & 0xC0) == 0x80)
                    sb_add(b, pat + ++i, 1);
                cls_atom(&cs, 0);
            }
            i++;
            continue;
        }
        switch (ch) {
        case '[':
            if (pat[i + 1] == ']') {
                sb_str(b, "(?!)");
                i += 2;
            } else if (pat[i + 1] == '^' && pat[i + 2] == ']') {
                sb_str(b, "[\\s\\S]");
                i += 3;
            } else {
                in_class = 1;
                memset(&cs, 0, sizeof cs);
                if (pat[i + 1] == '^') {
                    sb_str(b, "[^");
                    i += 2;
                } else {
                    sb_str(b, "[");
                    i++;
                }
            }
            break;
        case '.':
            sb_str(b, "[^\\n\\r\\x{2028}\\x{2029}]");
            i++;
            break;
        case '(': {
            if (strict && pat[i + 1] == '?') {
                char g = pat[i + 2];
                int ok = g == ':' || g == '=' || g == '!' ||
                         (g == '<' && (pat[i + 3] == '=' || pat[i + 3] == '!' ||
                                       (pat[i + 3] && pat[i + 3] != '>')));
                if (!ok) {
                    snprintf(err, errlen, "unsupported group syntax (?%c", g ? g : ' ');
                    return -1;
                }
            }
            if (strict && pat[i + 1] == '*') {
                snprintf(err, errlen, "unsupported verb (*");
                return -1;
            }
            /* a named group: PCRE2 gets n<id> for its name */
            char close;
            size_t k = gi->rename ? name_open(pat + i, &close) : 0, used, id;
            if (k) {
                if (name_id(gi, pat + i + k, close, 0, &used, &id, err, errlen) < 0)
                    return -1;
                sb_fmt(b, "(?<n%zu>", id);
                i += k + used;
            } else {
                sb_str(b, "(");
                i++;
            }
            break;
        }
        default:
            sb_add(b, &ch, 1);
            i++;
            break;
        }
    }
    if (in_class) {
        snprintf(err, errlen, "missing terminating ] for character class");
        return -1;
    }
    if (b->oom) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void cls_add(simple_el *e, int c)
{
    e->bits[c >> 6] |= 1ull << (c & 63);
}

static void cls_range(simple_el *e, int a, int b)
{
    for (int c = a; c <= b; c++)
        cls_add(e, c);
}

/* Reads one class item escape (\d \w or an escaped punctuation char) at
 * p (after the backslash) into e.  Returns 0, or -1 when unsupported. */
static int simple_escape(simple_el *e, char ch)
{
    switch (ch) {
    case 'd':
        cls_range(e, '0', '9');
        return 0;
    case 'w':
        cls_range(e, '0', '9');
        cls_range(e, 'A', 'Z');
        cls_range(e, 'a', 'z');
        cls_add(e, '_');
        return 0;
    default:
        if (ch && strchr("^$\\.*+?()[]{}|/-", ch)) {
            cls_add(e, (unsigned char)ch);
            return 0;
        }
        return -1; /* \s \b \u ... : leave to PCRE2 */
    }
}

/* Parses pattern into r; -1 when it is not in the supported subset. */
static int simple_parse(const char *p, simple_re *r)
{
    memset(r, 0, sizeof *r);
    if (*p++ != '^')
        return -1;
    while (*p) {
        if (*p == '$' && p[1] == '\0') {
            r->anchored_end = 1;
            break;
        }
        if (r->n == SIMPLE_MAX)
            return -1;
        simple_el *e = &r->el[r->n++];
        unsigned char ch = (unsigned char)*p;
        if (ch == '[') {
            p++;
            int neg = 0;
            if (*p == '^') {
                neg = 1;
                p++;
            }
            if (*p == ']')
                return -1; /* [] and [^] */
            while (*p && *p != ']') {
                int lo;
                if (*p == '\\') {
                    if (p[1] == 'd' || p[1] == 'w') {
                        simple_escape(e, p[1]);
                        p += 2;
                        continue;
                    }
                    if (!p[1] || !strchr("^$\\.*+?()[]{}|/-", p[1]))
                        return -1;
                    lo = (unsigned char)p[1];
                    p += 2;
                } else {
                    lo = (unsigned char)*p++;
                    if (lo >= 0x80 || lo == '[')
                        return -1;
                }
                if (*p == '-' && p[1] && p[1] != ']') {
                    int hi = (unsigned char)p[1];
                    if (hi == '\\' || hi >= 0x80 || hi == '[' || hi < lo)
                        return -1;
                    cls_range(e, lo, hi);
                    p += 2;
                } else {
                    cls_add(e, lo);
                }
            }
            if (*p != ']')
                return -1;
            p++;
            if (neg) {
                e->bits[0] = ~e->bits[0];
                e->bits[1] = ~e->bits[1];
                e->nonascii = 1;
            }
        } else if (ch == '\\') {
            if (simple_escape(e, p[1]) < 0)
                return -1;
            p += 2;
        } else if (ch >= 0x80 || strchr("^$.*+?()[]{}|", ch)) {
            return -1;
        } else {
            cls_add(e, ch);
            p++;
        }
        e->min = e->max = 1;
        if (*p == '?' || *p == '*' || *p == '+') {
            e->min = *p == '+';
            e->max = *p == '?' ? 1 : UINT32_MAX;
            p++;
        } else if (*p == '{') {
            char *end;
            if (p[1] < '0' || p[1] > '9')
                return -1; /* strtoul would skip spaces and signs */
            unsigned long a = strtoul(p + 1, &end, 10), b = a;
            if (a > 100000)
                return -1;
            if (*end == ',') {
                if (end[1] == '}') {
                    b = UINT32_MAX;
                    end++;
                } else {
                    char *e2;
                    if (end[1] < '0' || end[1] > '9')
                        return -1;
                    b = strtoul(end + 1, &e2, 10);
                    if (e2 == end + 1 || b < a || b > 100000)
                        return -1;
                    end = e2;
                }
            }
            if (*end != '}')
                return -1;
            e->min = (unsigned)a;
            e->max = (unsigned)b;
            p = end + 1;
        }
        if (*p == '?' || *p == '+' || *p == '*' || *p == '{')
            return -1; /* lazy or stacked quantifiers */
    }
    for (int k = 0; k < r->n; k++)
        for (int ch = 0; ch < 0x80; ch++)
            if ((r->el[k].bits[ch >> 6] >> (ch & 63)) & 1)
                r->tab[ch] |= 1u << k;
    /* greedy is exact when no variable-length element can take a character
     * that what may follow it needs */
    for (int i = 0; i < r->n; i++) {
        if (r->el[i].min == r->el[i].max)
            continue;
        for (int j = i + 1; j < r->n; j++) {
            const simple_el *a = &r->el[i], *b = &r->el[j];
            if ((a->bits[0] & b->bits[0]) || (a->bits[1] & b->bits[1]) ||
                (a->nonascii && b->nonascii))
                return -1;
            if (b->min > 0)
                break;
        }
    }
    return 0;
}

static int simple_match(const simple_re *r, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    for (int k = 0; k < r->n; k++) {
        const simple_el *e = &r->el[k];
        if (!e->nonascii) {
            /* ASCII members only: one byte per character (a byte >= 0x80
             * is in no class of tab) */
            size_t lim = len - i > e->max ? i + e->max : len, start = i;
            uint32_t bit = 1u << k;
            while (i < lim && (r->tab[s[i]] & bit))
                i++;
            if (i - start < e->min)
                return 0;
            continue;
        }
        unsigned cnt = 0;
        while (cnt < e->max && i < len) {
            unsigned char c = s[i];
            if (c < 0x80) {
                if (!((e->bits[c >> 6] >> (c & 63)) & 1))
                    break;
                i++;
            } else {
                if (!e->nonascii)
                    break;
                i++; /* one code point: skip its continuation bytes */
                while (i < len && (s[i] & 0xC0) == 0x80)
                    i++;
            }
            cnt++;
        }
        if (cnt < e->min)
            return 0;
    }
    return !r->anchored_end || i == len;
}

/* Shared, read-only after creation: limits for every match. */
static pcre2_match_context *g_mctx;
/* ECMA-262's RegExpIdentifierName, \u escapes decoded: a group name */
static pcre2_code *g_ident;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_md_key;
static int g_init_ok;

static pthread_key_t g_jit_key;

static void md_destroy(void *md)
{
    pcre2_match_data_free(md);
}

static void jit_destroy(void *js)
{
    pcre2_jit_stack_free(js);
}

static __thread pcre2_jit_stack *tl_jit;

/* The calling thread's JIT stack, made at its first match; NULL (PCRE2's
 * own) when it cannot be. */
static pcre2_jit_stack *thread_jit_stack(void *unused)
{
    (void)unused;
    if (!tl_jit) {
        pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, REGEX_JIT_STACK_MAX, NULL);
        if (js && pthread_setspecific(g_jit_key, js) != 0) {
            pcre2_jit_stack_free(js);
            js = NULL;
        }
        tl_jit = js;
    }
    return tl_jit;
}

static void regex_global_init(void)
{
    g_mctx = pcre2_match_context_create(NULL);
    if (!g_mctx)
        return;
    pcre2_set_match_limit(g_mctx, REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(g_mctx, REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(g_mctx, REGEX_HEAP_LIMIT_KIB);
    int ec;
    PCRE2_SIZE off;
    g_ident = pcre2_compile((PCRE2_SPTR) "[\\p{ID_Start}$_][\\p{ID_Continue}$\\x{200c}\\x{200d}]*",
                            PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                            &ec, &off, NULL);
    if (!g_ident)
        return;
    if (pthread_key_create(&g_md_key, md_destroy) != 0 || pthread_key_create(&g_jit_key, jit_destroy) != 0)
        return;
    pcre2_jit_stack_assign(g_mctx, thread_jit_stack, NULL);
    g_init_ok = 1;
}

/* Match data is not shareable between threads; each thread keeps one
 * (it also caches PCRE2's backtracking frames), freed at thread exit. */
static __thread pcre2_match_data *tl_md; /* fast access; the key frees it */

static pcre2_match_data *thread_match_data(void)
{
    pcre2_match_data *md = tl_md;
    if (!md) {
        md = pcre2_match_data_create(1, NULL);
        if (md && pthread_setspecific(g_md_key, md) != 0) {
            pcre2_match_data_free(md);
            md = NULL;
        }
        tl_md = md;
    }
    return md;
}

/* 1 when s[0..n) is a group name ECMA-262 takes, 0 when not (UTF-8
 * checked too: a name's bytes are the pattern's as given), -1 when out of
 * memory. */
static int ident_valid(const char *s, size_t n)
{
    pcre2_match_data *md = thread_match_data();
    if (!md)
        return -1;
    return pcre2_match(g_ident, (PCRE2_SPTR)(s ? s : ""), n, 0, 0, md, NULL) >= 0;
}

static schema_regex *regex_compile(const char *pattern, int flags, char *err, size_t errlen,
                                   int *pcre_error)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    pthread_once(&g_once, regex_global_init);
    if (!g_init_ok) {
        snprintf(err, errlen, "regex engine initialisation failed");
        return NULL;
    }
    pat_buf b = { 0 };
    group_info gi = { 0 };
    schema_regex *re = NULL;
    int strict = flags & SCHEMA_REGEX_STRICT;
    if (scan_groups(pattern, strict, &gi) < 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (gi.rename && gi.clash) {
        char close;
        const char *name = pattern + gi.clash - 1;
        name += name_open(name, &close);
        snprintf(err, errlen,
                 "duplicate group name '%.*s' (only groups in different alternatives may share one)",
                 name_shown(name, close), name);
        util_utf8_cut_end(err);
        goto done;
    }
    if (translate(pattern, strict, &gi, &b, err, errlen) < 0)
        goto done;
    int ec = 0;
    PCRE2_SIZE off = 0;
    /* MATCH_UNSET_BACKREF: in ECMA-262 a backreference to a group that
     * has not taken part (yet) matches the empty string; in PCRE2 it
     * fails.  DUPNAMES: ES2025's names shared by groups in different
     * alternatives (scan_groups checked that they are). */
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)(b.s.data ? b.s.data : ""), b.s.len,
                                     PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C |
                                         PCRE2_MATCH_UNSET_BACKREF |
                                         (gi.rename && gi.dupnames ? PCRE2_DUPNAMES : 0),
                                     &ec, &off, NULL);
    if (!code) {
        if (pcre_error)
            *pcre_error = ec;
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "%s", (const char *)msg);
        goto done;
    }
    /* JIT is an optimisation only: without it matching still works. */
    int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    re = calloc(1, sizeof *re);
    if (re)
        re->source = strdup(pattern);
    if (!re || !re->source) {
        pcre2_code_free(code);
        if (re)
            free(re);
        re = NULL;
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    re->code = code;
    re->jit = jit;
    if (!(flags & SCHEMA_REGEX_PCRE_ONLY)) {
        simple_re tmp;
        if (simple_parse(pattern, &tmp) == 0) {
            re->simple = malloc(sizeof *re->simple);
            if (re->simple)
                *re->simple = tmp;
        }
    }
done:
    group_info_free(&gi);
    sbuf_free(&b.s);
    return re;
}

schema_regex *schema_regex_compile(const char *pattern, int flags, char *err, size_t errlen)
{
    return regex_compile(pattern, flags, err, errlen, NULL);
}

void schema_regex_free(schema_regex *re)
{
    if (!re)
        return;
    pcre2_code_free(re->code);
    free(re->source);
    free(re->simple);
    free(re);
}

size_t schema_regex_mem_bytes(const schema_regex *re)
{
    if (!re)
        return 0;
    size_t code = 0, jit = 0;
    pcre2_pattern_info(re->code, PCRE2_INFO_SIZE, &code);
    if (re->jit)
        pcre2_pattern_info(re->code, PCRE2_INFO_JITSIZE, &jit);
    /* the JIT code is mapped in pages of its own, not allocated */
    size_t b = util_heap_bytes(sizeof *re) + util_heap_bytes(strlen(re->source) + 1) + util_heap_bytes(code) + jit;
    if (re->simple)
        b += util_heap_bytes(sizeof *re->simple);
    return b;
}

int schema_regex_match(const schema_regex *re, const char *s, size_t len)
{
    if (re->simple)
        return simple_match(re->simple, s, len);
    pcre2_match_data *md = thread_match_data();
    if (!md)
        return -1;
    /* pcre2_jit_match skips pcre2_match's argument checks (the hot path);
     * it honours the match limit of the context */
    int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, len, 0, PCRE2_NO_UTF_CHECK, md, g_mctx)
                     : pcre2_match(re->code, (PCRE2_SPTR)s, len, 0, PCRE2_NO_UTF_CHECK, md, g_mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, 0, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         md, g_mctx);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    return -1;
}

int schema_regex_is_simple(const schema_regex *re)
{
    return re->simple != NULL;
}

const char *schema_regex_source(const schema_regex *re)
{
    return re->source;
}

int schema_regex_is_valid(const char *pattern)
{
    int ec = 0;
    schema_regex *re = regex_compile(pattern, SCHEMA_REGEX_STRICT, NULL, 0, &ec);
    /* ECMA-262 allows variable-width lookbehind; PCRE2 10.42 cannot run
     * it but the syntax is valid */
    int ok = re != NULL || ec == PCRE2_ERROR_LOOKBEHIND_NOT_FIXED_LENGTH;
    schema_regex_free(re);
    return ok;
}
