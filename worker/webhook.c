#include "webhook.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_client.h"
#include "log.h"

typedef struct delivery {
    webhook *wh;
    char *job_id;
    char *body;
    int tries;
    llm_call *call;        /* in flight, or NULL */
    uv_timer_t timer;
    struct delivery *prev, *next;
} delivery;

struct webhook {
    llm_client *http;
    uv_loop_t *loop;
    int retries;
    size_t pending, max_pending;
    int stopping;                /* webhook_stop: no retries */
    uint64_t not_held, given_up;
    uint64_t refused_in_row; /* webhook_post -1 since the last call answered 2xx */
    delivery *list;
};

webhook *webhook_new(uv_loop_t *loop, const webhook_options *opts, char *err, size_t errlen) {
    webhook *wh = calloc(1, sizeof(*wh));
    if (!wh) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    llm_client_options o = {0};
    o.provider = LLM_PROVIDER_OPENAI;
    o.timeout_ms = opts->timeout_ms;
    o.connect_timeout_ms = opts->timeout_ms < 5000 ? opts->timeout_ms : 5000;
    o.ca_file = opts->ca_file;
    /* The body is thrown away: a 2xx with a large one was a transfer cut
     * at a cap, status 0, and the escalation was POSTed again. */
    o.max_response_bytes = 0;
    o.url = opts->url;
    wh->http = llm_client_new(loop, &o, err, errlen);
    if (!wh->http) {
        free(wh);
        return NULL;
    }
    wh->loop = loop;
    wh->retries = opts->retries;
    wh->max_pending = opts->max_pending ? opts->max_pending : 1;
    return wh;
}

static void delivery_close_cb(uv_handle_t *h) {
    delivery *d = h->data;
    free(d->job_id);
    free(d->body);
    free(d);
}

static void delivery_end(delivery *d) {
    webhook *wh = d->wh;
    if (d->prev) d->prev->next = d->next;
    else wh->list = d->next;
    if (d->next) d->next->prev = d->prev;
    wh->pending--;
    uv_close((uv_handle_t *)&d->timer, delivery_close_cb);
}

static void send_now(delivery *d);

static void retry_cb(uv_timer_t *t) { send_now(t->data); }

static void done_cb(void *ud, const llm_response *resp) {
    delivery *d = ud;
    d->call = NULL;
    if (resp->status >= 200 && resp->status < 300) {
        /* The streak of posts not held ends with a call answered, not with
         * one held: a full webhook whose endpoint is down holds one post a
         * slot freed (a delivery given up), and said at the 1st and 2nd of
         * each streak, the posts not held were said many times a second. */
        d->wh->refused_in_row = 0;
        delivery_end(d);
        return;
    }
    int retryable = resp->status == 0 || resp->status == 408 || resp->status == 429 || resp->status >= 500;
    if (!retryable || d->tries > d->wh->retries || d->wh->stopping) {
        if (resp->status)
            log_error(d->job_id, 0, "escalation webhook failed after %d tries (HTTP %ld); giving up", d->tries,
                      resp->status);
        else
            log_error(d->job_id, 0, "escalation webhook failed after %d tries (%s); giving up", d->tries,
                      resp->error ? resp->error : "no answer");
        d->wh->given_up++;
        delivery_end(d);
        return;
    }
    uint64_t delay = 250u << (d->tries < 8 ? d->tries : 8);
    if (resp->retry_after_ms > 0 && (uint64_t)resp->retry_after_ms > delay) delay = (uint64_t)resp->retry_after_ms;
    if (delay > 60000) delay = 60000;
    uv_timer_start(&d->timer, retry_cb, delay, 0);
}

static void send_now(delivery *d) {
    d->tries++;
    char *body = strdup(d->body);
    if (!body || llm_client_submit(d->wh->http, d->job_id, 0, body, strlen(body), done_cb, d, &d->call)) {
        llm_response r = {0};
        r.retry_after_ms = -1;
        r.error = "the call could not be started (out of memory?)";
        done_cb(d, &r);
    }
}

/* A post not held: counted, and said at the 1st, 2nd, 4th... in a row. */
static int not_held(webhook *wh, const char *job_id, const char *why) {
    uint64_t n = ++wh->refused_in_row;
    wh->not_held++;
    if (!(n & (n - 1)))
        log_warn(job_id, 0, "escalation webhook not called for this escalation (%llu in a row): %s; the "
                 "escalation event is in its topic", (unsigned long long)n, why);
    return -1;
}

int webhook_post(webhook *wh, const char *job_id, const char *body) {
    /* Each delivery holds its body, and a connection while it posts, for
     * all its retries (about 45 s with the defaults against an endpoint
     * that does not answer): unbounded, escalations coming faster than
     * that took memory and file descriptors (the LLM's, Redis's, Kafka's
     * connections then failed too). */
    if (wh->pending >= wh->max_pending)
        return not_held(wh, job_id, "escalation.webhook_max_pending deliveries are pending (the endpoint is down "
                        "or slow?)");
    delivery *d = calloc(1, sizeof(*d));
    char *id = strdup(job_id), *copy = strdup(body);
    if (!d || !id || !copy) {
        free(d);
        free(id);
        free(copy);
        return not_held(wh, job_id, "out of memory");
    }
    d->wh = wh;
    d->job_id = id;
    d->body = copy;
    uv_timer_init(wh->loop, &d->timer);
    d->timer.data = d;
    d->next = wh->list;
    if (wh->list) wh->list->prev = d;
    wh->list = d;
    wh->pending++;
    send_now(d);
    return 0;
}

size_t webhook_pending(const webhook *wh) { return wh->pending; }

void webhook_counts(const webhook *wh, uint64_t *not_held_out, uint64_t *given_up) {
    *not_held_out = wh->not_held;
    *given_up = wh->given_up;
}

void webhook_stop(webhook *wh) {
    if (!wh || wh->stopping) return;
    wh->stopping = 1;
    size_t dropped = 0;
    for (delivery *d = wh->list, *next; d; d = next) {
        next = d->next;
        if (d->call) continue;
        wh->given_up++;
        dropped++;
        delivery_end(d);
    }
    /* A webhook that fails for longer than a drain (each delivery is
     * retried for about 45 s by default) held every stop until the drain's
     * timeout (30 s by default: Kubernetes' grace period too). */
    if (dropped)
        log_warn(NULL, 0, "%zu escalation webhook call(s) waiting to be tried again dropped at the stop (their "
                 "escalation events are in their topic)", dropped);
}

void webhook_free(webhook *wh) {
    if (!wh) return;
    if (wh->pending)
        log_warn(NULL, 0, "%zu escalation webhook call(s) not made or not answered at the stop; dropped (their "
                 "escalation events are in their topic)", wh->pending);
    /* Calls in flight are the client's callers' to cancel (a stop that
     * did not wait for them); timers close. */
    while (wh->list) {
        delivery *d = wh->list;
        wh->list = d->next;
        if (d->call) llm_client_cancel(wh->http, d->call);
        uv_close((uv_handle_t *)&d->timer, delivery_close_cb);
    }
    llm_client_free(wh->http);
    free(wh);
}
