/* util.h - small helpers shared by every module: clocks, UTF-8, base64,
 * a growable string buffer. */
#ifndef RETORT_UTIL_H
#define RETORT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

uint64_t util_mono_ms(void);  /* monotonic clock, milliseconds */
uint64_t util_mono_us(void);  /* monotonic clock, microseconds */
int64_t util_wall_ms(void);   /* wall clock, ms since the epoch */
/* RFC 3339 UTC with milliseconds into buf (>= 32 bytes). */
void util_rfc3339(int64_t wall_ms, char *buf, size_t len);

/* Parses an RFC 3339 date-time into ms since the epoch.  0 = ok. */
int util_parse_rfc3339(const char *s, int64_t *wall_ms);

/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
int util_utf8_valid(const char *s, size_t len);
/* Number of code points of a valid UTF-8 string. */
size_t util_utf8_len(const char *s, size_t len);
/* Largest n <= max such that s[0..n) does not end inside a code point. */
size_t util_utf8_trim(const char *s, size_t len, size_t max);

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

/* Copies the strings given (the list ends with NULL) one after the other
 * into buf (cap > 0 bytes), cut to fit and NUL-terminated; returns the
 * length the whole would have (>= cap: cut), as snprintf does.  For hot
 * paths, where snprintf("%s%s") costs its format parsing. */
size_t util_concat(char *buf, size_t cap, ...) __attribute__((sentinel));

/* Makes room for extra more bytes (and the NUL): one allocation up front
 * when the size is known roughly.  0 = ok. */
int sbuf_reserve(sbuf *b, size_t extra);
int sbuf_append(sbuf *b, const char *s, size_t len);  /* 0 = ok */
int sbuf_puts(sbuf *b, const char *s);
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..len) as a quoted JSON string (UTF-8 passes through; quotes,
 * backslashes and control characters are escaped). */
int sbuf_json_string(sbuf *b, const char *s, size_t len);
void sbuf_free(sbuf *b);
/* Returns the buffer (taken by the caller) and resets b. */
char *sbuf_take(sbuf *b);

#endif
