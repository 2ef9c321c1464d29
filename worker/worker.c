#include "worker.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "decide.h"
#include "events.h"
#include "extract.h"
#include "job.h"
#include "jsonin.h"
#include "jsonout.h"
#include "kafka_io.h"
#include "llm_api.h"
#include "llm_client.h"
#include "http_server.h"
#include "log.h"
#include "llm_gate.h"
#include "metrics.h"
#include "offsets.h"
#include "plugins.h"
#include "recent.h"
#include "reflect.h"
#include "rules.h"
#include "schema.h"
#include "schema_cache.h"
#include "state.h"
#include "util.h"
#include "webhook.h"

#define OUTPUT_RECORD_CAP 65536

typedef struct worker worker;

typedef struct out_schema {
    char *name;
    schema *compiled;
    cJSON *doc;
    char *text;         /* doc printed unformatted, for prompts and request bodies */
    int strict;         /* llm_api_schema_is_strict(doc) */
    int max_attempts;   /* "x-retort": {"max_attempts": N}; 0: none */
    rules *rules;       /* "x-retort": {"rules": [...]}; NULL: none */
} out_schema;

typedef enum wjob_stage {
    STAGE_PARSED = 0,
    STAGE_BEGIN,
    STAGE_WAIT,              /* the attempt runs on another live worker */
    STAGE_LLM,
    STAGE_BACKOFF,
    STAGE_FINISH,
    STAGE_PRODUCE,
    STAGE_PUBLISHED,
    STAGE_DONE
} wjob_stage;

/* Freed jobs kept for reuse, linked through next: a job then costs no
 * allocation of its own.  Never more than were held at once; this caps
 * what a burst leaves behind (4 KB each). */
#define WJOB_POOL_MAX 1024

typedef struct wjob {
    worker *w;
    wjob_stage stage;
    int32_t partition;
    int64_t offset;
    uint64_t epoch;
    job job;
    const out_schema *os;    /* named schema, or NULL */
    schema_cache_entry *inline_ent; /* inline schema, held (schema_cache) */
    const char *schema_name;
    const cJSON *schema_doc;
    const char *schema_text;
    char schema_error[256];
    int schema_invalid;      /* schema_error: the inline schema is broken (not unknown) */
    const char *model;
    char owner[192];
    char next_owner[192];    /* retry.local: the next attempt's, claimed with this record */
    char other[192];         /* the attempt's owner elsewhere (STAGE_WAIT) */
    char takeover[192];      /* that owner, found gone: begin takes over */
    int takeover_unleased;   /* takeover's lease was found gone (not waited
                              * out): begin checks it again as it takes over */
    int takeover_uncounted;  /* decided, and not made yet (takeover_made) */
    uint64_t wait_start_ms;  /* loop time the wait began; 0: none */
    unsigned wait_ms;        /* the next look, doubling */
    llm_call *call;
    char *body;              /* request waiting at the gate */
    size_t body_len;
    long cost;               /* estimated tokens of the request, scaled by rl_used / rl_est */
    long cost_raw;           /* the estimate from its size alone */
    llm_gate_node gate_node; /* waiting at the gate, then its lane's while the call runs */
    struct wjob *rate_next;  /* in its rate queue, behind the one asking */
    int rate_waiting;        /* its rate ask said wait: j->timer runs it again (no Redis op pending) */
    struct rate_queue *rate_q; /* the queue it waited in (NULL: none) */
    uv_timer_t timer;
    int tries;
    unsigned undelivered;    /* deliveries of its event failed in a row */
    uint64_t start_us;
    int64_t recv_wall;       /* when the message was taken from Kafka */
    int64_t start_wall;      /* when the claim was granted */
    double llm_ms;
    long ptoks, ctoks;
    long cache_r, cache_w;   /* of ptoks: read from / written to the provider's prompt cache */
    long tokens_before;      /* recorded over earlier attempts */
    long http_status;
    /* outcome of the attempt */
    decide_category cat;
    decide_action action;
    char reason[256];
    char error[256];
    char *text;
    int text_nul;            /* the answer held U+0000: text may be cut short */
    cJSON *value;
    cJSON *violations;
    size_t fit_limit;        /* the event's size cap after Kafka refused it as too large; 0 = none */
    int retry_cut;           /* how hard the retry job's reflection is cut (retry_cuts) */
    char *value_text;        /* value printed: the record's and the final event's */
    size_t value_len;
    char *rec;               /* this attempt's record, JSON text: made once, sent
                              * again as it is after an error */
    size_t rec_len;
    double rec_latency_ms;   /* its latency_ms, for the final event */
    /* what gets produced */
    event_type ev_type;
    const char *ev_topic;
    char *ev_value;
    events_headers hdr;
    int ev_attempt;
    int is_dlq;
    char *msg_key;           /* dead letters keep the original key, byte for byte */
    size_t msg_key_len;
    /* bookkeeping */
    struct wjob *dups;       /* parked messages of the same job id */
    struct wjob *dup_next;
    int chain_first;         /* retry.local: the first attempt run here after
                              * delivering its retry job (0: none) */
    int superseded;          /* another worker took this attempt over */
    /* retry.local, the next attempt started before this one's retry job
     * was delivered: the attempt (succ) holds the message's offset, this
     * one (pred) only waits for the report.  The offset is stored when
     * both are over: until the retry job is on Kafka, a crash must leave
     * the message to be delivered again (Redis then answers 'retried'). */
    struct wjob *pred, *succ;
    int shadow;              /* the pred: no offset, no map entry */
    int held;                /* over, waiting for pred's report */
    int awaiting;            /* this record is sent, its answer not yet in */
    int counted;             /* the attempt is in the metrics */
    int parked;              /* this record waits for pred's answer */
    int doomed;              /* started early by a record Redis refused (that
                              * record's attempt, taken over): so will it */
    int delivering;          /* its outcome is with the producer and holds no job slot (slot_release) */
    int set_up;              /* job_setup ran (it holds an inline schema) */
    struct wjob *hnext;      /* in-flight map chain */
    int in_map;
    struct wjob *prev, *next;
} wjob;

/* The jobs of this process waiting for one bucket pair's tokens, in
 * order.  Only the first asks Redis (again when its wait is over); the
 * others wait here.  Each asking on its own, the waiting jobs all got the
 * same wait, woke together and asked again: with 2,000 jobs held back by
 * a limit of 10 calls a second, 19,000 scripts a second in Redis. */
typedef struct rate_queue {
    char key[1024];          /* endpoint|model */
    long rpm, tpm;
    struct wjob *head, *tail;
    int asking;              /* the head's request or wait is under way */
    size_t at_gate;          /* let in, waiting at the gate for a slot */
} rate_queue;

/* How many jobs of a bucket may wait at the gate with their tokens taken:
 * enough that a slot freed starts a call at once, few enough that a
 * worker whose lane is held back (a 429's halving, a Retry-After) does
 * not sit on tokens the other workers could use. */
#define RATE_AHEAD_MAX 8

#define RATE_QUEUES_MAX 64   /* models past these ask on their own */

/* One model's rate limits (ratelimit.MODEL.rpm / .tpm); -1: the default. */
typedef struct rl_model {
    const char *name;   /* into the config's key, which outlives the worker: not NUL-terminated */
    size_t len;
    long rpm, tpm;
} rl_model;

struct worker {
    uv_loop_t *loop;
    const config *cfg;
    kafka_io *kio;
    llm_client *llm;
    webhook *hook;
    http_server *http;
    metrics m;
    uint64_t llm_ok_ms, llm_net_fail_ms;
    /* the gate in front of the LLM: a lane per model, with AIMD
     * concurrency and Retry-After pauses (llm_gate.h); then the shared
     * rate limits */
    llm_gate *gate;
    uv_timer_t gate_timer;
    /* Shared rate limits: a bucket pair per endpoint and model in Redis */
    long rl_rpm, rl_tpm;       /* ratelimit.rpm / .tpm: every model's, unless set */
    /* llm.base_url, the endpoint, as its buckets' name: with its
     * credentials, query and fragment masked (the name is a Redis key,
     * seen by whoever reads Redis) */
    char rl_base[768];
    rl_model *rl_models;       /* ratelimit.MODEL.rpm / .tpm */
    size_t rl_nmodels;
    int rl_on;                 /* some model has a limit */
    rate_queue *rl_queues[RATE_QUEUES_MAX];
    size_t rl_nqueues;
    /* Decayed sums of the tokens answered calls used and of their size
     * estimates: an estimate is scaled by their ratio.  A call holds its
     * estimate until it is settled, and jobs waiting for tokens compute
     * their wait from a bucket that holds it: with estimates 7 times the
     * usage, each waited out a whole estimate and the limit's rate fell
     * to an eighth. */
    double rl_used, rl_est;
    long token_budget;
    state *st;
    offsets *offs;
    schema_registry *reg;
    schema_cache *scache;    /* inline schemas, compiled once */
    schema *envelope;
    rules *global_rules;     /* rules.file; NULL: none */
    plugins *plugins;        /* plugins.paths */
    out_schema *schemas;
    size_t nschemas;
    schema_options sopts;
    char id[128];
    char incarnation[160];   /* id:nonce, this process's lease in Redis */
    long lease_ms;
    uint64_t takeover_after_ms;
    uv_timer_t lease_timer;
    uint64_t lease_refusals;   /* renewals failed in a row (said once) */
    const char *source;
    const char *t_jobs, *t_final, *t_esc, *t_dlq;
    llm_provider provider;
    llm_response_format rf;
    const char *default_model;
    int max_tokens;
    int prompt_cache;        /* llm.prompt_cache (Anthropic) */
    int max_transient;
    long account_pause; /* llm.on_account_error=pause: llm.account_pause_ms; 0: escalate */
    long backoff_base, backoff_max;
    int default_max_attempts, max_attempts_ceiling;
    size_t prev_output_cap;
    size_t retry_max_bytes;
    size_t max_violations;
    const char *tmpl;
    char **critical;
    size_t ncritical;
    size_t max_inflight;     /* LLM calls (the gate's ceiling) */
    wjob *wjob_pool;         /* freed jobs kept for the next ones (wjob_close_cb) */
    size_t wjob_npool;
    size_t max_jobs;         /* jobs held: calls and the work around them */
    size_t inflight;         /* live jobs, the delivering ones included */
    size_t delivering;       /* of them, waiting only for their outcome's delivery report */
    size_t max_delivering;   /* worker.max_delivering */
    uv_timer_t resume_timer; /* takes messages into slots given back mid-callback */
    int retry_local;         /* retry.local */
    recent *continued;       /* retry.local: attempts run here, by job */
    uint64_t seq;
    /* the live jobs by job id: a power of two of buckets, twice the jobs a
     * process can hold (max_jobs + max_delivering), so the table stays in
     * cache (a fixed 16,384 took a cache miss a message at 64 in flight) */
    wjob **map;
    unsigned map_mask;
    wjob *jobs;              /* every live wjob */
    uv_signal_t sigterm, sigint;
    uv_timer_t drain_timer;
    uv_timer_t drain_poll;   /* webhooks and Redis marks finish outside any job */
    uv_prepare_t log_prep;   /* writes the turn's log lines before the loop waits */
    int stopping;
    int exit_code;
    /* counters for the shutdown line */
    unsigned long n_final, n_retry, n_esc, n_dlq, n_skipped;
};

/* ---- helpers ------------------------------------------------------------ */

static unsigned hash_str(const worker *w, const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h & w->map_mask;
}

static wjob *map_find(worker *w, const char *id) {
    for (wjob *j = w->map[hash_str(w, id)]; j; j = j->hnext)
        if (!strcmp(j->job.job_id, id)) return j;
    return NULL;
}

static void map_put(worker *w, wjob *j) {
    unsigned h = hash_str(w, j->job.job_id);
    j->hnext = w->map[h];
    w->map[h] = j;
    j->in_map = 1;
}

static void map_del(worker *w, wjob *j) {
    if (!j->in_map) return;
    for (wjob **pp = &w->map[hash_str(w, j->job.job_id)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == j) {
            *pp = j->hnext;
            break;
        }
    }
    j->in_map = 0;
}

static int is_critical(const worker *w, const char *code) {
    for (size_t i = 0; i < w->ncritical; i++)
        if (!strcasecmp(w->critical[i], code)) return 1;
    return 0;
}

static cJSON *violation(const char *path, const char *code, const char *message) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "path", path);
    cJSON_AddStringToObject(v, "code", code);
    cJSON_AddStringToObject(v, "message", message);
    cJSON_AddNullToObject(v, "expected");
    cJSON_AddNullToObject(v, "actual");
    return v;
}

static char *capped_copy(const char *s, size_t cap) {
    size_t len = strlen(s);
    size_t n = util_utf8_trim(s, len, cap);
    return strndup(s, n);
}

/* No room for another message: worker.max_jobs jobs hold a slot, or the
 * jobs live, those whose outcomes wait for their delivery reports
 * (slot_release) included, are max_jobs + worker.max_delivering. */
static int slots_full(const worker *w) {
    return w->inflight - w->delivering >= w->max_jobs || w->inflight >= w->max_jobs + w->max_delivering;
}

static void maybe_resume(worker *w) {
    if (w->stopping || !state_connected(w->st)) return;
    if (kafka_io_paused(w->kio)) {
        kafka_io_resume(w->kio);
        kafka_io_poll(w->kio);
    } else if (kafka_io_holding(w->kio) && !slots_full(w)) {
        kafka_io_poll(w->kio);
    }
}

/* j leaves the jobs counted (w->inflight, and w->delivering if it was
 * among them). */
static void slot_drop(wjob *j) {
    worker *w = j->w;
    w->inflight--;
    if (j->delivering) w->delivering--;
    j->delivering = 0;
}

static void check_drained(worker *w);
static void job_done(wjob *j);
static void job_begin(wjob *j);
static void job_abandon(wjob *j);
static void job_setup(wjob *j);
static void call_llm(wjob *j);
static void produce_outcome(wjob *j);
static int cut_harder(wjob *j);
static void gate_leave(wjob *j, long status, long retry_after_ms);
static void rate_noop(void *ud, const state_reply *r);
static void new_owner(worker *w, char *owner, size_t size);
static void job_go(wjob *j, long tokens_used);

/* Frees what j's attempt produced (the answer, its parsed and printed
 * value, its violations and its record) and leaves those fields empty. */
static void wjob_drop_answer(wjob *j) {
    free(j->text);
    j->text = NULL;
    jsonin_free(j->value);
    j->value = NULL;
    cJSON_Delete(j->violations);
    j->violations = NULL;
    free(j->value_text);
    j->value_text = NULL;
    j->value_len = 0;
    free(j->rec);
    j->rec = NULL;
    j->rec_len = 0;
}

static void wjob_close_cb(uv_handle_t *h) {
    wjob *j = h->data;
    job_clear(&j->job);
    schema_cache_release(j->w->scache, j->inline_ent);
    wjob_drop_answer(j);
    free(j->ev_value);
    free(j->msg_key);
    free(j->body);
    worker *w = j->w;
    if (w->wjob_npool < WJOB_POOL_MAX) {
        j->next = w->wjob_pool;
        w->wjob_pool = j;
        w->wjob_npool++;
        return;
    }
    free(j);
}

static void job_unlink(wjob *j) {
    worker *w = j->w;
    if (j->prev) j->prev->next = j->next;
    else w->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
}

/* A job taken now (its message, or the next attempt run here) for
 * partition and offset, linked into the worker's jobs.  NULL on out of
 * memory.  Freed by wjob_free. */
static wjob *wjob_new(worker *w, int32_t partition, int64_t offset, uint64_t epoch) {
    wjob *j = w->wjob_pool;
    if (j) {
        w->wjob_pool = j->next;
        w->wjob_npool--;
        memset(j, 0, sizeof(*j));
    } else if (!(j = calloc(1, sizeof(*j)))) {
        return NULL;
    }
    j->w = w;
    uv_timer_init(w->loop, &j->timer);
    j->timer.data = j;
    j->partition = partition;
    j->offset = offset;
    j->epoch = epoch;
    j->recv_wall = util_wall_ms();
    j->next = w->jobs;
    if (w->jobs) w->jobs->prev = j;
    w->jobs = j;
    return j;
}

/* j leaves: out of the worker's jobs and of its retry.local pairing (the
 * other side no longer waits for it), freed at its timer's close, which
 * also stops the timer.  Its count (slot_drop) is the caller's to settle.
 * Accepts NULL. */
static void wjob_free(wjob *j) {
    if (!j) return;
    j->stage = STAGE_DONE;
    if (j->pred) j->pred->succ = NULL;
    if (j->succ) j->succ->pred = NULL;
    j->pred = j->succ = NULL;
    job_unlink(j);
    uv_close((uv_handle_t *)&j->timer, wjob_close_cb);
}

/* 1 when j is the retry job of an attempt this worker ran to its outcome
 * already, right after delivering it (retry.local). */
static int ran_here(const worker *w, const wjob *j) {
    return w->continued && j->job.attempt > 1 && recent_covers(w->continued, j->job.job_id, j->job.run, j->job.attempt);
}

/* Such a retry job (ran_here): nothing left to do but its offset. */
static void skip_ran_here(wjob *j) {
    worker *w = j->w;
    log_debug(j->job.job_id, j->job.attempt, "retry job of an attempt run here already; skipping");
    w->n_skipped++;
    w->m.jobs[METRICS_SKIPPED]++;
    job_done(j);
}

/* The message is handled: store its offset when nothing below is pending,
 * release duplicates waiting for it, free it. */
static void job_done(wjob *j) {
    worker *w = j->w;
    if (j->pred) {
        j->held = 1; /* shadow_done comes back here */
        return;
    }
    j->stage = STAGE_DONE;
    int64_t commit;
    if (offsets_done(w->offs, j->partition, j->epoch, j->offset, &commit) == 1)
        kafka_io_store(w->kio, j->partition, commit);
    map_del(w, j);
    /* Attempts chain_first..last ran here after their retry jobs' delivery
     * (retry.local) and are over: their retry jobs, parked behind this
     * one or still to come from Kafka, are done.  An attempt another
     * worker took over is its own, and so are those after it. */
    int last = !j->chain_first ? 0 : j->doomed ? j->doomed - 1 : j->job.attempt - j->superseded;
    if (last && last >= j->chain_first && recent_add(w->continued, j->job.job_id, j->job.run, j->chain_first, last))
        log_warn(j->job.job_id, j->job.attempt, "out of memory remembering the attempts run here");
    wjob *ran = NULL, **ran_tail = &ran, *keep = NULL, **keep_tail = &keep;
    for (wjob *d = j->dups, *next; d; d = next) {
        next = d->dup_next;
        d->dup_next = NULL;
        if (ran_here(w, d)) {
            *ran_tail = d;
            ran_tail = &d->dup_next;
        } else {
            *keep_tail = d;
            keep_tail = &d->dup_next;
        }
    }
    j->dups = NULL;
    if (keep) {
        /* The first parked duplicate takes this one's place in the map;
         * the rest queue behind it.  Not while draining: begun, a later
         * run's message got a claim and called the LLM, and the drain
         * waited for it (or left it to be paid again).  They go
         * uncommitted, and come again after the restart. */
        keep->dups = keep->dup_next;
        keep->dup_next = NULL;
        map_put(w, keep);
        if (w->stopping) job_abandon(keep);
        else job_begin(keep);
    }
    slot_drop(j);
    wjob_free(j);
    for (wjob *d = ran, *next; d; d = next) {
        next = d->dup_next;
        d->dup_next = NULL;
        skip_ran_here(d);
    }
    maybe_resume(w);
    check_drained(w);
}

/* ---- producing ---------------------------------------------------------- */

static void produce_retry_timer(uv_timer_t *t) { produce_outcome(t->data); }

static void resume_timer_cb(uv_timer_t *t) { maybe_resume(t->data); }

/* j's outcome is with the producer.  When its delivery report is all that
 * is left of it (no attempt follows here: not a retry job that retry.local
 * may continue in this slot), it gives its job slot back now rather than
 * at the report: with fast answers the producer's linger and the broker's
 * acknowledgement were much of a job's time in its slot, and the slots,
 * not the CPU, bounded the rate (a_instant: 80 slots held about 12 ms
 * each; 24% more jobs a second without that wait).  It stays a job (its
 * offset is stored and it is freed at the report, and a failed delivery
 * is produced again), counted among the delivering: the jobs live, these
 * included, are bounded by worker.max_jobs + worker.max_delivering.  The
 * message waiting for a slot is taken on the next loop turn, not here:
 * this may run in the consumer's own callback (a dead letter). */
static void slot_release(wjob *j) {
    worker *w = j->w;
    if (j->delivering || (!j->shadow && !j->is_dlq && j->ev_type == EVENT_RETRY && w->retry_local)) return;
    j->delivering = 1;
    w->delivering++;
    if (j->is_dlq || j->ev_type != EVENT_RETRY) {
        /* Its event is all a final, escalation or dead letter needs from
         * here (produced again, cut, posted to the webhook): the answer,
         * its parsed value, its printed value and the attempt's record
         * would otherwise wait with it, several times the event's size
         * (a broker that stalls holds up to worker.max_delivering such
         * jobs).  A retry job keeps them: a cut rebuilds it from them. */
        wjob_drop_answer(j);
    }
    if (!uv_is_active((uv_handle_t *)&w->resume_timer)) uv_timer_start(&w->resume_timer, resume_timer_cb, 0, 0);
}

/* The outcome a job's message is counted under in the metrics. */
static metrics_outcome message_outcome(const wjob *j) {
    return j->is_dlq                      ? METRICS_DEAD_LETTER
           : j->ev_type == EVENT_FINAL    ? METRICS_FINAL
           : j->ev_type == EVENT_RETRY    ? METRICS_RETRY
           : j->ev_type == EVENT_ESCALATED ? METRICS_ESCALATED
                                           : METRICS_DEAD_LETTER;
}

/* A final, escalation or dead-letter event larger than a Kafka message
 * may be (message.max.bytes here, or less at the broker: fit_limit) would
 * be refused on every try, holding its partition's commits back for good:
 * it goes out without its largest parts instead, which the event names
 * (events_fit).  A retry job is cut instead (retry_cuts). */
static void fit_event(wjob *j, size_t key_len, const kafka_io_header *hdrs, int nhdrs) {
    worker *w = j->w;
    size_t over = 512 + key_len, max = kafka_io_max_message(w->kio);
    for (int i = 0; i < nhdrs; i++) over += strlen(hdrs[i].name) + strlen(hdrs[i].value);
    size_t limit = max > over ? max - over : 0, len = strlen(j->ev_value);
    if (j->fit_limit && j->fit_limit < limit) limit = j->fit_limit;
    if (len <= limit) return;
    if (events_fit(&j->ev_value, limit) == 0) {
        w->m.cut[message_outcome(j)]++;
        log_warn(j->job.job_id, j->ev_attempt,
                 "the %s event (%zu bytes) is larger than a Kafka message may be (%zu): produced without "
                 "its largest parts (%zu bytes; its \"omitted\" names them)",
                 events_ce_type(j->ev_type), len, limit, strlen(j->ev_value));
    } else {
        log_error(j->job.job_id, j->ev_attempt, "the %s event (%zu bytes) cannot be cut to %zu bytes",
                  events_ce_type(j->ev_type), len, limit);
    }
}

static void produce_outcome(wjob *j) {
    worker *w = j->w;
    j->stage = STAGE_PRODUCE;
    kafka_io_header hdrs[7] = {
        {"ce_specversion", "1.0"},     {"ce_id", j->hdr.id},           {"ce_type", j->hdr.type},
        {"ce_source", j->hdr.source},  {"ce_time", j->hdr.time},       {"ce_subject", j->hdr.subject},
        {"content-type", "application/json"},
    };
    char err[512];
    if (!j->ev_value) {
        /* Out of memory building the event: nothing is stored, so a
         * restarted worker does the job again; limping on helps no one. */
        log_error(j->job.job_id, j->ev_attempt, "out of memory building the %s event; exiting",
                  events_ce_type(j->ev_type));
        exit(3);
    }
    const char *key = j->is_dlq ? j->msg_key : j->job.job_id;
    size_t key_len = j->is_dlq ? j->msg_key_len : strlen(key);
    if (j->is_dlq && key_len > kafka_io_max_message(w->kio) / 4) {
        /* A key that leaves no room for the event would keep it out of
         * Kafka for good, and the partition's commits behind it.  The
         * event still says the key, unless it is too large there too
         * ("omitted" then names it). */
        log_warn(j->hdr.subject, 0, "the dead message's key (%zu bytes) is too large to key its dead letter "
                 "with; produced without a key", key_len);
        free(j->msg_key);
        j->msg_key = NULL;
        j->msg_key_len = 0;
        key = NULL;
        key_len = 0;
    }
    if (j->ev_type != EVENT_RETRY) fit_event(j, key_len, hdrs, 7);
    int rc = kafka_io_produce(w->kio, j->ev_topic, key, key_len, j->ev_value, strlen(j->ev_value), hdrs, 7,
                              j, err, sizeof(err));
    if (rc == 2) {
        /* our estimate of librdkafka's overhead was short: cut and go on */
        w->m.produce_failures[message_outcome(j)]++;
        uv_timer_start(&j->timer, produce_retry_timer, cut_harder(j) ? 5000 : 0, 0);
        return;
    }
    if (rc) {
        /* Queue full or a transient client state: try again shortly; the
         * message stays uncommitted meanwhile, so nothing is lost. */
        if (rc < 0) {
            w->m.produce_failures[message_outcome(j)]++;
            log_warn(j->job.job_id, j->job.attempt, "%s; retrying", err);
        }
        uv_timer_start(&j->timer, produce_retry_timer, rc > 0 ? 50 : 1000, 0);
        return;
    }
    slot_release(j);
}

static void set_event(wjob *j, event_type type, const char *topic, int attempt, cJSON *ev_doc,
                      char *ev_text) {
    free(j->ev_value);
    j->fit_limit = 0;
    j->undelivered = 0;
    j->ev_type = type;
    j->ev_topic = topic;
    j->ev_attempt = attempt;
    j->ev_value = ev_text ? ev_text : jsonout_print(ev_doc);
    cJSON_Delete(ev_doc);
    events_headers_init(&j->hdr, type, j->job.job_id, j->job.run, attempt, j->w->source, util_wall_ms());
}

/* retry.local: the next attempt starts here now, from j's retry job,
 * rather than when the retry job comes back from Kafka behind its
 * partition's backlog.  The new job takes j's place: its slot, its message
 * (whose offset is stored only when the attempt is over), its map entry
 * and the duplicates parked behind it.  The retry job on the topic is
 * skipped when it comes back here (job_done, on_message), and elsewhere
 * Redis says the attempt is running or done.
 *
 * claimed: j's record claims the next attempt (may_continue, then
 * record_attempt), with tokens_used recorded so far; the record is sent
 * and its answer not yet in (the attempt's own record waits for it), and
 * the retry job is neither produced nor delivered (the producer's linger
 * was most of a repair's added latency; j produces it at the record's
 * answer).  The attempt starts now; j stays as a shadow
 * until its report, and the new job's offset waits for it.  If this
 * process dies before the report, the message comes again and Redis,
 * seeing the next attempt claimed but this one's retry not published,
 * answers 'retried': the retry job is produced again from the record (a
 * second copy, if the first had left, is a duplicate like any other).
 * Otherwise (not claimed) j's report has come and j goes.  Either way,
 * whoever reads the retry job takes the attempt over once this process's
 * lease lapses.
 *
 * n: the next attempt's job, from next_attempt_new (taken). */
static void continue_with(wjob *j, wjob *n, int claimed, long tokens_used) {
    worker *w = j->w;
    n->chain_first = j->chain_first ? j->chain_first : n->job.attempt;
    map_del(w, j);
    n->dups = j->dups;
    j->dups = NULL;
    map_put(w, n);
    /* a report j itself waited for passes to n */
    n->pred = j->pred;
    if (n->pred) n->pred->succ = n;
    j->pred = NULL;
    w->m.local_retries++;
    if (claimed) {
        j->shadow = 1;
        j->succ = n;
        n->pred = j;
        w->inflight++; /* the shadow is held too, until its report */
        memcpy(n->owner, j->next_owner, sizeof(n->owner));
        job_setup(n);
        job_go(n, tokens_used);
        return;
    }
    if (j->delivering) { /* (never, as slot_release goes) n takes a slot again */
        w->delivering--;
        j->delivering = 0;
    }
    wjob_free(j);
    job_begin(n);
}

/* The job of the attempt after j's, from j's retry job (ev_value), for
 * continue_with; NULL (said) when it cannot be made: no memory, or a bug.
 * Made before the record that would claim that attempt is sent: a claim
 * whose attempt could not start here held it, with this process's lease,
 * from every other worker for worker.takeover_after_ms. */
static wjob *next_attempt_new(wjob *j) {
    worker *w = j->w;
    wjob *n = j->ev_value ? wjob_new(w, j->partition, j->offset, j->epoch) : NULL;
    if (!n) {
        log_warn(j->job.job_id, j->job.attempt, "out of memory starting the retry here; it waits for its retry job");
        return NULL;
    }
    char err[512], id[EVENTS_SUBJECT_MAX];
    cJSON *violations = NULL;
    if (job_parse(j->ev_value, strlen(j->ev_value), w->envelope, w->default_max_attempts,
                  w->max_attempts_ceiling, &n->job, &violations, id, sizeof(id), err, sizeof(err))) {
        /* Our own retry job: only a bug or no memory gets here.  The copy
         * on the topic goes the usual way. */
        log_warn(j->job.job_id, j->ev_attempt, "cannot run the retry here (%s); it waits for its retry job", err);
        cJSON_Delete(violations);
        wjob_free(n);
        return NULL;
    }
    return n;
}

/* continue_with, unclaimed, after j's retry job was delivered.  0 = done;
 * -1 = not here (off, shutting down, the retry job came back first and
 * runs already, Redis down, no memory): the caller goes on with j. */
static int continue_here(wjob *j) {
    worker *w = j->w;
    if (!j->in_map || !w->retry_local || w->stopping || !state_connected(w->st)) return -1;
    wjob *n = next_attempt_new(j);
    if (!n) return -1;
    continue_with(j, n, 0, 0);
    return 0;
}

/* j may claim its next attempt with its record (continue_with, claimed):
 * retry.local, and no earlier retry job of the job still waiting for its
 * report (one shadow a job: the next attempt then starts at this one's
 * report, which comes after, the retry jobs of a job sharing its key). */
static int may_continue(const wjob *j) {
    worker *w = j->w;
    return w->retry_local && !w->stopping && j->in_map && !j->pred && state_connected(w->st);
}

/* The shadow's retry job is delivered (or, its claim refused, will never
 * be produced): it goes, and the attempt after it, if over, is done now. */
static void shadow_done(wjob *j) {
    worker *w = j->w;
    wjob *n = j->succ;
    slot_drop(j);
    wjob_free(j); /* n waits no more */
    if (n && n->held) job_done(n);
    maybe_resume(w);
    check_drained(w);
}

static void on_delivery(void *ud, void *opaque, rd_kafka_resp_err_t err) {
    wjob *j = opaque;
    worker *w = ud;
    if (err) {
        w->m.produce_failures[message_outcome(j)]++;
        /* the broker takes less than our message.max.bytes: cut harder */
        int too_large = err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, stuck = too_large && cut_harder(j);
        if (too_large && !stuck) j->undelivered = 0; /* cut: a new message, tried at once-ish */
        /* librdkafka gave up on it (a permanent error, or its own retries
         * timed out): again after 0.5, 1, 2, 4, then every 8 s, and said
         * at the 1st, 2nd, 4th, 8th... time.  An error that lasts (a topic
         * the worker may not write) cost a warning a job twice a second,
         * for ever; the message stays uncommitted meanwhile. */
        unsigned n = ++j->undelivered;
        uint64_t again = stuck ? 5000 : n >= 5 ? 8000 : 500u << (n - 1);
        if (!(n & (n - 1))) {
            char times[48] = "";
            if (n > 1) snprintf(times, sizeof(times), " (%u times in a row)", n);
            log_warn(j->job.job_id, j->ev_attempt, "delivery to %s failed%s: %s; producing again in %llu ms",
                     j->ev_topic, times, rd_kafka_err2str(err), (unsigned long long)again);
        }
        uv_timer_start(&j->timer, produce_retry_timer, again, 0);
        return;
    }
    if (j->is_dlq) {
        w->n_dlq++;
        w->m.jobs[METRICS_DEAD_LETTER]++;
        job_done(j);
        return;
    }
    switch (j->ev_type) {
    case EVENT_FINAL:
        w->n_final++;
        w->m.jobs[METRICS_FINAL]++;
        break;
    case EVENT_RETRY:
        w->n_retry++;
        w->m.jobs[METRICS_RETRY]++;
        break;
    case EVENT_ESCALATED:
        w->n_esc++;
        w->m.jobs[METRICS_ESCALATED]++;
        if (w->hook) webhook_post(w->hook, j->job.job_id, j->ev_value);
        break;
    default: break;
    }
    /* The delivery is noted in Redis (so that a redelivered message does
     * not produce the outcome again) without waiting for it: the job's
     * slot is free one Redis round trip sooner.  Its offset may then be
     * committed before the mark is written; a crash in between leaves only
     * a missing mark, which a later redelivery of the same attempt turns
     * into the same event again (same ce_id), as before. */
    j->stage = STAGE_PUBLISHED;
    if (state_published(w->st, j->job.job_id, j->job.run, j->ev_attempt))
        log_warn(j->job.job_id, j->ev_attempt, "out of memory recording the delivered outcome");
    if (j->shadow) {
        shadow_done(j);
        return;
    }
    if (j->ev_type == EVENT_RETRY && continue_here(j) == 0) return;
    job_done(j);
}

/* ---- outcome events from Redis history (also used on redelivery) --------- */

static void build_from_history(wjob *j, const char *status, const cJSON *history) {
    worker *w = j->w;
    const cJSON *last = cJSON_GetArrayItem(history, cJSON_GetArraySize(history) - 1);
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(last, "attempt");
    int attempt = cJSON_IsNumber(att) ? (int)util_clamp_ll(att->valuedouble, 1, INT_MAX) : j->job.attempt;
    if (!strcmp(status, "final")) {
        set_event(j, EVENT_FINAL, w->t_final, attempt, NULL,
                  events_final(&j->job, j->schema_name, j->model, history, NULL, util_wall_ms()));
    } else {
        set_event(j, EVENT_ESCALATED, w->t_esc, attempt,
                  events_escalation(&j->job, j->schema_name, j->model, history, util_wall_ms()), NULL);
    }
}

/* How a retry job is cut when it is too large for a Kafka message: as
 * configured; then 1 KiB of the previous output and the first 5
 * violations; then the first violation only, without the output; then no
 * reflection at all, a fresh ask (the attempts left still bound it).  A
 * retry is cut when it exceeds retry.max_message_bytes, but never to a
 * fresh ask for that (a model without its repair prompt makes the same
 * mistake again: better a retry over the setting, which Kafka may still
 * take), and again each time Kafka refuses it as too large (the topic or
 * broker may take less than the producer): left as it was, it would be
 * refused on every try, holding its partition's commits back for good. */
static const struct {
    size_t output_cap;       /* bytes of the previous output; SIZE_MAX = retry.previous_output_max_bytes */
    int violations;          /* kept; -1 = all */
    const char *what;
} retry_cuts[] = {
    {SIZE_MAX, -1, "as configured"},
    {1024, 5, "previous output cut to 1 KiB, 5 violations kept"},
    {0, 1, "without the previous output, 1 violation kept"},
    {0, 0, "without its reflection (a fresh ask)"},
};
#define RETRY_CUTS ((int)(sizeof(retry_cuts) / sizeof(retry_cuts[0])))

/* The reflection of attempt `attempt` at cut level `cut` (retry_cuts):
 * as many of j->violations, and as much of j->text, as the cut keeps.
 * What was left out is said in it (violations_total,
 * previous_output_bytes, cut), so that a reader of the retry job, and the
 * next attempt's record, can tell a short reflection from a cut one.
 * Taken by the caller; NULL when out of memory. */
static cJSON *make_reflection(wjob *j, int attempt, int cut) {
    worker *w = j->w;
    cJSON *r = cJSON_CreateObject(), *few = NULL;
    const cJSON *violations = j->violations;
    int total = cJSON_GetArraySize(j->violations), keep = retry_cuts[cut].violations;
    if (keep >= 0 && total > keep) {
        few = cJSON_CreateArray();
        const cJSON *v;
        cJSON_ArrayForEach(v, j->violations) {
            if (cJSON_GetArraySize(few) == keep) break;
            cJSON_AddItemToArray(few, cJSON_Duplicate(v, 1));
        }
        violations = few;
    }
    size_t cap = retry_cuts[cut].output_cap == SIZE_MAX ? w->prev_output_cap : retry_cuts[cut].output_cap;
    const char *output = j->text ? j->text : "";
    char *prev = capped_copy(output, cap);
    cJSON_AddNumberToObject(r, "attempt", attempt);
    cJSON_AddNumberToObject(r, "max_attempts", j->job.max_attempts);
    cJSON_AddStringToObject(r, "reason", j->reason);
    cJSON_AddItemToObject(r, "violations", violations ? cJSON_Duplicate(violations, 1) : cJSON_CreateArray());
    cJSON_AddNumberToObject(r, "violations_total", total);
    cJSON_AddStringToObject(r, "previous_output", prev ? prev : "");
    cJSON_AddNumberToObject(r, "previous_output_bytes", (double)strlen(output));
    if (cut) cJSON_AddStringToObject(r, "cut", retry_cuts[cut].what);
    reflect_input in = {w->tmpl, attempt, j->job.max_attempts, j->reason, violations,
                        j->schema_text, prev, total};
    char *prompt = reflect_render(&in);
    cJSON_AddStringToObject(r, "prompt", prompt ? prompt : "");
    free(prompt);
    free(prev);
    cJSON_Delete(few);
    return r;
}

/* The retry job of attempt at cut level `cut`, from the attempt's reason,
 * violations and output as the job holds them (j->reason, j->violations,
 * j->text).  Taken by the caller; NULL when out of memory. */
static char *retry_value(wjob *j, int attempt, int cut) {
    if (cut == RETRY_CUTS - 1) return job_retry_value(&j->job, NULL);
    cJSON *refl = make_reflection(j, attempt, cut);
    /* job_retry_value bumps the job's attempt: the job here is the attempt
     * that failed. */
    char *value = refl ? job_retry_value(&j->job, refl) : NULL;
    cJSON_Delete(refl);
    return value;
}

/* The retry job, at the first cut from j->retry_cut on that fits in
 * retry.max_message_bytes and under the size Kafka last refused (limit,
 * 0 = none); the last cut allowed when none does (a fresh ask only after
 * a refusal). */
static void build_retry(wjob *j, int attempt, size_t limit) {
    worker *w = j->w;
    size_t max = w->retry_max_bytes;
    if (limit && limit < max) max = limit;
    int last = limit ? RETRY_CUTS - 1 : RETRY_CUTS - 2;
    char *value = NULL;
    for (;;) {
        value = retry_value(j, attempt, j->retry_cut);
        if (!value || strlen(value) <= max || j->retry_cut >= last) break;
        free(value);
        j->retry_cut++;
    }
    if (value && j->retry_cut) {
        w->m.cut[METRICS_RETRY]++;
        log_warn(j->job.job_id, attempt, "retry job cut to %zu bytes to fit %s (%zu): %s%s", strlen(value),
                 limit ? "under what Kafka refused" : "retry.max_message_bytes", max, retry_cuts[j->retry_cut].what,
                 strlen(value) > max ? "; still larger" : "");
    }
    set_event(j, EVENT_RETRY, w->t_jobs, attempt, NULL, value);
}

/* 1 when j's event is its attempt's retry job, built already. */
static int retry_built(const wjob *j) {
    return j->ev_value && j->ev_type == EVENT_RETRY && j->ev_attempt == j->job.attempt;
}

/* Kafka refused the message as too large (the producer or the broker): an
 * event is fitted to half its size when produced again (fit_event), a
 * retry job goes one cut further.  0 = cut; -1 = nothing left to cut (the
 * job itself is larger than the topic takes). */
static int cut_harder(wjob *j) {
    size_t len = strlen(j->ev_value);
    if (j->ev_type != EVENT_RETRY) {
        /* No smaller than the last cut asked for: what is left cannot be
         * cut (fit_event said so).  Trying again at once would spin. */
        if (j->fit_limit && len > j->fit_limit) return -1;
        j->fit_limit = len / 2;
        return 0;
    }
    if (j->retry_cut == RETRY_CUTS - 1) {
        log_error(j->job.job_id, j->ev_attempt,
                  "the retry job (%zu bytes) is too large for Kafka even without its reflection: "
                  "raise the topic's max.message.bytes; producing again in 5 s",
                  len);
        return -1;
    }
    j->retry_cut++;
    build_retry(j, j->ev_attempt, len - 1);
    return 0;
}

/* ---- Redis: finish ------------------------------------------------------ */

static void finish_retry_timer(uv_timer_t *t);
static void record_attempt(wjob *j);

/* The record of the attempt j started (NULL: gone) waited for j's answer:
 * it goes now. */
static void record_parked(wjob *n) {
    if (!n || !n->parked) return;
    n->parked = 0;
    record_attempt(n);
}

/* An attempt's outcome as its record and the final event's summary say. */
static const char *outcome_name(decide_category cat) {
    return cat == DECIDE_CAT_OK                                                  ? "valid"
           : (cat >= DECIDE_CAT_INVALID && cat <= DECIDE_CAT_CONTENT_FILTER) ? "invalid"
                                                                                 : "error";
}

static void on_finish(void *ud, const state_reply *r) {
    wjob *j = ud;
    worker *w = j->w;
    if (r->verdict == STATE_ERROR) {
        log_error(j->job.job_id, j->job.attempt, "recording the attempt failed: %s; retrying", r->error);
        uv_timer_start(&j->timer, finish_retry_timer, 1000, 0);
        return;
    }
    j->awaiting = 0;
    if (r->verdict == STATE_SUPERSEDED) {
        log_info(j->job.job_id, j->job.attempt,
                 "attempt taken over by another worker (now attempt %d, %s); dropping our result",
                 r->attempt, r->status);
        j->superseded = 1;
        if (j->shadow) {
            /* The attempt it started holds the message: its record,
             * refused in turn, settles it (counted once, there).  No
             * retry job comes, so no report: the shadow goes now. */
            wjob *n = j->succ;
            /* no attempt after it, then; and the attempts from this one
             * on are not this worker's to remember as run here (a copy
             * of this one's retry job was skipped with no word to Redis) */
            if (n) n->doomed = j->job.attempt;
            shadow_done(j);
            record_parked(n);
            return;
        }
        w->n_skipped++;
        w->m.jobs[METRICS_SKIPPED]++;
        job_done(j);
        return;
    }
    if (j->action == DECIDE_RETRY) {
        /* Built already when the record went, if retry.local tried to
         * start the next attempt here (counted and said once if cut). */
        if (!retry_built(j)) build_retry(j, j->job.attempt, 0);
    } else if (j->action == DECIDE_FINAL) {
        /* The records before this attempt (from Redis), then this one's,
         * which is only text: the event reads its parts from the job. */
        events_attempt last = {j->job.attempt, outcome_name(j->cat), j->violations, j->rec_latency_ms,
                               j->ptoks, j->ctoks, j->cache_r, j->cache_w, j->value_text, j->value_len};
        set_event(j, EVENT_FINAL, w->t_final, j->job.attempt, NULL,
                  events_final(&j->job, j->schema_name, j->model, r->history, &last, util_wall_ms()));
    } else {
        /* An escalation carries every record: this one's is read back
         * (escalations are few). */
        cJSON *history = cJSON_CreateArray();
        cJSON *mine = cJSON_Parse(j->rec);
        const cJSON *rec;
        cJSON_ArrayForEach(rec, r->history) cJSON_AddItemReferenceToArray(history, (cJSON *)rec);
        if (mine) cJSON_AddItemToArray(history, mine);
        build_from_history(j, "escalated", history);
        cJSON_Delete(history);
    }
    log_info(j->job.job_id, j->job.attempt, "%s: %s", decide_action_name(j->action), j->reason);
    produce_outcome(j);
    if (j->shadow) record_parked(j->succ);
}

/* Appends ,"key": and s[0..len) as a JSON string, or null when s is NULL. */
static int rec_strn(sbuf *b, const char *key, const char *s, size_t len) {
    return sbuf_puts(b, key) || (s ? sbuf_json_string(b, s, len) : sbuf_puts(b, "null"));
}

static int rec_str(sbuf *b, const char *key, const char *s) { return rec_strn(b, key, s, s ? strlen(s) : 0); }

static int rec_num(sbuf *b, const char *key, double d) { return sbuf_puts(b, key) || jsonout_number(b, d); }

static int rec_time(sbuf *b, const char *key, int64_t wall_ms) {
    char ts[40];
    util_rfc3339(wall_ms, ts, sizeof(ts));
    return rec_str(b, key, ts);
}

/* This attempt's record as JSON text (taken; NULL on OOM), *len bytes.
 * Written, not built as a cJSON tree and printed: one buffer instead of
 * some 25 allocations a job.  The bytes are those the tree printed
 * (jsonout writes as cJSON does), so records of older workers read the
 * same. */
static char *attempt_record(wjob *j, size_t *len) {
    worker *w = j->w;
    sbuf b = {0};
    char *out = NULL, *capped = NULL;
    const char *output = j->text;
    size_t output_len = output ? strlen(output) : 0;
    if (output_len > OUTPUT_RECORD_CAP) {
        if (!(output = capped = capped_copy(j->text, OUTPUT_RECORD_CAP))) goto cleanup;
        output_len = strlen(output);
    }
    /* Printed once: the final event takes the same text. */
    if (j->value && !j->value_text) {
        sbuf v = {0};
        if (sbuf_reserve(&v, 1024) || jsonout_value(&v, j->value)) {
            sbuf_free(&v);
            goto cleanup;
        }
        j->value_len = v.len;
        j->value_text = sbuf_take(&v);
    }
    j->rec_latency_ms = (double)(util_mono_us() - j->start_us) / 1000.0;
    const char *decision = j->action == DECIDE_FINAL ? "final" : j->action == DECIDE_RETRY ? "retry" : "escalate";
    const cJSON *cut = cJSON_GetObjectItemCaseSensitive(j->job.reflection, "cut");
    const char *reflection_cut = cJSON_IsString(cut) ? cut->valuestring : NULL;
    /* sbuf_json_string reserves for its worst case (6 bytes a byte): ask
     * for it here, or the buffer is copied to a larger one mid-record. */
    if (sbuf_reserve(&b, 512 + 6 * output_len + j->value_len) ||
        rec_num(&b, "{\"attempt\":", j->job.attempt) || rec_str(&b, ",\"outcome\":", outcome_name(j->cat)) ||
        rec_str(&b, ",\"category\":", decide_category_name(j->cat)) || rec_str(&b, ",\"decision\":", decision) ||
        rec_str(&b, ",\"reason\":", j->reason) || rec_strn(&b, ",\"output\":", output, output_len) ||
        (j->value_text && (sbuf_puts(&b, ",\"value\":") || sbuf_append(&b, j->value_text, j->value_len))) ||
        sbuf_puts(&b, ",\"violations\":") || (j->violations ? jsonout_value(&b, j->violations) : sbuf_puts(&b, "[]")) ||
        /* the repair this attempt was asked for had been cut to fit Kafka */
        (reflection_cut && rec_str(&b, ",\"reflection_cut\":", reflection_cut)) ||
        rec_num(&b, ",\"usage\":{\"prompt_tokens\":", j->ptoks) || rec_num(&b, ",\"completion_tokens\":", j->ctoks) ||
        rec_num(&b, ",\"total_tokens\":", j->ptoks + j->ctoks) ||
        /* only with a prompt cache: most records never have them */
        ((j->cache_r || j->cache_w) && (rec_num(&b, ",\"cache_read_tokens\":", j->cache_r) ||
                                        rec_num(&b, ",\"cache_write_tokens\":", j->cache_w))) ||
        rec_num(&b, "},\"latency_ms\":", j->rec_latency_ms) ||
        rec_num(&b, ",\"llm_latency_ms\":", j->llm_ms) || rec_num(&b, ",\"tries\":", j->tries + 1) ||
        rec_str(&b, ",\"error\":", j->error[0] ? j->error : NULL) ||
        (j->http_status && rec_num(&b, ",\"http_status\":", j->http_status)) ||
        (j->model && rec_str(&b, ",\"model\":", j->model)) || rec_str(&b, ",\"worker\":", w->id) ||
        /* received -> started is the wait for the Redis claim (and for the
         * attempt this one repeats, when the message came twice). */
        rec_time(&b, ",\"received_at\":", j->recv_wall) || rec_time(&b, ",\"started_at\":", j->start_wall) ||
        rec_time(&b, ",\"finished_at\":", util_wall_ms()) || sbuf_puts(&b, "}"))
        goto cleanup;
    *len = b.len;
    out = sbuf_take(&b);
cleanup:
    sbuf_free(&b);
    free(capped);
    return out;
}

static void record_attempt(wjob *j) {
    worker *w = j->w;
    j->stage = STAGE_FINISH;
    /* Started before the record that claimed it was answered:
     * this record may go only after that answer, so that Redis judges it
     * against the claim, whatever came of it. */
    if (j->pred && j->pred->awaiting) {
        j->parked = 1;
        return;
    }
    /* Once, though this runs again a second after each error from Redis
     * (LOADING, READONLY, out of memory): the attempt was counted again
     * each time, and its record remade with the wait in its latency. */
    if (!j->counted) {
        j->counted = 1;
        w->m.attempts++;
        metrics_observe(&w->m.job_latency, (double)(util_mono_us() - j->start_us) / 1e6);
        const cJSON *v;
        cJSON_ArrayForEach(v, j->violations) {
            const cJSON *code = cJSON_GetObjectItemCaseSensitive(v, "code");
            if (cJSON_IsString(code)) metrics_violation(&w->m, code->valuestring);
        }
    }
    if (!j->rec) j->rec = attempt_record(j, &j->rec_len);
    const char *status = j->action == DECIDE_FINAL ? "final"
                         : j->action == DECIDE_RETRY ? "retrying" : "escalated";
    /* retry.local: the next attempt is claimed with the record, one write
     * (and fsync) fewer a repair.  The owner is chosen once, so that the
     * call sent again after a lost reply is the same call. */
    wjob *n = NULL;
    if (j->rec && j->action == DECIDE_RETRY && !j->next_owner[0] && !j->doomed && may_continue(j)) {
        if (!retry_built(j)) build_retry(j, j->job.attempt, 0);
        if ((n = next_attempt_new(j))) new_owner(w, j->next_owner, sizeof(j->next_owner));
    }
    if (!j->rec || state_finish(w->st, j->job.job_id, j->job.batch_id, j->owner, j->job.attempt, status, j->rec,
                                j->rec_len, j->ptoks, j->ctoks, j->next_owner[0] ? j->next_owner : NULL,
                                on_finish, j)) {
        log_error(j->job.job_id, j->job.attempt, "out of memory recording the attempt; retrying");
        if (n) { /* nothing claimed: chosen again next time */
            wjob_free(n);
            j->next_owner[0] = '\0';
        }
        uv_timer_start(&j->timer, finish_retry_timer, 1000, 0);
        return;
    }
    j->awaiting = 1;
    /* The next attempt starts now, with the record that claims it on its
     * way, rather than one fsync'd Redis write later: the claim fails only
     * if this attempt was taken over (our lease lapsed), and then Redis
     * refuses the next attempt's record too.  Its tokens so far are what
     * the record adds to Redis's count.  A claim made is taken up even when
     * shutting down (the attempt is ours): n then goes at call_llm,
     * uncommitted, as any job before its call after the stop, and the
     * retry job's reader takes it over.  Sent again after an error, the
     * record finds it started (j is its shadow). */
    if (n) continue_with(j, n, 1, j->tokens_before + j->ptoks + j->ctoks);
}

static void finish_retry_timer(uv_timer_t *t) { record_attempt(t->data); }

/* ---- the decision ------------------------------------------------------- */

static void conclude(wjob *j, long retry_after_ms, int should_retry);

static void backoff_timer(uv_timer_t *t) {
    wjob *j = t->data;
    /* Past the deadline after the backoff: no call (it was let through
     * when the backoff began, and paid for after the deadline).  Decided
     * again, the deadline ends the job with what the last call gave. */
    if (j->job.deadline_ms > 0 && util_wall_ms() >= j->job.deadline_ms) {
        conclude(j, -1, 1);
        return;
    }
    j->tries++;
    call_llm(j);
}

static void conclude(wjob *j, long retry_after_ms, int should_retry) {
    worker *w = j->w;
    decide_input in = {0};
    in.category = j->cat;
    in.attempt = j->job.attempt;
    in.max_attempts = j->job.max_attempts;
    in.transient_retries = j->tries;
    in.max_transient_retries = should_retry == 0 ? 0 : w->max_transient;
    in.critical = is_critical(w, decide_category_name(j->cat));
    in.fixable = 1;
    const cJSON *v;
    cJSON_ArrayForEach(v, j->violations) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(v, "code");
        const cJSON *fixable = cJSON_GetObjectItemCaseSensitive(v, "fixable");
        if (cJSON_IsString(code) && is_critical(w, code->valuestring)) in.critical = 1;
        if (cJSON_IsFalse(fixable)) in.fixable = 0;
    }
    /* Budgets: tokens over every attempt so far, and the deadline. */
    long budget = j->job.token_budget ? j->job.token_budget : w->token_budget;
    long used = j->tokens_before + j->ptoks + j->ctoks;
    int over_tokens = budget > 0 && used >= budget;
    int past_deadline = j->job.deadline_ms > 0 && util_wall_ms() >= j->job.deadline_ms;
    in.budget_exceeded = over_tokens || past_deadline;
    j->action = decide(&in, j->reason, sizeof(j->reason));
    if (j->action == DECIDE_ESCALATE && in.budget_exceeded) {
        /* Say so when the budget, and nothing else, ended the job. */
        decide_input unbounded = in;
        unbounded.budget_exceeded = 0;
        char ignored[8];
        decide_action would = decide(&unbounded, ignored, sizeof(ignored));
        if (j->cat == DECIDE_CAT_BUDGET || would == DECIDE_RETRY || would == DECIDE_RETRY_IN_PLACE) {
            if (over_tokens)
                snprintf(j->reason, sizeof(j->reason), "token budget of %ld exceeded (%ld used) on attempt %d",
                         budget, used, j->job.attempt);
            else
                snprintf(j->reason, sizeof(j->reason), "deadline passed %s attempt %d",
                         j->cat == DECIDE_CAT_BUDGET ? "before" : "on", j->job.attempt);
            j->cat = DECIDE_CAT_BUDGET;
        }
    }
    if (j->action == DECIDE_RETRY_IN_PLACE && w->stopping) {
        /* the call goes again on the job's next owner (let_go_waiting) */
        log_info(j->job.job_id, j->job.attempt, "%s; stopping: left to the job's next owner (%s)", j->reason,
                 j->error);
        job_abandon(j);
        return;
    }
    if (j->action == DECIDE_RETRY_IN_PLACE) {
        uint64_t delay = (uint64_t)w->backoff_base << (j->tries < 20 ? j->tries : 20);
        if (delay > (uint64_t)w->backoff_max) delay = (uint64_t)w->backoff_max;
        delay = delay / 2 + (uint64_t)(rand() % (int)(delay / 2 + 1)); /* jitter: [d/2, d] */
        if (retry_after_ms >= 0 && (uint64_t)retry_after_ms > delay) delay = (uint64_t)retry_after_ms;
        if (delay > (uint64_t)w->backoff_max) delay = (uint64_t)w->backoff_max;
        log_info(j->job.job_id, j->job.attempt, "%s; again in %llu ms (%s)", j->reason,
                 (unsigned long long)delay, j->error);
        j->stage = STAGE_BACKOFF;
        uv_timer_start(&j->timer, backoff_timer, delay, 0);
        return;
    }
    record_attempt(j);
}

/* Not-fixable violations and those of a critical code go first so that
 * capping the list never hides them from the decision (a critical code
 * cut off cost the attempts left). */
static void trim_violations(const worker *w, cJSON *v, size_t max) {
    int moved = 0;
    for (int i = 0; i < cJSON_GetArraySize(v); i++) {
        cJSON *it = cJSON_GetArrayItem(v, i);
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(it, "code");
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(it, "fixable")) ||
            (cJSON_IsString(code) && is_critical(w, code->valuestring))) {
            cJSON_DetachItemViaPointer(v, it);
            cJSON_InsertItemInArray(v, moved++, it);
        }
    }
    while ((size_t)cJSON_GetArraySize(v) > max) cJSON_DeleteItemFromArray(v, cJSON_GetArraySize(v) - 1);
}

/* Returns 0 when the answer was parsed as JSON (so it is UTF-8), -1 when
 * not: the caller then checks its bytes before keeping them. */
static int validate_text(wjob *j) {
    worker *w = j->w;
    char err[256];
    cJSON *value = NULL;
    j->violations = cJSON_CreateArray();
    if (j->text_nul) {
        /* a NUL escaped in the JSON of the answer ("\\u0000" in the body)
         * is caught by extract_json; one in the text itself is this */
        j->cat = DECIDE_CAT_INVALID;
        cJSON_AddItemToArray(j->violations, violation("", "NOT_JSON",
            "the answer holds U+0000, the NUL character, which JSON text never holds: leave it out"));
        return -1;
    }
    if (extract_json(j->text, strlen(j->text), &value, err, sizeof(err))) {
        j->cat = DECIDE_CAT_INVALID;
        cJSON_AddItemToArray(j->violations, violation("", "NOT_JSON", err));
        return -1;
    }
    schema_violations sv = {0};
    const schema *s = j->os->compiled;
    int rc = schema_validate(s, value, &sv);
    if (rc == 0) {
        /* The schema holds: then the global rules, the schema's rules and
         * the plugins, all of them, so one repair can fix everything. */
        size_t nv = rules_check(w->global_rules, value, j->violations);
        nv += rules_check(j->os->rules, value, j->violations);
        nv += plugins_check(w->plugins, value, j->job.doc, j->violations);
        if (nv == 0) {
            j->cat = DECIDE_CAT_OK;
            j->value = value;
            return 0;
        }
        jsonin_free(value);
        trim_violations(w, j->violations, w->max_violations);
        j->cat = DECIDE_CAT_INVALID;
        return 0;
    }
    cJSON_Delete(j->violations);
    j->violations = schema_violations_to_json(&sv);
    trim_violations(w, j->violations, w->max_violations);
    schema_violations_clear(&sv);
    jsonin_free(value);
    j->cat = DECIDE_CAT_INVALID;
    return 0;
}

/* A model's limits: its own where set, else ratelimit.rpm / .tpm. */
static void rate_limits(const worker *w, const char *model, long *rpm, long *tpm) {
    *rpm = w->rl_rpm;
    *tpm = w->rl_tpm;
    size_t len = model ? strlen(model) : 0;
    for (size_t i = 0; i < w->rl_nmodels; i++) {
        const rl_model *m = &w->rl_models[i];
        if (m->len == len && !memcmp(m->name, model, len)) {
            if (m->rpm >= 0) *rpm = m->rpm;
            if (m->tpm >= 0) *tpm = m->tpm;
            return;
        }
    }
}

/* The buckets' name: the endpoint and the model.  0 = ok, -1 if it does
 * not fit (a cut name could be another model's). */
static int rate_key(const worker *w, const char *model, char *buf, size_t len) {
    int n = snprintf(buf, len, "%s|%s", w->rl_base, model ? model : "");
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* config_foreach_prefix over "ratelimit.": the MODEL.rpm / MODEL.tpm keys
 * (config_set let only those through).  rl_nmodels = SIZE_MAX when out of
 * memory. */
static void rl_collect(const char *key, const char *value, void *ud) {
    worker *w = ud;
    size_t n = strlen(key);
    if (w->rl_nmodels == SIZE_MAX || n < 5 || (strcmp(key + n - 4, ".rpm") && strcmp(key + n - 4, ".tpm"))) return;
    size_t len = n - 4;
    rl_model *m = NULL;
    for (size_t i = 0; i < w->rl_nmodels && !m; i++)
        if (w->rl_models[i].len == len && !memcmp(w->rl_models[i].name, key, len)) m = &w->rl_models[i];
    if (!m) {
        rl_model *p = realloc(w->rl_models, (w->rl_nmodels + 1) * sizeof(*p));
        if (!p) {
            w->rl_nmodels = SIZE_MAX;
            return;
        }
        w->rl_models = p;
        m = &p[w->rl_nmodels++];
        *m = (rl_model){key, len, -1, -1};
    }
    if (key[n - 3] == 'r') m->rpm = atol(value);
    else m->tpm = atol(value);
}

/* Settles the estimate a call was let in on against the tokens it used;
 * an answered call's usage also scales the next estimates (learn). */
static void rate_settle(wjob *j, long used, int learn) {
    worker *w = j->w;
    if (!w->rl_on) return;
    long rpm, tpm, diff = used - j->cost;
    rate_limits(w, j->model, &rpm, &tpm);
    char key[1024];
    if (tpm && diff && !rate_key(w, j->model, key, sizeof(key)))
        state_rate(w->st, key, rpm, tpm, diff, STATE_RATE_ADJUST, rate_noop, NULL);
    if (learn && used > 0) {
        w->rl_used = 0.9 * w->rl_used + (double)used;
        w->rl_est = 0.9 * w->rl_est + (double)j->cost_raw;
    }
}

/* A call let in by the rate limits and never made (its job let go at the
 * stop, or ended by its deadline before it), or made and never sent (the
 * connection refused, a call that could not start): its estimate and its
 * request go back, for the limit's next caller, here or in another
 * process.  j->cost is then what the buckets gave, or 0 when they gave
 * nothing (a Redis error let it through), when nothing was asked yet, or
 * when this call's share was settled already (on_llm_done); a model
 * without limits or a key asks nothing back. */
static void rate_unused(wjob *j) {
    worker *w = j->w;
    if (!w->rl_on || j->cost <= 0) return;
    long rpm, tpm;
    rate_limits(w, j->model, &rpm, &tpm);
    char key[1024];
    if ((rpm || tpm) && !rate_key(w, j->model, key, sizeof(key)))
        state_rate(w->st, key, rpm, tpm, -j->cost, STATE_RATE_UNUSED, rate_noop, NULL);
    j->cost = 0;
}

static void call_llm(wjob *j);

/* A call the account refused, under llm.on_account_error=pause: the
 * model's lane is held (one call a pause tries the account, llm_gate.h)
 * and the job goes back to wait at the gate, its attempt and its
 * transient retries unspent.  Its deadline still ends it (submit_now). */
static void account_hold(wjob *j) {
    worker *w = j->w;
    if (llm_gate_hold(w->gate, &j->gate_node, util_mono_ms() + (uint64_t)w->account_pause))
        log_warn(j->job.job_id, j->job.attempt,
                 "model %s: %s (%s): its calls are held, one tried every %ld ms until one goes through "
                 "(llm.on_account_error=pause)", j->model,
                 j->cat == DECIDE_CAT_QUOTA ? "the account's quota or credit is spent" : "the API key is refused",
                 j->error, w->account_pause);
    w->m.account_holds++;
    gate_leave(j, 0, -1);
    call_llm(j); /* while stopping, call_llm lets it go */
}

static void on_llm_done(void *ud, const llm_response *resp) {
    wjob *j = ud;
    worker *w = j->w;
    j->call = NULL;
    j->llm_ms += resp->latency_ms;
    j->http_status = resp->status;
    metrics_llm_call(&w->m, w->provider == LLM_PROVIDER_ANTHROPIC, resp->status);
    metrics_observe(&w->m.llm_latency, resp->latency_ms / 1000.0);
    if (resp->status == 0 && resp->transport == DECIDE_CAT_NETWORK) w->llm_net_fail_ms = util_mono_ms();
    else w->llm_ok_ms = util_mono_ms();
    free(j->text);
    j->text = NULL;
    j->text_nul = 0;
    cJSON_Delete(j->violations);
    j->violations = NULL;
    j->error[0] = '\0';
    if (resp->status == 0) {
        j->cat = resp->transport;
        util_concat(j->error, sizeof(j->error), resp->error, (char *)NULL);
        /* No answer.  A request never sent (the connection refused or
         * timed out, a failed TLS handshake) was neither worked on nor
         * counted: its estimate and its request go back, or an outage's
         * retries would leave the buckets owing for minutes after it.  A
         * request sent may have been counted (a reset after it): that
         * stays taken; its estimate goes back unless the call timed out,
         * when the model may have worked on it. */
        if (resp->unsent) rate_unused(j);
        else if (resp->transport != DECIDE_CAT_TIMEOUT) rate_settle(j, 0, 0);
    } else if (resp->too_large) {
        /* The model answered, at length: called again it answers at
         * length again, each time paid for (its tokens unknown: the
         * estimate stays spent).  A cut answer, repaired by asking for
         * less. */
        j->cat = DECIDE_CAT_TRUNCATED;
        snprintf(j->error, sizeof(j->error), "answer larger than llm.max_response_bytes (%lld bytes)",
                 config_get_int(w->cfg, "llm.max_response_bytes"));
    } else {
        llm_api_result res;
        llm_api_parse(w->provider, resp->status, resp->body, resp->body_len, &res);
        j->cat = res.category;
        j->ptoks += res.prompt_tokens;
        j->cache_r += res.cache_read_tokens;
        j->cache_w += res.cache_write_tokens;
        j->ctoks += res.completion_tokens;
        w->m.tokens[0] += (uint64_t)res.prompt_tokens;
        w->m.tokens[1] += (uint64_t)res.completion_tokens;
        rate_settle(j, res.prompt_tokens + res.completion_tokens, resp->status >= 200 && resp->status <= 299);
        j->text = res.text;
        j->text_nul = res.text_nul;
        res.text = NULL;
        util_concat(j->error, sizeof(j->error), res.error, (char *)NULL);
        llm_api_result_clear(&res);
    }
    /* This call's share of the buckets is settled (or stays spent): a
     * later call_failed before the next grant must not give it back. */
    j->cost = 0;
    /* The account refused (a spent quota, a refused key), not the job:
     * with llm.on_account_error=pause the job waits for the account. */
    if (w->account_pause && (j->cat == DECIDE_CAT_QUOTA || j->cat == DECIDE_CAT_AUTH) &&
        !(resp->status && resp->should_retry == 1)) {
        account_hold(j);
        return;
    }
    /* A spent quota's 429 is no rate limit: the model's lane learns
     * nothing from it (neither halved nor paused). */
    gate_leave(j, j->cat == DECIDE_CAT_QUOTA ? 0 : resp->status, resp->retry_after_ms);
    /* x-should-retry: true makes any failure transient. */
    if (resp->status && resp->should_retry == 1 && j->cat >= DECIDE_CAT_AUTH) j->cat = DECIDE_CAT_SERVER_ERROR;
    int utf8 = 0;
    switch (j->cat) {
    case DECIDE_CAT_OK:
        utf8 = validate_text(j) == 0;
        break;
    case DECIDE_CAT_TRUNCATED:
        j->violations = cJSON_CreateArray();
        cJSON_AddItemToArray(j->violations, violation("", "TRUNCATED", resp->too_large
            ? "the answer was longer than this service accepts; give a complete but more concise JSON value"
            : "the answer was cut off at the token limit; give a complete but more concise JSON value"));
        break;
    case DECIDE_CAT_EMPTY:
        j->violations = cJSON_CreateArray();
        cJSON_AddItemToArray(j->violations, violation("", "EMPTY_OUTPUT", "the answer was empty"));
        break;
    case DECIDE_CAT_REFUSAL:
        j->violations = cJSON_CreateArray();
        cJSON_AddItemToArray(j->violations, violation("", "REFUSAL", j->error));
        break;
    case DECIDE_CAT_CONTENT_FILTER:
        j->violations = cJSON_CreateArray();
        cJSON_AddItemToArray(j->violations, violation("", "CONTENT_FILTER", j->error));
        break;
    default:
        break;
    }
    /* Judged as it came; kept (records, the retry job's reflection, the
     * escalation) with bytes that are not UTF-8 replaced: the retry job
     * carrying them was dead-lettered on its way back, and the job lost.
     * An answer parsed as JSON was found UTF-8 there already. */
    size_t tlen = j->text && !utf8 ? strlen(j->text) : 0;
    if (tlen && !util_utf8_valid(j->text, tlen)) {
        char *scrubbed = util_utf8_scrub(j->text, tlen, NULL);
        free(j->text);
        j->text = scrubbed ? scrubbed : strdup("(an answer that is not UTF-8)");
    }
    conclude(j, resp->retry_after_ms, resp->should_retry);
}

static void gate_pump(worker *w);

/* A call that could not start ends as a network error would: the job
 * backs off and tries again. */
static void call_failed(wjob *j, const char *why) {
    llm_response resp = {0};
    resp.transport = DECIDE_CAT_NETWORK;
    resp.unsent = 1;
    resp.error = why;
    resp.retry_after_ms = -1;
    resp.should_retry = -1;
    on_llm_done(j, &resp);
}

/* The job's deadline passed before its call: no call (it would be paid
 * for and its answer come out as final); its rate estimate and request go
 * back. */
static void deadline_before_call(wjob *j) {
    free(j->body);
    j->body = NULL;
    rate_unused(j);
    j->cat = DECIDE_CAT_BUDGET;
    util_concat(j->error, sizeof(j->error), "deadline passed", (char *)NULL);
    conclude(j, -1, -1);
}

static void submit_now(wjob *j) {
    worker *w = j->w;
    /* Let through after the stop: only when let_go_waiting had no memory
     * for its list.  No call starts after the stop. */
    if (w->stopping) {
        gate_leave(j, 0, -1);
        rate_unused(j);
        job_abandon(j);
        return;
    }
    /* The deadline again: the wait for rate tokens can take a job past it
     * (the gate's own wait has its timer, gate_enter). */
    if (j->job.deadline_ms > 0 && util_wall_ms() >= j->job.deadline_ms) {
        gate_leave(j, 0, -1);
        deadline_before_call(j);
        return;
    }
    char *body = j->body;
    j->body = NULL;
    if (!body || llm_client_submit(w->llm, j->job.job_id, j->job.attempt, body, j->body_len, on_llm_done, j, &j->call))
        call_failed(j, "could not start the HTTP request");
}

static void rate_pump(rate_queue *q);
static void rate_alone_cb(uv_timer_t *t);
static void gate_enter(wjob *j);

/* The queue of a bucket pair, made on first use; NULL past
 * RATE_QUEUES_MAX models or out of memory. */
static rate_queue *rate_queue_of(worker *w, const char *key, long rpm, long tpm) {
    for (size_t i = 0; i < w->rl_nqueues; i++)
        if (!strcmp(w->rl_queues[i]->key, key)) return w->rl_queues[i];
    if (w->rl_nqueues == RATE_QUEUES_MAX) return NULL;
    rate_queue *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    memcpy(q->key, key, strlen(key) + 1); /* rate_key made it fit */
    q->rpm = rpm;
    q->tpm = tpm;
    w->rl_queues[w->rl_nqueues++] = q;
    return q;
}

/* The estimate a call is let in on: scaled at each try, not when the
 * request was built (a batch's jobs are built before any of their calls
 * is answered), by what calls really used so far against their estimates,
 * clamped: one odd answer must not make the next estimates absurd. */
static long rate_cost(const worker *w, const wjob *j) {
    if (w->rl_est <= 0) return j->cost_raw;
    double k = w->rl_used / w->rl_est;
    k = k < 0.05 ? 0.05 : k > 4 ? 4 : k;
    return (long)((double)j->cost_raw * k) + 1;
}

/* The head of q is let in (or the limiter failed: it must not stop the
 * pool): it leaves the queue, and the next one asks. */
static void rate_granted(rate_queue *q) {
    wjob *j = q->head;
    q->head = j->rate_next;
    if (!q->head) q->tail = NULL;
    j->rate_next = NULL;
    q->asking = 0;
    q->at_gate++;
    gate_enter(j);
    rate_pump(q);
}

/* j, let in by its rate queue, leaves the gate (its call starts, or could
 * not queue there): the queue may let the next one in. */
static void rate_left_gate(wjob *j) {
    rate_queue *q = j->rate_q;
    if (!q) return;
    j->rate_q = NULL;
    q->at_gate--;
    rate_pump(q);
}

/* Takes j out of its rate queue (anywhere in it: not the head while it
 * asks Redis, whose reply comes to it). */
static void rate_unqueue(wjob *j) {
    rate_queue *q = j->rate_q;
    wjob *prev = NULL, *it = q->head;
    while (it && it != j) {
        prev = it;
        it = it->rate_next;
    }
    if (it) {
        if (prev) prev->rate_next = j->rate_next;
        else q->head = j->rate_next;
        if (q->tail == j) q->tail = prev;
    }
    j->rate_next = NULL;
    j->rate_q = NULL;
    if (q->head == NULL) q->tail = NULL;
}

static int past_deadline(const wjob *j) { return j->job.deadline_ms > 0 && util_wall_ms() >= j->job.deadline_ms; }

/* A deadline timer came (the loop's clock, in whole ms, against the wall
 * clock of the deadline): 1 when the deadline has passed, else the timer
 * is armed again for what is left (or conclude would not see it passed). */
static int deadline_due(wjob *j, uv_timer_cb cb) {
    if (past_deadline(j)) return 1;
    uv_timer_start(&j->timer, cb, (uint64_t)(j->job.deadline_ms - util_wall_ms()) + 1, 0);
    return 0;
}

/* A job's deadline came while it waited in its rate queue: a queue moves
 * only as its jobs leave the gate, which can take hours when the lane is
 * held for the account.  The job ends now (deadline_before_call).  The
 * head asking Redis is left to the reply (on_rate looks). */
static void rate_deadline_cb(uv_timer_t *t) {
    wjob *j = t->data;
    rate_queue *q = j->rate_q;
    if (!q || j->gate_node.lane || (q->head == j && q->asking)) return;
    if (!deadline_due(j, rate_deadline_cb)) return;
    rate_unqueue(j);
    j->cost = 0; /* it took nothing */
    deadline_before_call(j);
    rate_pump(q);
}

static void rate_wait_cb(uv_timer_t *t) {
    wjob *j = t->data;
    rate_queue *q = j->rate_q;
    q->asking = 0;
    j->rate_waiting = 0;
    if (past_deadline(j)) {
        rate_unqueue(j);
        j->cost = 0;
        deadline_before_call(j);
    }
    rate_pump(q);
}

static void on_rate(void *ud, const state_reply *r) {
    wjob *j = ud;
    /* Let through without taking from the bucket: nothing to give back
     * at settle, only what the call used to take. */
    if (r->verdict == STATE_ERROR) j->cost = 0;
    int granted = r->verdict == STATE_ERROR || r->attempt <= 0;
    int past = past_deadline(j);
    if (past || j->w->stopping) { /* no call: its deadline ended it, or the stop lets it go (let_go_waiting) */
        rate_queue *q = j->rate_q;
        if (q) {
            q->asking = 0;
            rate_unqueue(j);
        }
        if (!granted) j->cost = 0;
        if (past) {
            deadline_before_call(j); /* gives back what it took */
        } else {
            rate_unused(j);
            job_abandon(j);
        }
        if (q) rate_pump(q);
        return;
    }
    if (granted) {
        if (j->rate_q) rate_granted(j->rate_q);
        else gate_enter(j);
        return;
    }
    /* not past the job's deadline: rate_wait_cb looks then */
    uint64_t wait = (uint64_t)r->attempt;
    if (j->job.deadline_ms > 0 && (uint64_t)(j->job.deadline_ms - util_wall_ms()) < wait)
        wait = (uint64_t)(j->job.deadline_ms - util_wall_ms());
    j->rate_waiting = 1;
    uv_timer_start(&j->timer, j->rate_q ? rate_wait_cb : rate_alone_cb, wait, 0);
}

/* The head of q asks Redis, unless it is asking already. */
static void rate_pump(rate_queue *q) {
    while (q->head && !q->asking && q->at_gate < RATE_AHEAD_MAX) {
        wjob *j = q->head;
        worker *w = j->w;
        if (w->stopping) { /* no call starts after the stop: nothing to ask for */
            rate_unqueue(j);
            j->cost = 0;
            job_abandon(j);
            continue;
        }
        j->cost = rate_cost(w, j);
        q->asking = 1;
        if (!state_rate(w->st, q->key, q->rpm, q->tpm, j->cost, STATE_RATE_TAKE, on_rate, j)) return;
        j->cost = 0;
        rate_granted(q); /* out of memory: not held back */
    }
}

/* A job of a model past RATE_QUEUES_MAX asks on its own. */
static void rate_alone(wjob *j) {
    worker *w = j->w;
    j->rate_q = NULL;
    long rpm, tpm;
    rate_limits(w, j->model, &rpm, &tpm);
    j->cost = rate_cost(w, j);
    char key[1024];
    if (rate_key(w, j->model, key, sizeof(key)) || state_rate(w->st, key, rpm, tpm, j->cost, STATE_RATE_TAKE, on_rate, j)) {
        j->cost = 0;
        gate_enter(j);
    }
}

static void rate_alone_cb(uv_timer_t *t) {
    wjob *j = t->data;
    j->rate_waiting = 0;
    if (j->w->stopping) { /* let_go_waiting had no memory for its list */
        j->cost = 0;
        job_abandon(j);
        return;
    }
    if (past_deadline(j)) {
        j->cost = 0;
        deadline_before_call(j);
        return;
    }
    rate_alone(j);
}

static void rate_acquire(wjob *j) {
    worker *w = j->w;
    j->rate_q = NULL;
    long rpm, tpm;
    rate_limits(w, j->model, &rpm, &tpm);
    char key[1024];
    /* no limit for this model, or a name too long for a key: not held back */
    if ((!rpm && !tpm) || rate_key(w, j->model, key, sizeof(key))) {
        j->cost = rate_cost(w, j);
        gate_enter(j);
        return;
    }
    rate_queue *q = rate_queue_of(w, key, rpm, tpm);
    if (!q) {
        rate_alone(j);
        return;
    }
    j->rate_q = q;
    if (q->tail) q->tail->rate_next = j;
    else q->head = j;
    q->tail = j;
    /* before the pump: asking, the head may be let in at once, and
     * gate_enter arms the timer anew */
    if (j->job.deadline_ms > 0) {
        int64_t left = j->job.deadline_ms - util_wall_ms();
        uv_timer_start(&j->timer, rate_deadline_cb, left > 0 ? (uint64_t)left : 0, 0);
    }
    rate_pump(q);
}

static void gate_timer_cb(uv_timer_t *t) { gate_pump(t->data); }

/* Starts the calls the gate lets through; while a lane waits out a
 * Retry-After, the timer comes back for it. */
static void gate_pump(worker *w) {
    uint64_t wake = llm_gate_pump(w->gate, util_mono_ms());
    if (wake) uv_timer_start(&w->gate_timer, gate_timer_cb, wake, 0);
}

/* A call let through the gate starts (its rate tokens, if any, were
 * taken before it queued there). */
static void gate_start(llm_gate_node *n, void *ud) {
    (void)ud;
    wjob *j = (wjob *)((char *)n - offsetof(wjob, gate_node));
    if (j->job.deadline_ms > 0) uv_timer_stop(&j->timer); /* gate_deadline_cb */
    rate_left_gate(j);
    submit_now(j);
}

/* A job's deadline came while it waited at the gate (its lane paused by a
 * Retry-After, held for the account, or at its limit behind a backlog):
 * it ends now, as budget, not when the gate would have let it through. */
static void gate_deadline_cb(uv_timer_t *t) {
    wjob *j = t->data;
    if (!deadline_due(j, gate_deadline_cb)) return;
    if (llm_gate_cancel(j->w->gate, &j->gate_node)) return; /* started: gate_start stops this timer */
    rate_left_gate(j);
    deadline_before_call(j);
}

/* Into the gate (after the shared rate limits, when there are any): a job
 * waiting for rate tokens held a slot of the process bound, so a model
 * with a low limit and a backlog took every slot, and the other models'
 * calls went at its pace. */
static void gate_enter(wjob *j) {
    worker *w = j->w;
    if (w->stopping) { /* after the stop only when a rate ask could not be sent (no memory) */
        rate_unused(j);
        rate_left_gate(j);
        job_abandon(j);
        return;
    }
    if (llm_gate_push(w->gate, j->model, &j->gate_node)) {
        rate_left_gate(j);
        call_failed(j, "out of memory at the LLM gate");
        return;
    }
    if (j->job.deadline_ms > 0) {
        int64_t left = j->job.deadline_ms - util_wall_ms();
        uv_timer_start(&j->timer, gate_deadline_cb, left > 0 ? (uint64_t)left : 0, 0);
    }
    gate_pump(w);
}

/* After a call: its model's lane learns from the status (llm_gate.h),
 * and the next calls may start. */
static void gate_leave(wjob *j, long status, long retry_after_ms) {
    worker *w = j->w;
    double before = 0, after = 0;
    /* a probe's 2xx lifts a hold (llm_gate_leave); a call let in before it, nothing */
    int lifts = status >= 200 && status < 300 && j->gate_node.probe && llm_gate_held(&j->gate_node);
    if (llm_gate_leave(w->gate, &j->gate_node, status, retry_after_ms, util_mono_ms(), &before, &after))
        log_warn(j->job.job_id, j->job.attempt, "rate limited (429) on model %s: concurrency limit %.0f -> %.0f",
                 j->model, before, after);
    if (lifts) log_info(j->job.job_id, j->job.attempt, "model %s: answered again: its held calls go on", j->model);
    gate_pump(w);
}

static void call_llm(wjob *j) {
    worker *w = j->w;
    if (w->stopping) { /* no call starts after the stop (let_go_waiting) */
        job_abandon(j);
        return;
    }
    j->stage = STAGE_LLM;
    int sends = llm_api_sends_schema(w->provider, w->rf, j->job.params);
    const char *schema_text = sends ? NULL : j->schema_text;
    /* On the stack unless the job brings a long conversation. */
    llm_api_message inl[8], *msgs = inl;
    size_t n = job_messages(&j->job, schema_text, inl, 8);
    if (n > 8) {
        if (!(msgs = malloc(n * sizeof(*msgs)))) {
            call_failed(j, "out of memory building the request");
            return;
        }
        job_messages(&j->job, schema_text, msgs, n);
    }
    llm_api_request req = {w->provider, j->model, msgs, n, j->job.params, j->schema_doc,
                           j->schema_name, w->rf, w->max_tokens, j->schema_text,
                           j->os->strict, w->prompt_cache};
    free(j->body);
    j->body = llm_api_build_body(&req, &j->body_len);
    if (msgs != inl) free(msgs);
    /* Tokens a request may use: its prompt (about 4 bytes a token) and the
     * completion budget; settled against real usage afterwards. */
    j->cost_raw = (long)(j->body ? j->body_len / 4 : 0) + w->max_tokens / 4;
    j->cost = j->cost_raw;
    if (w->rl_on) rate_acquire(j);
    else gate_enter(j);
}

static void rate_noop(void *ud, const state_reply *r) {}

/* ---- Redis: begin ------------------------------------------------------- */

/* Lets a message go unhandled (at shutdown, one waiting for another
 * worker's attempt): its offset stays pending, so it is never committed
 * and comes again to whoever has the partition next.  Its parked
 * duplicates go with it. */
static void job_abandon(wjob *j) {
    worker *w = j->w;
    map_del(w, j);
    for (wjob *d = j, *next; d; d = next) {
        next = d == j ? j->dups : d->dup_next;
        slot_drop(d);
        wjob_free(d); /* a shadow's report then comes to nothing */
    }
    check_drained(w);
}

/* A message that waits to ask Redis again (for another worker's attempt,
 * or because Redis did not answer) holds no call: while stopping it goes,
 * uncommitted.  With Redis down, those begun again each second held the
 * drain for its whole timeout. */
static int may_abandon(const wjob *j) {
    return (j->stage == STAGE_WAIT || j->stage == STAGE_BEGIN) && uv_is_active((const uv_handle_t *)&j->timer);
}

/* Waiting before its call with no Redis op of its own pending: at the
 * gate, in its rate queue (not while it asks Redis: the reply comes to
 * it), told by the rate limiter to wait, or in a backoff. */
static int unstarted(const wjob *j) {
    if (j->stage == STAGE_BACKOFF) return uv_is_active((const uv_handle_t *)&j->timer);
    if (j->stage != STAGE_LLM || j->call) return 0;
    if (j->gate_node.lane || j->rate_waiting) return 1;
    return j->rate_q && !(j->rate_q->head == j && j->rate_q->asking);
}

/* j, unstarted, leaves the gate or its rate queue (its tokens, if it took
 * any, given back) and is let go. */
static void let_go_unstarted(wjob *j) {
    rate_queue *q = NULL;
    uv_timer_stop(&j->timer); /* a deadline's, a rate wait's or a backoff's */
    if (!llm_gate_cancel(j->w->gate, &j->gate_node)) {
        rate_unused(j);
        rate_left_gate(j);
    } else if (j->rate_q) {
        q = j->rate_q;
        if (j->rate_waiting) q->asking = 0; /* the head's wait: no reply to come */
        rate_unqueue(j);
    }
    j->rate_waiting = 0;
    job_abandon(j);
    if (q) rate_pump(q);
}

/* At the stop, the messages that hold nothing paid for go (uncommitted):
 * those waiting for another worker's attempt or to ask Redis again, and
 * the jobs waiting before their calls.  No call starts after the stop: a
 * call begun during the drain may outlast it (a lane paused by
 * Retry-After, held for the account, at its limit behind calls of 30 s, a
 * backoff) and then be paid for again by the job's next owner.  The jobs
 * this cannot let go yet go where they would go on: one asking Redis for
 * rate tokens (the head of its queue, or one asking on its own) at its
 * reply (on_rate), one whose call fails during the drain in conclude,
 * one whose claim's reply comes after the stop in call_llm; the rest of
 * a rate queue goes in rate_pump.  (gate_enter and submit_now check too,
 * for when this has no memory for its list.)  Their claims lapse with
 * this process's lease (worker.lease_ms), and whoever reads the messages
 * next takes the attempts over, nothing spent. */
static void let_go_waiting(worker *w) {
    size_t nwait = 0;
    for (wjob *j = w->jobs; j; j = j->next) nwait += may_abandon(j) || unstarted(j);
    wjob **waiting = nwait ? malloc(nwait * sizeof(*waiting)) : NULL;
    nwait = 0;
    for (wjob *j = w->jobs; j && waiting; j = j->next)
        if (may_abandon(j) || unstarted(j)) waiting[nwait++] = j;
    /* (a waiting job is never another's parked duplicate) */
    for (size_t i = 0; i < nwait; i++) {
        wjob *j = waiting[i];
        /* One let go may have let another in at the gate (its rate queue
         * moved on), which gate_enter let go already, or made it ask
         * Redis: looked at again.  A freed job's memory lasts until its
         * timer's close callback, on a later turn of the loop. */
        if (j->stage == STAGE_DONE) continue;
        if (may_abandon(j)) job_abandon(j);
        else if (unstarted(j)) let_go_unstarted(j);
    }
    free(waiting);
}

static void begin_retry_timer(uv_timer_t *t) {
    wjob *j = t->data;
    if ((j->stage == STAGE_WAIT || j->stage == STAGE_BEGIN) && j->w->stopping) {
        job_abandon(j);
        return;
    }
    job_begin(j);
}

/* A claim's owner: this process's incarnation and a number of its own. */
static void new_owner(worker *w, char *owner, size_t size) {
    char seq[24];
    util_ltoa((long long)++w->seq, seq);
    util_concat(owner, size, w->incarnation, ":", seq, (char *)NULL);
}

/* The incarnation part of an owner ("id:nonce:seq"): its length. */
static size_t owner_holder_len(const char *owner) {
    const char *colon = strrchr(owner, ':');
    return colon ? (size_t)(colon - owner) : strlen(owner);
}

/* That part into holder (the key of its lease), cut to size. */
static void owner_holder(const char *owner, char *holder, size_t size) {
    size_t hl = owner_holder_len(owner);
    if (hl >= size) hl = size - 1;
    memcpy(holder, owner, hl);
    holder[hl] = '\0';
}

static void on_owner_lease(void *ud, const state_reply *r) {
    wjob *j = ud;
    worker *w = j->w;
    if (r->verdict == STATE_ERROR) {
        log_error(j->job.job_id, j->job.attempt, "reading a worker's lease: %s; retrying", r->error);
        uv_timer_start(&j->timer, begin_retry_timer, 1000, 0);
        return;
    }
    if (w->stopping) {
        job_abandon(j);
        return;
    }
    uint64_t mono = util_mono_ms(), back = state_back_ms(w->st);
    if (r->attempt != 1 && back && mono - back < (uint64_t)w->lease_ms) {
        /* Redis came back to this process less than a lease ago: the
         * lease may be gone with Redis (down past its TTL, or restarted
         * without it) while its owner lives, its renewal waiting for that
         * owner's own reconnect (or, refused while Redis loaded, for its
         * next try).  Taken for gone then, the attempt was paid for
         * twice; it is, a lease after Redis answered again. */
        log_info(j->job.job_id, j->job.attempt, "%s holds no lease, just after Redis came back; looking again in "
                 "%llu ms", j->other, (unsigned long long)(back + (uint64_t)w->lease_ms - mono));
        uv_timer_start(&j->timer, begin_retry_timer, back + (uint64_t)w->lease_ms - mono + 1, 0);
        return;
    }
    uint64_t now = uv_now(w->loop);
    if (!j->wait_start_ms) j->wait_start_ms = now ? now : 1;
    uint64_t waited = now - j->wait_start_ms;
    if (r->attempt == 1 && waited < w->takeover_after_ms) {
        /* Its owner lives (a rebalance moved the partition while the call
         * runs there, or another group reads the topic): calling the LLM
         * too would pay for the attempt twice.  Look again later; the
         * owner's outcome then ends this message. */
        if (!j->wait_ms) {
            log_info(j->job.job_id, j->job.attempt, "%s holds this attempt; waiting for its outcome", j->other);
            w->m.owner_waits++;
        }
        j->wait_ms = j->wait_ms ? (j->wait_ms >= 4000 ? 8000 : j->wait_ms * 2) : 250;
        uv_timer_start(&j->timer, begin_retry_timer, j->wait_ms, 0);
        return;
    }
    if (r->attempt == 1)
        log_warn(j->job.job_id, j->job.attempt, "waited %llu ms for %s; taking the attempt over",
                 (unsigned long long)waited, j->other);
    else
        log_info(j->job.job_id, j->job.attempt, "%s is gone; taking its attempt over", j->other);
    memcpy(j->takeover, j->other, sizeof(j->takeover));
    j->takeover_unleased = r->attempt != 1;
    j->takeover_uncounted = 1;
    job_begin(j);
}

/* The attempt (or its outcome's delivery) belongs to owner: 1 when that is
 * another process whose liveness must be read first (on_owner_lease then
 * goes on), 0 when this message may act now (the owner was found gone
 * already, or it is this process, which no longer holds the attempt). */
static int owner_elsewhere(wjob *j, const char *owner) {
    worker *w = j->w;
    if (!owner || !owner[0] || !strcmp(owner, j->takeover)) return 0;
    j->takeover_uncounted = 0; /* not the owner it decided to take over from */
    size_t hl = owner_holder_len(owner);
    if (hl == strlen(w->incarnation) && !memcmp(owner, w->incarnation, hl)) {
        util_concat(j->takeover, sizeof(j->takeover), owner, (char *)NULL);
        j->takeover_unleased = 0; /* its own lease is held, by this process */
        return 0;
    }
    char holder[160];
    owner_holder(owner, holder, sizeof(holder));
    if (strcmp(owner, j->other)) {
        /* Another owner than the one waited for (it took the attempt over
         * meanwhile): its grace starts now.  Measured from the first
         * owner, a live one was taken over at once, and the attempt paid
         * for a third time. */
        j->wait_start_ms = 0;
        j->wait_ms = 0;
    }
    util_concat(j->other, sizeof(j->other), owner, (char *)NULL);
    j->stage = STAGE_WAIT;
    if (state_lease(w->st, holder, 0, on_owner_lease, j)) uv_timer_start(&j->timer, begin_retry_timer, 1000, 0);
    return 1;
}

/* The attempt is claimed (tokens_used recorded over earlier attempts):
 * call the LLM, unless the job ends before. */
static void job_go(wjob *j, long tokens_used) {
    j->start_us = util_mono_us();
    j->start_wall = util_wall_ms();
    j->tokens_before = tokens_used;
    if (j->job.deadline_ms > 0 && j->start_wall >= j->job.deadline_ms) {
        j->cat = DECIDE_CAT_BUDGET;
        snprintf(j->error, sizeof(j->error), "deadline passed");
        conclude(j, -1, -1);
        return;
    }
    if (!j->schema_doc) {
        j->cat = j->schema_invalid ? DECIDE_CAT_INVALID_SCHEMA : DECIDE_CAT_UNKNOWN_SCHEMA;
        snprintf(j->error, sizeof(j->error), "%s", j->schema_error);
        j->violations = cJSON_CreateArray();
        cJSON_AddItemToArray(j->violations, violation("", j->schema_invalid ? "INVALID_SCHEMA" : "UNKNOWN_SCHEMA",
                                                      j->schema_error));
        conclude(j, -1, -1);
        return;
    }
    call_llm(j);
}

/* A takeover decided (on_owner_lease) is counted once it is made: begin
 * let it run the attempt or deliver the outcome (not when the owner came
 * back, another took it first, or the job was over). */
static void takeover_made(wjob *j) {
    if (!j->takeover_uncounted) return;
    j->takeover_uncounted = 0;
    j->w->m.takeovers++;
}

static void on_begin(void *ud, const state_reply *r) {
    wjob *j = ud;
    worker *w = j->w;
    switch (r->verdict) {
    case STATE_GO:
        takeover_made(j);
        job_go(j, r->tokens_used);
        return;
    case STATE_BUSY:
        if (!owner_elsewhere(j, r->owner)) job_begin(j); /* takes over */
        return;
    case STATE_ALIVE:
        /* The owner found gone renewed its lease since: it was slow (a
         * stall longer than a lease), not dead.  Wait for it again, as
         * for any live owner; its wait goes on from when it began. */
        log_info(j->job.job_id, j->job.attempt, "%s holds its lease again; not taking its attempt over", r->owner);
        j->takeover[0] = '\0';
        j->takeover_unleased = 0;
        j->takeover_uncounted = 0;
        if (!owner_elsewhere(j, r->owner)) job_begin(j);
        return;
    case STATE_DONE:
        if (r->history && r->published < r->attempt && cJSON_GetArraySize(r->history) > 0) {
            /* Decided earlier but its event may not have left: unless its
             * owner lives and will deliver it, produce it again with the
             * same event id. */
            if (owner_elsewhere(j, r->owner)) return;
            takeover_made(j);
            log_info(j->job.job_id, j->job.attempt, "job already %s; republishing its outcome", r->status);
            build_from_history(j, r->status, r->history);
            produce_outcome(j);
            return;
        }
        if (r->published < r->attempt) {
            /* Its event may not have left, and there is nothing to make
             * it from: the records hold the output and the audit trail,
             * and the hash outlived them (an evicting Redis).  Another
             * event (an escalation, a new call's final) could contradict
             * one delivered after all; so it is said loudly instead. */
            log_warn(j->job.job_id, j->job.attempt, "job already %s, but its attempt records are gone from Redis "
                     "(evicted?): its outcome event may never have been delivered and cannot be made again; "
                     "skipping", r->status);
            w->m.records_lost++;
        } else {
            log_info(j->job.job_id, j->job.attempt, "job already %s; skipping", r->status);
        }
        w->n_skipped++;
        w->m.jobs[METRICS_SKIPPED]++;
        job_done(j);
        return;
    case STATE_RETRIED:
        if (r->published < r->attempt && owner_elsewhere(j, r->owner)) return;
        if (r->published < r->attempt) takeover_made(j);
        if (r->history && r->published < r->attempt && cJSON_GetArraySize(r->history) > 0) {
            const cJSON *rec = cJSON_GetArrayItem(r->history, 0);
            const cJSON *reason = cJSON_GetObjectItemCaseSensitive(rec, "reason");
            const cJSON *out = cJSON_GetObjectItemCaseSensitive(rec, "output");
            log_info(j->job.job_id, j->job.attempt, "retry already decided; republishing it");
            /* the reply is gone once this returns: the job keeps what a
             * smaller retry would be cut from, as after its own attempt */
            util_concat(j->reason, sizeof(j->reason), cJSON_IsString(reason) ? reason->valuestring : "retry",
                        (char *)NULL);
            cJSON_Delete(j->violations);
            j->violations = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(rec, "violations"), 1);
            free(j->text);
            j->text = strdup(cJSON_IsString(out) ? out->valuestring : "");
            build_retry(j, r->attempt, 0);
            produce_outcome(j);
            return;
        }
        if (r->published < r->attempt && r->attempt == j->job.attempt) {
            /* The retry job never left and the attempt's record is gone
             * (Redis lost the list but not the hash).  Skipping would lose
             * the job; without the record there is nothing to repair from,
             * so the next attempt asks afresh (no reflection).  The
             * attempts left still bound it. */
            log_warn(j->job.job_id, j->job.attempt, "retry decided but not delivered, and its record is missing; "
                     "republishing it without a reflection");
            set_event(j, EVENT_RETRY, w->t_jobs, r->attempt, NULL, job_retry_value(&j->job, NULL));
            produce_outcome(j);
            return;
        }
        w->n_skipped++;
        w->m.jobs[METRICS_SKIPPED]++;
        job_done(j);
        return;
    case STATE_STALE:
        log_info(j->job.job_id, j->job.attempt, "stale message (job is at attempt %d, %s); skipping",
                 r->attempt, r->status);
        w->n_skipped++;
        w->m.jobs[METRICS_SKIPPED]++;
        job_done(j);
        return;
    default:
        log_error(j->job.job_id, j->job.attempt, "reading job state: %s; retrying", r->error ? r->error : "?");
        uv_timer_start(&j->timer, begin_retry_timer, 1000, 0);
        return;
    }
}

static void job_begin(wjob *j) {
    worker *w = j->w;
    if (!j->set_up) job_setup(j); /* not for a message skipped unbegun */
    j->stage = STAGE_BEGIN;
    new_owner(w, j->owner, sizeof(j->owner));
    char holder[160];
    owner_holder(j->takeover, holder, sizeof(holder));
    if (state_begin(w->st, j->job.job_id, j->job.run, j->job.attempt, j->job.max_attempts, j->owner,
                    j->job.batch_id, j->takeover[0] ? j->takeover : NULL, j->takeover_unleased ? holder : NULL,
                    on_begin, j))
        uv_timer_start(&j->timer, begin_retry_timer, 1000, 0);
}

/* ---- output schemas ----------------------------------------------------- */

/* The parts of an output schema the worker uses, from sd (taken: held as
 * os->doc): Retort's own settings ("x-retort": max_attempts, rules) are
 * taken out of it, so that they stay out of what the model is sent.  0 =
 * ok; -1 with the message in err (os is then cleared by the caller). */
static int out_schema_fill(out_schema *os, cJSON *sd, char *err, size_t errlen) {
    int rc = 0;
    os->doc = sd;
    cJSON *xr = cJSON_DetachItemFromObjectCaseSensitive(sd, "x-retort");
    if (!(os->text = jsonout_print(sd))) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
        goto done;
    }
    os->strict = llm_api_schema_is_strict(sd);
    const cJSON *xm = cJSON_GetObjectItemCaseSensitive(xr, "max_attempts");
    /* an inline schema is a job's: 1e300 is no int (retry.max_attempts_ceiling
     * caps it again) */
    os->max_attempts = cJSON_IsNumber(xm) && xm->valuedouble >= 1 ? (int)util_clamp_ll(xm->valuedouble, 1, 1000) : 0;
    const cJSON *xrules = cJSON_GetObjectItemCaseSensitive(xr, "rules");
    if (xrules && !(os->rules = rules_compile_prefix(xrules, "x-retort/rules", err, errlen))) rc = -1;
done:
    cJSON_Delete(xr);
    return rc;
}

/* Frees what out_schema_fill made and the name; not the compiled schema
 * (a named one's is freed with it, an inline one's by the cache). */
static void out_schema_clear(out_schema *os) {
    free(os->name);
    rules_free(os->rules);
    cJSON_Delete(os->doc);
    free(os->text);
}

/* schema_cache's user_free: an inline schema's out_schema */
static void inline_schema_free(void *user) {
    out_schema_clear(user);
    free(user);
}

/* ---- messages in -------------------------------------------------------- */

static void resolve_schema(wjob *j) {
    worker *w = j->w;
    const cJSON *s = j->job.schema;
    if (cJSON_IsString(s)) {
        for (size_t i = 0; i < w->nschemas; i++) {
            if (!strcmp(w->schemas[i].name, s->valuestring)) {
                j->os = &w->schemas[i];
                j->schema_name = j->os->name;
                j->schema_doc = j->os->doc;
                j->schema_text = j->os->text;
                return;
            }
        }
        j->schema_name = s->valuestring;
        snprintf(j->schema_error, sizeof(j->schema_error), "unknown schema '%s' (not in %s)",
                 s->valuestring, config_get(w->cfg, "schemas.dir"));
        util_utf8_cut_end(j->schema_error);
        return;
    }
    j->schema_name = "inline";
    char err[192];
    j->inline_ent = schema_cache_get(w->scache, s, err, sizeof(err));
    if (!j->inline_ent) {
        snprintf(j->schema_error, sizeof(j->schema_error), "inline schema does not compile: %s", err);
        util_utf8_cut_end(j->schema_error);
        j->schema_invalid = 1;
        return;
    }
    /* An inline schema is an output schema like the named ones, x-retort
     * settings included, made once with its compiled form. */
    if (!j->inline_ent->user) {
        out_schema *os = calloc(1, sizeof(*os));
        cJSON *sd = cJSON_Duplicate(s, 1);
        if (!os || !sd || !(os->name = strdup("inline"))) {
            snprintf(err, sizeof(err), "out of memory");
            cJSON_Delete(sd);
        } else {
            os->compiled = (schema *)j->inline_ent->compiled;
            if (!out_schema_fill(os, sd, err, sizeof(err))) {
                j->inline_ent->user = os;
                os = NULL;
            }
        }
        if (os) inline_schema_free(os);
        if (!j->inline_ent->user) {
            snprintf(j->schema_error, sizeof(j->schema_error), "inline schema: %s", err);
            j->schema_invalid = 1;
            return;
        }
    }
    j->os = j->inline_ent->user;
    j->schema_doc = j->os->doc;
    j->schema_text = j->os->text;
}

/* What a parsed job needs before it begins (job_begin): its model and
 * schema. */
static void job_setup(wjob *j) {
    worker *w = j->w;
    j->set_up = 1;
    j->model = j->job.model ? j->job.model : w->default_model;
    resolve_schema(j);
    if (!j->job.max_attempts_set && j->os && j->os->max_attempts)
        j->job.max_attempts = j->os->max_attempts < w->max_attempts_ceiling ? j->os->max_attempts
                                                                          : w->max_attempts_ceiling;
}

static int on_message(void *ud, const rd_kafka_message_t *msg) {
    worker *w = ud;
    if (w->stopping || slots_full(w) || !state_connected(w->st)) return 1;
    wjob *j = wjob_new(w, msg->partition, msg->offset, 0);
    if (!j) return 1;
    int64_t rewound_from;
    j->epoch = offsets_add(w->offs, msg->partition, msg->offset, &rewound_from);
    if (rewound_from >= 0)
        log_warn(NULL, 0, "%s[%d] moved back from offset %lld to %lld (an offset reset?): its jobs in flight "
                 "from %lld on will store no offset, and their messages come again; no offset is committed "
                 "past those below it until they are done", w->t_jobs, msg->partition, (long long)rewound_from,
                 (long long)msg->offset, (long long)msg->offset);
    if (!j->epoch) {
        /* Untracked, the message's offset would be committed past it by
         * the later ones of its partition: a restart is the safe way on. */
        log_error(NULL, 0, "out of memory tracking %s[%d]@%lld; exiting", w->t_jobs, msg->partition,
                  (long long)msg->offset);
        exit(3);
    }
    w->inflight++;

    char err[512], id[EVENTS_SUBJECT_MAX];
    cJSON *violations = NULL;
    if (job_parse(msg->payload, msg->len, w->envelope, w->default_max_attempts,
                  w->max_attempts_ceiling, &j->job, &violations, id, sizeof(id), err, sizeof(err))) {
        log_warn(id[0] ? id : NULL, 0, "dead letter %s[%d]@%lld: %s", w->t_jobs, msg->partition,
                 (long long)msg->offset, err);
        cJSON *ev = events_dead_letter(err, violations, id, w->t_jobs, msg->partition, msg->offset,
                                       msg->key, msg->key_len, msg->payload, msg->len, util_wall_ms());
        cJSON_Delete(violations);
        char subject[320];
        snprintf(subject, sizeof(subject), "%s/%d/%lld", w->t_jobs, msg->partition, (long long)msg->offset);
        j->is_dlq = 1;
        /* A key may be any bytes (a serialized integer holds zeros). */
        if (msg->key && (j->msg_key = malloc(msg->key_len ? msg->key_len : 1))) {
            memcpy(j->msg_key, msg->key, msg->key_len);
            j->msg_key_len = msg->key_len;
        }
        free(j->ev_value);
        j->ev_value = jsonout_print(ev);
        cJSON_Delete(ev);
        j->ev_topic = w->t_dlq;
        j->ev_type = EVENT_DEAD_LETTER;
        events_headers_init(&j->hdr, EVENT_DEAD_LETTER, subject, 1, 0, w->source, util_wall_ms());
        if (id[0]) snprintf(j->hdr.subject, sizeof(j->hdr.subject), "%s", id);
        produce_outcome(j);
        return 0;
    }
    if (ran_here(w, j)) {
        skip_ran_here(j);
        return 0;
    }
    wjob *active = map_find(w, j->job.job_id);
    if (active && active->stage == STAGE_PRODUCE && active->ev_type == EVENT_RETRY &&
        j->job.attempt == active->ev_attempt + 1) {
        /* The retry job `active` is producing, back from Kafka before its
         * delivery report: the next attempt goes ahead now.  All `active`
         * still waits for is the report, to store its own offset; Redis
         * has its record already, so the two never touch the same state. */
        map_del(w, active);
        j->dups = active->dups;
        active->dups = NULL;
        active = NULL;
    }
    if (active) {
        /* The same job is in flight here already (a duplicate message):
         * wait for it, then look at Redis, which will say it is done. */
        wjob **pp = &active->dups;
        while (*pp) pp = &(*pp)->dup_next;
        *pp = j;
        log_debug(j->job.job_id, j->job.attempt, "waiting behind the message of this job in flight here");
        return 0;
    }
    map_put(w, j);
    job_begin(j);
    return 0;
}

static void on_revoke(void *ud, const rd_kafka_topic_partition_list_t *parts) {
    worker *w = ud;
    /* Jobs of revoked partitions run on (their outcome is idempotent in
     * Redis); their offsets are no longer ours to store. */
    for (int i = 0; i < parts->cnt; i++) offsets_drop(w->offs, parts->elems[i].partition);
}

static void on_redis_conn(void *ud, int connected) {
    worker *w = ud;
    if (!w->kio) return;
    if (!connected) {
        log_warn(NULL, 0, "redis unavailable: not taking new jobs");
        kafka_io_pause(w->kio);
    } else {
        maybe_resume(w);
    }
}

/* ---- start and stop ----------------------------------------------------- */

static void lease_renew(uv_timer_t *t);

/* Left to the state module, a refused renewal (READONLY, LOADING, NOAUTH)
 * was logged as a failed delivery mark with no job id. */
static void on_lease_renewed(void *ud, const state_reply *r) {
    worker *w = ud;
    if (r->verdict != STATE_ERROR) {
        if (w->lease_refusals)
            log_info(NULL, 0, "the worker's lease is renewed, after %llu failed tries",
                     (unsigned long long)w->lease_refusals);
        w->lease_refusals = 0;
        return;
    }
    uint64_t every = (uint64_t)w->lease_ms / 3, soon = every < 500 ? every : 500;
    /* Said once until it is renewed: a Redis refusing writes for minutes
     * (out of memory, a replica) refuses it twice a second. */
    if (!w->lease_refusals++)
        log_warn(NULL, 0, "renewing the worker's lease failed: %s (once it lapses, other workers take "
                 "this worker's attempts over); trying again every %llu ms until it is renewed", r->error,
                 (unsigned long long)soon);
    /* not a third of a lease later: a Redis back from a restart (LOADING
     * until then) lost the lease, and other workers wait only a lease for
     * it to come back (a draining worker's attempts still need it) */
    if (uv_is_active((uv_handle_t *)&w->lease_timer)) uv_timer_start(&w->lease_timer, lease_renew, soon, every);
}

/* This process's lease: while it holds, other workers wait for the
 * attempts it owns instead of paying for them again.  Renewed three times
 * a lease; a dead process's lapses within worker.lease_ms. */
static void lease_renew(uv_timer_t *t) {
    worker *w = t->data;
    if (state_lease(w->st, w->incarnation, w->lease_ms, on_lease_renewed, w))
        log_warn(NULL, 0, "out of memory renewing the worker's lease");
}

/* Closing the Kafka clients blocks in librdkafka (the final commit, the
 * group leave, the producer flush), with no way to interrupt it; a broker
 * that never answers, or a librdkafka hang, must not keep a stopped worker
 * alive.  Past the deadline the process exits: offsets not committed are
 * delivered again and Redis answers those jobs without an LLM call. */
typedef struct close_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    uint64_t timeout_ms;
} close_watchdog;

static void *close_watchdog_run(void *arg) {
    close_watchdog *cw = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(cw->timeout_ms / 1000);
    until.tv_nsec += (long)(cw->timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&cw->mu);
    int rc = 0;
    while (!cw->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&cw->cv, &cw->mu, &until);
    int done = cw->done;
    pthread_mutex_unlock(&cw->mu);
    if (!done) {
        log_error(NULL, 0, "closing the Kafka clients took over %llu ms; exiting without them",
                  (unsigned long long)cw->timeout_ms);
        _exit(1);
    }
    return NULL;
}

/* The loop thread's log lines are written once per loop turn, right
 * before the loop waits: one write() instead of one per job. */
static void log_prep_cb(uv_prepare_t *h) { log_flush(); }

static void loop_close_walk(uv_handle_t *h, void *arg) {
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void shutdown_now(worker *w) {
    if (w->stopping == 2) return;
    w->stopping = 2;
    uv_timer_stop(&w->drain_timer);
    uv_timer_stop(&w->drain_poll);
    log_info(NULL, 0, "stopping: %lu final, %lu retries, %lu escalated, %lu dead letters, %lu skipped; %zu jobs unfinished",
             w->n_final, w->n_retry, w->n_esc, w->n_dlq, w->n_skipped, w->inflight);
    uv_stop(w->loop);
}

static void check_drained(worker *w) {
    /* the delivered-outcome marks too: sent at the end of the loop turn
     * (drain_poll looks again), they spare a restarted worker the events
     * it would otherwise produce again */
    if (w->stopping == 1 && w->inflight == 0 && (!w->hook || webhook_pending(w->hook) == 0) &&
        (!w->st || !state_connected(w->st) || state_pending(w->st) == 0))
        shutdown_now(w);
}

static void drain_timeout(uv_timer_t *t) {
    worker *w = t->data;
    log_warn(NULL, 0, "drain timeout: %zu jobs unfinished (their offsets stay uncommitted), %zu escalation webhook "
             "call(s) pending", w->inflight, w->hook ? webhook_pending(w->hook) : 0);
    shutdown_now(w);
}

static void drain_poll_cb(uv_timer_t *t) { check_drained(t->data); }

static void on_signal(uv_signal_t *s, int signum) {
    worker *w = s->data;
    if (w->stopping) {
        if (signum == SIGINT) shutdown_now(w);
        return;
    }
    log_info(NULL, 0, "signal %d: draining %zu in-flight jobs", signum, w->inflight);
    w->stopping = 1;
    webhook_stop(w->hook);
    /* One reading a lease goes when the reply comes. */
    let_go_waiting(w);
    kafka_io_stop_consuming(w->kio);
    /* Parked duplicates are not started anymore: they hold no LLM call. */
    uv_timer_start(&w->drain_timer, drain_timeout,
                   (uint64_t)config_get_int(w->cfg, "worker.drain_timeout_ms"), 0);
    uv_timer_start(&w->drain_poll, drain_poll_cb, 20, 20);
    check_drained(w);
}

static void refresh_gauges(worker *w) {
    w->m.inflight = (int64_t)(w->inflight - w->delivering);
    w->m.delivering = (int64_t)w->delivering;
    if (w->hook) webhook_counts(w->hook, &w->m.webhook_not_held, &w->m.webhook_given_up);
    schema_cache_stats sc;
    schema_cache_get_stats(w->scache, &sc);
    w->m.inline_hits = sc.hits;
    w->m.inline_misses = sc.misses;
    w->m.inline_entries = sc.entries;
    w->m.inline_bytes = sc.mem_bytes;
    w->m.llm_inflight = (int64_t)llm_gate_active(w->gate);
    w->m.consumer_lag = kafka_io_lag(w->kio);
    w->m.ready_kafka = kafka_io_ready(w->kio);
    w->m.ready_redis = state_connected(w->st);
    w->m.ready_llm = !(w->llm_net_fail_ms && w->llm_net_fail_ms >= w->llm_ok_ms);
}

static int http_handle(void *ud, const char *method, const char *path, sbuf *body,
                       const char **content_type) {
    worker *w = ud;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        sbuf_puts(body, "only GET\n");
        return 405;
    }
    if (!strcmp(path, "/metrics")) {
        refresh_gauges(w);
        metrics_render(&w->m, body);
        metrics_render_llm_lanes(w->gate, util_mono_ms(), body);
        *content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    if (!strcmp(path, "/healthz")) {
        sbuf_puts(body, "ok\n");
        return 200;
    }
    if (!strcmp(path, "/readyz")) {
        refresh_gauges(w);
        int ready = w->m.ready_kafka && w->m.ready_redis && w->m.ready_llm && !w->stopping;
        sbuf_printf(body, "kafka %s\nredis %s\nllm %s\n%s", w->m.ready_kafka ? "ok" : "down",
                    w->m.ready_redis ? "ok" : "down", w->m.ready_llm ? "ok" : "unreachable",
                    w->stopping ? "draining\n" : "");
        return ready ? 200 : 503;
    }
    sbuf_puts(body, "not found: try /metrics, /healthz, /readyz\n");
    return 404;
}

/* A file of JSON the worker is configured with (a schema, the rules),
 * read as strictly as a job is (one value and nothing after it, no
 * \u0000, UTF-8), then as a cJSON tree the caller owns.  cJSON alone took
 * "[A]\n[B]" for [A] and cut a forbidden phrase at "\u0000".  NULL with
 * why set. */
static cJSON *read_json_file(const char *path, char *why, size_t whylen) {
    size_t len = 0, err_at = 0;
    char *text = util_read_file(path, &len);
    cJSON *doc = NULL;
    if (!text) {
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    cJSON *strict = util_utf8_valid(text, len) ? jsonin_parse_all(text, len, &err_at) : NULL;
    if (!strict)
        snprintf(why, whylen, "%s is not JSON%s (at byte %zu)", path,
                 util_utf8_valid(text, len) ? "" : " in UTF-8", err_at);
    else if (!(doc = cJSON_ParseWithLength(text, len)))
        snprintf(why, whylen, "out of memory reading %s", path);
    jsonin_free(strict);
    free(text);
    return doc;
}

static int load_schemas(worker *w, char *err, size_t errlen) {
    const char *dir = config_get(w->cfg, "schemas.dir");
    const char *env = config_get(w->cfg, "schemas.envelopes");
    w->reg = schema_registry_new();
    if (!w->reg) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (schema_registry_load_dir(w->reg, env, "https://retort.dev/schemas/", err, errlen)) return -1;
    char path[2048];
    snprintf(path, sizeof(path), "%s/job.schema.json", env);
    cJSON *doc = read_json_file(path, err, errlen);
    if (!doc) return -1;
    char inner[512];
    w->envelope = schema_compile(w->reg, doc, &w->sopts, inner, sizeof(inner));
    cJSON_Delete(doc);
    if (!w->envelope) {
        snprintf(err, errlen, "%s: %s", path, inner);
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "schemas.dir %s: %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json")) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (access(path, R_OK)) continue;
        cJSON *sd = read_json_file(path, err, errlen);
        if (!sd) {
            closedir(d);
            return -1;
        }
        schema *c = schema_compile(w->reg, sd, &w->sopts, inner, sizeof(inner));
        if (!c) {
            snprintf(err, errlen, "%s: %s", path, inner);
            cJSON_Delete(sd);
            closedir(d);
            return -1;
        }
        out_schema *p = realloc(w->schemas, (w->nschemas + 1) * sizeof(*p));
        if (!p) {
            schema_free(c);
            cJSON_Delete(sd);
            closedir(d);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        w->schemas = p;
        out_schema *os = &w->schemas[w->nschemas++];
        memset(os, 0, sizeof(*os));
        os->name = strndup(de->d_name, len - 5);
        os->compiled = c;
        if (out_schema_fill(os, sd, inner, sizeof(inner))) {
            snprintf(err, errlen, "%s: %s", path, inner);
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    log_info(NULL, 0, "loaded %zu output schema(s) from %s", w->nschemas, dir);
    const char *rules_file = config_get(w->cfg, "rules.file");
    if (rules_file && rules_file[0]) {
        cJSON *spec = read_json_file(rules_file, inner, sizeof(inner));
        w->global_rules = spec ? rules_compile_prefix(spec, "rules", inner, sizeof(inner)) : NULL;
        cJSON_Delete(spec);
        if (!w->global_rules) {
            snprintf(err, errlen, "rules.file %s: %s", rules_file, inner);
            return -1;
        }
    }
    w->plugins = plugins_load(config_get(w->cfg, "plugins.paths"), err, errlen);
    if (!w->plugins) return -1;
    if (plugins_count(w->plugins)) log_info(NULL, 0, "loaded %zu validator plugin(s)", plugins_count(w->plugins));
    return 0;
}

static void parse_critical(worker *w) {
    const char *list = config_get(w->cfg, "retry.critical_codes");
    char *copy = strdup(list ? list : "");
    for (char *save = NULL, *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        char **p = realloc(w->critical, (w->ncritical + 1) * sizeof(*p));
        if (!p) break;
        w->critical = p;
        w->critical[w->ncritical++] = strdup(tok);
    }
    free(copy);
}

static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int worker_run(const config *cfg, const char *worker_id, int slot) {
    worker *w = calloc(1, sizeof(*w));
    char err[8192];
    int rc = 1;
    if (!w) return 1;
    raise_nofile();
    srand((unsigned)(getpid() ^ util_mono_us()));
    w->cfg = cfg;
    w->loop = uv_default_loop();
    metrics_init(&w->m);
    snprintf(w->id, sizeof(w->id), "%s", worker_id);
    /* The owner of this process's attempts: a restarted worker with the
     * same id is another incarnation, whose lease says nothing of the
     * attempts the dead one left. */
    uint32_t nonce = 0;
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&nonce, sizeof(nonce), 1, ur) != 1) nonce = (uint32_t)rand() ^ (uint32_t)util_mono_us();
    if (ur) fclose(ur);
    snprintf(w->incarnation, sizeof(w->incarnation), "%.120s:%08x", worker_id, nonce);
    w->lease_ms = (long)config_get_int(cfg, "worker.lease_ms");
    w->takeover_after_ms = (uint64_t)config_get_int(cfg, "worker.takeover_after_ms");
    w->source = config_get(cfg, "events.source");
    w->t_jobs = config_get(cfg, "topics.jobs");
    w->t_final = config_get(cfg, "topics.final");
    w->t_esc = config_get(cfg, "topics.escalations");
    w->t_dlq = config_get(cfg, "topics.dlq");
    llm_api_provider_parse(config_get(cfg, "llm.provider"), &w->provider);
    llm_api_response_format_parse(config_get(cfg, "llm.response_format"), &w->rf);
    w->default_model = config_get(cfg, "llm.model");
    w->max_tokens = (int)config_get_int(cfg, "llm.max_tokens");
    w->prompt_cache = config_get_bool(cfg, "llm.prompt_cache");
    w->max_transient = (int)config_get_int(cfg, "llm.max_transient_retries");
    if (!strcmp(config_get(cfg, "llm.on_account_error"), "pause"))
        w->account_pause = (long)config_get_int(cfg, "llm.account_pause_ms");
    w->backoff_base = (long)config_get_int(cfg, "llm.backoff_base_ms");
    w->backoff_max = (long)config_get_int(cfg, "llm.backoff_max_ms");
    w->default_max_attempts = (int)config_get_int(cfg, "retry.max_attempts");
    w->max_attempts_ceiling = (int)config_get_int(cfg, "retry.max_attempts_ceiling");
    w->prev_output_cap = (size_t)config_get_int(cfg, "retry.previous_output_max_bytes");
    w->retry_max_bytes = (size_t)config_get_int(cfg, "retry.max_message_bytes");
    w->max_violations = (size_t)config_get_int(cfg, "retry.max_violations");
    w->tmpl = config_get(cfg, "retry.template");
    w->max_inflight = (size_t)config_get_int(cfg, "llm.max_inflight");
    w->token_budget = (long)config_get_int(cfg, "retry.token_budget");
    w->rl_rpm = (long)config_get_int(cfg, "ratelimit.rpm");
    w->rl_tpm = (long)config_get_int(cfg, "ratelimit.tpm");
    config_get_masked(cfg, "llm.base_url", w->rl_base, sizeof(w->rl_base));
    config_foreach_prefix(cfg, "ratelimit.", rl_collect, w);
    if (w->rl_nmodels == SIZE_MAX) {
        log_error(NULL, 0, "out of memory reading the rate limits");
        goto out;
    }
    w->rl_on = w->rl_rpm || w->rl_tpm;
    for (size_t i = 0; i < w->rl_nmodels; i++) w->rl_on |= w->rl_models[i].rpm > 0 || w->rl_models[i].tpm > 0;
    /* A job holds an LLM call for only part of its life: before it,
     * Redis claims it; after it, validation, Redis and the producer finish
     * it.  Holding only max_inflight jobs leaves calls unused during that
     * work (with 10,000 calls of 2 s, the steady rate was 61-89% of the
     * ideal); a quarter more jobs keeps them busy (94-99%), while the gate
     * caps the calls.  Never fewer jobs than calls. */
    w->max_jobs = (size_t)config_get_int(cfg, "worker.max_jobs");
    if (!w->max_jobs) w->max_jobs = w->max_inflight + (w->max_inflight + 3) / 4;
    if (w->max_jobs < w->max_inflight) w->max_jobs = w->max_inflight;
    w->max_delivering = (size_t)config_get_int(cfg, "worker.max_delivering");
    if (!w->max_delivering) w->max_delivering = w->max_jobs;
    size_t buckets = 64;
    while (buckets < 2 * (w->max_jobs + w->max_delivering) && buckets < ((size_t)1 << 30)) buckets <<= 1;
    if (!(w->map = calloc(buckets, sizeof(*w->map)))) {
        log_error(NULL, 0, "out of memory");
        goto out;
    }
    w->map_mask = (unsigned)(buckets - 1);
    if (!(w->gate = llm_gate_new(w->max_inflight, config_get_bool(cfg, "llm.aimd"), w->backoff_max, gate_start, w))) {
        log_error(NULL, 0, "out of memory");
        goto out;
    }
    w->sopts.format_assert = config_get_bool(cfg, "schemas.format_assert");
    w->sopts.max_violations = w->max_violations;
    parse_critical(w);

    if (load_schemas(w, err, sizeof(err))) {
        log_error(NULL, 0, "%s", err);
        goto out;
    }
    if (!(w->scache = schema_cache_new(w->reg, &w->sopts, (size_t)config_get_int(cfg, "schemas.inline_cache"),
                                       inline_schema_free))) {
        log_error(NULL, 0, "out of memory");
        goto out;
    }
    schema_cache_set_max_bytes(w->scache, (size_t)config_get_int(cfg, "schemas.inline_max_bytes"));
    schema_cache_set_max_mem(w->scache, (size_t)config_get_int(cfg, "schemas.inline_cache_max_bytes"));
    w->offs = offsets_new();
    w->retry_local = config_get_bool(cfg, "retry.local");
    /* Sized for the retry jobs of a few rounds of held jobs (at most 65,536:
     * its index is allocated whole): one that comes back later than that
     * (behind a long backlog) costs a Redis round trip instead, which says
     * the same. */
    size_t remember = w->max_jobs * 4 < 1024 ? 1024 : w->max_jobs * 4 > 65536 ? 65536 : w->max_jobs * 4;
    if (w->retry_local && !(w->continued = recent_new(remember))) {
        log_error(NULL, 0, "out of memory");
        goto out;
    }
    const char *key_env = config_get(cfg, "llm.api_key_env");
    const char *api_key = key_env && key_env[0] ? getenv(key_env) : NULL;
    llm_client_options lo = {w->provider, config_get(cfg, "llm.base_url"), api_key,
                             config_get(cfg, "llm.anthropic_version"),
                             (long)config_get_int(cfg, "llm.timeout_ms"),
                             (long)config_get_int(cfg, "llm.connect_timeout_ms"),
                             (size_t)config_get_int(cfg, "llm.max_response_bytes"), NULL,
                             config_get(cfg, "llm.ca_file")};
    w->llm = llm_client_new(w->loop, &lo, err, sizeof(err));
    if (!w->llm) {
        log_error(NULL, 0, "%s", err);
        goto out;
    }
    const char *hook_url = config_get(cfg, "escalation.webhook_url");
    if (hook_url && hook_url[0]) {
        webhook_options wo = {hook_url, config_get(cfg, "escalation.webhook_ca_file"),
                              (long)config_get_int(cfg, "escalation.webhook_timeout_ms"),
                              (int)config_get_int(cfg, "escalation.webhook_retries"),
                              (size_t)config_get_int(cfg, "escalation.webhook_max_pending")};
        w->hook = webhook_new(w->loop, &wo, err, sizeof(err));
        if (!w->hook) {
            log_error(NULL, 0, "%s", err);
            goto out;
        }
    }
    state_options so = {config_get(cfg, "redis.host"), (int)config_get_int(cfg, "redis.port"),
                        config_get(cfg, "redis.password"), (int)config_get_int(cfg, "redis.db"),
                        config_get(cfg, "redis.key_prefix"), (long)config_get_int(cfg, "redis.ttl_s")};
    w->st = state_new(w->loop, &so, on_redis_conn, w, err, sizeof(err));
    if (!w->st) {
        log_error(NULL, 0, "%s", err);
        goto out;
    }
    /* The lease before any claim: the commands go out in order. */
    uv_timer_init(w->loop, &w->lease_timer);
    w->lease_timer.data = w;
    lease_renew(&w->lease_timer);
    uv_timer_start(&w->lease_timer, lease_renew, (uint64_t)w->lease_ms / 3, (uint64_t)w->lease_ms / 3);
    kafka_io_callbacks cbs = {on_message, on_delivery, on_revoke, w};
    w->kio = kafka_io_new(w->loop, cfg, config_get_int(cfg, "worker.processes") > 1 ? slot : -1, &cbs, err,
                          sizeof(err));
    if (!w->kio) {
        log_error(NULL, 0, "%s", err);
        goto out;
    }
    /* a retry job above the producer's own limit would be refused forever */
    size_t max_msg = kafka_io_max_message(w->kio);
    if (max_msg > 8192 && w->retry_max_bytes > max_msg - 4096) w->retry_max_bytes = max_msg - 4096;
    int mport = (int)config_get_int(cfg, "metrics.port");
    if (mport > 0) {
        w->http = http_server_new(w->loop, config_get(cfg, "metrics.host"), mport + slot, http_handle, w, err,
                                  sizeof(err));
        if (!w->http) {
            log_error(NULL, 0, "%s", err);
            goto out;
        }
        log_info(NULL, 0, "metrics on http://%s:%d/metrics", config_get(cfg, "metrics.host"),
                 http_server_port(w->http));
    }
    uv_signal_init(w->loop, &w->sigterm);
    uv_signal_init(w->loop, &w->sigint);
    w->sigterm.data = w->sigint.data = w;
    uv_signal_start(&w->sigterm, on_signal, SIGTERM);
    uv_signal_start(&w->sigint, on_signal, SIGINT);
    /* A supervisor's worker starts with them blocked (supervisor.c): a
     * stop that came meanwhile is taken now, by the handlers. */
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &stops, NULL);
    uv_timer_init(w->loop, &w->drain_timer);
    w->drain_timer.data = w;
    uv_timer_init(w->loop, &w->drain_poll);
    w->drain_poll.data = w;
    uv_timer_init(w->loop, &w->gate_timer);
    w->gate_timer.data = w;
    uv_timer_init(w->loop, &w->resume_timer);
    w->resume_timer.data = w;
    char url[512];
    log_info(NULL, 0, "worker %s: consuming %s (group %s), llm %s %s, at most %zu calls and %zu jobs in flight", w->id,
             w->t_jobs, config_get(cfg, "kafka.group.id"), config_get(cfg, "llm.provider"),
             config_get_masked(cfg, "llm.base_url", url, sizeof(url)), w->max_inflight, w->max_jobs);

    uv_prepare_init(w->loop, &w->log_prep);
    uv_prepare_start(&w->log_prep, log_prep_cb);
    log_buffered(1);
    uv_run(w->loop, UV_RUN_DEFAULT);
    log_buffered(0);

    /* Drained (or timed out): flush the producer (the reports still to
     * come store their offsets), then close the consumer, which commits
     * the stored offsets (only those with nothing pending below them) and
     * leaves the group. */
    rc = 0;
out:;
    close_watchdog cw = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
                         (uint64_t)config_get_int(cfg, "worker.close_timeout_ms")};
    pthread_t cw_thread;
    int cw_started = w->kio && pthread_create(&cw_thread, NULL, close_watchdog_run, &cw) == 0;
    if (w->kio) kafka_io_free(w->kio, 10000);
    w->kio = NULL;
    if (cw_started) {
        pthread_mutex_lock(&cw.mu);
        cw.done = 1;
        pthread_cond_signal(&cw.cv);
        pthread_mutex_unlock(&cw.mu);
        pthread_join(cw_thread, NULL);
    }
    state_free(w->st);
    webhook_free(w->hook);
    http_server_free(w->http);
    llm_client_free(w->llm);
    uv_walk(w->loop, loop_close_walk, NULL);
    uv_run(w->loop, UV_RUN_DEFAULT);
    uv_loop_close(w->loop);
    while (w->wjob_pool) {
        wjob *j = w->wjob_pool;
        w->wjob_pool = j->next;
        free(j);
    }
    /* Jobs left by a drain timeout die with the process. */
    offsets_free(w->offs);
    recent_free(w->continued);
    for (size_t i = 0; i < w->nschemas; i++) {
        schema_free(w->schemas[i].compiled);
        out_schema_clear(&w->schemas[i]);
    }
    free(w->schemas);
    schema_cache_free(w->scache);
    schema_free(w->envelope);
    rules_free(w->global_rules);
    plugins_free(w->plugins);
    schema_registry_free(w->reg);
    for (size_t i = 0; i < w->ncritical; i++) free(w->critical[i]);
    free(w->critical);
    free(w->rl_models);
    for (size_t i = 0; i < w->rl_nqueues; i++) free(w->rl_queues[i]);
    llm_gate_free(w->gate);
    free(w->map);
    free(w);
    return rc;
}
