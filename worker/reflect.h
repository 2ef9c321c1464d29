/* reflect.h - renders the repair prompt of a retry from a template.
 *
 * Placeholders: {attempt} {max} {reason} {violations} {schema}
 * {previous_output}.  {violations} is one line per violation: path, code,
 * message, expected, got.  Unknown placeholders are left as they are. */
#ifndef RETORT_REFLECT_H
#define RETORT_REFLECT_H

#include <stddef.h>
#include <cjson/cJSON.h>

extern const char reflect_default_template[];

typedef struct reflect_input {
    const char *tmpl;            /* NULL or "": the default template */
    int attempt, max_attempts;   /* of the failed attempt */
    const char *reason;
    const cJSON *violations;     /* [{path, code, message, expected, actual}] */
    const char *schema_text;     /* compact JSON of the output schema */
    const char *previous_output; /* capped by the caller */
} reflect_input;

/* Returns a malloc'd prompt (taken by the caller) or NULL on OOM. */
char *reflect_render(const reflect_input *in);

/* The violations as the lines used by {violations}; malloc'd. */
char *reflect_violations_text(const cJSON *violations);

#endif
