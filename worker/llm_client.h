/* llm_client.h - asynchronous HTTP calls to the LLM on the process's libuv
 * loop (curl multi socket API: CURLMOPT_SOCKETFUNCTION/TIMERFUNCTION).
 * Thousands of calls may be in flight; connections are reused. */
#ifndef RETORT_LLM_CLIENT_H
#define RETORT_LLM_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "decide.h"
#include "llm_api.h"

typedef struct llm_client llm_client;
typedef struct llm_call llm_call;

typedef struct llm_client_options {
    llm_provider provider;
    const char *base_url;          /* borrowed, copied */
    const char *api_key;           /* borrowed, copied; never logged; NULL or "" for none */
    const char *anthropic_version; /* borrowed, copied */
    long timeout_ms;
    long connect_timeout_ms;
    size_t max_response_bytes;     /* 0: the body is read and thrown away (webhooks: the status is all) */
    const char *url;               /* borrowed, copied: a full URL used as is (webhooks); NULL: the API's */
    const char *ca_file;           /* borrowed, copied: PEM CA bundle to verify the server; NULL or "": the system's */
} llm_client_options;

typedef struct llm_response {
    long status;                 /* HTTP status; 0 when the call failed in transport */
    decide_category transport;   /* status 0: DECIDE_CAT_TIMEOUT or DECIDE_CAT_NETWORK */
    const char *error;           /* status 0: what failed */
    const char *body;            /* valid until the callback returns */
    size_t body_len;
    long retry_after_ms;         /* retry-after-ms / Retry-After; -1 when absent */
    int should_retry;            /* x-should-retry: 1 true, 0 false, -1 absent */
    double latency_ms;           /* whole call */
    int too_large;               /* status 2xx: the body passed llm.max_response_bytes, unread
                                  * (body is ""): an answer the worker cannot take, not a
                                  * failure of the network */
    int unsent;                  /* status 0: no byte of the request was sent (no connection,
                                  * a failed TLS handshake, a call that could not start): the
                                  * server saw nothing of it, nor counted it */
} llm_response;

/* Called once per call, on the loop thread, unless the call was cancelled.
 * resp: valid until the callback returns. */
typedef void (*llm_client_cb)(void *ud, const llm_response *resp);

/* 0 on error (err filled). */
llm_client *llm_client_new(uv_loop_t *loop, const llm_client_options *opts, char *err, size_t errlen);
/* Cancels every call without callbacks and frees; accepts NULL.  The loop
 * must run afterwards to finish closing the handles. */
void llm_client_free(llm_client *c);

/* Starts a call.  job_id: borrowed (sent as X-Retort-Job-Id).  body:
 * taken, body_len bytes.  On success returns 0 and *out (may be NULL)
 * identifies the call until its callback runs. */
int llm_client_submit(llm_client *c, const char *job_id, int attempt, char *body, size_t body_len,
                      llm_client_cb cb, void *ud, llm_call **out);
/* Stops a call in flight; its callback is not called. */
void llm_client_cancel(llm_client *c, llm_call *call);
size_t llm_client_inflight(const llm_client *c);

/* The wait in ms a response asks for, from its retry-after-ms and
 * Retry-After values (borrowed; NULL when absent): retry-after-ms when it
 * is a number of ms, else Retry-After, in seconds or an HTTP date (now_ms:
 * the wall clock, ms since the epoch; a date past is 0).  At most a day;
 * -1 when neither says. */
long llm_client_retry_after(const char *ms, const char *retry_after, int64_t now_ms);

#endif
