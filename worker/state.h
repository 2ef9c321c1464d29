/* state.h - per-job retry state in Redis, updated atomically by Lua scripts
 * over hiredis's async API on the process's libuv loop.
 *
 * Keys (hash-tagged by job id so a cluster keeps them on one slot):
 *   PREFIX:job:{ID}          hash: attempt, status (running|retrying|final|
 *                            escalated), owner, max_attempts, created,
 *                            updated, recorded, published, batch_id,
 *                            prompt_tokens, completion_tokens (retort
 *                            submit makes it with batch_id alone: the id's
 *                            claim while the job waits in the topic)
 *   PREFIX:job:{ID}:history  list: one JSON record per attempt
 *   PREFIX:batch:{BATCH}     hash: per batch, counts of attempts by outcome
 *                            (final, escalated, retrying), attempts, tokens;
 *                            its :jobs and :input (retort submit) get their
 *                            TTL anew with it
 * All expire after the configured TTL.  The batch counters are updated in
 * the same script as the job's record, so they are exact (on a Redis
 * Cluster the batch key would need the job's slot: single Redis only; so
 * would the delivery marks, which one script writes for several jobs).
 *
 * Every operation but state_rate is idempotent, so an operation whose
 * connection broke is sent again after reconnecting: callers see it
 * complete exactly once.  A rate-limit ask or settle sent again counts
 * twice if the first one was applied: at most the calls of one dropped
 * connection, taken from (or given to) buckets that refill within a
 * minute; making it exact would cost a key per call. */
#ifndef RETORT_STATE_H
#define RETORT_STATE_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "util.h"

typedef struct state state;

typedef struct state_options {
    const char *host;        /* borrowed, copied */
    int port;
    const char *password;    /* borrowed, copied; never logged */
    int db;
    const char *prefix;      /* borrowed, copied */
    long ttl_s;
} state_options;

typedef enum state_verdict {
    STATE_GO = 0,      /* begin: this attempt is ours, call the LLM */
    STATE_DONE,        /* begin: the job is final or escalated already */
    STATE_STALE,       /* begin: a later attempt exists */
    STATE_RETRIED,     /* begin: this attempt already produced its retry; also
                        * when the next attempt is claimed but `published` is
                        * below this one (its retry job may never have left:
                        * retry.local starts the next attempt at once).  history:
                        * this attempt's record, if kept; owner: the later
                        * attempt's, when one runs */
    STATE_BUSY,        /* begin: the attempt is running on another worker (owner) */
    STATE_ALIVE,       /* begin: the owner named to take over from holds its
                        * lease again (takeover_holder); nothing was written */
    STATE_SUPERSEDED,  /* finish: another worker took the attempt over */
    STATE_OK,          /* finish / published: written */
    STATE_ERROR        /* the script failed (bug or Redis refused): see error */
} state_verdict;

typedef struct state_reply {
    state_verdict verdict;
    const char *status;     /* the job's status after the call ("" if none) */
    int attempt;            /* the job's current attempt */
    int published;          /* highest attempt whose outcome event was delivered */
    long tokens_used;       /* begin: tokens recorded over earlier attempts */
    const cJSON *history;   /* array of attempt records, when the verdict needs it, else NULL */
    const char *owner;      /* begin: the attempt's owner (STATE_BUSY, STATE_DONE,
                             * STATE_RETRIED), or NULL */
    const char *error;      /* STATE_ERROR: why */
} state_reply;

/* reply: valid until the callback returns. */
typedef void (*state_cb)(void *ud, const state_reply *reply);
/* Connection changes: connected 1 / 0. */
typedef void (*state_conn_cb)(void *ud, int connected);

state *state_new(uv_loop_t *loop, const state_options *opts, state_conn_cb conn_cb, void *ud,
                 char *err, size_t errlen);
/* Disconnects; pending callbacks are not called.  Accepts NULL. */
void state_free(state *st);
int state_connected(const state *st);
/* Commands sent and not yet answered, plus one for a batch of marks
 * still to go (state_published). */
size_t state_pending(const state *st);
/* When Redis came back (util_mono_ms), the latest of: after the
 * connection was lost, its first answer that was not an error after the
 * reconnect (not the connect: a restarted Redis answers LOADING while it
 * reads its data back); its first answer after it loaded (it answered
 * LOADING, or INFO said it was loading); when the Redis connected to
 * started, by its uptime.  0 when none is known (the first connect, to a
 * Redis up since before this machine's boot); after a later loss, the
 * time before until Redis answers again. */
uint64_t state_back_ms(const state *st);

/* Every string argument is borrowed and copied.  0 = queued.  run: the
 * job's run (1, or what `retort resubmit` set): a message of an earlier
 * run than the state's is STATE_STALE.  An attempt running under another
 * owner is STATE_BUSY, unless takeover (NULL: none) names that owner: the
 * caller found it gone and takes the attempt over.  takeover_holder (NULL:
 * none), with takeover: the process whose lease the caller found gone;
 * if the attempt's owner is still takeover and that lease is held again,
 * the answer is STATE_ALIVE and nothing is taken over. */
int state_begin(state *st, const char *job_id, int run, int attempt, int max_attempts, const char *owner,
                const char *batch_id, const char *takeover, const char *takeover_holder, state_cb cb,
                void *ud);
/* status: "retrying", "final" or "escalated".  record: JSON text of the
 * attempt's record, record_len bytes.  Unless status is "retrying", the reply's history
 * holds the records of the attempts before this one (NULL for attempt 1):
 * the caller appends the record it has, so the common case of a job done
 * in one attempt reads nothing back.  next_owner (NULL: none), with
 * "retrying": the next attempt is claimed for it in the same write
 * (retry.local), and the reply says so: status "running", attempt + 1, and
 * tokens_used as begin's STATE_GO has it.  Sent again after a lost reply
 * (same arguments), it answers the same. */
int state_finish(state *st, const char *job_id, const char *batch_id, const char *owner, int attempt,
                 const char *status, const char *record, size_t record_len, long prompt_tokens,
                 long completion_tokens, const char *next_owner, state_cb cb, void *ud);
/* A worker process's lease (key PREFIX:worker:{holder}): ttl_ms > 0 holds
 * it for that long, 0 reads it (reply->attempt: 1 held, 0 not), < 0 lets
 * it go.  cb may be NULL. */
int state_lease(state *st, const char *holder, long ttl_ms, state_cb cb, void *ud);
/* What state_rate does with the buckets. */
typedef enum {
    STATE_RATE_TAKE,   /* one request and cost tokens, or how long to wait */
    STATE_RATE_ADJUST, /* only add cost (may be negative) to the token bucket,
                        * to settle an estimate against real usage */
    STATE_RATE_UNUSED  /* a request taken and never made: its request back,
                        * and cost (negative: the estimate) to the tokens */
} state_rate_mode;

/* Shared rate limit of an endpoint (e.g. "base_url|model"), rpm/tpm per
 * minute (0: no limit), as mode says.  STATE_RATE_TAKE: reply->attempt
 * holds the wait in ms (0: granted). */
int state_rate(state *st, const char *endpoint, long rpm, long tpm, long cost, state_rate_mode mode,
               state_cb cb, void *ud);

/* Notes that the outcome event of attempt (of the job's run) was
 * delivered; a job reset to a later run meanwhile is left as it is.  No one waits for
 * it: an error is logged here.  The marks of a loop turn go out together
 * (one command per turn, or per 64 marks; state_pending() counts the
 * batch still to go as one); a mark still waiting goes out before any
 * other command on its job.  A batch Redis refuses for a while (OOM,
 * READONLY, LOADING...) goes again each second until it takes it; while
 * it waits it is not pending, nor ordered with later commands (the mark
 * only ever raises `published`).  A mark still queued or waiting when
 * the state is freed is dropped (a missing mark only makes a redelivered
 * message produce its outcome again, with the same event id). */
int state_published(state *st, const char *job_id, int run, int attempt);

/* Reads a script's head line, "VERDICT STATUS ATTEMPT PUBLISHED TOKENS
 * [OWNER]", line[0..len) (NUL-terminated at len, as hiredis leaves a
 * reply: rep->owner points into it), into rep; STATUS is copied into buf.
 * 0 = ok, -1 on a line of another shape.  Exposed for the unit tests. */
int state_parse_head(const char *line, size_t len, state_reply *rep, char *buf, size_t buflen);
/* 1 when e, an error reply's text, is a refusal that passes (the server
 * short of memory, a replica or a loading server, a script running long,
 * a failed disk), also as Redis before 7 wraps it in a script's error: a
 * batch of marks goes again.  Another error (a key of another type, a
 * script's own error) would come back every time. */
int state_refusal_passes(const char *e);

/* Whether a Redis whose INFO memory reads info[0..len) evicts keys: a
 * maxmemory set, with any policy but noeviction.  The policy is copied
 * into policy (cut to policylen).  1 = it evicts, 0 = it does not, -1 =
 * the fields are missing.  Exposed for the unit tests. */
int state_parse_eviction(const char *info, size_t len, char *policy, size_t policylen);

/* The command argv[0..argc) (lengths in lens) in Redis's wire format
 * (RESP: an array of bulk strings, what redisFormatCommandArgv writes)
 * into b, replacing what it held.  0 = ok, -1 on out of memory.  Exposed
 * for the unit tests. */
int state_format_command(sbuf *b, int argc, const char *const *argv, const size_t *lens);

#endif
