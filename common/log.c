#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static log_level log_min = LOG_INFO;
static int log_json = 1;
static char log_worker[64] = "";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* Buffered lines of the owner thread (log_buffered): at most one pipe's
 * atomic write (PIPE_BUF, 4096 on Linux), so that one write() never mixes
 * with the lines of another process sharing stderr. */
#define LOG_BUF_CAP 4096
static atomic_int buf_on;   /* read by every thread that logs */
static pthread_t buf_owner; /* set before buf_on is (release), read after (acquire) */
static char buf_data[LOG_BUF_CAP];
static size_t buf_len;

static void write_all(const char *p, size_t n) {
    ssize_t w = write(STDERR_FILENO, p, n);
    (void)w;
}

/* 1 when the calling thread's records go into the buffer */
static int buffering(void) {
    return atomic_load_explicit(&buf_on, memory_order_acquire) && pthread_equal(pthread_self(), buf_owner);
}

void log_flush(void) {
    if (buf_len && buffering()) {
        write_all(buf_data, buf_len);
        buf_len = 0;
    }
}

static void flush_at_exit(void) { log_flush(); }

void log_buffered(int on) {
    static int registered;
    if (!on) {
        log_flush();
        atomic_store_explicit(&buf_on, 0, memory_order_release);
        return;
    }
    /* (turned on once per process, before or while other threads log: they
     * see buf_on 0 until the owner is set) */
    buf_owner = pthread_self();
    atomic_store_explicit(&buf_on, 1, memory_order_release);
    if (!registered) registered = atexit(flush_at_exit) == 0;
}

void log_init(log_level level, log_format format, const char *worker) {
    log_min = level;
    if (format == LOG_FORMAT_AUTO)
        log_json = !isatty(STDERR_FILENO);
    else
        log_json = format == LOG_FORMAT_JSON;
    snprintf(log_worker, sizeof(log_worker), "%s", worker ? worker : "");
    util_utf8_cut_end(log_worker);
}

int log_level_parse(const char *s, log_level *out) {
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (log_level)i;
            return 0;
        }
    }
    if (strcmp(s, "warning") == 0) {
        *out = LOG_WARN;
        return 0;
    }
    return -1;
}

int log_format_parse(const char *s, log_format *out) {
    if (strcmp(s, "auto") == 0) *out = LOG_FORMAT_AUTO;
    else if (strcmp(s, "json") == 0) *out = LOG_FORMAT_JSON;
    else if (strcmp(s, "text") == 0) *out = LOG_FORMAT_TEXT;
    else return -1;
    return 0;
}

int log_enabled(log_level level) { return level >= log_min; }

/* Bytes a log line's JSON strings take as they are. */
static const unsigned char log_plain[256] = {
    [0x20 ... 0x21] = 1, [0x23 ... 0x5B] = 1, [0x5D ... 0x7F] = 1, /* not '"', '\\' */
};

/* Appends s JSON-escaped; returns the new length (clamped to cap - 1).
 * A character is copied whole or not at all, so that a line cut at cap
 * stays UTF-8 (byte by byte, the cut fell inside one), and a byte that
 * begins no valid character (a message may quote anything) becomes
 * \ufffd: a log line is always valid JSON. */
static size_t json_escape_into(char *buf, size_t len, size_t cap, const char *s) {
    while (*s && len + 7 < cap) { /* room for the longest: \u00XX */
        /* a run of printable ASCII but '"' and '\\' (most of a line),
         * copied as it is: one table look a byte (a line a job at info) */
        while (log_plain[(unsigned char)*s] && len + 7 < cap) buf[len++] = *s++;
        if (!*s || len + 7 >= cap) break;
        unsigned char c = (unsigned char)*s;
        if (c >= 0x80) {
            size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (strnlen(s, n) < n || !util_utf8_valid(s, n)) {
                memcpy(buf + len, "\\ufffd", 6);
                len += 6;
                s++;
            } else {
                memcpy(buf + len, s, n);
                len += n;
                s += n;
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            buf[len++] = '\\';
            buf[len++] = (char)c;
        } else if (c == '\n') {
            buf[len++] = '\\';
            buf[len++] = 'n';
        } else if (c < 0x20) {
            len += (size_t)snprintf(buf + len, cap - len, "\\u%04x", c);
        } else {
            buf[len++] = (char)c;
        }
        s++;
    }
    buf[len] = '\0';
    return len;
}

/* Appends s for the text format: a newline or carriage return as \n or
 * \r (a record is one line), any other control byte as \xNN (an ESC
 * would reach the terminal, and a job id is the producer's text), cut
 * below cap on a character's boundary. */
static size_t text_escape_into(char *buf, size_t len, size_t cap, const char *s) {
    static const char hex[] = "0123456789abcdef";
    size_t start = len;
    for (; *s && len + 2 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n' || c == '\r') {
            buf[len++] = '\\';
            buf[len++] = c == '\n' ? 'n' : 'r';
        } else if (c < 0x20 || c == 0x7f) {
            if (len + 4 >= cap) break;
            buf[len++] = '\\';
            buf[len++] = 'x';
            buf[len++] = hex[c >> 4];
            buf[len++] = hex[c & 15];
        } else {
            buf[len++] = (char)c;
        }
    }
    if (((unsigned char)*s & 0xC0) == 0x80) { /* stopped inside a character: drop its start */
        while (len > start && ((unsigned char)buf[len - 1] & 0xC0) == 0x80) len--;
        if (len > start) len--;
    }
    buf[len] = '\0';
    return len;
}

/* Appends s[0..n) if it fits below cap; returns the new length. */
static size_t put(char *buf, size_t len, size_t cap, const char *s, size_t n) {
    if (len + n >= cap) n = len < cap ? cap - 1 - len : 0;
    memcpy(buf + len, s, n);
    return len + n;
}

#define PUT(lit) (len = put(line, len, sizeof(line), lit, sizeof(lit) - 1))

/* A line is assembled with copies, not snprintf: the worker logs a line
 * per job at info, and with nine format calls and strftime a line took
 * 450-470 ns, against 165 now.  Only the message itself is formatted. */
void log_msg(log_level level, const char *job_id, int attempt, const char *fmt, ...) {
    if (level < log_min) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(msg, sizeof(msg), fmt, ap) >= (int)sizeof(msg))
        util_utf8_cut_end(msg); /* cut inside a character: drop it */
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    char ts[40];
    util_rfc3339((int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000, ts, sizeof(ts));
    const char *lname = level_names[level];
    char att[24] = "";
    if (attempt > 0) util_ltoa(attempt, att);

    char line[4096];
    size_t len = 0;
    if (log_json) {
        PUT("{\"ts\":\"");
        len = put(line, len, sizeof(line), ts, strlen(ts));
        PUT("\",\"level\":\"");
        len = put(line, len, sizeof(line), lname, strlen(lname));
        PUT("\",\"msg\":\"");
        len = json_escape_into(line, len, sizeof(line) - 128, msg);
        PUT("\"");
        if (job_id) {
            PUT(",\"job_id\":\"");
            len = json_escape_into(line, len, sizeof(line) - 64, job_id);
            PUT("\"");
        }
        if (attempt > 0) {
            PUT(",\"attempt\":");
            len = put(line, len, sizeof(line), att, strlen(att));
        }
        if (log_worker[0]) {
            PUT(",\"worker\":\"");
            len = json_escape_into(line, len, sizeof(line) - 8, log_worker);
            PUT("\"");
        }
        PUT("}\n");
        line[len] = '\0';
    } else {
        /* the prefix is short (< 400 bytes); the message is cut to leave
         * room for the newline, which snprintf cut off a long record.  The
         * job id is escaped as the message is: a producer's "\n" in it
         * forged a line of its own. */
        len = (size_t)snprintf(line, sizeof(line), "%s %-5s %s", ts + 11, lname, log_worker);
        if (job_id) {
            PUT(" [");
            len = text_escape_into(line, len, len + 250, job_id);
            if (attempt > 0) {
                PUT("#");
                len = put(line, len, sizeof(line), att, strlen(att));
            }
            PUT("]");
        }
        PUT(" ");
        len = text_escape_into(line, len, sizeof(line) - 1, msg);
        line[len++] = '\n';
        line[len] = '\0';
    }
    size_t ll = strlen(line);
    if (buffering()) {
        if (buf_len + ll > LOG_BUF_CAP) log_flush();
        memcpy(buf_data + buf_len, line, ll); /* ll < LOG_BUF_CAP: line's size */
        buf_len += ll;
        if (level >= LOG_WARN) log_flush(); /* trouble is seen at once */
        return;
    }
    /* One write per record so lines of several processes do not interleave. */
    write_all(line, ll);
}
