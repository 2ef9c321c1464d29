/* events.h - the JSON of everything Retort produces: final, escalation and
 * dead-letter events, attempt records, and their CloudEvents headers
 * (Kafka binding, binary mode).  The envelopes are JSON Schemas in
 * schemas/events/. */
#ifndef RETORT_EVENTS_H
#define RETORT_EVENTS_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "job.h"

typedef enum event_type {
    EVENT_FINAL = 0,
    EVENT_RETRY,
    EVENT_ESCALATED,
    EVENT_DEAD_LETTER
} event_type;

const char *events_ce_type(event_type type);   /* "retort.job.final", ... */

/* CloudEvents headers.  The id is stable: <subject>:<attempt>:<kind>, so a
 * republished outcome carries the same id; a later run of the job (run > 1,
 * after `retort resubmit`) appends :r<run>, so its events are new ones. */
/* A job id whole: 200 code points (its schema's maxLength) of up to 4
 * bytes each, and the NUL.  Cut, two jobs' events shared ids. */
#define EVENTS_SUBJECT_MAX 804
typedef struct events_headers {
    char id[EVENTS_SUBJECT_MAX + 64];
    char time[40];
    char subject[EVENTS_SUBJECT_MAX];
    const char *type;
    const char *source;   /* borrowed */
} events_headers;

void events_headers_init(events_headers *h, event_type type, const char *subject, int run, int attempt,
                         const char *source, int64_t wall_ms);

/* Sums usage over history records into a usage object. */
cJSON *events_usage_total(const cJSON *history);

/* history and the job: borrowed.  Return values are taken, but the
 * final and escalation events refer to parts of history and of the job
 * (cJSON references, not copies): print or delete the event before
 * those go. */
/* An attempt as the final event reads it, for the attempt whose record
 * exists only as text (the worker writes its records without a tree).
 * Everything borrowed. */
typedef struct events_attempt {
    int attempt;
    const char *outcome;        /* "valid", "invalid" or "error" */
    const cJSON *violations;    /* array, or NULL */
    double latency_ms;
    long prompt_tokens, completion_tokens;
    long cache_read_tokens, cache_write_tokens; /* of prompt_tokens */
    const char *value;          /* the output as JSON text, or NULL */
    size_t value_len;
} events_attempt;

/* The final event as JSON text (malloc'd, taken), or NULL on OOM.  The
 * attempts are history's records then last; last NULL: history's last
 * record is the last attempt. */
char *events_final(const job *j, const char *schema_name, const char *model,
                   const cJSON *history, const events_attempt *last, int64_t wall_ms);
cJSON *events_escalation(const job *j, const char *schema_name, const char *model,
                         const cJSON *history, int64_t wall_ms);
cJSON *events_dead_letter(const char *reason, const cJSON *violations, const char *job_id,
                          const char *topic, int32_t partition, int64_t offset, const char *key,
                          size_t key_len, const char *value, size_t value_len, int64_t wall_ms);

/* An event (final, escalation or dead letter; not a retry job, which
 * must stay a job) made to fit in limit bytes: when *text (taken and
 * replaced) is longer, its largest top-level members (output, metadata,
 * history, the dead message's value...) are left out, largest first,
 * until it fits, and "omitted" names each one with its size in bytes:
 * {"omitted":{"output":1048576}}.  The parts left out stay where they
 * came from (the attempt records and the batch input in Redis).  Returns
 * 0 when *text fits (changed or not), -1 when it cannot be made to fit or
 * memory ran out (*text unchanged). */
int events_fit(char **text, size_t limit);

#endif
