/* metrics.h - the worker's counters, gauges and histograms, rendered in
 * the Prometheus text format.  Names follow Prometheus conventions
 * (retort_ prefix, _total counters, seconds); no job ids as labels, and
 * violation codes (which plugins may invent) are capped in number. */
#ifndef RETORT_METRICS_H
#define RETORT_METRICS_H

#include <stdint.h>

#include "llm_gate.h"
#include "util.h"

#define METRICS_MAX_CODES 64
#define METRICS_BUCKETS 12

typedef enum metrics_outcome {
    METRICS_FINAL = 0,
    METRICS_RETRY,
    METRICS_ESCALATED,
    METRICS_DEAD_LETTER,
    METRICS_SKIPPED,      /* duplicate or stale messages */
    METRICS_OUTCOMES
} metrics_outcome;

typedef struct metrics_histogram {
    uint64_t buckets[METRICS_BUCKETS]; /* cumulative at render time */
    uint64_t count;
    double sum;
} metrics_histogram;

typedef struct metrics {
    uint64_t jobs[METRICS_OUTCOMES];
    /* by the outcome of the message (final, retry, escalated, dead_letter) */
    uint64_t produce_failures[METRICS_SKIPPED]; /* refused or not delivered: produced again */
    uint64_t cut[METRICS_SKIPPED];              /* produced cut to fit a Kafka message */
    uint64_t attempts;
    uint64_t owner_waits;              /* messages that waited for a live worker's attempt */
    uint64_t takeovers;                /* attempts taken over from a worker found gone */
    uint64_t local_retries;            /* attempts run at once after their retry job's delivery (retry.local) */
    uint64_t records_lost;             /* decided jobs whose undelivered outcome had no records to make it from */
    uint64_t account_holds;            /* calls the account refused, held for it (llm.on_account_error=pause) */
    uint64_t webhook_not_held;         /* escalations not posted: too many webhook calls pending */
    uint64_t webhook_given_up;         /* webhook calls given up after their retries */
    uint64_t llm_calls[2][6];          /* provider x class: 2xx 4xx 5xx 429 error 3xx */
    char codes[METRICS_MAX_CODES][65]; /* a code whole (RULES_CODE_MAX): cut, one code took a slot a time */
    uint64_t code_counts[METRICS_MAX_CODES];
    uint64_t codes_other;
    uint64_t tokens[2];                /* prompt, completion */
    uint64_t inline_hits, inline_misses; /* inline schemas found compiled, compiled (schema_cache) */
    uint64_t inline_entries, inline_bytes; /* kept compiled now, and their memory (schema_cache) */
    metrics_histogram llm_latency;     /* one LLM call */
    metrics_histogram job_latency;     /* first attempt start to outcome, per attempt */
    int64_t inflight;                  /* jobs holding a slot (at most worker.max_jobs) */
    int64_t delivering;                /* jobs waiting only for their outcome's delivery report */
    int64_t llm_inflight;              /* LLM calls started and not answered */
    int64_t consumer_lag;              /* -1: unknown */
    int ready_kafka, ready_redis, ready_llm;
} metrics;

void metrics_init(metrics *m);
void metrics_observe(metrics_histogram *h, double seconds);
/* provider: 0 openai, 1 anthropic; status 0 = transport error */
void metrics_llm_call(metrics *m, int provider, long status);
void metrics_violation(metrics *m, const char *code);
void metrics_render(const metrics *m, sbuf *out);
/* The LLM gate's lanes (borrowed), a series per model: concurrency
 * limit, the Retry-After pause left at now_ms, calls waiting. */
void metrics_render_llm_lanes(const llm_gate *g, uint64_t now_ms, sbuf *out);

#endif
