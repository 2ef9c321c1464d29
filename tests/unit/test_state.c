/* state_format_command writes what hiredis's redisFormatCommandArgv
 * writes, byte for byte, and reuses its buffer; a socket that cannot be
 * watched is given up and tried again, not a crash; a command that could
 * not be sent (out of memory) goes out a moment later, and the commands
 * behind it too (against a real redis-server); a job's keys are given
 * their TTL when new or drifted, not on every write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "state.h"

static void same_as_hiredis(sbuf *b, int argc, const char *const *argv, const size_t *lens)
{
    char *want = NULL;
    long long wl = redisFormatCommandArgv(&want, argc, (const char **)argv, lens);
    assert_true(wl > 0);
    assert_int_equal(state_format_command(b, argc, argv, lens), 0);
    assert_int_equal(b->len, (size_t)wl);
    assert_memory_equal(b->data, want, b->len);
    redisFreeCommand(want);
}

static void test_format_command(void **s)
{
    (void)s;
    sbuf b = { 0 };
    static const char bin[] = "a\0b\r\n$3\r\n";
    const char *a1[] = { "EVALSHA", "0123456789012345678901234567890123456789", "2", "r:job:{j-1}",
                         "r:job:{j-1}:history", "", bin };
    size_t l1[] = { 7, 40, 1, 11, 19, 0, sizeof bin - 1 };
    same_as_hiredis(&b, 7, a1, l1);
    const char *a2[] = { "PING" };
    size_t l2[] = { 4 };
    same_as_hiredis(&b, 1, a2, l2); /* shorter than before: replaced, not appended */
    /* many arguments and a long one */
    const char *a3[40];
    size_t l3[40];
    char *big = malloc(100000);
    memset(big, 'x', 100000);
    for (int i = 0; i < 40; i++) {
        a3[i] = i == 17 ? big : "key";
        l3[i] = i == 17 ? 100000 : 3;
    }
    same_as_hiredis(&b, 40, a3, l3);
    free(big);
    sbuf_free(&b);
}

static void on_conn(void *ud, int connected)
{
    if (connected) uv_stop(ud);
}

static void give_up(uv_timer_t *t) { uv_stop(t->loop); }

static void stale_cb(uv_poll_t *h, int status, int events)
{
    (void)h, (void)status, (void)events;
}

/* A script's head line: the verdict, the status, three numbers (to long
 * long's range, as strtoll held them) and the owner when there is one;
 * any other shape is refused. */
static void test_parse_head(void **s)
{
    (void)s;
    static const struct {
        const char *line;
        int rc;
        state_verdict verdict;
        const char *status;
        long long attempt, published, tokens;
        const char *owner;
    } cases[] = {
        {"go  1 0 0", 0, STATE_GO, "", 1, 0, 0, NULL},
        {"done final 3 3 1234 w-1:inc:7", 0, STATE_DONE, "final", 3, 3, 1234, "w-1:inc:7"},
        {"busy running 2 1 99 owner with spaces", 0, STATE_BUSY, "running", 2, 1, 99, "owner with spaces"},
        {"alive final 1 0 15 a:b:1", 0, STATE_ALIVE, "final", 1, 0, 15, "a:b:1"},
        {"ok final 12 0 9999999999999999", 0, STATE_OK, "final", 12, 0, 9999999999999999LL, NULL},
        {"stale x 0 -1 0", 0, STATE_STALE, "x", 0, -1, 0, NULL},
        {"retried retrying 4 4 9223372036854775807", 0, STATE_RETRIED, "retrying", 4, 4, 9223372036854775807LL, NULL},
        {"superseded x 5 5 9999999999999999999", 0, STATE_SUPERSEDED, "x", 5, 5, 9223372036854775807LL, NULL},
        {"go x 1 0 -9999999999999999999", 0, STATE_GO, "x", 1, 0, -9223372036854775807LL - 1, NULL},
        {"go x 1 0 99999999999999999999", -1, 0, NULL, 0, 0, 0, NULL},  /* 20 digits */
        {"go x 1 0", -1, 0, NULL, 0, 0, 0, NULL},
        {"go x 1 0 7x", -1, 0, NULL, 0, 0, 0, NULL},
        {"go x 1 0 -", -1, 0, NULL, 0, 0, 0, NULL},
        {"go x 1  0 0", -1, 0, NULL, 0, 0, 0, NULL},
        {"go x +1 0 0", -1, 0, NULL, 0, 0, 0, NULL},
        {"maybe x 1 0 0", -1, 0, NULL, 0, 0, 0, NULL},
        {"go", -1, 0, NULL, 0, 0, 0, NULL},
        {"go a-status-longer-than-the-buffer 1 0 0", -1, 0, NULL, 0, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        state_reply rep = {0};
        char buf[16];
        int rc = state_parse_head(cases[i].line, strlen(cases[i].line), &rep, buf, sizeof(buf));
        if (rc != cases[i].rc) fail_msg("\"%s\": rc %d, expected %d", cases[i].line, rc, cases[i].rc);
        if (rc) continue;
        assert_int_equal(rep.verdict, cases[i].verdict);
        assert_string_equal(rep.status, cases[i].status);
        assert_true(rep.attempt == cases[i].attempt);
        assert_true(rep.published == cases[i].published);
        assert_true(rep.tokens_used == cases[i].tokens);
        if (cases[i].owner) assert_string_equal(rep.owner, cases[i].owner);
        else assert_null(rep.owner);
    }
}

/* INFO memory's text: a Redis that evicts keys at its maxmemory is told
 * apart from one that never does. */
/* Which refusals send a batch of marks again: Redis's codes that pass,
 * bare (Redis 7 passes a script's refused command through) or wrapped in
 * the script's error (Redis 6: a batch refused for OOM was dropped). */
static void test_refusals_that_pass(void **s)
{
    (void)s;
    assert_true(state_refusal_passes("OOM command not allowed when used memory > 'maxmemory'."));
    assert_true(state_refusal_passes("READONLY You can't write against a read only replica."));
    assert_true(state_refusal_passes("LOADING Redis is loading the dataset in memory"));
    assert_true(state_refusal_passes("BUSY Redis is busy running a script."));
    assert_true(state_refusal_passes("MISCONF"));
    assert_true(state_refusal_passes("ERR Error running script (call to f_8f55ae4a3be429c6d38c5d5db3e80edf89197b64): "
                                     "@user_script:41: @user_script: 41: -OOM command not allowed when used "
                                     "memory > 'maxmemory'."));
    assert_true(state_refusal_passes("ERR Error running script (call to f_0123): @user_script:5: @user_script: 5: "
                                     "-READONLY You can't write against a read only replica."));
    assert_false(state_refusal_passes("WRONGTYPE Operation against a key holding the wrong kind of value"));
    assert_false(state_refusal_passes("OOMPH"));
    assert_false(state_refusal_passes("ERR unknown command"));
    assert_false(state_refusal_passes("ERR Error running script (call to f_0123): @user_script:5: "
                                      "user_script:5: Script attempted to access nonexistent global variable"));
    assert_false(state_refusal_passes("ERR Error running script (call to f_0123): @user_script:5: @user_script: 5: "
                                      "-WRONGTYPE Operation against a key holding the wrong kind of value"));
    assert_false(state_refusal_passes("NOSCRIPT No matching script. Please use EVAL."));
}

static void test_parse_eviction(void **s)
{
    (void)s;
    static const struct {
        const char *info;
        int rc;
        const char *policy;
    } cases[] = {
        {"# Memory\r\nused_memory:1015832\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\n"
         "maxmemory_policy:noeviction\r\nallocator_frag_ratio:1.00\r\n", 0, "noeviction"},
        /* a policy, but no maxmemory: nothing is evicted */
        {"# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", 0, "allkeys-lru"},
        {"# Memory\r\nmaxmemory:536870912\r\nmaxmemory_human:512.00M\r\nmaxmemory_policy:allkeys-lru\r\n", 1,
         "allkeys-lru"},
        /* our keys all have a TTL: volatile-* takes them too */
        {"# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:volatile-ttl\r\n", 1, "volatile-ttl"},
        {"# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n", 0, "noeviction"},
        /* the last line without its CRLF; \n alone */
        {"maxmemory_policy:allkeys-lfu\nmaxmemory:10", 1, "allkeys-lfu"},
        /* maxmemory_human and maxmemory_policy are not maxmemory */
        {"# Memory\r\nmaxmemory_human:0B\r\nmaxmemory_policy:allkeys-lru\r\n", -1, NULL},
        {"# Memory\r\nmaxmemory:10\r\n", -1, NULL},
        {"", -1, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char policy[40] = "";
        int rc = state_parse_eviction(cases[i].info, strlen(cases[i].info), policy, sizeof(policy));
        if (rc != cases[i].rc) fail_msg("case %zu: rc %d, expected %d", i, rc, cases[i].rc);
        if (cases[i].policy) assert_string_equal(policy, cases[i].policy);
    }
    /* a policy longer than the buffer is cut, not overrun */
    char small[8];
    const char *info = "maxmemory:1\r\nmaxmemory_policy:volatile-lru\r\n";
    assert_int_equal(state_parse_eviction(info, strlen(info), small, sizeof(small)), 1);
    assert_string_equal(small, "volatil");
}

/* libuv still watching an fd number (a handle left on a closed socket)
 * makes the next poll handle on that number fail with EEXIST.  hiredis's
 * libuv adapter set its cleanup before making its handle, so the
 * redisAsyncFree after that failure called the cleanup with NULL: a crash
 * on the next Redis connection.  Now the connection is given up and tried
 * again, and connects once the number is free. */
static void test_an_fd_libuv_still_watches_is_tried_again(void **s)
{
    (void)s;
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* a listener that never answers: the TCP connect completes in its backlog */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 8), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    /* the lowest free fd, watched by a handle and then closed under it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uv_poll_t stale;
    assert_int_equal(uv_poll_init_socket(&loop, &stale, fd), 0);
    assert_int_equal(uv_poll_start(&stale, UV_READABLE, stale_cb), 0);
    close(fd);

    state_options so = { "127.0.0.1", ntohs(a.sin_port), NULL, 0, "t", 60 };
    char err[256];
    state *st = state_new(&loop, &so, on_conn, &loop, err, sizeof err);
    assert_non_null(st);
    assert_false(state_connected(st)); /* its socket took fd: not watched, given up */

    uv_close((uv_handle_t *)&stale, NULL);
    uv_timer_t limit;
    uv_timer_init(&loop, &limit);
    uv_timer_start(&limit, give_up, 5000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(state_connected(st)); /* tried again once the number was free */

    state_free(st);
    uv_close((uv_handle_t *)&limit, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(lfd);
}

/* Linked with -Wl,--wrap=realloc (see the Makefile): while fail_from is
 * set, growing a buffer of our own code to fail_from bytes or more fails,
 * as out of memory would. */
void *__real_realloc(void *p, size_t n);
static size_t fail_from;
static int failed;
void *__wrap_realloc(void *p, size_t n)
{
    if (fail_from && n >= fail_from) {
        failed++;
        return NULL;
    }
    return __real_realloc(p, n);
}

typedef struct {
    pid_t pid;
    int port;
} server;

/* A redis-server of the test's own, stopped by the teardown even when a
 * test fails. */
static int redis_start(void **s)
{
    server *srv = malloc(sizeof(*srv));
    int *port = &srv->port;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    *port = ntohs(a.sin_port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", *port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    srv->pid = pid;
    *s = srv;
    return 0;
}

static int redis_stop(void **s)
{
    server *srv = *s;
    kill(srv->pid, SIGTERM);
    waitpid(srv->pid, NULL, 0);
    free(srv);
    return 0;
}

typedef struct {
    uv_loop_t *loop;
    char order[8];
    int n;
} replies;

static void on_reply_a(void *ud, const state_reply *r)
{
    replies *rs = ud;
    assert_int_equal(r->verdict, STATE_OK);
    rs->order[rs->n++] = 'a';
}

static void on_reply_b(void *ud, const state_reply *r)
{
    replies *rs = ud;
    assert_int_equal(r->verdict, STATE_OK);
    rs->order[rs->n++] = 'b';
    uv_stop(rs->loop);
}

/* A state on loop, connected to the test's redis-server (prefix "t",
 * TTL ttl_s); limit: a timer the test may start to stop a wait. */
static state *connected_state(uv_loop_t *loop, uv_timer_t *limit, int port, long ttl_s)
{
    uv_loop_init(loop);
    state_options so = { "127.0.0.1", port, NULL, 0, "t", ttl_s };
    char err[256];
    state *st = state_new(loop, &so, on_conn, loop, err, sizeof err);
    assert_non_null(st);
    uv_timer_init(loop, limit);
    uv_timer_start(limit, give_up, 5000, 0);
    uv_run(loop, UV_RUN_DEFAULT); /* until connected (the server starts meanwhile) */
    return st;
}

static void state_done(uv_loop_t *loop, uv_timer_t *limit, state *st)
{
    state_free(st);
    uv_close((uv_handle_t *)limit, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* A send that failed while connected (the command's buffer could not
 * grow) was put in the line for a reconnect: that command and every one
 * after it waited for a reconnect that never came. */
static void test_a_command_that_could_not_be_sent_goes_a_moment_later(void **s)
{
    int port = ((server *)*s)->port;
    uv_loop_t loop;
    uv_timer_t limit;
    state *st = connected_state(&loop, &limit, port, 60);
    assert_true(state_connected(st));

    /* Just connected: the scripts are not loaded yet, so a command carries
     * its script's text (EVAL): far more than the 256 bytes of its own
     * arguments' buffer. */
    replies rs = { &loop, "", 0 };
    fail_from = 512;
    assert_int_equal(state_lease(st, "holder-a", 10000, on_reply_a, &rs), 0);
    fail_from = 0;
    assert_int_equal(failed, 1); /* the send failed, not the making of the command */
    assert_int_equal(state_lease(st, "holder-b", 10000, on_reply_b, &rs), 0);
    uv_timer_start(&limit, give_up, 3000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_string_equal(rs.order, "ab"); /* both went, in order */
    assert_int_equal(state_pending(st), 0);

    state_done(&loop, &limit, st);
}

/* One job's commands, each waited for. */
typedef struct {
    uv_loop_t *loop;
    uv_timer_t *limit;
    state *st;
    int verdict;
} one_job;

static void on_one(void *ud, const state_reply *r)
{
    one_job *o = ud;
    o->verdict = (int)r->verdict;
    uv_stop(o->loop);
}

/* Runs the loop until the command queued just before has its reply. */
static int wait_verdict(one_job *o)
{
    o->verdict = -1;
    uv_timer_start(o->limit, give_up, 5000, 0);
    uv_run(o->loop, UV_RUN_DEFAULT);
    return o->verdict;
}

static int begin_verdict(one_job *o, const char *id, int attempt)
{
    assert_int_equal(state_begin(o->st, id, 1, attempt, 3, "w1", NULL, NULL, NULL, on_one, o), 0);
    return wait_verdict(o);
}

static int finish_verdict(one_job *o, const char *id, const char *batch_id, int attempt, const char *status)
{
    static const char rec[] = "{\"attempt\":1}";
    assert_int_equal(state_finish(o->st, id, batch_id, "w1", attempt, status, rec, sizeof rec - 1, 10, 5,
                                  NULL, on_one, o), 0);
    return wait_verdict(o);
}

/* A state with TTL ttl_s and a plain hiredis context on the test's
 * redis-server, whose command counts start at 0. */
typedef struct {
    uv_loop_t loop;
    uv_timer_t limit;
    redisContext *c;
    one_job o;
} ttl_rig;

static void ttl_rig_start(ttl_rig *r, int port, long ttl_s)
{
    state *st = connected_state(&r->loop, &r->limit, port, ttl_s);
    assert_true(state_connected(st));
    r->c = redisConnect("127.0.0.1", port);
    assert_true(r->c && !r->c->err);
    freeReplyObject(redisCommand(r->c, "CONFIG RESETSTAT"));
    r->o = (one_job){ &r->loop, &r->limit, st, -1 };
}

static void ttl_rig_done(ttl_rig *r)
{
    redisFree(r->c);
    state_done(&r->loop, &r->limit, r->o.st);
}

static long long redis_int(redisContext *c, const char *fmt, const char *key)
{
    redisReply *r = redisCommand(c, fmt, key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Calls of a command so far, from Redis's own count (scripts' calls
 * included); name in lower case. */
static long calls(redisContext *c, const char *name)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", name);
    const char *p = strstr(r->str, field);
    long n = p ? strtol(p + strlen(field), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static long expires(redisContext *c) { return calls(c, "expire"); }

#define assert_fresh(c, key) do { \
        long long ms_ = redis_int(c, "PTTL %s", key); \
        assert_in_range(ms_, 59000, 60000); \
    } while (0)

/* A job's two keys live redis.ttl_s after its last write (within 1%, at
 * least a second), but a TTL given a moment ago is not given again (each EXPIRE is one more record in the
 * append-only file): a job answered at the first attempt costs two
 * EXPIREs (begin's on the new hash, finish's on the new history list), not
 * three; a TTL that drifted by 1% (a second at least, at 60 s), or that a
 * key lost, is set anew. */
static void test_a_fresh_ttl_is_not_set_again(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    redisContext *c = r.c;
    one_job *o = &r.o;

    /* one attempt */
    assert_int_equal(begin_verdict(o, "j1", 1), STATE_GO);
    assert_fresh(c, "t:job:{j1}");
    assert_int_equal(finish_verdict(o, "j1", NULL, 1, "retrying"), STATE_OK);
    assert_fresh(c, "t:job:{j1}");
    assert_fresh(c, "t:job:{j1}:history");
    assert_int_equal(expires(c), 2);

    /* the hash's TTL drifted, the list lost its own: both set anew */
    assert_int_equal(redis_int(c, "PEXPIRE %s 30000", "t:job:{j1}"), 1);
    assert_int_equal(redis_int(c, "PERSIST %s", "t:job:{j1}:history"), 1);
    assert_int_equal(begin_verdict(o, "j1", 2), STATE_GO);
    assert_fresh(c, "t:job:{j1}");
    assert_int_equal(finish_verdict(o, "j1", NULL, 2, "final"), STATE_OK);
    assert_fresh(c, "t:job:{j1}");
    assert_fresh(c, "t:job:{j1}:history");
    assert_int_equal(redis_int(c, "LLEN %s", "t:job:{j1}:history"), 2);
    assert_int_equal(expires(c), 4);

    /* the hash vanished during the attempt: finish writes it anew, with a TTL */
    assert_int_equal(begin_verdict(o, "j2", 1), STATE_GO);
    assert_int_equal(redis_int(c, "DEL %s", "t:job:{j2}"), 1);
    assert_int_equal(finish_verdict(o, "j2", NULL, 1, "final"), STATE_OK);
    assert_fresh(c, "t:job:{j2}");
    assert_fresh(c, "t:job:{j2}:history");

    ttl_rig_done(&r);
}

/* A hash's "published", 0 when it has none. */
static long published_of(redisContext *c, const char *key)
{
    redisReply *r = redisCommand(c, "HGET %s published", key);
    assert_non_null(r);
    long v = r->type == REDIS_REPLY_STRING ? strtol(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

/* `retort resubmit` reset a job (to run 2) between its escalation's
 * delivery and the delivery's mark: the mark, of run 1's attempt 3, was
 * written on run 2's hash, and a retry of run 2 that never left was then
 * taken as delivered (its redelivered message judged stale: the job
 * lost).  A mark counts only on a hash of its own run (no "run": 1). */
static void test_a_mark_of_an_earlier_run_is_not_the_new_runs(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    redisContext *c = r.c;
    freeReplyObject(redisCommand(c, "HSET t:job:{m1} run 2 status resubmitted"));
    freeReplyObject(redisCommand(c, "HSET t:job:{m2} status escalated attempt 3"));
    freeReplyObject(redisCommand(c, "HSET t:job:{m3} run 2 status final attempt 1"));
    /* one loop turn: one PUBLISHED script for the three marks */
    assert_int_equal(state_published(r.o.st, "m1", 1, 3), 0);
    assert_int_equal(state_published(r.o.st, "m2", 1, 3), 0);
    assert_int_equal(state_published(r.o.st, "m3", 2, 1), 0);
    for (int i = 0; i < 500 && !published_of(c, "t:job:{m3}"); i++) {
        uv_run(&r.loop, UV_RUN_NOWAIT);
        usleep(2000);
    }
    assert_int_equal(published_of(c, "t:job:{m3}"), 1);
    assert_int_equal(published_of(c, "t:job:{m2}"), 3);
    assert_int_equal(published_of(c, "t:job:{m1}"), 0);
    ttl_rig_done(&r);
}

/* Redis lost the scripts (SCRIPT FLUSH, a failover; or a restarted Redis
 * answered LOADING to the loads at connect): the command that met
 * NOSCRIPT goes whole (EVAL), and its script is loaded again, so that the
 * next ones go by SHA.  The SHA stayed lost for the connection's life:
 * every later call carried the script's whole text. */
static void test_a_script_redis_lost_is_loaded_again(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    one_job *o = &r.o;
    assert_int_equal(begin_verdict(o, "s0", 1), STATE_GO);
    freeReplyObject(redisCommand(r.c, "SCRIPT FLUSH"));
    freeReplyObject(redisCommand(r.c, "CONFIG RESETSTAT"));
    char id[16];
    for (int i = 1; i <= 10; i++) {
        snprintf(id, sizeof id, "s%d", i);
        assert_int_equal(begin_verdict(o, id, 1), STATE_GO);
    }
    /* one whole (the answer to NOSCRIPT), perhaps one more if the load's
     * answer came after the next call went; the rest by SHA */
    assert_in_range(calls(r.c, "eval"), 1, 2);
    assert_in_range(calls(r.c, "evalsha"), 9, 10);
    ttl_rig_done(&r);
}

static int begin_as(one_job *o, const char *id, const char *owner, const char *takeover, const char *holder)
{
    assert_int_equal(state_begin(o->st, id, 1, 1, 3, owner, NULL, takeover, holder, on_one, o), 0);
    return wait_verdict(o);
}

static void assert_owner(redisContext *c, const char *key, const char *owner)
{
    redisReply *r = redisCommand(c, "HGET %s owner", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, owner);
    freeReplyObject(r);
}

/* B found A's lease gone and takes A's attempt over; but A was only slow
 * (a stall longer than a lease) and has renewed its lease since.  The
 * lease is read again in the takeover's own step: held, the answer is
 * STATE_ALIVE and the attempt stays A's, whether A is still calling
 * (else the LLM is paid twice) or has recorded its outcome meanwhile
 * (else B delivered that outcome a second time).  A takeover without the
 * lease named (waited out, not found gone) goes on as before, and so does
 * one whose owner's lease is gone. */
static void test_a_takeover_of_an_owner_back_with_its_lease_is_called_off(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    redisContext *c = r.c;
    one_job *o = &r.o;
    static const char rec[] = "{\"attempt\":1}";

    assert_int_equal(begin_as(o, "k1", "A:1", NULL, NULL), STATE_GO);
    assert_int_equal(begin_as(o, "k1", "B:1", NULL, NULL), STATE_BUSY);
    freeReplyObject(redisCommand(c, "SET t:worker:{A} 1 PX 10000"));
    assert_int_equal(begin_as(o, "k1", "B:1", "A:1", "A"), STATE_ALIVE);
    assert_owner(c, "t:job:{k1}", "A:1");

    /* A recorded its outcome between B's read of the lease and B's begin */
    assert_int_equal(state_finish(o->st, "k1", NULL, "A:1", 1, "final", rec, sizeof rec - 1, 10, 5, NULL,
                                  on_one, o), 0);
    assert_int_equal(wait_verdict(o), STATE_OK);
    assert_int_equal(begin_as(o, "k1", "B:1", "A:1", "A"), STATE_ALIVE);
    /* its outcome delivered: nothing to take over, the message is done */
    freeReplyObject(redisCommand(c, "HSET t:job:{k1} published 1"));
    assert_int_equal(begin_as(o, "k1", "B:1", "A:1", "A"), STATE_DONE);
    freeReplyObject(redisCommand(c, "HSET t:job:{k1} published 0"));
    freeReplyObject(redisCommand(c, "DEL t:worker:{A}"));
    assert_int_equal(begin_as(o, "k1", "B:1", "A:1", "A"), STATE_DONE);

    /* waited out (no lease named): taken over though A holds its lease */
    freeReplyObject(redisCommand(c, "SET t:worker:{A} 1 PX 10000"));
    assert_int_equal(begin_as(o, "k2", "A:2", NULL, NULL), STATE_GO);
    assert_int_equal(begin_as(o, "k2", "B:2", "A:2", NULL), STATE_GO);
    assert_owner(c, "t:job:{k2}", "B:2");

    /* A gone: taken over */
    assert_int_equal(begin_as(o, "k3", "A:3", NULL, NULL), STATE_GO);
    freeReplyObject(redisCommand(c, "DEL t:worker:{A}"));
    assert_int_equal(begin_as(o, "k3", "B:3", "A:3", "A"), STATE_GO);
    assert_owner(c, "t:job:{k3}", "B:3");

    /* another worker's lease held is not A's */
    assert_int_equal(begin_as(o, "k4", "A:4", NULL, NULL), STATE_GO);
    freeReplyObject(redisCommand(c, "SET t:worker:{C} 1 PX 10000"));
    assert_int_equal(begin_as(o, "k4", "B:4", "A:4", "A"), STATE_GO);

    ttl_rig_done(&r);
}

/* A finish that Redis fails part way (here the batch's key is of another
 * type) wrote nothing: a script that fails keeps what it wrote before,
 * and the record pushed before the batch's counters were read was pushed
 * again by each resend, once a second.  Once the key is right, the
 * record goes once. */
static void test_a_finish_that_fails_writes_nothing(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    redisContext *c = r.c;
    one_job *o = &r.o;
    assert_int_equal(begin_verdict(o, "f1", 1), STATE_GO);
    freeReplyObject(redisCommand(c, "SET t:batch:{b1} not-a-hash"));
    for (int i = 0; i < 3; i++) assert_int_equal(finish_verdict(o, "f1", "b1", 1, "final"), STATE_ERROR);
    assert_int_equal(redis_int(c, "LLEN %s", "t:job:{f1}:history"), 0);
    freeReplyObject(redisCommand(c, "DEL t:batch:{b1}"));
    assert_int_equal(finish_verdict(o, "f1", "b1", 1, "final"), STATE_OK);
    assert_int_equal(finish_verdict(o, "f1", "b1", 1, "final"), STATE_OK);
    assert_int_equal(redis_int(c, "LLEN %s", "t:job:{f1}:history"), 1);
    redisReply *rr = redisCommand(c, "HGET t:batch:{b1} final");
    assert_non_null(rr);
    assert_int_equal(rr->type, REDIS_REPLY_STRING);
    assert_string_equal(rr->str, "1");
    freeReplyObject(rr);
    ttl_rig_done(&r);
}

/* At a TTL of 100,000 s, 1% is 1,000 s: a hash whose TTL drifted 500 s
 * (an attempt that long) keeps it; one 2,000 s off gets it anew. */
static void test_a_ttl_within_one_percent_is_kept(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 100000);
    redisContext *c = r.c;
    one_job *o = &r.o;

    assert_int_equal(begin_verdict(o, "j3", 1), STATE_GO);
    assert_int_equal(redis_int(c, "PEXPIRE %s 99500000", "t:job:{j3}"), 1);
    assert_int_equal(finish_verdict(o, "j3", NULL, 1, "retrying"), STATE_OK);
    assert_in_range(redis_int(c, "PTTL %s", "t:job:{j3}"), 99000000, 99500000); /* kept */
    assert_in_range(redis_int(c, "PTTL %s", "t:job:{j3}:history"), 99999000, 100000000);
    assert_int_equal(expires(c), 2);

    assert_int_equal(redis_int(c, "PEXPIRE %s 98000000", "t:job:{j3}"), 1);
    assert_int_equal(begin_verdict(o, "j3", 2), STATE_GO);
    assert_in_range(redis_int(c, "PTTL %s", "t:job:{j3}"), 99999000, 100000000); /* anew */
    assert_int_equal(expires(c), 3);

    ttl_rig_done(&r);
}

/* The batch's three keys (counters, job list, inputs) expire together,
 * redis.ttl_s after its last recorded attempt, by the same 1% rule as a
 * job's: at a TTL of 100,000 s a batch hash 500 s off keeps its TTL (no
 * EXPIRE at all for that attempt), one 2,000 s off gets it anew on all
 * three keys. */
static void test_a_batch_ttl_within_one_percent_is_kept(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 100000);
    redisContext *c = r.c;
    one_job *o = &r.o;
    static const char *const keys[] = { "t:batch:{b1}", "t:batch:{b1}:jobs", "t:batch:{b1}:input" };
    freeReplyObject(redisCommand(c, "RPUSH %s j4 j5", keys[1]));
    freeReplyObject(redisCommand(c, "HSET %s j4 x j5 y", keys[2]));

    /* the first record makes the batch hash: all three get the TTL */
    assert_int_equal(begin_verdict(o, "j4", 1), STATE_GO);
    assert_int_equal(finish_verdict(o, "j4", "b1", 1, "retrying"), STATE_OK);
    for (int i = 0; i < 3; i++)
        assert_in_range(redis_int(c, "PTTL %s", keys[i]), 99999000, 100000000);
    assert_int_equal(expires(c), 5); /* begin's hash, the list, the batch's three */

    /* 500 s off: kept, on all three */
    for (int i = 0; i < 3; i++)
        assert_int_equal(redis_int(c, "PEXPIRE %s 99500000", keys[i]), 1);
    assert_int_equal(begin_verdict(o, "j4", 2), STATE_GO);
    assert_int_equal(finish_verdict(o, "j4", "b1", 2, "final"), STATE_OK);
    for (int i = 0; i < 3; i++)
        assert_in_range(redis_int(c, "PTTL %s", keys[i]), 99000000, 99500000);
    assert_int_equal(expires(c), 5);
    redisReply *a = redisCommand(c, "HGET %s attempts", keys[0]);
    assert_true(a && a->type == REDIS_REPLY_STRING);
    assert_string_equal(a->str, "2"); /* both attempts counted */
    freeReplyObject(a);

    /* 2,000 s off: anew, on all three */
    assert_int_equal(redis_int(c, "PEXPIRE %s 98000000", keys[0]), 1);
    assert_int_equal(begin_verdict(o, "j5", 1), STATE_GO);
    assert_int_equal(finish_verdict(o, "j5", "b1", 1, "final"), STATE_OK);
    for (int i = 0; i < 3; i++)
        assert_in_range(redis_int(c, "PTTL %s", keys[i]), 99999000, 100000000);
    assert_int_equal(expires(c), 5 + 2 + 3);

    ttl_rig_done(&r);
}

/* Finished commands are kept and reused (state.c's pool): each one then
 * carries its own job's keys and record only, whatever the one before it
 * held: a longer id, a record of 3,000 bytes, one of 100,000 (over what a
 * kept buffer may hold: freed, not kept). */
static void test_commands_reused_carry_only_their_own_arguments(void **s)
{
    ttl_rig r;
    ttl_rig_start(&r, ((server *)*s)->port, 60);
    redisContext *c = r.c;
    one_job *o = &r.o;
    static const struct {
        const char *id;
        size_t rec_len;
    } jobs[] = {
        {"a-job-id-much-longer-than-the-next-one", 3000}, {"j", 24}, {"k", 100000}, {"l", 24}, {"m", 3000}, {"n", 24},
    };
    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        char *rec = malloc(jobs[i].rec_len + 1);
        assert_non_null(rec);
        /* {"attempt":1,"x":"ccc..."} padded to rec_len, a letter per job */
        int head = snprintf(rec, jobs[i].rec_len + 1, "{\"attempt\":1,\"x\":\"");
        memset(rec + head, 'a' + (int)i, jobs[i].rec_len - (size_t)head - 2);
        memcpy(rec + jobs[i].rec_len - 2, "\"}", 3);
        assert_int_equal(begin_verdict(o, jobs[i].id, 1), STATE_GO);
        assert_int_equal(state_finish(o->st, jobs[i].id, NULL, "w1", 1, "final", rec, jobs[i].rec_len, 10, 5, NULL,
                                      on_one, o), 0);
        assert_int_equal(wait_verdict(o), STATE_OK);
        char key[128];
        snprintf(key, sizeof(key), "t:job:{%s}:history", jobs[i].id);
        redisReply *h = redisCommand(c, "LRANGE %s 0 -1", key);
        assert_true(h && h->type == REDIS_REPLY_ARRAY);
        assert_int_equal(h->elements, 1);
        assert_int_equal(h->element[0]->len, jobs[i].rec_len);
        assert_memory_equal(h->element[0]->str, rec, jobs[i].rec_len);
        freeReplyObject(h);
        snprintf(key, sizeof(key), "t:job:{%s}", jobs[i].id);
        redisReply *st = redisCommand(c, "HGET %s status", key);
        assert_true(st && st->type == REDIS_REPLY_STRING);
        assert_string_equal(st->str, "final");
        freeReplyObject(st);
        free(rec);
    }
    ttl_rig_done(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_command),
        cmocka_unit_test(test_parse_head),
        cmocka_unit_test(test_parse_eviction),
        cmocka_unit_test(test_refusals_that_pass),
        cmocka_unit_test(test_an_fd_libuv_still_watches_is_tried_again),
        cmocka_unit_test_setup_teardown(test_a_command_that_could_not_be_sent_goes_a_moment_later, redis_start,
                                        redis_stop),
        cmocka_unit_test_setup_teardown(test_a_fresh_ttl_is_not_set_again, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_a_mark_of_an_earlier_run_is_not_the_new_runs, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_a_ttl_within_one_percent_is_kept, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_a_script_redis_lost_is_loaded_again, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_a_finish_that_fails_writes_nothing, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_a_takeover_of_an_owner_back_with_its_lease_is_called_off, redis_start,
                                        redis_stop),
        cmocka_unit_test_setup_teardown(test_a_batch_ttl_within_one_percent_is_kept, redis_start, redis_stop),
        cmocka_unit_test_setup_teardown(test_commands_reused_carry_only_their_own_arguments, redis_start, redis_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
