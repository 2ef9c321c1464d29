/* jsonout.h - prints cJSON values as compact JSON text, fast.
 *
 * The output is byte for byte what cJSON_PrintUnformatted gives (same
 * escapes, same number forms), so the two can be mixed freely, with one
 * exception: a number node that carries its text in valuestring (jsonin
 * keeps each number's text there) is printed as that text, so a value
 * read with jsonin goes out with its numbers as they were written, where
 * cJSON would print the double (12345678901234567890 as
 * 1.2345678901234567e+19, 1e400 as null).  It is cheaper because it
 * writes into one growable buffer and formats numbers without cJSON's
 * sprintf + sscanf round trip: integers are written digit by digit, and
 * other doubles are checked with strtod. */
#ifndef RETORT_JSONOUT_H
#define RETORT_JSONOUT_H

#include <cjson/cJSON.h>

#include "util.h"

/* Appends v (borrowed; references are followed) to b.  0 = ok, -1 on
 * out of memory (b then holds a prefix). */
int jsonout_value(sbuf *b, const cJSON *v);
/* Appends a number as cJSON would print it (NaN and infinities: null). */
int jsonout_number(sbuf *b, double d);
/* v as a malloc'd string (taken by the caller), or NULL on OOM / NULL v. */
char *jsonout_print(const cJSON *v);
/* The same, laid out for people byte for byte as cJSON_Print lays it out
 * (but for the numbers' text, as above). */
char *jsonout_print_formatted(const cJSON *v);

#endif
