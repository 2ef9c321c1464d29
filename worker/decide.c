#include "decide.h"

#include <stdio.h>

#include "util.h"

static const char *const category_names[DECIDE_CAT_COUNT] = {
    "ok", "invalid", "truncated", "empty", "refusal", "content_filter",
    "timeout", "network", "rate_limited", "server_error",
    "auth", "quota", "bad_request", "context_length", "unknown_schema", "invalid_schema", "budget",
};

const char *decide_category_name(decide_category cat) {
    return cat < DECIDE_CAT_COUNT ? category_names[cat] : "unknown";
}

const char *decide_action_name(decide_action action) {
    switch (action) {
    case DECIDE_FINAL: return "final";
    case DECIDE_RETRY: return "retry";
    case DECIDE_RETRY_IN_PLACE: return "retry_in_place";
    case DECIDE_ESCALATE: return "escalate";
    }
    return "unknown";
}

int decide_category_is_transient(decide_category cat) {
    return cat >= DECIDE_CAT_TIMEOUT && cat <= DECIDE_CAT_SERVER_ERROR;
}

static int is_output_problem(decide_category cat) {
    return cat >= DECIDE_CAT_INVALID && cat <= DECIDE_CAT_CONTENT_FILTER;
}

decide_action decide(const decide_input *in, char *reason, size_t reason_len) {
    const char *cat = decide_category_name(in->category);
    if (in->category == DECIDE_CAT_OK) {
        /* every job that passes comes here: without snprintf's format
         * parsing (700 instructions) */
        char att[24];
        util_ltoa(in->attempt, att);
        util_concat(reason, reason_len, "valid on attempt ", att, (char *)NULL);
        return DECIDE_FINAL;
    }
    if (decide_category_is_transient(in->category)) {
        /* A transient failure says nothing about the answer, so it spends
         * its own budget, not a validation attempt. */
        if (in->budget_exceeded) {
            snprintf(reason, reason_len, "budget exhausted after %s on attempt %d", cat, in->attempt);
            return DECIDE_ESCALATE;
        }
        if (in->transient_retries < in->max_transient_retries) {
            snprintf(reason, reason_len, "%s, retry %d of %d", cat, in->transient_retries + 1,
                     in->max_transient_retries);
            return DECIDE_RETRY_IN_PLACE;
        }
        snprintf(reason, reason_len, "llm call failed (%s) after %d tries on attempt %d", cat,
                 in->transient_retries + 1, in->attempt);
        return DECIDE_ESCALATE;
    }
    if (!is_output_problem(in->category)) {
        snprintf(reason, reason_len, "%s is not retryable", cat);
        return DECIDE_ESCALATE;
    }
    if (in->critical) {
        snprintf(reason, reason_len, "critical failure (%s) on attempt %d", cat, in->attempt);
        return DECIDE_ESCALATE;
    }
    if (in->category == DECIDE_CAT_INVALID && !in->fixable) {
        snprintf(reason, reason_len, "validation failed with violations that are not fixable on attempt %d",
                 in->attempt);
        return DECIDE_ESCALATE;
    }
    if (in->attempt >= in->max_attempts) {
        snprintf(reason, reason_len, "%s failed after %d attempt%s",
                 in->category == DECIDE_CAT_INVALID ? "validation" : cat, in->attempt,
                 in->attempt == 1 ? "" : "s");
        return DECIDE_ESCALATE;
    }
    if (in->budget_exceeded) {
        snprintf(reason, reason_len, "budget exhausted after attempt %d", in->attempt);
        return DECIDE_ESCALATE;
    }
    snprintf(reason, reason_len, "%s on attempt %d of %d",
             in->category == DECIDE_CAT_INVALID ? "validation failed" : cat, in->attempt,
             in->max_attempts);
    return DECIDE_RETRY;
}
