/* decide.h - the retry decision: a pure function of a job's state and the
 * outcome of one LLM call.  No I/O, no clocks: table-driven tests cover it. */
#ifndef RETORT_DECIDE_H
#define RETORT_DECIDE_H

#include <stddef.h>

/* What happened to one call.  The first group are answers that reached
 * validation; the rest are failures of the call itself. */
typedef enum decide_category {
    DECIDE_CAT_OK = 0,          /* valid output */
    DECIDE_CAT_INVALID,         /* output failed validation (violations) */
    DECIDE_CAT_TRUNCATED,       /* finish_reason length / max_tokens */
    DECIDE_CAT_EMPTY,           /* no content */
    DECIDE_CAT_REFUSAL,         /* the model refused */
    DECIDE_CAT_CONTENT_FILTER,  /* the provider filtered the output */
    DECIDE_CAT_TIMEOUT,         /* transient from here ... */
    DECIDE_CAT_NETWORK,
    DECIDE_CAT_RATE_LIMITED,
    DECIDE_CAT_SERVER_ERROR,    /* ... to here */
    DECIDE_CAT_AUTH,            /* permanent from here */
    DECIDE_CAT_QUOTA,           /* the account's quota or credit is spent (a 429 that is no rate limit) */
    DECIDE_CAT_BAD_REQUEST,
    DECIDE_CAT_CONTEXT_LENGTH,
    DECIDE_CAT_UNKNOWN_SCHEMA,  /* no output schema of that name */
    DECIDE_CAT_INVALID_SCHEMA,  /* the job's inline schema (or its x-retort) is broken */
    DECIDE_CAT_BUDGET,          /* token budget or deadline spent */
    DECIDE_CAT_COUNT
} decide_category;

typedef enum decide_action {
    DECIDE_FINAL = 0,       /* emit the final event */
    DECIDE_RETRY,           /* republish with attempt + 1 and a reflection */
    DECIDE_RETRY_IN_PLACE,  /* transient: call again after a backoff, same attempt */
    DECIDE_ESCALATE         /* emit the escalation event */
} decide_action;

typedef struct decide_input {
    decide_category category;
    int attempt;                /* 1-based, of the call just made */
    int max_attempts;           /* total attempts allowed, the first included */
    int transient_retries;      /* in-place retries already made this attempt */
    int max_transient_retries;
    int critical;               /* the category or a violation code is critical */
    int fixable;                /* DECIDE_CAT_INVALID: every violation fixable */
    int budget_exceeded;        /* token budget or deadline spent */
} decide_input;

/* reason: a sentence for events and logs (e.g. "validation failed after 3
 * attempts"). */
decide_action decide(const decide_input *in, char *reason, size_t reason_len);

const char *decide_category_name(decide_category cat);
const char *decide_action_name(decide_action action);
int decide_category_is_transient(decide_category cat);

#endif
