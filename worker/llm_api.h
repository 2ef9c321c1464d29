/* llm_api.h - the wire formats of the LLM APIs Retort speaks: building a
 * request body and reading a response into a category, text and usage.
 * Pure functions (no I/O); llm_client moves the bytes. */
#ifndef RETORT_LLM_API_H
#define RETORT_LLM_API_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "decide.h"

typedef enum llm_provider { LLM_PROVIDER_OPENAI = 0, LLM_PROVIDER_ANTHROPIC } llm_provider;
typedef enum llm_response_format { LLM_RF_AUTO = 0, LLM_RF_ON, LLM_RF_OFF } llm_response_format;

int llm_api_provider_parse(const char *s, llm_provider *out);          /* 0 = ok */
int llm_api_response_format_parse(const char *s, llm_response_format *out);

/* One message of the conversation.  Its content is its parts joined, up
 * to the first NULL one (the system instruction and the schema's text go
 * as they are, not copied into one string first).  All borrowed. */
#define LLM_API_PARTS 3
typedef struct llm_api_message {
    const char *role;
    const char *parts[LLM_API_PARTS];
} llm_api_message;

typedef struct llm_api_request {
    llm_provider provider;
    const char *model;
    const llm_api_message *messages; /* OpenAI style, system included; borrowed */
    size_t nmessages;
    const cJSON *params;        /* object merged at top level (temperature, ...) or NULL */
    const cJSON *schema;        /* output schema or NULL */
    const char *schema_name;    /* [a-zA-Z0-9_-]; others become '_' */
    llm_response_format response_format;
    int default_max_tokens;     /* used when params set none (Anthropic requires it) */
    /* The schema printed unformatted and llm_api_schema_is_strict() of it,
     * worked out once per schema by the caller; NULL: done here per call. */
    const char *schema_json;
    int schema_strict;
    /* Anthropic: the system prompt (Retort's instructions, the schema, the
     * job's system messages) is marked for the prompt cache, as a text
     * block with cache_control; the jobs of one schema share it. */
    int prompt_cache;
} llm_api_request;

/* Returns the JSON body (malloc'd, taken by the caller) or NULL on OOM;
 * *len (may be NULL) receives its length. */
char *llm_api_build_body(const llm_api_request *req, size_t *len);

/* 1 when the schema is sent to the API itself (response_format /
 * output_config), so the prompt need not carry it; 0 too when the job's
 * params (borrowed, may be NULL) replace that member with their own. */
int llm_api_sends_schema(llm_provider provider, llm_response_format rf, const cJSON *params);

/* 1 when the schema meets OpenAI's strict mode: an object at the root,
 * every object (with properties or not) closed by additionalProperties
 * false and requiring all of its properties, and no keyword strict mode
 * refuses (patternProperties, allOf, not, if, uniqueItems...).  Otherwise
 * the schema goes with strict false: sent as strict, OpenAI refuses the
 * request (400), and every job of the schema escalated. */
int llm_api_schema_is_strict(const cJSON *schema);

typedef struct llm_api_result {
    decide_category category;  /* OK: text holds the answer */
    char *text;                /* malloc'd, or NULL */
    int text_nul;              /* OK only: the body escapes U+0000 (text may end early) */
    char finish_reason[32];
    long prompt_tokens;        /* the whole prompt, cached parts included */
    long completion_tokens;
    /* Of prompt_tokens: read from, and written to, the provider's prompt
     * cache, which it prices apart (OpenAI's
     * usage.prompt_tokens_details.cached_tokens; Anthropic's
     * cache_read_input_tokens and cache_creation_input_tokens). */
    long cache_read_tokens;
    long cache_write_tokens;
    char error[256];           /* provider's error message, if any */
} llm_api_result;

/* Reads a response.  status: HTTP status (> 0).  body: borrowed.  An
 * answer (category OK) whose body holds the escape \u0000 anywhere gets
 * text_nul = 1: C strings end at the NUL, so text may be the answer cut
 * short, and it must not be taken as it is. */
void llm_api_parse(llm_provider provider, long status, const char *body, size_t len,
                   llm_api_result *out);

/* llm_api_parse through a cJSON document only, never the scanner below:
 * the reference the tests hold the scanner to. */
void llm_api_parse_dom(llm_provider provider, long status, const char *body, size_t len,
                       llm_api_result *out);

/* A 2xx answer read without a DOM (what llm_api_parse tries first): 0 =
 * read, out filled exactly as llm_api_parse_dom would fill it; -1 = left
 * to cJSON (a body it does not handle, see llm_api.c), out untouched.
 * body: borrowed. */
int llm_api_scan(llm_provider provider, const char *body, size_t len, llm_api_result *out);
void llm_api_result_clear(llm_api_result *r);

/* The category of an HTTP status and error body (4xx/5xx): a spent quota
 * or credit (OpenAI's code insufficient_quota, with a 429; Anthropic's
 * "credit balance is too low", with a 400) is DECIDE_CAT_QUOTA, not a rate
 * limit or a bad request. */
decide_category llm_api_status_category(long status, const char *error_code, const char *message);

#endif
