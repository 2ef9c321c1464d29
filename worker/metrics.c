#include "metrics.h"

#include <stdio.h>
#include <string.h>

static const double bounds[METRICS_BUCKETS] = {0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

/* A label value as the exposition format wants it: a quote or a newline
 * in it would forge series. */
static void label_value(sbuf *b, const char *s) {
    for (const char *c = s; *c; c++) {
        if (*c == '\\' || *c == '"') sbuf_append(b, "\\", 1);
        if (*c == '\n') sbuf_puts(b, "\\n");
        else sbuf_append(b, c, 1);
    }
}

void metrics_init(metrics *m) {
    memset(m, 0, sizeof(*m));
    m->consumer_lag = -1;
}

void metrics_observe(metrics_histogram *h, double seconds) {
    for (int i = 0; i < METRICS_BUCKETS; i++)
        if (seconds <= bounds[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += seconds;
}

void metrics_llm_call(metrics *m, int provider, long status) {
    /* 3xx has a class of its own: curl follows no redirect, so a base_url
     * that answers 301 fails every call, which "2xx" hid */
    int cls = status == 0 ? 4 : status == 429 ? 3 : status >= 500 ? 2 : status >= 400 ? 1 : status >= 300 ? 5 : 0;
    m->llm_calls[provider ? 1 : 0][cls]++;
}

void metrics_violation(metrics *m, const char *code) {
    for (int i = 0; i < METRICS_MAX_CODES; i++) {
        if (!m->codes[i][0]) {
            snprintf(m->codes[i], sizeof(m->codes[i]), "%s", code);
            m->code_counts[i] = 1;
            return;
        }
        if (!strncmp(m->codes[i], code, sizeof(m->codes[i]) - 1)) {
            m->code_counts[i]++;
            return;
        }
    }
    m->codes_other++;
}

static void histogram(sbuf *b, const char *name, const char *help, const metrics_histogram *h) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += h->buckets[i];
        sbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

void metrics_render(const metrics *m, sbuf *b) {
    static const char *const outcomes[METRICS_OUTCOMES] = {"final", "retry", "escalated", "dead_letter", "skipped"};
    static const char *const classes[6] = {"2xx", "4xx", "5xx", "429", "error", "3xx"};
    static const char *const providers[2] = {"openai", "anthropic"};
    sbuf_puts(b, "# HELP retort_jobs_total Job messages handled, by outcome.\n# TYPE retort_jobs_total counter\n");
    for (int i = 0; i < METRICS_OUTCOMES; i++)
        sbuf_printf(b, "retort_jobs_total{outcome=\"%s\"} %llu\n", outcomes[i], (unsigned long long)m->jobs[i]);
    sbuf_puts(b, "# HELP retort_produce_failures_total Outcome messages Kafka refused or did not deliver "
                 "(each is produced again; the log says why), by outcome.\n"
                 "# TYPE retort_produce_failures_total counter\n");
    for (int i = 0; i < METRICS_SKIPPED; i++)
        sbuf_printf(b, "retort_produce_failures_total{outcome=\"%s\"} %llu\n", outcomes[i],
                    (unsigned long long)m->produce_failures[i]);
    sbuf_puts(b, "# HELP retort_messages_cut_total Outcome messages produced cut to fit a Kafka message (an "
                 "event without its largest members, a retry job with less reflection), by outcome.\n"
                 "# TYPE retort_messages_cut_total counter\n");
    for (int i = 0; i < METRICS_SKIPPED; i++)
        sbuf_printf(b, "retort_messages_cut_total{outcome=\"%s\"} %llu\n", outcomes[i], (unsigned long long)m->cut[i]);
    sbuf_printf(b, "# HELP retort_attempts_total Attempts decided (LLM answer validated or failed).\n"
                   "# TYPE retort_attempts_total counter\nretort_attempts_total %llu\n",
                (unsigned long long)m->attempts);
    sbuf_printf(b, "# HELP retort_owner_waits_total Job messages whose attempt another live worker held: they "
                   "waited for its outcome instead of calling the LLM (rebalances, members joining).\n"
                   "# TYPE retort_owner_waits_total counter\nretort_owner_waits_total %llu\n"
                   "# HELP retort_takeovers_total Attempts (or undelivered outcomes) taken over from a worker "
                   "whose lease had lapsed.\n"
                   "# TYPE retort_takeovers_total counter\nretort_takeovers_total %llu\n"
                   "# HELP retort_local_retries_total Attempts run by the worker that decided the retry, as soon "
                   "as their retry job was delivered, instead of after it came back through Kafka (retry.local).\n"
                   "# TYPE retort_local_retries_total counter\nretort_local_retries_total %llu\n"
                   "# HELP retort_records_lost_total Jobs Redis holds as decided whose outcome event may not have "
                   "been delivered, and whose attempt records, to make it again from, are gone (evicted?).\n"
                   "# TYPE retort_records_lost_total counter\nretort_records_lost_total %llu\n"
                   "# HELP retort_llm_account_holds_total Calls refused for the account (a spent quota, a refused "
                   "key) whose jobs went back to wait for it (llm.on_account_error=pause).\n"
                   "# TYPE retort_llm_account_holds_total counter\nretort_llm_account_holds_total %llu\n",
                (unsigned long long)m->owner_waits, (unsigned long long)m->takeovers,
                (unsigned long long)m->local_retries, (unsigned long long)m->records_lost,
                (unsigned long long)m->account_holds);
    sbuf_printf(b, "# HELP retort_webhook_failures_total Escalations the webhook did not deliver: not_held (too "
                   "many calls pending: escalation.webhook_max_pending), given_up (after its retries, or waiting "
                   "to be tried again at a stop).\n"
                   "# TYPE retort_webhook_failures_total counter\n"
                   "retort_webhook_failures_total{reason=\"not_held\"} %llu\n"
                   "retort_webhook_failures_total{reason=\"given_up\"} %llu\n",
                (unsigned long long)m->webhook_not_held, (unsigned long long)m->webhook_given_up);
    sbuf_puts(b, "# HELP retort_violations_total Violations found in outputs, by code.\n# TYPE retort_violations_total counter\n");
    for (int i = 0; i < METRICS_MAX_CODES && m->codes[i][0]; i++) {
        /* Codes are checked where they are made (rules, plugins); escaped
         * here all the same, as the exposition format wants: a quote or a
         * newline in a label value forges series. */
        sbuf_puts(b, "retort_violations_total{code=\"");
        label_value(b, m->codes[i]);
        sbuf_printf(b, "\"} %llu\n", (unsigned long long)m->code_counts[i]);
    }
    /* "_other", which no code can be (^[A-Z][A-Z0-9_]*$): as "OTHER" it
     * made a second series beside a rule's own code OTHER */
    if (m->codes_other) sbuf_printf(b, "retort_violations_total{code=\"_other\"} %llu\n", (unsigned long long)m->codes_other);
    sbuf_puts(b, "# HELP retort_llm_calls_total LLM HTTP calls, by provider and status class.\n# TYPE retort_llm_calls_total counter\n");
    for (int p = 0; p < 2; p++)
        for (int c = 0; c < 6; c++)
            if (m->llm_calls[p][c] || p == 0)
                sbuf_printf(b, "retort_llm_calls_total{provider=\"%s\",status_class=\"%s\"} %llu\n", providers[p],
                            classes[c], (unsigned long long)m->llm_calls[p][c]);
    sbuf_printf(b, "# HELP retort_llm_tokens_total Tokens reported by the LLM.\n# TYPE retort_llm_tokens_total counter\n"
                   "retort_llm_tokens_total{kind=\"prompt\"} %llu\nretort_llm_tokens_total{kind=\"completion\"} %llu\n",
                (unsigned long long)m->tokens[0], (unsigned long long)m->tokens[1]);
    sbuf_printf(b, "# HELP retort_inline_schemas_total Inline schemas of jobs, by whether the worker had them "
                   "compiled already (hit) or compiled them (miss).\n# TYPE retort_inline_schemas_total counter\n"
                   "retort_inline_schemas_total{cache=\"hit\"} %llu\nretort_inline_schemas_total{cache=\"miss\"} %llu\n",
                (unsigned long long)m->inline_hits, (unsigned long long)m->inline_misses);
    sbuf_printf(b, "# HELP retort_inline_schema_cache_entries Inline schemas kept compiled (at most "
                   "schemas.inline_cache).\n# TYPE retort_inline_schema_cache_entries gauge\n"
                   "retort_inline_schema_cache_entries %llu\n"
                   "# HELP retort_inline_schema_cache_bytes Memory the inline schemas kept compiled hold, estimated "
                   "(at most schemas.inline_cache_max_bytes while no job holds one).\n"
                   "# TYPE retort_inline_schema_cache_bytes gauge\nretort_inline_schema_cache_bytes %llu\n",
                (unsigned long long)m->inline_entries, (unsigned long long)m->inline_bytes);
    histogram(b, "retort_llm_latency_seconds", "Latency of one LLM call.", &m->llm_latency);
    histogram(b, "retort_job_latency_seconds", "From an attempt's start to its outcome, LLM included.", &m->job_latency);
    sbuf_printf(b, "# HELP retort_inflight_jobs Job messages being handled now, in a job slot (at most worker.max_jobs).\n"
                   "# TYPE retort_inflight_jobs gauge\nretort_inflight_jobs %lld\n"
                   "# HELP retort_delivering_jobs Jobs whose outcome waits only for Kafka's delivery report "
                   "(they hold no job slot; the jobs live are at most worker.max_jobs + worker.max_delivering).\n"
                   "# TYPE retort_delivering_jobs gauge\nretort_delivering_jobs %lld\n",
                (long long)m->inflight, (long long)m->delivering);
    sbuf_printf(b, "# HELP retort_llm_inflight_calls LLM calls started and not yet answered (at most llm.max_inflight).\n"
                   "# TYPE retort_llm_inflight_calls gauge\nretort_llm_inflight_calls %lld\n", (long long)m->llm_inflight);
    sbuf_printf(b, "# HELP retort_consumer_lag_messages Messages of the assigned partitions not yet consumed.\n"
                   "# TYPE retort_consumer_lag_messages gauge\nretort_consumer_lag_messages %lld\n",
                (long long)(m->consumer_lag < 0 ? 0 : m->consumer_lag));
    sbuf_printf(b, "# HELP retort_up Dependencies as the worker sees them (1 ok).\n# TYPE retort_up gauge\n"
                   "retort_up{dependency=\"kafka\"} %d\nretort_up{dependency=\"redis\"} %d\nretort_up{dependency=\"llm\"} %d\n",
                m->ready_kafka, m->ready_redis, m->ready_llm);
}

/* One gauge over the gate's lanes: which says the field (0 limit,
 * 1 pause left, 2 waiting, 3 held). */
static void lane_gauge(const llm_gate *g, uint64_t now_ms, const char *name, const char *help, int which,
                       sbuf *b) {
    llm_gate_lane_info info;
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (size_t i = 0; i < llm_gate_lanes(g); i++) {
        llm_gate_lane_get(g, i, &info);
        double v = which == 0   ? info.limit
                   : which == 1 ? (info.paused_until_ms > now_ms ? (double)(info.paused_until_ms - now_ms) / 1000.0 : 0)
                   : which == 2 ? (double)info.waiting
                                : (double)info.held;
        sbuf_printf(b, "%s{model=\"", name);
        label_value(b, info.model);
        sbuf_printf(b, "\"} %g\n", v);
    }
}

void metrics_render_llm_lanes(const llm_gate *g, uint64_t now_ms, sbuf *b) {
    lane_gauge(g, now_ms, "retort_llm_concurrency_limit",
               "Calls a model may have in flight now: llm.max_inflight, halved on 429s and grown back on "
               "successes (llm.aimd); model \"\" is the lane the models past 64 share.", 0, b);
    lane_gauge(g, now_ms, "retort_llm_paused_seconds",
               "How long a model's calls still wait out a Retry-After, or an account hold's pause.", 1, b);
    lane_gauge(g, now_ms, "retort_llm_waiting_calls", "Calls waiting at the gate, by model.", 2, b);
    lane_gauge(g, now_ms, "retort_llm_held", "1 while a model's calls are held for a refused account (a spent "
               "quota, a refused key: llm.on_account_error=pause), one at a time until one goes through.", 3, b);
}
