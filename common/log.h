/* log.h - one line per record on stderr: JSON objects (production) or a
 * human format (terminals).  Never pass secrets to these functions. */
#ifndef RETORT_LOG_H
#define RETORT_LOG_H

typedef enum log_level {
    LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR
} log_level;

typedef enum log_format { LOG_FORMAT_AUTO = 0, LOG_FORMAT_JSON, LOG_FORMAT_TEXT } log_format;

/* worker: borrowed, copied.  Safe to call again (e.g. after fork). */
void log_init(log_level level, log_format format, const char *worker);
int log_level_parse(const char *s, log_level *out);   /* 0 = ok */
int log_format_parse(const char *s, log_format *out); /* 0 = ok */
int log_enabled(log_level level);

/* on: the calling thread's records are kept in a buffer (at most 4 KB,
 * whole lines) and written by log_flush(), when the buffer is full, with
 * a warning or an error, or at exit; one write() per turn of an event
 * loop instead of one per record.  Records of other threads are written
 * at once.  off: flushes and writes every record at once again. */
void log_buffered(int on);
/* Writes the buffered records (only from the thread that buffers). */
void log_flush(void);

/* job_id may be NULL; attempt <= 0 means none. */
void log_msg(log_level level, const char *job_id, int attempt,
             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_debug(...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
