/* schema_format.h - checks for the JSON Schema `format` keyword.
 *
 * Pure functions on UTF-8 strings, thread-safe.  Formats follow the RFCs
 * the JSON Schema validation spec names (RFC 3339 dates and times and
 * durations, RFC 5321/5322 email, RFC 1123 host names, RFC 4291 IPv6,
 * RFC 3986/3987 URIs, RFC 4122 UUIDs, RFC 6901 JSON pointers, RFC 6570 URI
 * templates, ECMA-262 regexes).
 */
#ifndef RETORT_SCHEMA_FORMAT_H
#define RETORT_SCHEMA_FORMAT_H

#include <stddef.h>

/* Identifier of a known format name, or 0 when the format is unknown
 * (unknown formats are always valid). */
int schema_format_id(const char *name);

/* Name of a format identifier (static string), "" for 0. */
const char *schema_format_name(int id);

/* 1 when s[0..len) (valid UTF-8) is valid for format id, else 0. */
int schema_format_check(int id, const char *s, size_t len);

#endif
