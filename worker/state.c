#include "state.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonin.h"
#include "log.h"
#include "util.h"

/* Every script answers with one line, "verdict status attempt published
 * tokens [owner]" (status may be empty; the owner, which may hold spaces,
 * runs to the end), alone or, when records come back, as the first element
 * of an array with them: a bare string is two allocations in hiredis's
 * reader where an array of five was nine, for each of the two or three
 * commands a job costs. */
#define SCRIPT_HEAD \
    "local function head(v, s, a, p, t, o)\n" \
    "  local h = string.format('%s %s %d %d %d', v, s, a, p, t)\n" \
    "  if o then h = h .. ' ' .. o end\n" \
    "  return h\n" \
    "end\n"

/* drifted(k, s): key k's TTL is gone or 1% (at least a second) off s
 * seconds.  ttl(k, s) gives key k (just written) its TTL anew only then:
 * a job's hash, given its TTL by begin, is not given it again by finish
 * an LLM call later (at the default 7 days, unless the attempt took over
 * 100 minutes).  An EXPIRE is a record in the append-only file and a
 * command to propagate (with `always`, fsync'd like the writes), and a job
 * answered at the first attempt made three where two are needed.  A key
 * without a TTL (-1: made by this script) or gone (-2) has drifted. */
#define SCRIPT_TTL \
    "local function drifted(k, s)\n" \
    "  local left = redis.call('PTTL', k)\n" \
    "  return left < 0 or math.abs(left - s * 1000) >= math.max(1000, s * 10)\n" \
    "end\n" \
    "local function ttl(k, s)\n" \
    "  if drifted(k, s) then redis.call('EXPIRE', k, s) end\n" \
    "end\n"

/* BEGIN: decides what a received job message means.  The owner of the
 * attempt comes back with 'done' and 'retried' (its outcome may still be
 * on its way) and with 'busy': the attempt is running on another worker,
 * unless ARGV[8] names that owner (gone: the caller takes the attempt
 * over).  KEYS[3], with ARGV[8], is that owner's lease, which the caller
 * found gone: held again now (the owner was slow, not dead, and renewed
 * it since), the answer is 'alive'.  Read here, in the same step as the
 * takeover, and not only before it: between the two, such an owner could
 * record its outcome, and the caller, taking it for gone, delivered it a
 * second time (or called the LLM a second time). */
static const char script_begin[] = SCRIPT_HEAD SCRIPT_TTL
    "local f = redis.call('HMGET', KEYS[1], 'attempt', 'status', 'published', 'prompt_tokens', 'completion_tokens',\n"
    "                     'run', 'owner', 'created')\n"
    "local cur = tonumber(f[1]) or 0\n"
    "local status = f[2] or ''\n"
    "local pub = tonumber(f[3]) or 0\n"
    "local tok = (tonumber(f[4]) or 0) + (tonumber(f[5]) or 0)\n"
    "local att = tonumber(ARGV[1])\n"
    "-- runs: `retort resubmit` leaves only 'run' (the next one) behind\n"
    "local hrun, mrun = tonumber(f[6]) or 1, tonumber(ARGV[7]) or 1\n"
    "if mrun < hrun then return head('stale', status, cur, pub, tok) end\n"
    "if mrun > hrun then\n"
    "  -- a later run than the state knows: its reset was lost; start afresh\n"
    "  redis.call('DEL', KEYS[1], KEYS[2])\n"
    "  cur, status, pub, tok, f[7], f[8] = 0, '', 0, 0, nil, nil\n"
    "end\n"
    "-- the answer for an owner to take over that holds its lease again\n"
    "local function alive()\n"
    "  if KEYS[3] and f[7] == ARGV[8] and redis.call('EXISTS', KEYS[3]) == 1 then\n"
    "    return head('alive', status, cur, pub, tok, f[7])\n"
    "  end\n"
    "end\n"
    "if status == 'final' or status == 'escalated' then\n"
    "  local a = pub < cur and alive()\n"
    "  if a then return a end\n"
    "  local r = {head('done', status, cur, pub, tok, f[7])}\n"
    "  if pub < cur then\n"
    "    for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do r[#r + 1] = v end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "if cur > att then\n"
    "  -- retry.local starts attempt att+1 before the retry job of att is\n"
    "  -- delivered: until 'published' says it was, this message may be all\n"
    "  -- that is left of the job, and answers as the retry decided\n"
    "  if cur == att + 1 and pub < att then\n"
    "    local a = alive()\n"
    "    if a then return a end\n"
    "    local r = {head('retried', status, att, pub, tok, f[7])}\n"
    "    local p = '{\"attempt\":' .. att .. ','\n"
    "    for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do\n"
    "      if string.sub(v, 1, #p) == p then r[2] = v end\n"
    "    end\n"
    "    return r\n"
    "  end\n"
    "  return head('stale', status, cur, pub, tok)\n"
    "end\n"
    "if cur == att and status == 'retrying' then\n"
    "  local a = pub < cur and alive()\n"
    "  if a then return a end\n"
    "  local r = {head('retried', status, cur, pub, tok, f[7])}\n"
    "  if pub < cur then\n"
    "    local last = redis.call('LINDEX', KEYS[2], -1)\n"
    "    if last then r[#r + 1] = last end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "if cur == att and status == 'running' and f[7] and f[7] ~= '' then\n"
    "  if f[7] ~= ARGV[8] then return head('busy', status, cur, pub, tok, f[7]) end\n"
    "  local a = alive()\n"
    "  if a then return a end\n"
    "end\n"
    "local w = {'attempt', att, 'status', 'running', 'owner', ARGV[4], 'max_attempts', ARGV[2],\n"
    "           'updated', ARGV[3]}\n"
    "if not f[8] then w[#w + 1] = 'created' w[#w + 1] = ARGV[3] end\n"
    "if ARGV[6] ~= '' then w[#w + 1] = 'batch_id' w[#w + 1] = ARGV[6] end\n"
    "if mrun > 1 then w[#w + 1] = 'run' w[#w + 1] = mrun end\n"
    "redis.call('HSET', KEYS[1], unpack(w))\n"
    "ttl(KEYS[1], tonumber(ARGV[5]))\n"
    "return head('go', 'running', att, pub, tok)\n";

/* FINISH: records an attempt's outcome, once, if we still own it.  With
 * ARGV[9] (retry.local), a retry also claims the next attempt for that
 * owner in the same write; the reply then reads 'running' and the tokens
 * so far, as begin's 'go' would.  Each hash is written by one HSET: every
 * write command is a record in Redis's append-only file, which one Redis
 * keeps for the whole pool (a recorded attempt of a batch: 5 writes
 * where there were 14).  So counters are read and written back, not
 * HINCRBYed (the script runs alone: the same).  Keys get their TTL anew
 * only when it has drifted (see SCRIPT_TTL): the job's history list when
 * RPUSH made it, its hash when its TTL is 1% off the configured one; the
 * batch's three keys together when its hash's is, so that they expire
 * together (at 7 days, once per 100 minutes per batch while the workers
 * agree on redis.ttl_s, not three EXPIREs per attempt). */
static const char script_finish[] = SCRIPT_HEAD SCRIPT_TTL
    "local f = redis.call('HMGET', KEYS[1], 'owner', 'attempt', 'status', 'recorded', 'prompt_tokens',\n"
    "                     'completion_tokens')\n"
    "local att = tonumber(ARGV[2])\n"
    "local pt, ct = tonumber(f[5]) or 0, tonumber(f[6]) or 0\n"
    "local function claimed()\n"
    "  return head('ok', 'running', att + 1, 0, pt + ct)\n"
    "end\n"
    "-- sent again after a lost reply: the claim was made\n"
    "if ARGV[9] ~= '' and f[1] == ARGV[9] and tonumber(f[2]) == att + 1 then return claimed() end\n"
    "if f[1] and (f[1] ~= ARGV[1] or tonumber(f[2]) ~= att) then\n"
    "  return head('superseded', f[3] or '', tonumber(f[2]) or 0, 0, 0)\n"
    "end\n"
    "if not f[1] and f[3] then\n"
    "  -- no owner but a status: `retort resubmit` reset the job for a new\n"
    "  -- run; this attempt's run is over, and written here it would pass\n"
    "  -- for the new run's outcome\n"
    "  return head('superseded', f[3], 0, 0, 0)\n"
    "end\n"
    "local claim = ARGV[3] == 'retrying' and ARGV[9] ~= ''\n"
    "local w = {'status', ARGV[3], 'recorded', att, 'updated', ARGV[5]}\n"
    "local function put(k, v) w[#w + 1] = k w[#w + 1] = v end\n"
    "if not f[1] then\n"
    "  -- the state vanished (Redis lost it or it expired): write it anew\n"
    "  put('created', ARGV[5])\n"
    "  if not claim then put('attempt', att) put('owner', ARGV[1]) end\n"
    "end\n"
    "if (tonumber(f[4]) or 0) ~= att then\n"
    "  local p, c = tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "  -- read before the first write: a script that fails (a key of\n"
    "  -- another type) keeps the writes made before, and the record, sent\n"
    "  -- again each second, was pushed again each time\n"
    "  local b = KEYS[3] and redis.call('HMGET', KEYS[3], ARGV[3], 'attempts', 'prompt_tokens', 'completion_tokens')\n"
    "  redis.call('RPUSH', KEYS[2], ARGV[4])\n"
    "  pt, ct = pt + p, ct + c\n"
    "  put('prompt_tokens', string.format('%d', pt)) put('completion_tokens', string.format('%d', ct))\n"
    "  if KEYS[3] then\n"
    "    -- batch progress, counted once per attempt with the record\n"
    "    redis.call('HSET', KEYS[3], ARGV[3], string.format('%d', (tonumber(b[1]) or 0) + 1),\n"
    "               'attempts', string.format('%d', (tonumber(b[2]) or 0) + 1),\n"
    "               'prompt_tokens', string.format('%d', (tonumber(b[3]) or 0) + p),\n"
    "               'completion_tokens', string.format('%d', (tonumber(b[4]) or 0) + c), 'updated', ARGV[5])\n"
    "    -- the batch's job list and inputs live as long as its counters\n"
    "    -- (results, report and resubmit read them): all three from now\n"
    "    if drifted(KEYS[3], tonumber(ARGV[6])) then\n"
    "      redis.call('EXPIRE', KEYS[3], ARGV[6])\n"
    "      redis.call('EXPIRE', KEYS[4], ARGV[6])\n"
    "      redis.call('EXPIRE', KEYS[5], ARGV[6])\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if claim then w[2] = 'running' put('attempt', att + 1) put('owner', ARGV[9]) end\n"
    "redis.call('HSET', KEYS[1], unpack(w))\n"
    "ttl(KEYS[1], tonumber(ARGV[6]))\n"
    "ttl(KEYS[2], tonumber(ARGV[6]))\n"
    "if claim then return claimed() end\n"
    "-- the records before this attempt's (the caller has its own)\n"
    "if ARGV[3] ~= 'retrying' and att > 1 then\n"
    "  local r = {head('ok', ARGV[3], att, 0, 0)}\n"
    "  for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -2)) do r[#r + 1] = v end\n"
    "  return r\n"
    "end\n"
    "return head('ok', ARGV[3], att, 0, 0)\n";

/* RATE: two token buckets (requests, tokens) per endpoint and model,
 * shared by every worker.  Each holds at most one second's worth of its
 * per-minute limit, so bursts stay short.  Takes `cost` tokens and one
 * request, or returns how long to wait; ARGV[4] < 0 only adjusts the token
 * bucket by the difference between a call's estimate and its usage, and
 * -2 also gives back the request of a call let in and never made (its job
 * let go at a stop, or ended by its deadline): the provider never saw it,
 * and the limit's next caller must not wait for it.
 * The buckets refill by Redis's clock, not the callers': with the callers'
 * own, a machine whose clock was ahead saw the time since a slower one's
 * write as a full refill on every call, and took the whole limit.  A
 * bucket without a limit (0) stays full: taken from, it ran into a debt
 * as large as the traffic, and a limit set later (another worker's
 * config, a deploy) made the calls wait it out, for hours.  A debt (the
 * usage above its estimate, a limit lowered) is at most a minute's worth. */
static const char script_rate[] = SCRIPT_HEAD
    "local tm = redis.call('TIME')\n"
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"
    "local rpm, tpm, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local f = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')\n"
    "local rcap, tcap = math.max(1, rpm / 60), math.max(1, tpm / 60)\n"
    "local r = tonumber(f[1]) or rcap\n"
    "local t = tonumber(f[2]) or tcap\n"
    "local ts = tonumber(f[3]) or now\n"
    "local dt = math.max(0, now - ts)\n"
    "r = math.min(rcap, r + dt * rpm / 60000)\n"
    "t = math.min(tcap, t + dt * tpm / 60000)\n"
    "local wait = 0\n"
    "if tonumber(ARGV[4]) < 0 then\n"
    "  t = math.min(tcap, t - cost)\n"
    "  if tonumber(ARGV[4]) == -2 then r = math.min(rcap, r + 1) end\n"
    "else\n"
    "  if rpm > 0 and r < 1 then wait = math.max(wait, math.ceil((1 - r) * 60000 / rpm)) end\n"
    "  local need = math.min(cost, tcap)\n"
    "  if tpm > 0 and t < need then wait = math.max(wait, math.ceil((need - t) * 60000 / tpm)) end\n"
    "  if wait == 0 then r = r - 1 t = t - cost end\n"
    "end\n"
    "if rpm <= 0 then r = rcap else r = math.max(r, -rpm) end\n"
    "if tpm <= 0 then t = tcap else t = math.max(t, -tpm) end\n"
    "redis.call('HSET', KEYS[1], 'r', tostring(r), 't', tostring(t), 'ts', now)\n"
    "redis.call('PEXPIRE', KEYS[1], 120000)\n"
    "return head('ok', '', wait, 0, 0)\n";

/* PUBLISHED: the outcome events of these attempts were delivered (KEYS:
 * the jobs' hashes, ARGV: each one's attempt and run, in the same order);
 * the marks of a loop turn in one command instead of one per job.  A hash
 * that expired (or was deleted) meanwhile is not made again: it would
 * hold only the mark, without a TTL, for ever.  A mark of an earlier run
 * (`retort resubmit` reset the job between the event's delivery and its
 * mark) is not the new run's: taken for it, a retry of the new run that
 * was never delivered was judged delivered, and the job was lost. */
static const char script_published[] = SCRIPT_HEAD
    "for i, k in ipairs(KEYS) do\n"
    "  local a, run = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])\n"
    "  local f = redis.call('HMGET', k, 'published', 'run')\n"
    "  if redis.call('EXISTS', k) == 1 and (tonumber(f[2]) or 1) == run and (tonumber(f[1]) or 0) < a then\n"
    "    redis.call('HSET', k, 'published', a)\n"
    "  end\n"
    "end\n"
    "return head('ok', '', #KEYS, 0, 0)\n";

/* LEASE: a worker process's liveness, KEYS[1]: ARGV[1] > 0 holds it for
 * that many ms, 0 reads it, < 0 lets it go.  Answers 1 (held) or 0 in the
 * attempt field. */
static const char script_lease[] = SCRIPT_HEAD
    "local ms = tonumber(ARGV[1])\n"
    "if ms > 0 then redis.call('SET', KEYS[1], '1', 'PX', ms) return head('ok', '', 1, 0, 0) end\n"
    "if ms < 0 then redis.call('DEL', KEYS[1]) return head('ok', '', 0, 0, 0) end\n"
    "return head('ok', '', redis.call('EXISTS', KEYS[1]), 0, 0)\n";

enum { SCRIPT_BEGIN, SCRIPT_FINISH, SCRIPT_PUBLISHED, SCRIPT_RATE, SCRIPT_LEASE, SCRIPT_COUNT };
static const char *const scripts[SCRIPT_COUNT] = {script_begin, script_finish, script_published, script_rate,
                                                  script_lease};

#define OP_MAX_ARGS 16
/* Marks per PUBLISHED command (keys, attempts and runs: 3 arguments each). */
#define PUB_BATCH_MAX 64
#define OP_ARGS_MAX (3 * PUB_BATCH_MAX)

typedef struct state_op {
    state *st;
    int script;
    int nkeys;
    int argc;                  /* ARGV count after the keys */
    sbuf args;                 /* keys then argv, back to back (one allocation) */
    int cap;                   /* slots in offs and lens */
    size_t *offs, *lens;       /* where each starts in args, its length */
    size_t offs_inl[OP_MAX_ARGS], lens_inl[OP_MAX_ARGS]; /* offs, lens unless a batch */
    size_t nmarks;             /* PUBLISHED: how many jobs */
    state_cb cb;
    void *ud;
    size_t id_off, id_len;     /* the job id inside the first key */
    int sent;                  /* on the wire now */
    int refusals;              /* PUBLISHED: times Redis refused it (remark_later) */
    struct state_op *next;     /* queue while disconnected */
} state_op;

struct state {
    uv_loop_t *loop;
    redisAsyncContext *ac;
    int connected;
    int closing;
    char *host, *password, *prefix;
    int port, db;
    long ttl_s;
    char sha[SCRIPT_COUNT][41];
    /* A SCRIPT LOAD on the wire for the script: one at a time. */
    unsigned char loading[SCRIPT_COUNT];
    state_op *queue_head, *queue_tail;  /* waiting for a connection */
    state_op *pool;                     /* finished ops kept for reuse (op_free) */
    size_t npool;
    size_t pending;                     /* ops not yet completed */
    uv_timer_t reconnect;
    uv_timer_t resend;         /* tries the line again after a send failed */
    /* Batches of marks Redis refused (OOM, READONLY, LOADING), sent again
     * a second later: dropped, a redelivery of such a job's message found
     * its outcome unmarked and waited worker.takeover_after_ms for an
     * owner that had delivered it. */
    state_op *remark;
    uv_timer_t remark_timer;
    /* Redis came back after a loss (0: not since the first connect): when
     * it first answered a command, not when its socket connected (it
     * answers LOADING while it reads its data back). */
    int ever_connected, back_due;
    uint64_t back_ms;
    uint64_t started_ms;       /* when the Redis connected to started, by its
                                * uptime (util_mono_ms; 0: unknown, or before
                                * this machine's boot, where that clock
                                * starts) */
    uv_timer_t connect_watch;  /* gives up on a connect that never completes */
    uint64_t backoff_ms;
    /* hiredis 0.14's libuv adapter drops a poll error: when Redis dies
     * with data in flight (a reset, not a clean close) the connection is
     * never seen to go, and the commands on it wait forever.  So replies
     * are watched: none for REPLY_TIMEOUT_MS while commands are on the
     * wire drops the connection (they are sent again after the reconnect;
     * every script but the rate limiter's is idempotent: see state.h).
     * This also covers a silent network. */
    uv_timer_t reply_watch;
    size_t on_wire;                     /* ops sent, reply not yet in */
    uint64_t wire_since_ms;             /* last reply, or first send after none */
    int handles;                        /* uv handles not yet closed */
    /* Delivered-outcome marks nobody waits for, sent as one command when
     * the loop turn ends (before_poll) or the batch is full. */
    state_op *pub;
    int pub_att[PUB_BATCH_MAX];         /* the attempts of pub's jobs */
    int pub_run[PUB_BATCH_MAX];         /* and their runs */
    /* Runs before the loop waits, while marks or commands are due: the
     * marks go out as one command, then everything hiredis holds is
     * written (see watch_add_write). */
    uv_prepare_t before_poll;
    int write_due;                      /* hiredis holds output to write */
    int writing;                        /* in before_poll's write */
    state_conn_cb conn_cb;
    void *conn_ud;
    sbuf wire;                          /* the command being sent, in RESP (reused) */
    char evicts[40];                    /* the evicting policy last warned of ("" none) */
};

#define REPLY_TIMEOUT_MS 5000

static void connect_now(state *st);
static int op_send(state *st, state_op *op);
static void script_load_cb(redisAsyncContext *ac, void *reply, void *privdata);

/* A finished op is kept for the next one, with its argument buffer: a
 * job's two scripts then allocate nothing (the op's calloc and its
 * buffer's growth were five allocations a job).  Bounded in count and in
 * the buffer kept: a record's arguments carry the model's answer, which
 * may run to megabytes once in a while. */
#define OP_POOL_MAX 256
#define OP_POOL_ARGS_MAX (64 * 1024)

static void op_free(state_op *op) {
    if (!op) return;
    state *st = op->st;
    if (op->offs != op->offs_inl) {
        free(op->offs);
        free(op->lens);
    }
    if (!st->closing && st->npool < OP_POOL_MAX && op->args.cap <= OP_POOL_ARGS_MAX) {
        op->next = st->pool;
        st->pool = op;
        st->npool++;
        return;
    }
    sbuf_free(&op->args);
    free(op);
}

static void enqueue(state *st, state_op *op) {
    op->sent = 0;
    op->next = NULL;
    if (st->queue_tail) st->queue_tail->next = op;
    else st->queue_head = op;
    st->queue_tail = op;
}

static void resend_cb(uv_timer_t *t);

/* A send that failed while connected (out of memory) puts its command
 * back first in line, and the line is tried again in a moment: left in
 * line, it held every later command behind it until a reconnect that may
 * never come; tried again at once, it spun. */
static void send_failed(state *st, state_op *op) {
    op->sent = 0;
    op->next = st->queue_head;
    st->queue_head = op;
    if (!st->queue_tail) st->queue_tail = op;
    if (!st->closing) uv_timer_start(&st->resend, resend_cb, 100, 0);
}

static void flush_queue(state *st) {
    while (st->connected && st->queue_head) {
        state_op *op = st->queue_head;
        st->queue_head = op->next;
        if (!st->queue_head) st->queue_tail = NULL;
        if (op_send(st, op)) {
            send_failed(st, op);
            return;
        }
    }
}

static void resend_cb(uv_timer_t *t) { flush_queue(t->data); }

int state_parse_head(const char *line, size_t len, state_reply *rep, char *buf, size_t buflen) {
    const char *p = line, *end = line + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (!sp) return -1;
    size_t vlen = (size_t)(sp - p);
#define VERDICT_IS(word) (vlen == sizeof(word) - 1 && !memcmp(p, word, vlen))
    rep->verdict = VERDICT_IS("go")           ? STATE_GO
                   : VERDICT_IS("done")       ? STATE_DONE
                   : VERDICT_IS("stale")      ? STATE_STALE
                   : VERDICT_IS("retried")    ? STATE_RETRIED
                   : VERDICT_IS("busy")       ? STATE_BUSY
                   : VERDICT_IS("alive")      ? STATE_ALIVE
                   : VERDICT_IS("superseded") ? STATE_SUPERSEDED
                   : VERDICT_IS("ok")         ? STATE_OK
                                              : STATE_ERROR;
#undef VERDICT_IS
    if (rep->verdict == STATE_ERROR) return -1;
    p = sp + 1;
    if (!(sp = memchr(p, ' ', (size_t)(end - p))) || (size_t)(sp - p) >= buflen) return -1;
    memcpy(buf, p, (size_t)(sp - p));
    buf[sp - p] = '\0';
    rep->status = buf;
    /* The three numbers, each an optional '-' and 1 to 19 digits (what
     * the scripts' %d writes), held to long long's range as strtoll
     * would: read here, where strtoll's generality cost 110 instructions
     * a number, six a job. */
    long long n[3];
    p = sp;
    for (int i = 0; i < 3; i++) {
        if (p >= end || *p != ' ') return -1;
        p++;
        int neg = p < end && *p == '-';
        p += neg;
        const char *digits = p;
        unsigned long long u = 0;
        while (p < end && *p >= '0' && *p <= '9' && p - digits < 19) u = u * 10 + (unsigned)(*p++ - '0');
        if (p == digits || (p < end && *p >= '0' && *p <= '9')) return -1;
        if (u > (unsigned long long)LLONG_MAX) n[i] = neg ? LLONG_MIN : LLONG_MAX;
        else n[i] = neg ? -(long long)u : (long long)u;
    }
    if (p != end) {
        if (*p != ' ') return -1;
        rep->owner = p + 1;
    }
    rep->attempt = (int)n[0];
    rep->published = (int)n[1];
    rep->tokens_used = (long)n[2];
    return 0;
}

/* Reads a script's head line (see SCRIPT_HEAD) into rep. */
static int parse_head(const redisReply *h, state_reply *rep, char *buf, size_t buflen) {
    return h->type == REDIS_REPLY_STRING ? state_parse_head(h->str, h->len, rep, buf, buflen) : -1;
}

int state_refusal_passes(const char *e) {
    static const char *const codes[] = {"OOM", "READONLY", "LOADING", "BUSY", "MISCONF", "MASTERDOWN",
                                        "TRYAGAIN", "NOREPLICAS", "CLUSTERDOWN", NULL};
    /* Before Redis 7, a command a script called and Redis refused comes
     * back inside the script's error: "ERR Error running script (call to
     * f_SHA): @user_script:3: -OOM command not allowed ...". */
    static const char wrapped[] = "ERR Error running script";
    const char *code = e;
    if (!strncmp(e, wrapped, sizeof(wrapped) - 1)) {
        code = strstr(e, ": -");
        if (!code) return 0;
        code += 3;
    }
    for (int i = 0; codes[i]; i++) {
        size_t n = strlen(codes[i]);
        if (!strncmp(code, codes[i], n) && (code[n] == ' ' || code[n] == '\0')) return 1;
    }
    return 0;
}

/* 1 when op, a batch of marks, is kept to be sent again (remark_later). */
static int complete(state_op *op, const redisReply *r) {
    state *st = op->st;
    int again = 0;
    state_reply rep = {0};
    rep.status = "";
    cJSON *history = NULL, **recs = NULL;
    size_t nrecs = 0;
    char err[256], status[32];
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, sizeof(err), "redis: %s", r->str);
        rep.verdict = STATE_ERROR;
        rep.error = err;
    } else if (parse_head(r->type == REDIS_REPLY_ARRAY && r->elements ? r->element[0] : r, &rep, status,
                          sizeof(status))) {
        rep.verdict = STATE_ERROR;
        rep.error = "redis: unexpected script reply";
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 1) {
        /* Read with jsonin, so that an outcome produced again from its
         * record carries the numbers of the answer as they were written
         * (jsonin.h); the array holds references to the records. */
        history = cJSON_CreateArray();
        recs = calloc(r->elements, sizeof(*recs));
        for (size_t i = 1; history && recs && i < r->elements; i++) {
            if (r->element[i]->type != REDIS_REPLY_STRING) continue;
            cJSON *rec = jsonin_parse_all(r->element[i]->str, r->element[i]->len, NULL);
            if (!rec) continue;
            recs[nrecs++] = rec;
            cJSON_AddItemReferenceToArray(history, rec);
        }
        rep.history = history;
    }
    if (st->back_due && rep.verdict != STATE_ERROR) {
        st->back_due = 0;
        st->back_ms = util_mono_ms();
    } else if (rep.verdict == STATE_ERROR && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "LOADING", 7)) {
        /* loading its data back, at this process's first connect too:
         * back at its first answer */
        st->back_due = 1;
    }
    if (op->script == SCRIPT_PUBLISHED && rep.verdict != STATE_ERROR && op->refusals) {
        char id[256];
        snprintf(id, sizeof(id), "%.*s", (int)op->id_len, op->args.data + op->id_off);
        log_info(id, 0, "recorded %zu delivered outcome(s) Redis had refused %d time(s)", op->nmarks, op->refusals);
    }
    if (op->cb) {
        op->cb(op->ud, &rep);
    } else if (rep.verdict == STATE_ERROR) {
        /* No one waits for the delivery marks: their error is logged here,
         * with the job id from the first key. */
        char id[256];
        snprintf(id, sizeof(id), "%.*s", (int)op->id_len, op->args.data + op->id_off);
        again = op->script == SCRIPT_PUBLISHED && !st->closing && r->type == REDIS_REPLY_ERROR &&
                state_refusal_passes(r->str);
        /* Once per batch while it goes again (a Redis refusing writes for
         * minutes refuses it every second), and when it is dropped. */
        if (!op->refusals++ || !again) {
            const char *then = again ? "; again each second until Redis takes it"
                               : op->refusals > 1 ? "; dropped" : "";
            if (op->nmarks > 1)
                log_warn(id, 0, "recording %zu delivered outcomes (this job's and %zu more) failed: %s%s",
                         op->nmarks, op->nmarks - 1, rep.error, then);
            else
                log_warn(id, 0, "recording a delivered outcome failed: %s%s", rep.error, then);
        }
    }
    cJSON_Delete(history);
    for (size_t i = 0; i < nrecs; i++) jsonin_free(recs[i]);
    free(recs);
    return again;
}

static void remark_cb(uv_timer_t *t) {
    state *st = t->data;
    while (st->remark) {
        state_op *op = st->remark;
        st->remark = op->next;
        st->pending++;
        if (!st->connected || st->queue_head) enqueue(st, op);
        else if (op_send(st, op)) send_failed(st, op);
    }
}

/* A batch of marks Redis refused goes again in a second, and again until
 * Redis takes it (the script skips what is marked already).  Not counted
 * pending meanwhile: a drain does not wait for a Redis refusing writes. */
static void remark_later(state *st, state_op *op) {
    op->next = st->remark;
    st->remark = op;
    if (!uv_is_active((uv_handle_t *)&st->remark_timer)) uv_timer_start(&st->remark_timer, remark_cb, 1000, 0);
}

static void reply_cb(redisAsyncContext *ac, void *reply, void *privdata) {
    state_op *op = privdata;
    state *st = op->st;
    redisReply *r = reply;
    if (op->sent) {
        op->sent = 0;
        st->on_wire--;
        st->wire_since_ms = uv_now(st->loop);
    }
    if (!r) {
        /* The connection went away with the command on it.  Every script is
         * idempotent (the rate limiter's but for a double count, see
         * state.h), so it is sent again once connected. */
        if (st->closing) {
            st->pending--;
            op_free(op);
        } else {
            enqueue(st, op);
        }
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8)) {
        st->sha[op->script][0] = '\0';
        if (op_send(st, op)) send_failed(st, op); /* EVAL this time; it loads the script as well */
        return;
    }
    st->pending--;
    if (complete(op, r)) remark_later(st, op);
    else op_free(op);
}

int state_format_command(sbuf *b, int argc, const char *const *argv, const size_t *lens) {
    size_t need = 16;
    for (int i = 0; i < argc; i++) need += lens[i] + 24;
    b->len = 0;
    if (sbuf_reserve(b, need)) return -1;
    char *o = b->data;
    *o++ = '*';
    o += util_ltoa(argc, o);
    *o++ = '\r';
    *o++ = '\n';
    for (int i = 0; i < argc; i++) {
        *o++ = '$';
        o += util_ltoa((long long)lens[i], o);
        *o++ = '\r';
        *o++ = '\n';
        memcpy(o, argv[i], lens[i]);
        o += lens[i];
        *o++ = '\r';
        *o++ = '\n';
    }
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return 0;
}

/* Hands op to hiredis; -1 (not connected, out of memory): the caller
 * keeps it. */
static int op_send(state *st, state_op *op) {
    const char *argv[OP_ARGS_MAX + 3];
    size_t lens[OP_ARGS_MAX + 3];
    char nkeys[24];
    util_ltoa(op->nkeys, nkeys);
    int n = 0;
    if (st->sha[op->script][0]) {
        argv[n] = "EVALSHA"; lens[n++] = 7;
        argv[n] = st->sha[op->script]; lens[n++] = 40;
    } else {
        argv[n] = "EVAL"; lens[n++] = 4;
        argv[n] = scripts[op->script]; lens[n++] = strlen(scripts[op->script]);
    }
    argv[n] = nkeys; lens[n++] = strlen(nkeys);
    for (int i = 0; i < op->nkeys + op->argc; i++) {
        argv[n] = op->args.data + op->offs[i];
        lens[n++] = op->lens[i];
    }
    /* Formatted here into one reused buffer: hiredis's own formatting
     * allocates the command and parses a format string for every
     * argument. */
    if (!st->connected || state_format_command(&st->wire, n, argv, lens) ||
        redisAsyncFormattedCommand(st->ac, reply_cb, op, st->wire.data, st->wire.len) != REDIS_OK)
        return -1;
    /* Sent whole, the script's SHA is loaded again: the load at connect
     * may have failed (a restarted Redis answers LOADING while it reads
     * its files, and a worker is back within a second), or Redis lost its
     * scripts (NOSCRIPT: SCRIPT FLUSH, a failover).  Else every call
     * carried its script's text (1.3-3.2 KB), for the connection's life. */
    if (!st->sha[op->script][0] && !st->loading[op->script] &&
        redisAsyncCommand(st->ac, script_load_cb, (void *)(intptr_t)op->script, "SCRIPT LOAD %s",
                          scripts[op->script]) == REDIS_OK)
        st->loading[op->script] = 1;
    op->sent = 1;
    if (st->on_wire++ == 0) st->wire_since_ms = uv_now(st->loop);
    return 0;
}

static void script_load_cb(redisAsyncContext *ac, void *reply, void *privdata) {
    state *st = ac->data;
    redisReply *r = reply;
    int idx = (int)(intptr_t)privdata;
    if (!st) return;
    st->loading[idx] = 0;
    /* On an error (LOADING) the script goes whole, and the next call
     * loads it again (op_send). */
    if (r && r->type == REDIS_REPLY_STRING && r->len == 40) memcpy(st->sha[idx], r->str, 41);
}

static void ignore_cb(redisAsyncContext *ac, void *reply, void *privdata) {
    redisReply *r = reply;
    if (r && r->type == REDIS_REPLY_ERROR) log_error(NULL, 0, "redis setup: %s", r->str);
}

/* One field of INFO's text ("name:value" lines), into buf; 0 = found. */
static int info_field(const char *info, size_t len, const char *name, char *buf, size_t buflen) {
    size_t nl = strlen(name);
    const char *p = info, *end = info + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        size_t ll = (size_t)(eol - p);
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll > nl && !memcmp(p, name, nl) && p[nl] == ':') {
            size_t vl = ll - nl - 1;
            if (vl >= buflen) vl = buflen - 1;
            memcpy(buf, p + nl + 1, vl);
            buf[vl] = '\0';
            return 0;
        }
        p = eol + 1;
    }
    return -1;
}

int state_parse_eviction(const char *info, size_t len, char *policy, size_t policylen) {
    char max[32];
    if (info_field(info, len, "maxmemory", max, sizeof(max)) ||
        info_field(info, len, "maxmemory_policy", policy, policylen))
        return -1;
    /* no maxmemory: nothing is evicted, whatever the policy */
    return strcmp(max, "0") && strcmp(policy, "noeviction");
}

/* INFO's reply (the default sections), at each connect.
 *
 * Eviction: a Redis that evicts keys at its maxmemory drops job state
 * (every key of ours has a TTL, so the volatile-* policies take them
 * too).  An evicted hash runs a finished job again; an evicted record
 * list leaves a job decided with an event that cannot be made again.
 * Said once per setting: a reconnect does not repeat it.
 *
 * Its start: a Redis restarted a moment before this process's first
 * connect may have lost the leases (see state_back_ms) as surely as one
 * restarted while connected; one still loading its data is back at its
 * first answer after (its uptime counts the load). */
static void info_cb(redisAsyncContext *ac, void *reply, void *privdata) {
    state *st = ac->data;
    redisReply *r = reply;
    char policy[sizeof(st->evicts)], field[32];
    (void)privdata;
    if (!st || !r || r->type != REDIS_REPLY_STRING) return;
    int evicts = state_parse_eviction(r->str, r->len, policy, sizeof(policy));
    if (evicts == 1 && strcmp(policy, st->evicts)) {
        log_warn(NULL, 0, "redis %s:%d evicts keys at its maxmemory (maxmemory-policy %s): a job whose state is "
                 "evicted may be paid for again or end with no outcome event; set maxmemory-policy noeviction "
                 "(a full Redis then refuses writes, and jobs wait)", st->host, st->port, policy);
        util_concat(st->evicts, sizeof(st->evicts), policy, (char *)NULL);
    } else if (evicts == 0) {
        st->evicts[0] = '\0';
    }
    if (!info_field(r->str, r->len, "uptime_in_seconds", field, sizeof(field))) {
        /* whole seconds: it started at the latest that many ago */
        uint64_t up_ms = strtoull(field, NULL, 10) * 1000, now = util_mono_ms();
        st->started_ms = up_ms < now ? now - up_ms : 0;
    }
    if (!info_field(r->str, r->len, "loading", field, sizeof(field)) && !strcmp(field, "1")) st->back_due = 1;
}

static void reconnect_cb(uv_timer_t *t) { connect_now(t->data); }

/* Doubling from 100 ms up to 1 s: every job waits while Redis is away, so
 * a worker should see it back within a second (a 5 s cap kept a worker
 * off a restarted Redis for up to 5 s more, its jobs waiting); a Redis
 * still down costs a refused connect a second. */
#define STATE_RECONNECT_MAX_MS 1000

static void schedule_reconnect(state *st) {
    if (st->closing) return;
    st->backoff_ms = st->backoff_ms ? st->backoff_ms * 2 : 100;
    if (st->backoff_ms > STATE_RECONNECT_MAX_MS) st->backoff_ms = STATE_RECONNECT_MAX_MS;
    uv_timer_start(&st->reconnect, reconnect_cb, st->backoff_ms, 0);
}

static void on_connect(const redisAsyncContext *cac, int status) {
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    state *st = ac->data;
    if (!st) return;
    if (status != REDIS_OK) {
        log_warn(NULL, 0, "redis %s:%d: connect failed: %s; retrying", st->host, st->port,
                 ac->errstr);
        st->ac = NULL;
        schedule_reconnect(st);
        return;
    }
    st->connected = 1;
    st->backoff_ms = 0;
    st->back_due = st->ever_connected;
    st->ever_connected = 1;
    uv_timer_stop(&st->connect_watch);
    /* AUTH and SELECT go first on the connection, before any script. */
    if (st->password && st->password[0])
        redisAsyncCommand(ac, ignore_cb, NULL, "AUTH %s", st->password);
    if (st->db) redisAsyncCommand(ac, ignore_cb, NULL, "SELECT %d", st->db);
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        st->sha[i][0] = '\0';
        st->loading[i] = redisAsyncCommand(ac, script_load_cb, (void *)(intptr_t)i, "SCRIPT LOAD %s",
                                           scripts[i]) == REDIS_OK;
    }
    redisAsyncCommand(ac, info_cb, NULL, "INFO");
    log_info(NULL, 0, "redis %s:%d connected", st->host, st->port);
    flush_queue(st);
    if (st->conn_cb) st->conn_cb(st->conn_ud, 1);
}

static void on_disconnect(const redisAsyncContext *cac, int status) {
    state *st = cac->data;
    if (!st) return;
    st->connected = 0;
    st->ac = NULL;
    if (st->closing) return;
    log_warn(NULL, 0, "redis %s:%d disconnected: %s; reconnecting", st->host, st->port,
             status == REDIS_OK ? "closed" : cac->errstr);
    if (st->conn_cb) st->conn_cb(st->conn_ud, 0);
    schedule_reconnect(st);
}

/* hiredis 0.14's libuv adapter drops a poll error (a refused connect), so
 * the connect callback never comes: a connect not done in time is given up
 * and tried again. */
static void connect_watch_cb(uv_timer_t *t) {
    state *st = t->data;
    if (st->connected || !st->ac) return;
    log_warn(NULL, 0, "redis %s:%d: no connection; retrying", st->host, st->port);
    st->ac->data = NULL;
    redisAsyncFree(st->ac);
    st->ac = NULL;
    schedule_reconnect(st);
}

static void reply_watch_cb(uv_timer_t *t) {
    state *st = t->data;
    if (!st->connected || !st->ac || !st->on_wire) return;
    uint64_t quiet = uv_now(st->loop) - st->wire_since_ms;
    if (quiet < REPLY_TIMEOUT_MS) return;
    log_warn(NULL, 0, "redis %s:%d: no reply for %llu ms with %zu command(s) sent; reconnecting", st->host,
             st->port, (unsigned long long)quiet, st->on_wire);
    redisAsyncContext *ac = st->ac;
    /* Calls back every command with no reply (they queue again) and then
     * on_disconnect, which schedules the reconnect. */
    redisAsyncFree(ac);
    if (st->ac == ac) {
        /* no disconnect callback came: do its work */
        st->ac = NULL;
        st->connected = 0;
        if (st->conn_cb) st->conn_cb(st->conn_ud, 0);
        schedule_reconnect(st);
    }
    st->on_wire = 0;
}

/* hiredis 0.14's libuv adapter calls uv_poll_start for every command it
 * queues and after every write, and libuv (1.44) answers each
 * uv_poll_start with an epoll_ctl(DEL) of the socket, re-adding it on the
 * next poll: strace counted one wasted DEL per Redis command, three per
 * job.  These wrappers start or stop the poll only when what is watched
 * changes.
 *
 * And the adapter's poll callback returns on an error status, which libuv
 * gives (having stopped the handle) when the socket has a pending error: a
 * connection reset, which is what a Redis that exits with a command of
 * ours unread sends, or a refused connect.  Nothing was watched any more,
 * so the loss showed only when the reply watch gave up, 5 s later (while
 * /readyz still said "redis ok": a failed CI run), or, for a refused
 * connect, when the connect watch did, 2 s later.  watch_poll reads on an
 * error instead: hiredis then finds the error and disconnects at once. */
static void watch_poll(uv_poll_t *handle, int status, int events);
static void before_poll_cb(uv_prepare_t *h);

static void watch_set(redisLibuvEvents *p, int events) {
    if (events == p->events) return;
    p->events = events;
    if (events) uv_poll_start(&p->handle, events, watch_poll);
    else uv_poll_stop(&p->handle);
}

static void watch_poll(uv_poll_t *handle, int status, int events) {
    redisLibuvEvents *p = handle->data;
    if (status < 0) {
        int watched = p->events;
        p->events = 0; /* libuv stopped the handle */
        if (p->context) redisAsyncHandleRead(p->context);
        /* still connected (the error went away): watch again */
        if (p->context) watch_set(p, watched);
        return;
    }
    if (p->context && (events & UV_READABLE)) redisAsyncHandleRead(p->context);
    if (p->context && (events & UV_WRITABLE)) redisAsyncHandleWrite(p->context);
}

static void watch_add_read(void *privdata) {
    redisLibuvEvents *p = privdata;
    watch_set(p, p->events | UV_READABLE);
}

static void watch_del_read(void *privdata) {
    redisLibuvEvents *p = privdata;
    watch_set(p, p->events & ~UV_READABLE);
}

/* hiredis asks to watch for room after each command it queues.  The
 * socket nearly always has room, so watching for it cost a loop wakeup
 * that only reported room (an epoll_wait returning EPOLLOUT alone: one in
 * seven in a_instant, strace) and two epoll_ctl per turn.  Once connected,
 * the turn's commands are written by before_poll instead, and the socket
 * is watched for room only when a write leaves output behind.  While
 * connecting, room is how the connect is seen to complete. */
static void watch_add_write(void *privdata) {
    redisLibuvEvents *p = privdata;
    state *st = p->context ? p->context->data : NULL;
    if (st && st->ac == p->context && st->connected && !st->writing) {
        st->write_due = 1;
        uv_prepare_start(&st->before_poll, before_poll_cb);
        return;
    }
    watch_set(p, p->events | UV_WRITABLE);
}

static void watch_del_write(void *privdata) {
    redisLibuvEvents *p = privdata;
    watch_set(p, p->events & ~UV_WRITABLE);
}

/* The adapter's redisLibuvAttach, with these wrappers' events.  Not the
 * adapter's own: it sets its cleanup before making the poll handle, and
 * when that fails (libuv still watching the fd number: EEXIST) the
 * redisAsyncFree that follows calls the cleanup with NULL, a crash.  Here
 * the cleanup is set only once the handle exists.  0 = ok. */
static int watch_attach(redisAsyncContext *ac, uv_loop_t *loop) {
    if (ac->ev.data) return -1;
    redisLibuvEvents *p = calloc(1, sizeof(*p));
    if (!p) return -1;
    if (uv_poll_init_socket(loop, &p->handle, ac->c.fd) != 0) {
        free(p);
        return -1;
    }
    p->handle.data = p;
    p->context = ac;
    ac->ev.data = p;
    ac->ev.addRead = watch_add_read;
    ac->ev.delRead = watch_del_read;
    ac->ev.addWrite = watch_add_write;
    ac->ev.delWrite = watch_del_write;
    ac->ev.cleanup = redisLibuvCleanup; /* stops the handle, frees p once closed */
    return 0;
}

static void connect_now(state *st) {
    if (st->closing || st->ac) return;
    redisAsyncContext *ac = redisAsyncConnect(st->host, st->port);
    if (!ac) {
        schedule_reconnect(st);
        return;
    }
    if (ac->err) {
        log_warn(NULL, 0, "redis %s:%d: %s; retrying", st->host, st->port, ac->errstr);
        redisAsyncFree(ac);
        schedule_reconnect(st);
        return;
    }
    if (watch_attach(ac, st->loop)) {
        log_warn(NULL, 0, "redis %s:%d: cannot watch the socket; retrying", st->host, st->port);
        redisAsyncFree(ac);
        schedule_reconnect(st);
        return;
    }
    ac->data = st;
    st->ac = ac;
    uv_timer_start(&st->connect_watch, connect_watch_cb, 2000, 0);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
}

state *state_new(uv_loop_t *loop, const state_options *opts, state_conn_cb conn_cb, void *ud,
                 char *err, size_t errlen) {
    state *st = calloc(1, sizeof(*st));
    if (!st) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    st->loop = loop;
    st->host = strdup(opts->host);
    st->password = strdup(opts->password ? opts->password : "");
    st->prefix = strdup(opts->prefix);
    st->port = opts->port;
    st->db = opts->db;
    st->ttl_s = opts->ttl_s;
    st->conn_cb = conn_cb;
    st->conn_ud = ud;
    uv_timer_init(loop, &st->reconnect);
    st->reconnect.data = st;
    uv_timer_init(loop, &st->resend);
    st->resend.data = st;
    uv_timer_init(loop, &st->connect_watch);
    st->connect_watch.data = st;
    uv_timer_init(loop, &st->reply_watch);
    st->reply_watch.data = st;
    uv_timer_start(&st->reply_watch, reply_watch_cb, 1000, 1000);
    uv_timer_init(loop, &st->remark_timer);
    st->remark_timer.data = st;
    uv_prepare_init(loop, &st->before_poll);
    st->before_poll.data = st;
    st->handles = 6;
    connect_now(st);
    return st;
}

int state_connected(const state *st) { return st->connected; }
uint64_t state_back_ms(const state *st) { return st->back_ms > st->started_ms ? st->back_ms : st->started_ms; }
/* A batch of marks still to go counts too: a drain that looked only at
 * the commands sent stopped the loop in the turn of the last delivery,
 * before its mark went out. */
size_t state_pending(const state *st) { return st->pending + (st->pub != NULL); }

static void st_close_cb(uv_handle_t *h) {
    state *st = h->data;
    if (--st->handles == 0) free(st);
}

void state_free(state *st) {
    if (!st) return;
    st->closing = 1;
    if (st->ac) {
        st->ac->data = NULL;
        redisAsyncFree(st->ac); /* replies of ops on the wire come back NULL: freed there */
        st->ac = NULL;
    }
    while (st->queue_head) {
        state_op *op = st->queue_head;
        st->queue_head = op->next;
        op_free(op);
    }
    size_t unmarked = 0; /* those waiting to go again (a lower bound: some may be in line) */
    while (st->remark) {
        state_op *op = st->remark;
        st->remark = op->next;
        unmarked += op->nmarks;
        op_free(op);
    }
    if (unmarked)
        log_warn(NULL, 0, "%zu delivered outcome(s) left unmarked in Redis, which refused them (a redelivery of "
                 "their messages produces them again, with the same event ids)", unmarked);
    uv_timer_stop(&st->remark_timer);
    uv_close((uv_handle_t *)&st->remark_timer, st_close_cb);
    op_free(st->pub);
    st->pub = NULL;
    while (st->pool) {
        state_op *op = st->pool;
        st->pool = op->next;
        sbuf_free(&op->args);
        free(op);
    }
    st->npool = 0;
    uv_prepare_stop(&st->before_poll);
    uv_close((uv_handle_t *)&st->before_poll, st_close_cb);
    free(st->host);
    free(st->password);
    free(st->prefix);
    sbuf_free(&st->wire);
    uv_timer_stop(&st->reconnect);
    uv_timer_stop(&st->resend);
    uv_timer_stop(&st->connect_watch);
    uv_close((uv_handle_t *)&st->reconnect, st_close_cb);
    uv_close((uv_handle_t *)&st->resend, st_close_cb);
    uv_close((uv_handle_t *)&st->connect_watch, st_close_cb);
    uv_timer_stop(&st->reply_watch);
    uv_close((uv_handle_t *)&st->reply_watch, st_close_cb);
}

static int op_add(state_op *op, const char *s, size_t len) {
    int i = op->nkeys + op->argc;
    if (i >= op->cap) {
        /* only a batch of marks outgrows the inline slots */
        if (op->cap >= OP_ARGS_MAX) return -1;
        size_t *o = malloc(OP_ARGS_MAX * sizeof(*o)), *l = malloc(OP_ARGS_MAX * sizeof(*l));
        if (!o || !l) {
            free(o);
            free(l);
            return -1;
        }
        memcpy(o, op->offs, (size_t)i * sizeof(*o));
        memcpy(l, op->lens, (size_t)i * sizeof(*l));
        op->offs = o;
        op->lens = l;
        op->cap = OP_ARGS_MAX;
    }
    op->offs[i] = op->args.len;
    op->lens[i] = len;
    if (sbuf_append(&op->args, s, len)) return -1;
    op->argc++;
    return 0;
}

/* A key: PREFIX:kind:{id}suffix (no printf: two or three a command). */
static int op_add_key(state_op *op, const char *kind, const char *id, const char *suffix) {
    char buf[1024];
    size_t n = util_concat(buf, sizeof(buf), op->st->prefix, ":", kind, ":{", id, "}", suffix, (char *)NULL);
    return n >= sizeof(buf) ? -1 : op_add(op, buf, n);
}

/* A decimal argument without printf. */
static int op_addl(state_op *op, long long v) {
    char buf[24];
    return op_add(op, buf, util_ltoa(v, buf));
}

static state_op *op_alloc(state *st, int script) {
    state_op *op = st->pool;
    if (op) {
        st->pool = op->next;
        st->npool--;
        sbuf args = op->args;
        memset(op, 0, sizeof(*op));
        op->args = args;
        op->args.len = 0;
    } else if (!(op = calloc(1, sizeof(*op)))) {
        return NULL;
    }
    op->st = st;
    op->script = script;
    op->offs = op->offs_inl;
    op->lens = op->lens_inl;
    op->cap = OP_MAX_ARGS;
    return op;
}

static state_op *op_new(state *st, int script, const char *job_id, state_cb cb, void *ud) {
    state_op *op = op_alloc(st, script);
    if (!op) return NULL;
    op->cb = cb;
    op->ud = ud;
    op->id_off = strlen(st->prefix) + strlen(":job:{");
    op->id_len = strlen(job_id);
    if (op_add_key(op, "job", job_id, "") ||
        op_add_key(op, "job", job_id, ":history")) {
        op_free(op);
        return NULL;
    }
    op->nkeys = 2;
    op->argc = 0;
    return op;
}

static void pub_flush(state *st);

/* 1 when the batch of marks holds the job of op's first key. */
static int pub_holds(const state *st, const state_op *op) {
    const state_op *b = st->pub;
    for (int i = 0; b && op->nkeys && i < b->nkeys; i++)
        if (b->lens[i] == op->lens[0] && !memcmp(b->args.data + b->offs[i], op->args.data + op->offs[0], op->lens[0]))
            return 1;
    return 0;
}

static int op_submit(state *st, state_op *op, int failed) {
    if (failed) {
        op_free(op);
        return -1;
    }
    /* Commands go out in the order they are made: a mark still waiting for
     * the end of the loop turn goes before another command on its job (a
     * redelivered message must find its outcome marked). */
    if (op->script != SCRIPT_PUBLISHED && pub_holds(st, op)) pub_flush(st);
    st->pending++;
    if (!st->connected || st->queue_head) enqueue(st, op);
    else if (op_send(st, op)) send_failed(st, op);
    return 0;
}

int state_begin(state *st, const char *job_id, int run, int attempt, int max_attempts, const char *owner,
                const char *batch_id, const char *takeover, const char *takeover_holder, state_cb cb,
                void *ud) {
    state_op *op = op_new(st, SCRIPT_BEGIN, job_id, cb, ud);
    if (!op) return -1;
    if (takeover && takeover_holder) {
        if (op_add_key(op, "worker", takeover_holder, "")) {
            op_free(op);
            return -1;
        }
        op->nkeys = 3;
        op->argc = 0;
    }
    int failed = op_addl(op, attempt) || op_addl(op, max_attempts) ||
                 op_addl(op, util_wall_ms()) || op_add(op, owner, strlen(owner)) ||
                 op_addl(op, st->ttl_s) ||
                 op_add(op, batch_id ? batch_id : "", batch_id ? strlen(batch_id) : 0) ||
                 op_addl(op, run) || op_add(op, takeover ? takeover : "", takeover ? strlen(takeover) : 0);
    return op_submit(st, op, failed);
}

int state_finish(state *st, const char *job_id, const char *batch_id, const char *owner, int attempt,
                 const char *status, const char *record, size_t record_len, long prompt_tokens,
                 long completion_tokens, const char *next_owner, state_cb cb, void *ud) {
    state_op *op = op_new(st, SCRIPT_FINISH, job_id, cb, ud);
    if (!op) return -1;
    if (sbuf_reserve(&op->args, record_len + 512)) {
        op_free(op);
        return -1;
    }
    if (batch_id && batch_id[0]) {
        if (op_add_key(op, "batch", batch_id, "") || op_add_key(op, "batch", batch_id, ":jobs") ||
            op_add_key(op, "batch", batch_id, ":input")) {
            op_free(op);
            return -1;
        }
        op->nkeys = 5;
        op->argc = 0;
    }
    int failed = op_add(op, owner, strlen(owner)) || op_addl(op, attempt) ||
                 op_add(op, status, strlen(status)) || op_add(op, record, record_len) ||
                 op_addl(op, util_wall_ms()) || op_addl(op, st->ttl_s) ||
                 op_addl(op, prompt_tokens) || op_addl(op, completion_tokens) ||
                 op_add(op, next_owner ? next_owner : "", next_owner ? strlen(next_owner) : 0);
    return op_submit(st, op, failed);
}

/* Sends the batch of marks: keys, then the attempts in the same order. */
static void pub_flush(state *st) {
    state_op *op = st->pub;
    if (!op) return;
    st->pub = NULL;
    if (!op->nmarks) {
        op_free(op);
        return;
    }
    int failed = 0;
    for (size_t i = 0; i < op->nmarks && !failed; i++)
        failed = op_addl(op, st->pub_att[i]) || op_addl(op, st->pub_run[i]);
    if (failed) {
        char id[256];
        snprintf(id, sizeof(id), "%.*s", (int)op->id_len, op->args.data + op->id_off);
        log_warn(id, 0, "out of memory recording %zu delivered outcomes (this job's and %zu more)",
                 op->nmarks, op->nmarks - 1);
    }
    op_submit(st, op, failed);
}

/* Runs once per loop turn, before the loop waits: every mark of the turn
 * goes out in one command, then every command of the turn in one write.
 * A command queued later in the turn (by a prepare callback that runs
 * after this one) would wait for the loop's next wakeup: none does. */
static void before_poll_cb(uv_prepare_t *h) {
    state *st = h->data;
    if (st->pub) pub_flush(st);
    if (st->write_due) {
        st->write_due = 0;
        if (st->ac && st->connected) {
            st->writing = 1;
            redisAsyncHandleWrite(st->ac); /* what does not fit is watched for room */
            st->writing = 0;
        }
    }
    if (!st->pub && !st->write_due) uv_prepare_stop(h);
}

int state_published(state *st, const char *job_id, int run, int attempt) {
    state_op *op = st->pub;
    if (!op) {
        if (!(op = op_alloc(st, SCRIPT_PUBLISHED))) return -1;
        op->id_off = strlen(st->prefix) + strlen(":job:{");
        op->id_len = strlen(job_id);
        st->pub = op;
        uv_prepare_start(&st->before_poll, before_poll_cb);
    }
    /* op_add counts an argument; these are keys (the attempts follow) */
    if (op_add_key(op, "job", job_id, "")) return -1;
    op->argc--;
    op->nkeys++;
    st->pub_run[op->nmarks] = run;
    st->pub_att[op->nmarks++] = attempt;
    if (op->nmarks == PUB_BATCH_MAX) pub_flush(st);
    return 0;
}

/* An op of a script whose one key is PREFIX:kind:{id}. */
static state_op *op_new_one_key(state *st, int script, const char *kind, const char *id, state_cb cb, void *ud) {
    state_op *op = op_alloc(st, script);
    if (!op) return NULL;
    op->cb = cb;
    op->ud = ud;
    if (op_add_key(op, kind, id, "")) {
        op_free(op);
        return NULL;
    }
    op->nkeys = 1;
    op->argc = 0;
    return op;
}

int state_lease(state *st, const char *holder, long ttl_ms, state_cb cb, void *ud) {
    state_op *op = op_new_one_key(st, SCRIPT_LEASE, "worker", holder, cb, ud);
    return op ? op_submit(st, op, op_addl(op, ttl_ms)) : -1;
}

int state_rate(state *st, const char *endpoint, long rpm, long tpm, long cost, state_rate_mode mode,
               state_cb cb, void *ud) {
    state_op *op = op_new_one_key(st, SCRIPT_RATE, "rate", endpoint, cb, ud);
    if (!op) return -1;
    int failed = op_addl(op, rpm) || op_addl(op, tpm) || op_addl(op, cost) ||
                 op_addl(op, mode == STATE_RATE_TAKE ? 1 : mode == STATE_RATE_ADJUST ? -1 : -2);
    return op_submit(st, op, failed);
}
