/* reflect.h - renders the repair prompt of a retry from a template.
 *
 * Placeholders: {attempt} {max} {reason} {violations} {schema}
 * {previous_output}.  {violations} is one line per violation: path, code,
 * message, expected, got, and a last line saying how many more there are
 * when the list was cut.  Unknown placeholders are left as they are. */
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
    int violations_total;        /* found by the attempt (more than listed when the
                                    list was cut); 0 = as many as listed */
} reflect_input;

/* Returns a malloc'd prompt (taken by the caller) or NULL on OOM. */
char *reflect_render(const reflect_input *in);

/* The violations as the lines used by {violations}, and a line for the
 * total - listed not listed (total 0 = none); malloc'd. */
char *reflect_violations_text(const cJSON *violations, int total);

#endif
