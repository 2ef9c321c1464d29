/* util.h - small helpers shared by every module: clocks, UTF-8, base64,
 * a growable string buffer. */
#ifndef RETORT_UTIL_H
#define RETORT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

uint64_t util_mono_ms(void);  /* monotonic clock, milliseconds */
uint64_t util_mono_us(void);  /* monotonic clock, microseconds */
int64_t util_wall_ms(void);   /* wall clock, ms since the epoch */
/* RFC 3339 UTC with milliseconds into buf (>= 32 bytes). */
void util_rfc3339(int64_t wall_ms, char *buf, size_t len);

/* Parses an RFC 3339 date-time into ms since the epoch.  0 = ok; -1 with
 * why (may be NULL) saying what is wrong: the form, or a part out of range
 * (a day its month does not have, an offset beyond 23:59). */
int util_parse_rfc3339(const char *s, int64_t *wall_ms, char *why, size_t whylen);

/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
int util_utf8_valid(const char *s, size_t len);
/* A copy of s[0..len), NUL-terminated, with each byte that does not begin
 * a well-formed sequence replaced by U+FFFD: text from outside (an LLM's
 * answer, an API's error) that goes where only UTF-8 may (events, retry
 * jobs).  Its length into *out_len (may be NULL).  NULL: out of memory. */
char *util_utf8_scrub(const char *s, size_t len, size_t *out_len);
/* Number of code points of a valid UTF-8 string. */
size_t util_utf8_len(const char *s, size_t len);
/* Largest n <= max such that s[0..n) does not end inside a code point. */
size_t util_utf8_trim(const char *s, size_t len, size_t max);

/* Reads exactly 4 hex digits (either case) at s into *out: a JSON \u
 * escape's.  0 = ok, -1 = not 4 hex digits.  Inline: the JSON readers
 * call it per escape. */
static inline int util_hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        else return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Writes code point cp (<= 0x10FFFF, not a surrogate) as UTF-8 at out
 * (room for 4 bytes); returns the bytes written. */
static inline size_t util_utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The rest of f, NUL-terminated; malloc'd, caller frees.  *len (may be
 * NULL) receives the length.  NULL on a read error or out of memory. */
char *util_read_stream(FILE *f, size_t *len);
/* The whole file at path, as util_read_stream; "-" is stdin.  NULL with
 * errno set when it cannot be opened or read. */
char *util_read_file(const char *path, size_t *len);

/* base64 (RFC 4648, padded) of data; malloc'd, NUL-terminated. */
char *util_base64(const unsigned char *data, size_t len);

/* Growable buffer; always NUL-terminated once anything was appended. */
typedef struct sbuf {
    char *data;
    size_t len;
    size_t cap;
} sbuf;

/* Writes v in decimal, NUL-terminated, into buf (at least 21 bytes) and
 * returns the digits' length: for hot paths, where snprintf's format
 * parsing costs more than the digits. */
size_t util_ltoa(long long v, char *buf);

/* d as an integer within [lo, hi], truncated toward zero: a JSON number
 * (a double) cast to an integer type it does not fit is undefined, so
 * every number a message, an answer or a schema gives goes through here.
 * NaN gives lo. */
long long util_clamp_ll(double d, long long lo, long long hi);

/* Copies the strings given (the list ends with NULL) one after the other
 * into buf (cap > 0 bytes), cut to fit (on a UTF-8 character's boundary)
 * and NUL-terminated; returns the length the whole would have (>= cap:
 * cut), as snprintf does.  For hot paths, where snprintf("%s%s") costs
 * its format parsing. */
size_t util_concat(char *buf, size_t cap, ...) __attribute__((sentinel));

/* What a malloc of n bytes takes, about: glibc's malloc rounds n and its
 * 8-byte header up to 16 (32 at least) and maps 128 KB or more as whole
 * pages; tcmalloc (the worker's) rounds to a size class, at most an
 * eighth or so more than n.  For estimates of what a structure holds
 * (schema_mem_bytes), so that every module counts an allocation alike. */
static inline size_t util_heap_bytes(size_t n) {
    if (n >= 128 * 1024) return (n + 16 + 4095) & ~(size_t)4095;
    size_t b = (n + 8 + 15) & ~(size_t)15;
    return b < 32 ? 32 : b;
}

/* s, UTF-8 cut by snprintf, may end inside a character: drops that
 * partial character, so that the text stays valid where it goes (events,
 * retry jobs, the next request). */
void util_utf8_cut_end(char *s);

/* Makes room for extra more bytes (and the NUL): one allocation up front
 * when the size is known roughly.  0 = ok. */
int sbuf_reserve(sbuf *b, size_t extra);
/* Appends s[0..len), NUL-terminated after; 0 = ok.  Inline (about 130
 * calls a job, most of a few bytes): with room, it is the copy alone,
 * which the compiler unrolls when len is a constant. */
static inline int sbuf_append(sbuf *b, const char *s, size_t len) {
    if (len >= b->cap - b->len && sbuf_reserve(b, len)) return -1;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}
/* Inline, so that the length of a literal (most calls) is the compiler's
 * to count, not strlen's at every call. */
static inline int sbuf_puts(sbuf *b, const char *s) { return sbuf_append(b, s, strlen(s)); }
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..len) as a quoted JSON string (UTF-8 passes through; quotes,
 * backslashes and control characters are escaped). */
int sbuf_json_string(sbuf *b, const char *s, size_t len);
/* The same without the quotes: appends s[0..len) escaped as inside a JSON
 * string, so one string can be written in pieces. */
int sbuf_json_escape(sbuf *b, const char *s, size_t len);
void sbuf_free(sbuf *b);
/* Returns the buffer (taken by the caller) and resets b. */
char *sbuf_take(sbuf *b);

#endif
