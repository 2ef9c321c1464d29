/* schema_uri.h - RFC 3986 URI reference resolution for JSON Schema $id/$ref.
 *
 * Pure string functions, no I/O, thread-safe.
 */
#ifndef RETORT_SCHEMA_URI_H
#define RETORT_SCHEMA_URI_H

#include <stddef.h>

/* Resolves the reference ref against the absolute URI base (RFC 3986
 * section 5.2, with dot-segment removal).  An empty trailing fragment ("#")
 * is dropped so that "x#" and "x" name the same resource.  Returns a
 * malloc'd string the caller frees, or NULL when out of memory. */
char *schema_uri_resolve(const char *base, const char *ref);

/* Length of uri without its fragment (index of the first '#', or strlen). */
size_t schema_uri_base_len(const char *uri);

/* Decodes %XX escapes of src[0..len) into dst (at least len + 1 bytes,
 * NUL-terminated).  Returns the decoded length; invalid escapes are kept. */
size_t schema_uri_percent_decode(const char *src, size_t len, char *dst);

/* prefix + path as a URI's path: the bytes that would end it or start an
 * escape ('?', '#', '%') are %XX-escaped, so that a file in a directory
 * named "a#b" is not "a" with a fragment.  Other bytes are kept, as the
 * registry's keys and $refs written by hand have them.  malloc'd, NULL
 * when out of memory. */
char *schema_uri_from_path(const char *prefix, const char *path);

#endif
