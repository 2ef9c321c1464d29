/* schema_meta.h - the draft 2020-12 and draft-07 metaschemas, embedded.
 *
 * The metaschemas are spec documents; they are compiled into the binary so
 * that `$ref` to them (and `$schema` lookups) work without any file or
 * network access.  Every schema_registry sees them.
 */
#ifndef RETORT_SCHEMA_META_H
#define RETORT_SCHEMA_META_H

#include <stddef.h>

/* Number of embedded documents. */
size_t schema_meta_count(void);

/* URI (absolute, no fragment) and JSON text of document i (static). */
const char *schema_meta_uri(size_t i);
const char *schema_meta_text(size_t i);

#endif
