#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

uint64_t util_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t util_mono_ms(void) { return util_mono_us() / 1000u; }

int64_t util_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void util_rfc3339(int64_t wall_ms, char *buf, size_t len) {
    /* Several stamps a job, mostly within the same second: the date and
     * time part is formatted once a second (per thread). */
    static __thread int64_t cached_secs;
    static __thread int cached_set;
    static __thread char cached[24];
    static __thread size_t cached_len;
    int64_t secs = wall_ms / 1000;
    int ms = (int)(wall_ms % 1000);
    if (ms < 0) { /* before 1970: the second before, and ms into it */
        secs--;
        ms += 1000;
    }
    if (!cached_set || secs != cached_secs) {
        time_t t = (time_t)secs;
        struct tm tm;
        gmtime_r(&t, &tm);
        cached_len = strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
        cached_secs = secs;
        cached_set = cached_len != 0;
    }
    if (len < cached_len + 6) {
        if (len) buf[0] = '\0';
        return;
    }
    memcpy(buf, cached, cached_len);
    char *p = buf + cached_len;
    *p++ = '.';
    *p++ = (char)('0' + ms / 100);
    *p++ = (char)('0' + ms / 10 % 10);
    *p++ = (char)('0' + ms % 10);
    *p++ = 'Z';
    *p = '\0';
}

/* n decimal digits at s (no sign, no space: sscanf's %2d took " 1" and
 * "+1"); -1 if any is not a digit. */
static int rfc3339_num(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static int rfc3339_days_in_month(int y, int m) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return days[m - 1];
}

static int rfc3339_fail(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rfc3339_fail(char *why, size_t whylen, const char *fmt, ...) {
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int util_parse_rfc3339(const char *s, int64_t *wall_ms, char *why, size_t whylen) {
    static const char form[] = "not of the form YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)";
    if (strnlen(s, 19) < 19 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
        s[13] != ':' || s[16] != ':')
        return rfc3339_fail(why, whylen, "%s", form);
    int y = rfc3339_num(s, 4), mo = rfc3339_num(s + 5, 2), d = rfc3339_num(s + 8, 2);
    int h = rfc3339_num(s + 11, 2), mi = rfc3339_num(s + 14, 2), sec = rfc3339_num(s + 17, 2);
    if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || sec < 0)
        return rfc3339_fail(why, whylen, "%s", form);
    const char *p = s + 19;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3) frac_ms = frac_ms * 10 + (*p - '0');
        if (!digits) return rfc3339_fail(why, whylen, "%s", form);
        for (; digits < 3; digits++) frac_ms *= 10;
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        /* (each read stops at the first byte that is not a digit: none
         * past the NUL) */
        int oh = rfc3339_num(p + 1, 2), om = oh < 0 || p[3] != ':' ? -1 : rfc3339_num(p + 4, 2);
        if (om < 0) return rfc3339_fail(why, whylen, "%s", form);
        if (oh > 23 || om > 59)
            return rfc3339_fail(why, whylen, "offset %.6s is out of range (hours 00-23, minutes 00-59)", p);
        offset_s = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return rfc3339_fail(why, whylen, "%s", form);
    }
    if (*p) return rfc3339_fail(why, whylen, "%s", form);
    /* timegm would take 2026-02-31 for March 3rd: a date that does not
     * exist is refused, not moved */
    if (mo < 1 || mo > 12) return rfc3339_fail(why, whylen, "month %02d does not exist", mo);
    if (d < 1 || d > rfc3339_days_in_month(y, mo))
        return rfc3339_fail(why, whylen, "day %02d does not exist in %04d-%02d (%d days)", d, y, mo,
                            rfc3339_days_in_month(y, mo));
    /* 60: a leap second (timegm makes it the next minute's first) */
    if (h > 23 || mi > 59 || sec > 60)
        return rfc3339_fail(why, whylen, "time %.8s is out of range", s + 11);
    struct tm tm = {0};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    *wall_ms = ((int64_t)timegm(&tm) - offset_s) * 1000 + frac_ms;
    return 0;
}

/* Length of the well-formed multi-byte sequence at s (avail bytes there,
 * s[0] >= 0x80): no overlongs, no surrogates, nothing past U+10FFFF; 0
 * when there is none. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    size_t need;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
    else return 0;
    if (avail <= need) return 0;
    for (size_t k = 1; k <= need; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return need + 1;
}

int util_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            /* Jobs and answers are mostly ASCII: after an ASCII byte, skip
             * eight at a time (memcpy: no unaligned or aliased loads).  Not
             * tried after a multi-byte sequence, so text of CJK runs costs
             * what the byte loop did. */
            i++;
            while (len - i >= 8) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ULL) break;
                i += 8;
            }
            continue;
        }
        size_t n = utf8_seq(s + i, len - i);
        if (!n) return 0;
        i += n;
    }
    return 1;
}

char *util_utf8_scrub(const char *str, size_t len, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)str;
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(3 * len + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < len;) {
        size_t n = s[i] < 0x80 ? 1 : utf8_seq(s + i, len - i);
        if (n) {
            memcpy(o, s + i, n);
            o += n;
            i += n;
        } else {
            o += util_utf8_put(o, 0xFFFD);
            i++;
        }
    }
    *o = '\0';
    if (out_len) *out_len = (size_t)(o - out);
    return out;
}

size_t util_utf8_len(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) n++;
    return n;
}

size_t util_utf8_trim(const char *s, size_t len, size_t max) {
    if (len <= max) return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

char *util_base64(const unsigned char *data, size_t len) {
    static const char tbl[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t out_len = 4 * ((len + 2) / 3);
    char *out = malloc(out_len + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len) v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len) v |= data[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

int sbuf_reserve(sbuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int sbuf_printf(sbuf *b, const char *fmt, ...) {
    /* Print into the room there is first: one pass in the common case. */
    if (sbuf_reserve(b, 64)) return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n >= b->cap - b->len) {
        if (sbuf_reserve(b, (size_t)n)) {
            b->data[b->len] = '\0';
            return -1;
        }
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return 0;
}

/* 1 for the bytes a JSON string cannot hold as they are: the quote, the
 * backslash and the control characters. */
static const unsigned char json_special[256] = {[0 ... 0x1F] = 1, ['"'] = 1, ['\\'] = 1};

#ifdef __SSE2__
/* A bit per byte of v: set for the bytes json_special names. */
static inline unsigned json_special_mask(__m128i v) {
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1F);
    /* v <= 0x1F, unsigned: min(v, 0x1F) == v */
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                             _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v));
    return (unsigned)_mm_movemask_epi8(m);
}
#endif

/* Writes byte c, one json_special names, escaped at o; returns the end. */
static inline char *json_escape_byte(char *o, unsigned char c) {
    static const char hex[] = "0123456789abcdef";
    *o++ = '\\';
    switch (c) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '\b': *o++ = 'b'; break;
    case '\f': *o++ = 'f'; break;
    case '\n': *o++ = 'n'; break;
    case '\r': *o++ = 'r'; break;
    case '\t': *o++ = 't'; break;
    default:
        *o++ = 'u'; *o++ = '0'; *o++ = '0';
        *o++ = hex[c >> 4]; *o++ = hex[c & 15];
    }
    return o;
}

/* Writes [p, stop) escaped at o; returns the end. */
static inline char *json_escape_run(char *o, const char *p, const char *stop) {
    for (; p < stop; p++) {
        unsigned char c = (unsigned char)*p;
        if (json_special[c]) o = json_escape_byte(o, c);
        else *o++ = (char)c;
    }
    return o;
}

/* Writes s[0..len) escaped at o, which has room for 6 bytes a byte;
 * returns the end. */
static inline char *json_escape_to(char *o, const char *s, size_t len) {
    const char *p = s, *end = s + len;
#ifdef __SSE2__
    /* 16 bytes at a time: a block with nothing to escape is copied whole,
     * one with something byte by byte.  Measured on the bench's answers
     * and keys (the bulk of a job's 800 bytes here): 25% and 46% less
     * time than a byte loop.  Leaving the block at its first quote and
     * coming back cost 15% more than the byte loop on answers (a quote
     * every 5 or 6 bytes), and a branch-free byte loop 25% more. */
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const void *)p);
        if (json_special_mask(v)) {
            o = json_escape_run(o, p, p + 16);
        } else {
            _mm_storeu_si128((void *)o, v);
            o += 16;
        }
        p += 16;
    }
#endif
    return json_escape_run(o, p, end);
}

int sbuf_json_escape(sbuf *b, const char *s, size_t len) {
    /* Worst case every byte becomes \u00XX. */
    if (sbuf_reserve(b, len * 6)) return -1;
    char *o = json_escape_to(b->data + b->len, s, len);
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return 0;
}

int sbuf_json_string(sbuf *b, const char *s, size_t len) {
    if (sbuf_reserve(b, len * 6 + 2)) return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    o = json_escape_to(o, s, len);
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return 0;
}

void sbuf_free(sbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *sbuf_take(sbuf *b) {
    char *p = b->data;
    if (!p) p = calloc(1, 1);
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

char *util_read_stream(FILE *f, size_t *len) {
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (ferror(f)) {
        free(buf);
        if (!errno) errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

char *util_read_file(const char *path, size_t *len) {
    if (!strcmp(path, "-")) return util_read_stream(stdin, len);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = util_read_stream(f, len);
    int saved = errno;
    fclose(f);
    errno = saved;
    return buf;
}

long long util_clamp_ll(double d, long long lo, long long hi) {
    if (!(d > (double)lo)) return lo; /* NaN too */
    /* (double)hi may round up (LLONG_MAX to 2^63): at or above it is hi */
    if (d >= (double)hi) return hi;
    return (long long)d;
}

size_t util_ltoa(long long v, char *buf) {
    /* Digits written in place, their count found first: most numbers here
     * are short (lengths in Redis commands, attempts), and the copy out of
     * a scratch buffer was a call to memcpy each time. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t n = v < 0, digits = 1;
    for (unsigned long long t = u; t >= 10; t /= 10) digits++;
    if (v < 0) buf[0] = '-';
    n += digits;
    buf[n] = '\0';
    char *p = buf + n;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    return n;
}

size_t util_concat(char *buf, size_t cap, ...) {
    va_list ap;
    va_start(ap, cap);
    size_t n = 0, w = 0;
    int cut = 0;
    for (const char *s; (s = va_arg(ap, const char *));) {
        size_t len = strlen(s);
        if (!cut) {
            size_t room = cap - 1 - w, take = len;
            if (len > room) {
                /* on a character's boundary: the cut text stays UTF-8 */
                take = util_utf8_trim(s, len, room);
                cut = 1;
            }
            memcpy(buf + w, s, take);
            w += take;
        }
        n += len;
    }
    va_end(ap);
    buf[w] = '\0';
    return n;
}

void util_utf8_cut_end(char *s) {
    size_t len = strlen(s), i = len;
    while (i > 0 && len - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    if (i == 0) return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 + (len - i)) s[i - 1] = '\0';
}
