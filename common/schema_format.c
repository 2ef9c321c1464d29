/* schema_format.c - `format` checks (see schema_format.h).
 *
 * Everything is ASCII-strict where the RFC grammar is ASCII (a Bengali
 * digit is not a digit).  Internationalised host names follow IDNA2008:
 * Punycode (RFC 3492), the code point categories of RFC 5892 (derived from
 * Unicode properties that PCRE2 knows: general category, script, bidi class,
 * default-ignorable), the CONTEXTJ/CONTEXTO rules and the Bidi rule of
 * RFC 5893.  Without Unicode normalisation tables, "unstable under NFKC
 * casefold" is approximated by upper/title-case letters and the
 * compatibility blocks.
 */
#include "schema_format.h"
#include "schema_regex.h"
#include "util.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

enum {
    F_NONE = 0, F_DATE_TIME, F_DATE, F_TIME, F_DURATION, F_EMAIL, F_IDN_EMAIL, F_HOSTNAME,
    F_IDN_HOSTNAME, F_IPV4, F_IPV6, F_URI, F_URI_REFERENCE, F_IRI, F_IRI_REFERENCE, F_UUID,
    F_JSON_POINTER, F_REL_JSON_POINTER, F_REGEX, F_URI_TEMPLATE, F__COUNT
};

static const char *const NAMES[F__COUNT] = {
    "", "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
    "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
    "json-pointer", "relative-json-pointer", "regex", "uri-template",
};

int schema_format_id(const char *name)
{
    for (int i = 1; i < F__COUNT; i++)
        if (strcmp(NAMES[i], name) == 0)
            return i;
    return 0;
}

const char *schema_format_name(int id)
{
    return id > 0 && id < F__COUNT ? NAMES[id] : "";
}

/* ------------------------------------------------------------------ */
/* small helpers                                                        */

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int num_n(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Decodes one UTF-8 code point (input known valid); returns its length. */
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0 && n >= 2) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0 && n >= 3) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (n >= 4) {
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    *cp = 0xFFFD;
    return 1;
}

/* ------------------------------------------------------------------ */
/* dates and times (RFC 3339)                                           */

static int days_in_month(int y, int m)
{
    static const int d[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return d[m - 1];
}

static int check_date(const char *s, size_t n)
{
    if (n != 10 || s[4] != '-' || s[7] != '-')
        return 0;
    int y = num_n(s, 4), m = num_n(s + 5, 2), d = num_n(s + 8, 2);
    if (y < 0 || m < 1 || m > 12 || d < 1)
        return 0;
    return d <= days_in_month(y, m);
}

static int check_time(const char *s, size_t n)
{
    if (n < 9 || s[2] != ':' || s[5] != ':')
        return 0;
    int h = num_n(s, 2), mi = num_n(s + 3, 2), se = num_n(s + 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60)
        return 0;
    size_t i = 8;
    if (s[i] == '.') {
        size_t j = ++i;
        while (i < n && is_digit((unsigned char)s[i]))
            i++;
        if (i == j)
            return 0;
    }
    int off = 0;
    if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-')) {
        if (n - i != 6 || s[i + 3] != ':')
            return 0;
        int oh = num_n(s + i + 1, 2), om = num_n(s + i + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return 0;
        off = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
        i += 6;
    } else {
        return 0;
    }
    if (i != n)
        return 0;
    if (se == 60) {
        /* a leap second happens at 23:59:60 UTC */
        int utc = ((h * 60 + mi - off) % 1440 + 1440) % 1440;
        if (utc != 23 * 60 + 59)
            return 0;
    }
    return 1;
}

static int check_date_time(const char *s, size_t n)
{
    if (n < 20 || (s[10] != 'T' && s[10] != 't'))
        return 0;
    return check_date(s, 10) && check_time(s + 11, n - 11);
}

/* RFC 3339 appendix A (ISO 8601 durations, no fractions). */
static int check_duration(const char *s, size_t n)
{
    size_t i = 0;
    if (n < 2 || s[0] != 'P')
        return 0;
    i = 1;
    int in_time = 0, time_units = 0, date_units = 0;
    char date_seq[4] = "", time_seq[4] = "";
    while (i < n) {
        if (s[i] == 'T') {
            if (in_time)
                return 0;
            in_time = 1;
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && is_digit((unsigned char)s[j]))
            j++;
        if (j == i || j == n)
            return 0;
        char u = s[j];
        if (in_time) {
            if (u != 'H' && u != 'M' && u != 'S')
                return 0;
            if (time_units >= 3)
                return 0;
            time_seq[time_units++] = u;
            time_seq[time_units] = '\0';
        } else {
            if (u != 'Y' && u != 'M' && u != 'D' && u != 'W')
                return 0;
            if (date_units >= 3)
                return 0;
            date_seq[date_units++] = u;
            date_seq[date_units] = '\0';
        }
        i = j + 1;
    }
    if (in_time && time_units == 0)
        return 0;
    if (!date_units && !time_units)
        return 0;
    if (strchr(date_seq, 'W'))
        return date_units == 1 && !in_time;
    static const char *const date_ok[] = { "", "Y", "YM", "YMD", "M", "MD", "D" };
    static const char *const time_ok[] = { "", "H", "HM", "HMS", "M", "MS", "S" };
    int dok = 0, tok = 0;
    for (size_t k = 0; k < 7; k++) {
        dok |= strcmp(date_seq, date_ok[k]) == 0;
        tok |= strcmp(time_seq, time_ok[k]) == 0;
    }
    return dok && tok;
}

/* ------------------------------------------------------------------ */
/* IP addresses                                                         */

static int check_ipv4(const char *s, size_t n)
{
    int parts = 0;
    size_t i = 0;
    while (parts < 4) {
        size_t j = i;
        while (j < n && is_digit((unsigned char)s[j]))
            j++;
        size_t len = j - i;
        if (len == 0 || len > 3 || (len > 1 && s[i] == '0'))
            return 0;
        if (num_n(s + i, (int)len) > 255)
            return 0;
        parts++;
        if (parts < 4) {
            if (j >= n || s[j] != '.')
                return 0;
            i = j + 1;
        } else {
            i = j;
        }
    }
    return i == n;
}

static int check_ipv6(const char *s, size_t n)
{
    int groups = 0, dbl = 0;
    size_t i = 0;
    if (n >= 2 && s[0] == ':' && s[1] == ':') {
        dbl = 1;
        i = 2;
        if (i == n)
            return 1;
    } else if (n == 0 || s[0] == ':') {
        return 0;
    }
    for (;;) {
        size_t j = i;
        int dots = 0;
        while (j < n && s[j] != ':') {
            if (s[j] == '.')
                dots = 1;
            j++;
        }
        if (dots) {
            if (j != n || !check_ipv4(s + i, j - i))
                return 0;
            groups += 2;
            break;
        }
        size_t len = j - i;
        if (len < 1 || len > 4)
            return 0;
        for (size_t k = i; k < j; k++)
            if (!is_hex((unsigned char)s[k]))
                return 0;
        groups++;
        if (j == n)
            break;
        if (j + 1 < n && s[j + 1] == ':') {
            if (dbl)
                return 0;
            dbl = 1;
            i = j + 2;
            if (i == n)
                break;
            if (s[i] == ':')
                return 0;
        } else {
            i = j + 1;
            if (i == n)
                return 0;
        }
        if (groups > 8)
            return 0;
    }
    return dbl ? groups <= 7 : groups == 8;
}

/* ------------------------------------------------------------------ */
/* Unicode classification through PCRE2 properties                      */

enum {
    U_LETTERDIGIT, U_UPPER, U_IGNORABLE, U_MARK, U_UNASSIGNED, U_GREEK, U_HEBREW, U_KANA_HAN,
    U_JOINING, U_BC_L, U_BC_R, U_BC_AL, U_BC_AN, U_BC_EN, U_BC_ES, U_BC_CS, U_BC_ET, U_BC_ON,
    U_BC_BN, U_BC_NSM, U__COUNT
};

static const char *const UPATTERNS[U__COUNT] = {
    "^[\\p{Ll}\\p{Lu}\\p{Lo}\\p{Nd}\\p{Lm}\\p{Mn}\\p{Mc}]$",
    "^[\\p{Lu}\\p{Lt}]$",
    "^[\\p{Default_Ignorable_Code_Point}\\p{White_Space}\\p{Noncharacter_Code_Point}]$",
    "^\\p{M}$",
    "^\\p{Cn}$",
    "^\\p{Greek}$",
    "^\\p{Hebrew}$",
    "^[\\p{Hiragana}\\p{Katakana}\\p{Han}]$",
    "^[\\p{Arabic}\\p{Syriac}\\p{Nko}\\p{Mongolian}\\p{Mandaic}\\p{Manichaean}\\p{Adlam}]$",
    "^\\p{bc:L}$", "^\\p{bc:R}$", "^\\p{bc:AL}$", "^\\p{bc:AN}$", "^\\p{bc:EN}$",
    "^\\p{bc:ES}$", "^\\p{bc:CS}$", "^\\p{bc:ET}$", "^\\p{bc:ON}$", "^\\p{bc:BN}$",
    "^\\p{bc:NSM}$",
};

/* compiled once, kept for the life of the process (immutable) */
static schema_regex *g_u[U__COUNT];
static pthread_once_t g_u_once = PTHREAD_ONCE_INIT;

static void u_init(void)
{
    for (int i = 0; i < U__COUNT; i++)
        g_u[i] = schema_regex_compile(UPATTERNS[i], 0, NULL, 0);
}

static int uis(int cls, uint32_t cp)
{
    pthread_once(&g_u_once, u_init);
    if (!g_u[cls] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    char buf[4];
    size_t n = util_utf8_put(buf, cp);
    return schema_regex_match(g_u[cls], buf, n) == 1;
}

static int bidi_class(uint32_t cp)
{
    for (int c = U_BC_L; c <= U_BC_NSM; c++)
        if (uis(c, cp))
            return c;
    return -1;
}

/* Code points with canonical combining class 9 (virama). */
static int is_virama(uint32_t cp)
{
    static const uint32_t v[] = {
        0x094D, 0x09CD, 0x0A4D, 0x0ACD, 0x0B4D, 0x0BCD, 0x0C4D, 0x0CCD, 0x0D3B, 0x0D3C, 0x0D4D,
        0x0DCA, 0x0E3A, 0x0EBA, 0x0F84, 0x1039, 0x103A, 0x1714, 0x1715, 0x1734, 0x17D2, 0x1A60,
        0x1B44, 0x1BAA, 0x1BAB, 0x1BF2, 0x1BF3, 0x2D7F, 0xA806, 0xA82C, 0xA8C4, 0xA953, 0xA9C0,
        0xAAF6, 0xABED, 0x10A3F, 0x11046, 0x11070, 0x1107F, 0x110B9, 0x11133, 0x11134, 0x111C0,
        0x11235, 0x112EA, 0x1134D, 0x11442, 0x114C2, 0x115BF, 0x1163F, 0x116B6, 0x1172B,
        0x11839, 0x1193D, 0x1193E, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11C3F, 0x11D44,
        0x11D45, 0x11D97,
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] == cp)
            return 1;
    return 0;
}

enum { PVALID, CONTEXTJ, CONTEXTO, DISALLOWED };

/* RFC 5892 derived property (see the file comment for the approximation). */
static int idna_class(uint32_t cp)
{
    switch (cp) {
    case 0x00DF: case 0x03C2: case 0x06FD: case 0x06FE: case 0x0F0B: case 0x3007:
        return PVALID;
    case 0x00B7: case 0x0375: case 0x05F3: case 0x05F4: case 0x30FB:
        return CONTEXTO;
    case 0x0640: case 0x07FA: case 0x302E: case 0x302F: case 0x3031: case 0x3032:
    case 0x3033: case 0x3034: case 0x3035: case 0x303B:
        return DISALLOWED;
    case 0x200C: case 0x200D:
        return CONTEXTJ;
    default:
        break;
    }
    if ((cp >= 0x0660 && cp <= 0x0669) || (cp >= 0x06F0 && cp <= 0x06F9))
        return CONTEXTO;
    if (cp < 0x80)
        return ((cp >= 'a' && cp <= 'z') || is_digit((int)cp) || cp == '-') ? PVALID : DISALLOWED;
    if (uis(U_UNASSIGNED, cp) || uis(U_UPPER, cp) || uis(U_IGNORABLE, cp))
        return DISALLOWED;
    if ((cp >= 0x20D0 && cp <= 0x20FF) || (cp >= 0x1D100 && cp <= 0x1D24F) ||
        (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
        (cp >= 0xD7B0 && cp <= 0xD7FF) || (cp >= 0xFF00 && cp <= 0xFFEF) ||
        (cp >= 0xFB00 && cp <= 0xFB4F) || (cp >= 0x1D400 && cp <= 0x1D7FF) ||
        (cp >= 0x2460 && cp <= 0x24FF) || (cp >= 0x3300 && cp <= 0x33FF))
        return DISALLOWED;
    return uis(U_LETTERDIGIT, cp) ? PVALID : DISALLOWED;
}

/* RFC 5892 appendix A; i is the position of cp in label[0..n). */
static int context_ok(const uint32_t *l, size_t n, size_t i)
{
    uint32_t cp = l[i];
    switch (cp) {
    case 0x200D:
        return i > 0 && is_virama(l[i - 1]);
    case 0x200C: {
        if (i > 0 && is_virama(l[i - 1]))
            return 1;
        /* (L|D) T* ZWNJ T* (R|D): joining letters approximated by the
         * letters of the joining scripts, T by marks */
        size_t a = i;
        while (a > 0 && uis(U_MARK, l[a - 1]))
            a--;
        size_t b = i + 1;
        while (b < n && uis(U_MARK, l[b]))
            b++;
        return a > 0 && b < n && uis(U_JOINING, l[a - 1]) && uis(U_JOINING, l[b]);
    }
    case 0x00B7:
        return i > 0 && i + 1 < n && l[i - 1] == 0x6C && l[i + 1] == 0x6C;
    case 0x0375:
        return i + 1 < n && uis(U_GREEK, l[i + 1]);
    case 0x05F3:
    case 0x05F4:
        return i > 0 && uis(U_HEBREW, l[i - 1]);
    case 0x30FB:
        for (size_t k = 0; k < n; k++)
            if (l[k] != 0x30FB && uis(U_KANA_HAN, l[k]))
                return 1;
        return 0;
    default:
        break;
    }
    if (cp >= 0x0660 && cp <= 0x0669) {
        for (size_t k = 0; k < n; k++)
            if (l[k] >= 0x06F0 && l[k] <= 0x06F9)
                return 0;
        return 1;
    }
    if (cp >= 0x06F0 && cp <= 0x06F9) {
        for (size_t k = 0; k < n; k++)
            if (l[k] >= 0x0660 && l[k] <= 0x0669)
                return 0;
        return 1;
    }
    return 0;
}

/* RFC 5891 4.2 checks on a U-label given as code points. */
static int ulabel_ok(const uint32_t *l, size_t n)
{
    if (n == 0)
        return 0;
    if (n >= 4 && l[2] == '-' && l[3] == '-')
        return 0;
    if (l[0] == '-' || l[n - 1] == '-')
        return 0;
    if (uis(U_MARK, l[0]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        int c = idna_class(l[i]);
        if (c == DISALLOWED)
            return 0;
        if ((c == CONTEXTJ || c == CONTEXTO) && !context_ok(l, n, i))
            return 0;
    }
    return 1;
}

/* RFC 5893 section 2, for one label of a Bidi domain name. */
static int bidi_label_ok(const uint32_t *l, size_t n)
{
    if (n == 0)
        return 1;
    int first = bidi_class(l[0]);
    if (first != U_BC_L && first != U_BC_R && first != U_BC_AL)
        return 0;
    int rtl = first != U_BC_L;
    int has_en = 0, has_an = 0;
    size_t last = n;
    for (size_t i = 0; i < n; i++) {
        int c = bidi_class(l[i]);
        if (rtl) {
            if (c != U_BC_R && c != U_BC_AL && c != U_BC_AN && c != U_BC_EN && c != U_BC_ES &&
                c != U_BC_CS && c != U_BC_ET && c != U_BC_ON && c != U_BC_BN && c != U_BC_NSM)
                return 0;
        } else {
            if (c != U_BC_L && c != U_BC_EN && c != U_BC_ES && c != U_BC_CS && c != U_BC_ET &&
                c != U_BC_ON && c != U_BC_BN && c != U_BC_NSM)
                return 0;
        }
        has_en |= c == U_BC_EN;
        has_an |= c == U_BC_AN;
        if (c != U_BC_NSM)
            last = i;
    }
    if (last == n)
        return 0;
    int lc = bidi_class(l[last]);
    if (rtl)
        return (lc == U_BC_R || lc == U_BC_AL || lc == U_BC_EN || lc == U_BC_AN) && !(has_en && has_an);
    return lc == U_BC_L || lc == U_BC_EN;
}

static int label_is_rtl(const uint32_t *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (l[i] < 0x80)
            continue;
        int c = bidi_class(l[i]);
        if (c == U_BC_R || c == U_BC_AL || c == U_BC_AN)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Punycode (RFC 3492)                                                  */

#define PC_BASE 36
#define PC_TMIN 1
#define PC_TMAX 26
#define PC_SKEW 38
#define PC_DAMP 700
#define MAX_LABEL_CPS 256

static uint32_t pc_adapt(uint32_t delta, uint32_t numpoints, int first)
{
    delta = first ? delta / PC_DAMP : delta / 2;
    delta += delta / numpoints;
    uint32_t k = 0;
    while (delta > ((PC_BASE - PC_TMIN) * PC_TMAX) / 2) {
        delta /= PC_BASE - PC_TMIN;
        k += PC_BASE;
    }
    return k + (PC_BASE - PC_TMIN + 1) * delta / (delta + PC_SKEW);
}

static int pc_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0' + 26;
    if (c >= 'a' && c <= 'z')
        return c - 'a';
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    return -1;
}

/* Decodes in[0..n) into out; returns the count or -1. */
static long pc_decode(const char *in, size_t n, uint32_t *out, size_t cap)
{
    size_t b = 0;
    for (size_t j = 0; j < n; j++)
        if (in[j] == '-')
            b = j;
    size_t len = 0;
    if (b > 0) {
        for (size_t j = 0; j < b; j++) {
            if ((unsigned char)in[j] >= 0x80 || len >= cap)
                return -1;
            out[len++] = (unsigned char)in[j];
        }
    }
    uint32_t nn = 0x80, bias = 72;
    uint64_t i = 0;
    for (size_t in_i = b > 0 ? b + 1 : 0; in_i < n;) {
        uint64_t oldi = i, w = 1;
        for (uint32_t k = PC_BASE;; k += PC_BASE) {
            if (in_i >= n)
                return -1;
            int d = pc_digit((unsigned char)in[in_i++]);
            if (d < 0)
                return -1;
            i += (uint64_t)d * w;
            if (i > 0x7FFFFFFF)
                return -1;
            uint32_t t = k <= bias ? PC_TMIN : (k >= bias + PC_TMAX ? PC_TMAX : k - bias);
            if ((uint32_t)d < t)
                break;
            w *= PC_BASE - t;
            if (w > 0x7FFFFFFF)
                return -1;
        }
        bias = pc_adapt((uint32_t)(i - oldi), (uint32_t)len + 1, oldi == 0);
        nn += (uint32_t)(i / (len + 1));
        i %= len + 1;
        if (nn > 0x10FFFF || (nn >= 0xD800 && nn <= 0xDFFF) || len >= cap)
            return -1;
        memmove(out + i + 1, out + i, (len - i) * sizeof *out);
        out[i++] = nn;
        len++;
    }
    return (long)len;
}

static char pc_encode_digit(uint32_t d)
{
    return (char)(d < 26 ? 'a' + d : '0' + (d - 26));
}

/* Encodes cps into out (without "xn--"); returns the length or -1. */
static long pc_encode(const uint32_t *cps, size_t n, char *out, size_t cap)
{
    size_t o = 0, h, b;
    for (size_t j = 0; j < n; j++) {
        if (cps[j] < 0x80) {
            if (o >= cap)
                return -1;
            out[o++] = (char)cps[j];
        }
    }
    h = b = o;
    if (b > 0) {
        if (o >= cap)
            return -1;
        out[o++] = '-';
    }
    uint32_t nn = 0x80, bias = 72;
    uint64_t delta = 0;
    while (h < n) {
        uint32_t m = 0xFFFFFFFF;
        for (size_t j = 0; j < n; j++)
            if (cps[j] >= nn && cps[j] < m)
                m = cps[j];
        delta += (uint64_t)(m - nn) * (h + 1);
        nn = m;
        for (size_t j = 0; j < n; j++) {
            if (cps[j] < nn)
                delta++;
            if (cps[j] == nn) {
                uint64_t q = delta;
                for (uint32_t k = PC_BASE;; k += PC_BASE) {
                    uint32_t t = k <= bias ? PC_TMIN : (k >= bias + PC_TMAX ? PC_TMAX : k - bias);
                    if (q < t)
                        break;
                    if (o >= cap)
                        return -1;
                    out[o++] = pc_encode_digit((uint32_t)(t + (q - t) % (PC_BASE - t)));
                    q = (q - t) / (PC_BASE - t);
                }
                if (o >= cap)
                    return -1;
                out[o++] = pc_encode_digit((uint32_t)q);
                bias = pc_adapt((uint32_t)delta, (uint32_t)h + 1, h == b);
                delta = 0;
                h++;
            }
        }
        delta++;
        nn++;
    }
    return (long)o;
}

/* ------------------------------------------------------------------ */
/* host names                                                           */

static int ascii_ci_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x += 32;
        if (y >= 'A' && y <= 'Z')
            y += 32;
        if (x != y)
            return 0;
    }
    return 1;
}

typedef struct label_state {
    int bidi_domain;   /* some label has an RTL character */
    int bidi_bad;      /* some label fails the Bidi rule */
} label_state;

/* Checks a label given as code points (from a U-label or a decoded
 * A-label) and records Bidi facts. */
static int check_ulabel_cps(const uint32_t *l, size_t n, label_state *st)
{
    if (!ulabel_ok(l, n))
        return 0;
    if (label_is_rtl(l, n))
        st->bidi_domain = 1;
    if (!bidi_label_ok(l, n))
        st->bidi_bad = 1;
    return 1;
}

/* An ASCII label: LDH rules, and A-label checks for "xn--". */
static int check_ascii_label(const char *s, size_t n, label_state *st)
{
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (!is_alpha(c) && !is_digit(c) && c != '-')
            return 0;
    }
    if (s[0] == '-' || s[n - 1] == '-')
        return 0;
    if (n >= 4 && s[2] == '-' && s[3] == '-') {
        if (!ascii_ci_eq(s, "xn", 2))
            return 0;
        uint32_t cps[MAX_LABEL_CPS];
        long k = pc_decode(s + 4, n - 4, cps, MAX_LABEL_CPS);
        if (k <= 0)
            return 0;
        int non_ascii = 0;
        for (long i = 0; i < k; i++)
            non_ascii |= cps[i] >= 0x80;
        if (!non_ascii)
            return 0;
        char re[128];
        long rl = pc_encode(cps, (size_t)k, re, sizeof re);
        if (rl != (long)(n - 4) || !ascii_ci_eq(re, s + 4, n - 4))
            return 0;
        return check_ulabel_cps(cps, (size_t)k, st);
    }
    /* plain LDH label: all left-to-right as far as the Bidi rule goes */
    uint32_t cps[64];
    for (size_t i = 0; i < n; i++)
        cps[i] = (unsigned char)s[i];
    if (!bidi_label_ok(cps, n))
        st->bidi_bad = 1;
    return 1;
}

static int check_hostname(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    label_state st = { 0, 0 };
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '.')
            j++;
        if (!check_ascii_label(s + i, j - i, &st))
            return 0;
        if (j == n)
            break;
        i = j + 1;
    }
    return !(st.bidi_domain && st.bidi_bad);
}

/* Label separators of IDNA: . U+3002 U+FF0E U+FF61 */
static size_t sep_len(const char *s, size_t n)
{
    if (s[0] == '.')
        return 1;
    if (n >= 3 && (memcmp(s, "\xE3\x80\x82", 3) == 0 || memcmp(s, "\xEF\xBC\x8E", 3) == 0 ||
                   memcmp(s, "\xEF\xBD\xA1", 3) == 0))
        return 3;
    return 0;
}

static int check_idn_hostname(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    label_state st = { 0, 0 };
    size_t total = 0, i = 0;
    int labels = 0;
    for (;;) {
        size_t j = i, sl = 0;
        while (j < n && (sl = sep_len(s + j, n - j)) == 0)
            j++;
        size_t len = j - i;
        if (len == 0)
            return 0;
        int ascii = 1;
        for (size_t k = i; k < j; k++)
            ascii &= (unsigned char)s[k] < 0x80;
        size_t alen;
        if (ascii) {
            if (!check_ascii_label(s + i, len, &st))
                return 0;
            alen = len;
        } else {
            uint32_t cps[MAX_LABEL_CPS];
            size_t k = 0, p = i;
            while (p < j) {
                if (k >= MAX_LABEL_CPS)
                    return 0;
                p += utf8_dec((const unsigned char *)s + p, j - p, &cps[k++]);
            }
            if (!check_ulabel_cps(cps, k, &st))
                return 0;
            char enc[128];
            long el = pc_encode(cps, k, enc, sizeof enc);
            if (el < 0)
                return 0;
            alen = (size_t)el + 4;
        }
        if (alen > 63)
            return 0;
        total += alen + (labels ? 1 : 0);
        labels++;
        if (j == n)
            break;
        i = j + sl;
        if (i == n)
            return 0; /* trailing separator */
    }
    if (total > 253)
        return 0;
    return !(st.bidi_domain && st.bidi_bad);
}

/* ------------------------------------------------------------------ */
/* e-mail (RFC 5321 Mailbox; RFC 6531 for idn-email)                    */

static int is_atext(int c)
{
    return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

static int check_email(const char *s, size_t n, int idn)
{
    size_t i = 0;
    if (n && s[0] == '"') {
        i = 1;
        for (;;) {
            if (i >= n)
                return 0;
            unsigned char c = (unsigned char)s[i];
            if (c == '"')
                break;
            if (c == '\\') {
                if (i + 1 >= n || (unsigned char)s[i + 1] < 32 ||
                    ((unsigned char)s[i + 1] > 126 && !idn))
                    return 0;
                i += 2;
                continue;
            }
            if ((c < 32 || c == 127 || c > 126) && !(idn && c >= 0x80))
                return 0;
            i++;
        }
        i++;
    } else {
        size_t start = 0;
        int prev_dot = 1;
        for (; i < n && s[i] != '@'; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c == '.') {
                if (prev_dot)
                    return 0;
                prev_dot = 1;
                continue;
            }
            if (!is_atext(c) && !(idn && c >= 0x80))
                return 0;
            prev_dot = 0;
        }
        if (i == start || prev_dot)
            return 0;
    }
    if (i > 64 || i >= n || s[i] != '@')
        return 0;
    const char *d = s + i + 1;
    size_t dn = n - i - 1;
    if (dn == 0)
        return 0;
    if (d[0] == '[') {
        if (d[dn - 1] != ']')
            return 0;
        if (dn > 6 && strncasecmp(d + 1, "IPv6:", 5) == 0) /* RFC 5321: case-insensitive */
            return check_ipv6(d + 6, dn - 7);
        return check_ipv4(d + 1, dn - 2);
    }
    return idn ? check_idn_hostname(d, dn) : check_hostname(d, dn);
}

/* ------------------------------------------------------------------ */
/* URIs and IRIs (RFC 3986 / RFC 3987)                                  */

static int is_unreserved(int c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static int is_subdelim(int c)
{
    return c && strchr("!$&'()*+,;=", c) != NULL;
}

static int is_ucschar(uint32_t cp)
{
    return (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xF900 && cp <= 0xFDCF) ||
           (cp >= 0xFDF0 && cp <= 0xFFEF) ||
           (cp >= 0x10000 && cp <= 0xEFFFD && (cp & 0xFFFF) <= 0xFFFD &&
            !(cp >= 0xE0000 && cp < 0xE1000)); /* RFC 3987 skips E0000-E0FFF (tags) */
}

static int is_iprivate(uint32_t cp)
{
    return (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xF0000 && cp <= 0xFFFFD) ||
           (cp >= 0x100000 && cp <= 0x10FFFD);
}

/* One character of a component: returns its byte length, or 0 when the
 * character is not allowed.  extra: additional ASCII characters allowed. */
static size_t uri_char(const char *s, size_t n, int iri, int private_ok, const char *extra)
{
    unsigned char c = (unsigned char)s[0];
    if (c == '%')
        return (n >= 3 && is_hex((unsigned char)s[1]) && is_hex((unsigned char)s[2])) ? 3 : 0;
    if (c < 0x80) {
        if (is_unreserved(c) || is_subdelim(c) || (extra && c && strchr(extra, c)))
            return 1;
        return 0;
    }
    if (!iri)
        return 0;
    uint32_t cp;
    size_t l = utf8_dec((const unsigned char *)s, n, &cp);
    if (is_ucschar(cp) || (private_ok && is_iprivate(cp)))
        return l;
    return 0;
}

static int uri_span(const char *s, size_t n, int iri, int private_ok, const char *extra)
{
    size_t i = 0;
    while (i < n) {
        size_t l = uri_char(s + i, n - i, iri, private_ok, extra);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

static int check_authority(const char *s, size_t n, int iri)
{
    const char *at = memchr(s, '@', n);
    if (at) {
        if (!uri_span(s, (size_t)(at - s), iri, 0, ":"))
            return 0;
        n -= (size_t)(at - s) + 1;
        s = at + 1;
    }
    size_t hl;
    if (n && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb)
            return 0;
        const char *h = s + 1;
        size_t len = (size_t)(rb - h);
        if (len && (h[0] == 'v' || h[0] == 'V')) {
            size_t k = 1;
            while (k < len && is_hex((unsigned char)h[k]))
                k++;
            if (k == 1 || k >= len || h[k] != '.' || k + 1 == len)
                return 0;
            for (size_t q = k + 1; q < len; q++) {
                int c = (unsigned char)h[q];
                if (!is_unreserved(c) && !is_subdelim(c) && c != ':')
                    return 0;
            }
        } else if (!check_ipv6(h, len)) {
            return 0;
        }
        hl = (size_t)(rb - s) + 1;
    } else {
        hl = 0;
        while (hl < n && s[hl] != ':')
            hl++;
        if (!uri_span(s, hl, iri, 0, NULL))
            return 0;
    }
    if (hl < n) {
        if (s[hl] != ':')
            return 0;
        for (size_t k = hl + 1; k < n; k++)
            if (!is_digit((unsigned char)s[k]))
                return 0;
    }
    return 1;
}

static int check_uri_ref(const char *s, size_t n, int iri, int need_scheme)
{
    size_t i = 0;
    int has_scheme = 0;
    if (n && is_alpha((unsigned char)s[0])) {
        size_t k = 1;
        while (k < n && (is_alpha((unsigned char)s[k]) || is_digit((unsigned char)s[k]) ||
                         s[k] == '+' || s[k] == '-' || s[k] == '.'))
            k++;
        if (k < n && s[k] == ':') {
            has_scheme = 1;
            i = k + 1;
        }
    }
    if (need_scheme && !has_scheme)
        return 0;
    /* the path ends at ? or #, the query at # */
    size_t pend = i;
    while (pend < n && s[pend] != '?' && s[pend] != '#')
        pend++;
    const char *p = s + i;
    size_t pn = pend - i;
    if (pn >= 2 && p[0] == '/' && p[1] == '/') {
        size_t a = 2;
        while (a < pn && p[a] != '/')
            a++;
        if (!check_authority(p + 2, a - 2, iri))
            return 0;
        p += a;
        pn -= a;
    } else if (!has_scheme) {
        /* path-noscheme: no ':' in the first segment */
        for (size_t k = 0; k < pn && p[k] != '/'; k++)
            if (p[k] == ':')
                return 0;
    }
    if (!uri_span(p, pn, iri, 0, ":@/"))
        return 0;
    i = pend;
    if (i < n && s[i] == '?') {
        size_t q = i + 1;
        while (q < n && s[q] != '#')
            q++;
        if (!uri_span(s + i + 1, q - i - 1, iri, 1, ":@/?"))
            return 0;
        i = q;
    }
    if (i < n && s[i] == '#') {
        if (!uri_span(s + i + 1, n - i - 1, iri, 0, ":@/?"))
            return 0;
    }
    return 1;
}

static int check_uri_template(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c == '{') {
            size_t j = i + 1;
            if (j < n && strchr("+#./;?&=,!@|", s[j]) && s[j])
                j++;
            for (;;) {
                /* varname */
                size_t start = j;
                int prev_dot = 1;
                while (j < n) {
                    if (s[j] == '%') {
                        if (j + 2 >= n || !is_hex((unsigned char)s[j + 1]) || !is_hex((unsigned char)s[j + 2]))
                            return 0;
                        j += 3;
                        prev_dot = 0;
                    } else if (is_alpha((unsigned char)s[j]) || is_digit((unsigned char)s[j]) || s[j] == '_') {
                        j++;
                        prev_dot = 0;
                    } else if (s[j] == '.' && !prev_dot) {
                        j++;
                        prev_dot = 1;
                    } else {
                        break;
                    }
                }
                if (j == start || prev_dot)
                    return 0;
                if (j < n && s[j] == ':') {
                    size_t d = ++j;
                    while (j < n && is_digit((unsigned char)s[j]))
                        j++;
                    if (j == d || j - d > 4 || s[d] == '0')
                        return 0;
                } else if (j < n && s[j] == '*') {
                    j++;
                }
                if (j < n && s[j] == ',') {
                    j++;
                    continue;
                }
                break;
            }
            if (j >= n || s[j] != '}')
                return 0;
            i = j + 1;
            continue;
        }
        if (c == '%') {
            if (i + 2 >= n || !is_hex((unsigned char)s[i + 1]) || !is_hex((unsigned char)s[i + 2]))
                return 0;
            i += 3;
            continue;
        }
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = utf8_dec((const unsigned char *)s + i, n - i, &cp);
            if (!is_ucschar(cp) && !is_iprivate(cp))
                return 0;
            i += l;
            continue;
        }
        if (c <= 0x20 || c == 0x7F || strchr("\"'<>\\^`{|}", c)) /* RFC 6570 literals: no ' either */
            return 0;
        i++;
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* the rest                                                             */

static int check_uuid(const char *s, size_t n)
{
    if (n != 36)
        return 0;
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return 0;
        } else if (!is_hex((unsigned char)s[i])) {
            return 0;
        }
    }
    return 1;
}

static int check_json_pointer(const char *s, size_t n)
{
    if (n && s[0] != '/')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '~' && (i + 1 >= n || (s[i + 1] != '0' && s[i + 1] != '1')))
            return 0;
    return 1;
}

static int check_rel_json_pointer(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_digit((unsigned char)s[i]))
        i++;
    if (i == 0 || (s[0] == '0' && i > 1))
        return 0;
    if (i == n)
        return 1;
    if (s[i] == '#')
        return i + 1 == n;
    return check_json_pointer(s + i, n - i);
}

static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t need;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3;
        else
            return 0;
        if (i + need >= n)
            return 0;
        for (size_t k = 1; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
            (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
            return 0;
        i += need + 1;
    }
    return 1;
}

int schema_format_check(int id, const char *s, size_t len)
{
    if (!utf8_valid((const unsigned char *)s, len))
        return 0;
    /* an embedded NUL cannot occur in a cJSON string, but a caller could
     * pass a length that includes one */
    if (memchr(s, '\0', len))
        return id == F_JSON_POINTER ? check_json_pointer(s, len) : 0;
    switch (id) {
    case F_DATE_TIME: return check_date_time(s, len);
    case F_DATE: return check_date(s, len);
    case F_TIME: return check_time(s, len);
    case F_DURATION: return check_duration(s, len);
    case F_EMAIL: return check_email(s, len, 0);
    case F_IDN_EMAIL: return check_email(s, len, 1);
    case F_HOSTNAME: return check_hostname(s, len);
    case F_IDN_HOSTNAME: return check_idn_hostname(s, len);
    case F_IPV4: return check_ipv4(s, len);
    case F_IPV6: return check_ipv6(s, len);
    case F_URI: return check_uri_ref(s, len, 0, 1);
    case F_URI_REFERENCE: return check_uri_ref(s, len, 0, 0);
    case F_IRI: return check_uri_ref(s, len, 1, 1);
    case F_IRI_REFERENCE: return check_uri_ref(s, len, 1, 0);
    case F_UUID: return check_uuid(s, len);
    case F_JSON_POINTER: return check_json_pointer(s, len);
    case F_REL_JSON_POINTER: return check_rel_json_pointer(s, len);
    case F_REGEX: return schema_regex_is_valid(s);
    case F_URI_TEMPLATE: return check_uri_template(s, len);
    default: return 1;
    }
}
