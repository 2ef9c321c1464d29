/* test_log.c - log.c: records as lines on stderr, buffered per loop turn. */
#include "log.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

static int g_saved_fd = -1;
static char g_path[64];

/* stderr goes to a fresh file for each test */
static int setup(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/retort-test-log-XXXXXX");
    int fd = mkstemp(g_path);
    assert_true(fd >= 0);
    g_saved_fd = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    log_init(LOG_INFO, LOG_FORMAT_JSON, "t");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    log_buffered(0);
    dup2(g_saved_fd, STDERR_FILENO);
    close(g_saved_fd);
    unlink(g_path);
    return 0;
}

/* what stderr has received so far */
static size_t written(char *buf, size_t cap)
{
    FILE *f = fopen(g_path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_unbuffered_writes_each_record(void **state)
{
    (void)state;
    char buf[8192];
    log_info("job-1", 2, "final: \"valid\"");
    written(buf, sizeof buf);
    assert_non_null(strstr(buf, "\"msg\":\"final: \\\"valid\\\"\""));
    assert_non_null(strstr(buf, "\"job_id\":\"job-1\",\"attempt\":2,\"worker\":\"t\"}\n"));
}

/* A line is one JSON object, whatever its parts hold: a long message is
 * cut, a worker id is escaped, the stamp is RFC 3339 with milliseconds. */
static void test_line_is_json(void **state)
{
    (void)state;
    char buf[8192], big[3000];
    memset(big, 'm', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_init(LOG_INFO, LOG_FORMAT_JSON, "w\"1");
    log_warn("j\\2", 7, "%s", big);
    log_init(LOG_INFO, LOG_FORMAT_JSON, "t");
    written(buf, sizeof buf);
    cJSON *line = cJSON_Parse(buf);
    assert_non_null(line);
    const char *ts = cJSON_GetObjectItem(line, "ts")->valuestring;
    assert_int_equal(strlen(ts), 24);
    assert_true(ts[4] == '-' && ts[10] == 'T' && ts[19] == '.' && ts[23] == 'Z');
    assert_string_equal(cJSON_GetObjectItem(line, "level")->valuestring, "warn");
    assert_string_equal(cJSON_GetObjectItem(line, "job_id")->valuestring, "j\\2");
    assert_int_equal(cJSON_GetObjectItem(line, "attempt")->valueint, 7);
    assert_string_equal(cJSON_GetObjectItem(line, "worker")->valuestring, "w\"1");
    size_t mlen = strlen(cJSON_GetObjectItem(line, "msg")->valuestring);
    assert_true(mlen > 1000 && mlen < sizeof(big));
    cJSON_Delete(line);
}

/* stderr emptied, for the next record */
static void reset_stderr(void)
{
    assert_int_equal(ftruncate(STDERR_FILENO, 0), 0);
    assert_int_equal(lseek(STDERR_FILENO, 0, SEEK_SET), 0);
}

/* Every ASCII byte, in a message and a job id, reads back as it was:
 * the plain runs copied whole, the rest escaped. */
static void test_every_ascii_byte_reads_back(void **state)
{
    (void)state;
    char buf[8192], msg[300];
    size_t n = 0;
    for (int round = 0; round < 2; round++)
        for (int c = 1; c < 0x80; c++) msg[n++] = (char)c;
    msg[n] = '\0';
    log_init(LOG_INFO, LOG_FORMAT_JSON, "w");
    reset_stderr();
    log_info(msg + 1, 1, "%s", msg);
    written(buf, sizeof buf);
    cJSON *line = cJSON_Parse(buf);
    assert_non_null(line);
    assert_string_equal(cJSON_GetObjectItem(line, "msg")->valuestring, msg);
    assert_string_equal(cJSON_GetObjectItem(line, "job_id")->valuestring, msg + 1);
    cJSON_Delete(line);
}

/* s repeated to n bytes (whole copies) after lead bytes of 'a' */
static void fill(char *out, size_t lead, const char *s, size_t n)
{
    memset(out, 'a', lead);
    size_t len = lead, k = strlen(s);
    while (len + k <= n) {
        memcpy(out + len, s, k);
        len += k;
    }
    out[len] = '\0';
}

/* A JSON line is valid UTF-8 wherever it is cut: the message at 2,047
 * bytes (vsnprintf), the message or the job id at the line's end (the
 * escape loop, after escapes lengthened it), and a message quoting bytes
 * that are not UTF-8.  Every lead length moves the cut across a
 * character's bytes. */
static void test_json_line_stays_utf8(void **state)
{
    (void)state;
    static char buf[16384], msg[8192], id[8192];
    static const struct {
        const char *ctrl; /* bytes that escape to 6 each, before the text */
        size_t nctrl;
        const char *text, *id_text; /* repeated in the message, the job id */
    } cases[] = {
        { "", 0, "\xc3\xa9", NULL },            /* 2-byte: cut by vsnprintf */
        { "", 0, "\xe2\x82\xac", NULL },        /* 3-byte */
        { "", 0, "\xf0\x9f\x98\x80", NULL },    /* 4-byte */
        { "\x01", 600, "\xe2\x82\xac", NULL },  /* cut by the escape loop */
        { "\"", 1500, "\xf0\x9f\x98\x80", NULL },
        { "", 0, "x", "\xe2\x82\xac" },         /* the job id cut */
        { "", 0, "bad \xff\xfe byte \xc3 \xed\xa0\x80 \xf8", NULL }, /* not UTF-8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t lead = 0; lead < 4; lead++) {
            char *m = msg;
            for (size_t k = 0; k < cases[i].nctrl; k++)
                *m++ = cases[i].ctrl[0];
            fill(m, lead, cases[i].text, 3000 - cases[i].nctrl);
            if (cases[i].id_text)
                fill(id, lead, cases[i].id_text, 6000);
            reset_stderr();
            log_info(cases[i].id_text ? id : "j", 1, "%s", msg);
            size_t n = written(buf, sizeof buf);
            if (!util_utf8_valid(buf, n))
                fail_msg("case %zu lead %zu: the line is not UTF-8", i, lead);
            assert_int_equal(count_lines(buf), 1);
            cJSON *line = cJSON_Parse(buf);
            if (!line)
                fail_msg("case %zu lead %zu: not JSON: %.200s", i, lead, buf);
            const char *got = cJSON_GetObjectItem(line, "msg")->valuestring;
            static const char fffd[] = "bad \xef\xbf\xbd\xef\xbf\xbd byte \xef\xbf\xbd "
                                       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd";
            if (i == 6) { /* each byte that begins no character: U+FFFD */
                if (strncmp(got + lead, fffd, strlen(fffd)) != 0)
                    fail_msg("lead %zu: %.40s", lead, got + lead);
            } else if (strlen(got) < 500 || strncmp(got, msg, strlen(got)) != 0) {
                /* cut, but only after whole characters */
                fail_msg("case %zu lead %zu: msg of %zu bytes, not the start of the message", i, lead,
                         strlen(got));
            }
            cJSON_Delete(line);
        }
    }
}

/* The text format: a record is one line, whatever its message holds
 * (newlines are written \n), and ends with its newline however long. */
static void test_text_record_is_one_line(void **state)
{
    (void)state;
    static char buf[16384], msg[4096];
    log_init(LOG_INFO, LOG_FORMAT_TEXT, "t");
    static const struct {
        const char *text;
        size_t len;
    } cases[] = {
        { "two\nlines\r\n", 12 },
        { "\n", 2040 },            /* 4,080 bytes escaped, beyond the line */
        { "\n\xe2\x82\xac", 2040 }, /* cut inside a character */
        { "\xe2\x82\xac", 2046 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t lead = 0; lead < 3; lead++) {
            fill(msg, lead, cases[i].text, cases[i].len);
            reset_stderr();
            log_warn("job-\xc3\xa9", 2, "%s", msg);
            size_t n = written(buf, sizeof buf);
            assert_int_equal(count_lines(buf), 1);
            assert_true(n > 0 && n <= 4096 && buf[n - 1] == '\n');
            if (!util_utf8_valid(buf, n))
                fail_msg("case %zu lead %zu: the line is not UTF-8", i, lead);
            assert_non_null(strstr(buf, " warn  t [job-\xc3\xa9#2] "));
        }
    }
    reset_stderr();
    log_info(NULL, 0, "two\nlines");
    written(buf, sizeof buf);
    assert_non_null(strstr(buf, "info  t two\\nlines\n"));
    /* a job id is the producer's text: its newline forged a line of its
     * own, its ESC reached the terminal; so with the message's */
    reset_stderr();
    log_warn("x\n12:00:00.000 error forged\x1b[2J", 3, "m\x01sg\x7f");
    size_t n = written(buf, sizeof buf);
    assert_int_equal(count_lines(buf), 1);
    assert_true(n > 0 && buf[n - 1] == '\n');
    assert_non_null(strstr(buf, " warn  t [x\\n12:00:00.000 error forged\\x1b[2J#3] m\\x01sg\\x7f\n"));
    /* a long id is cut on a character's boundary, the message kept */
    static char id[600];
    fill(id, 0, "\xc3\xa9", 500);
    reset_stderr();
    log_warn(id, 0, "kept");
    n = written(buf, sizeof buf);
    assert_int_equal(count_lines(buf), 1);
    assert_true(util_utf8_valid(buf, n));
    assert_non_null(strstr(buf, "] kept\n"));
    log_init(LOG_INFO, LOG_FORMAT_JSON, "t");
}

static void test_buffered_until_flush(void **state)
{
    (void)state;
    char buf[8192];
    log_buffered(1);
    log_info("a", 1, "one");
    log_info("b", 1, "two");
    assert_int_equal(written(buf, sizeof buf), 0);
    log_flush();
    written(buf, sizeof buf);
    assert_int_equal(count_lines(buf), 2);
    assert_true(strstr(buf, "one") < strstr(buf, "two"));
    /* a warning goes out at once, with what was waiting before it */
    log_info("c", 1, "three");
    log_warn("d", 1, "four");
    written(buf, sizeof buf);
    assert_int_equal(count_lines(buf), 4);
    assert_true(strstr(buf, "three") < strstr(buf, "four"));
    /* turning buffering off writes what is left */
    log_info("e", 1, "five");
    log_buffered(0);
    written(buf, sizeof buf);
    assert_int_equal(count_lines(buf), 5);
}

/* the next write() on the other end of a SOCK_SEQPACKET pair (0: none) */
static size_t next_write(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap - 1, MSG_DONTWAIT);
    if (n < 0) return 0;
    buf[n] = '\0';
    return (size_t)n;
}

static void test_buffer_never_exceeds_an_atomic_write(void **state)
{
    (void)state;
    /* stderr as a socket that keeps each write() whole and apart */
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    int file_fd = dup(STDERR_FILENO);
    dup2(sv[0], STDERR_FILENO);
    close(sv[0]);
    log_buffered(1);
    char msg[1000];
    memset(msg, 'x', sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    for (int i = 0; i < 20; i++)
        log_info("j", 1, "%s", msg);
    /* ~1,080-byte lines, 3 to a 4,096-byte buffer (a pipe's atomic
     * write): each line that does not fit sends the buffer, full, in one
     * write; 6 of them, 18 lines, and 2 lines wait for the flush */
    static char buf[1 << 16];
    size_t n, line_len = 0;
    int writes = 0;
    while ((n = next_write(sv[1], buf, sizeof buf)) > 0) {
        writes++;
        assert_int_equal(count_lines(buf), 3);
        assert_int_equal(buf[n - 1], '\n');
        if (!line_len) line_len = strcspn(buf, "\n") + 1;
        assert_true(line_len * 3 <= 4096 && line_len * 4 > 4096);
        assert_int_equal(n, 3 * line_len);
    }
    assert_int_equal(writes, 6);
    log_flush();
    n = next_write(sv[1], buf, sizeof buf);
    assert_int_equal(n, 2 * line_len);
    assert_int_equal(count_lines(buf), 2);
    assert_int_equal(next_write(sv[1], buf, sizeof buf), 0);
    log_buffered(0);
    dup2(file_fd, STDERR_FILENO);
    close(file_fd);
    close(sv[1]);
}

static void *other_thread(void *arg)
{
    (void)arg;
    log_info(NULL, 0, "from another thread");
    return NULL;
}

static void test_other_threads_write_at_once(void **state)
{
    (void)state;
    char buf[8192];
    log_buffered(1);
    log_info(NULL, 0, "from the loop");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    written(buf, sizeof buf);
    assert_non_null(strstr(buf, "from another thread"));
    assert_null(strstr(buf, "from the loop"));
    log_flush();
    written(buf, sizeof buf);
    assert_non_null(strstr(buf, "from the loop"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unbuffered_writes_each_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_line_is_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_ascii_byte_reads_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_line_stays_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_record_is_one_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffered_until_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffer_never_exceeds_an_atomic_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_threads_write_at_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
