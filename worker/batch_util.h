/* batch_util.h - what the batch commands (retort submit, watch, results,
 * resubmit, report) share: their argument parsing, a synchronous Redis
 * connection with pipelined commands, the batch's key names.
 *
 * Redis keys of a batch (PREFIX from redis.key_prefix):
 *   PREFIX:batch:{B}         hash: counters kept by the workers (final,
 *                            escalated, retrying, attempts, prompt_tokens,
 *                            completion_tokens, updated) plus, from submit:
 *                            total, created, submitted_by, input, and
 *                            not_sent (the jobs of the input a failed
 *                            produce cut from the batch: not in total,
 *                            the list or the inputs); from
 *                            resubmit: resubmitted, replaced_attempts,
 *                            replaced_attempts.MODEL, replaced_prompt_tokens.MODEL,
 *                            replaced_completion_tokens.MODEL
 *   PREFIX:batch:{B}:jobs    list: the job ids in input order
 *   PREFIX:batch:{B}:input   hash: job id -> the job JSON as produced
 *   PREFIX:job:{J}           the job's state hash: submit claims J for B
 *                            by writing batch_id there (HMGET ... batch_id
 *                            tells a reused id's state from this batch's)
 * All expire after redis.ttl_s, set as submit creates each one (in the
 * same script: a submit that dies leaves none for ever), counted anew
 * (all three) by resubmit,
 * by submit's cut of a batch, and by a worker's record of an attempt of
 * the batch when the batch's hash has drifted a second from that TTL
 * (not on every attempt: at most once a second per batch while the
 * workers agree on redis.ttl_s). */
#ifndef RETORT_BATCH_UTIL_H
#define RETORT_BATCH_UTIL_H

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stddef.h>

#include "config.h"

/* Exit codes of every batch command. */
#define BATCH_EXIT_OK 0
#define BATCH_EXIT_NO 1     /* the answer is negative: unknown batch, jobs not finished */
#define BATCH_EXIT_USAGE 2  /* usage, input, configuration or connection error */

/* Room for a job's Redis key: the prefix, and a job id of 200 characters
 * (up to 800 bytes) in its hash tag, with a suffix. */
#define BATCH_KEY_MAX 1280

/* One option of a command.  name: "--interval"; alias: "-o" or NULL. */
typedef struct batch_opt {
    const char *name;
    const char *alias;
    int takes_value;
    const char *value;  /* out: the value (borrowed from argv), or NULL */
    int set;            /* out: given at least once */
} batch_opt;

/* Parses argv[1..argc) of command cmd: its own options (opts, "--name=value"
 * accepted too), the configuration flags of every command (-c/--config,
 * -s/--set, -b/--brokers, --log-level, --log-format, loaded with
 * cli_config_load) and up to maxpos positional arguments (pos: borrowed
 * from argv).  Returns 0 with *cfg (taken) set, or BATCH_EXIT_USAGE after
 * printing why.  usage is printed on stderr with a usage error. */
int batch_util_args(const char *cmd, const char *usage, int argc, char **argv, batch_opt *opts,
                    size_t nopts, const char **pos, size_t maxpos, size_t *npos, config **cfg);

/* Key names.  Return buf. */
const char *batch_util_key_batch(const config *cfg, const char *batch, char *buf, size_t len);
const char *batch_util_key_jobs(const config *cfg, const char *batch, char *buf, size_t len);
const char *batch_util_key_input(const config *cfg, const char *batch, char *buf, size_t len);
const char *batch_util_key_job(const config *cfg, const char *job_id, char *buf, size_t len);
const char *batch_util_key_history(const config *cfg, const char *job_id, char *buf, size_t len);

/* Connects to redis.host:redis.port (5 s timeout), AUTH and SELECT as
 * configured.  NULL with err set on failure. */
redisContext *batch_util_redis(const config *cfg, char *err, size_t errlen);

/* A Redis list of strings (job ids).  Entries are owned. */
typedef struct batch_ids {
    char **ids;
    size_t count;
} batch_ids;

/* LRANGE key 0 -1 into out.  0 = ok (an absent key gives count 0). */
int batch_util_read_list(redisContext *c, const char *key, batch_ids *out, char *err, size_t errlen);
void batch_util_ids_clear(batch_ids *ids);

/* Pipelining: for item i of n, build appends exactly per_item commands
 * (redisAppendCommand*; return 0, or -1 to fail); then, once a chunk of
 * items has been sent, reply(i, replies, ud) gets that item's per_item
 * replies (valid until it returns; return 0, or -1 to stop with err
 * filled by the callback).  Commands go out in chunks so memory stays
 * bounded for any n.  0 = ok; -1 with err when a callback fails (no
 * later chunk is sent; the replies of its own are read, so the
 * connection can go on), or on a connection error or a failed build
 * (replies may then be left unread: free the connection). */
typedef int (*batch_pipe_build)(redisContext *c, size_t i, void *ud);
typedef int (*batch_pipe_reply)(size_t i, redisReply **replies, void *ud, char *err, size_t errlen);
int batch_util_pipeline(redisContext *c, size_t n, size_t per_item, batch_pipe_build build,
                        batch_pipe_reply reply, void *ud, char *err, size_t errlen);

/* SIGINT and SIGTERM for a command that must undo or finish something
 * before it ends (submit, results).  batch_util_catch_signals installs a
 * handler that only sets batch_util_stop to the signal, with SA_RESTART
 * (a Redis read goes on: the command checks the flag between its steps)
 * and SA_RESETHAND (a second signal ends the process at once), keeping
 * the handlers it replaces in *s.  batch_util_release_signals puts them
 * back (when caught) and then, when end is set and a signal came, ends
 * the process by that signal, as it would have ended without a handler,
 * so that a shell sees how (130 or 143).  Set s to {0} first. */
extern volatile sig_atomic_t batch_util_stop;
typedef struct batch_signals {
    struct sigaction old_int, old_term;
    int caught;
} batch_signals;
void batch_util_catch_signals(batch_signals *s);
void batch_util_release_signals(batch_signals *s, int end);
const char *batch_util_signal_name(int sig);  /* "SIGINT", "SIGTERM" */

/* 1 when r, a job hash's batch_id, names a batch other than batch: the
 * job's state is another batch's (its job_id reused), not this one's. */
int batch_util_other_batch(const redisReply *r, const char *batch);

/* The decimal value of an integer or string reply; def when nil/other. */
long long batch_util_reply_ll(const redisReply *r, long long def);

#endif
