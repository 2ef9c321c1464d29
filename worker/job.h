/* job.h - a generation job as read from Kafka: parsing, envelope check,
 * the messages sent to the model, and the retry job of the next attempt. */
#ifndef RETORT_JOB_H
#define RETORT_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "llm_api.h"
#include "schema.h"

typedef struct job {
    cJSON *doc;              /* the parsed message value (owned): a read-only
                              * jsonin tree (jsonin_free, never cJSON_Delete) */
    const char *job_id;      /* into doc */
    const cJSON *schema;     /* string id or inline object, into doc */
    const char *model;       /* into doc, or NULL */
    const char *batch_id;    /* into doc, or NULL */
    const cJSON *params;     /* into doc, or NULL */
    const cJSON *metadata;   /* into doc, or NULL */
    const cJSON *reflection; /* into doc, or NULL */
    int run;                 /* 1 when absent; `retort resubmit` counts up */
    int attempt;             /* 1 when absent */
    int max_attempts;        /* resolved: job's own (capped) or the default */
    int max_attempts_set;    /* the job named its own max_attempts */
    long token_budget;       /* 0: none */
    int64_t deadline_ms;     /* wall clock; 0: none */
} job;

/* Parses value[0..len) and checks it against the job envelope (borrowed).
 * 0 = ok.  On failure err says why; *violations (taken, may be NULL) lists
 * the envelope violations and job_id_out receives the job id when one could
 * be read (for the dead letter). */
int job_parse(const char *value, size_t len, const schema *envelope, int default_max_attempts,
              int max_attempts_ceiling, job *out, cJSON **violations, char *job_id_out,
              size_t job_id_len, char *err, size_t errlen);
void job_clear(job *j);

/* The name of a member of the job object doc (borrowed) that appears more
 * than once, NULL when none does.  A job with one is refused (job_parse,
 * retort submit): readers disagree on which copy counts (Retort's the
 * first, Python's the last), and a retry job replaced only the first
 * "attempt", so the next one read the old number again. */
const char *job_duplicate_member(const cJSON *doc);

/* The conversation for the model: a system instruction (with the schema
 * text unless the API carries it: schema_text NULL), the job's messages or
 * prompt, then, on a retry, the previous output as the assistant's turn and
 * the repair prompt as the user's.  Fills out[0..cap) and returns how many
 * messages there are: when that is more than cap, out holds the first cap
 * (call again with room for all).  Nothing is allocated or copied: the
 * strings are j's, schema_text's and constants, valid while those live. */
size_t job_messages(const job *j, const char *schema_text, llm_api_message *out, size_t cap);

/* The retry job for attempt + 1: the original job with attempt and
 * reflection replaced (reflection borrowed; NULL leaves the retry without
 * one, a fresh ask).  JSON text, taken by the caller. */
char *job_retry_value(const job *j, const cJSON *reflection);

#endif
