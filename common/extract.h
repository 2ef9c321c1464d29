/* extract.h - takes the single JSON value out of a model's text answer.
 *
 * Tolerated around the value, and nothing looser: surrounding white space,
 * one Markdown code fence (``` or ```json) with at most one line of prose
 * before and after it, or without a fence one line of prose before and/or
 * after the value.  Anything else is NOT_JSON. */
#ifndef RETORT_EXTRACT_H
#define RETORT_EXTRACT_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* On success returns 0 and *out (taken by the caller) holds the value,
 * a read-only jsonin tree: free it with jsonin_free, never cJSON_Delete.
 * The JSON is read strictly (RFC 8259; see jsonin.h), and a string that
 * holds "\u0000" is refused with an error that says so (a C string ends
 * at the NUL: taking it would cut the value short).
 * On failure returns -1 and err says why, in words fit for a repair
 * prompt. */
int extract_json(const char *text, size_t len, cJSON **out, char *err, size_t errlen);

#endif
