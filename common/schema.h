/* schema.h - JSON Schema (draft 2020-12 and draft-07) compiler and validator.
 *
 * A schema is compiled once (schema_compile) into an immutable internal form
 * and then validates any number of instances.  Validation never mutates the
 * compiled schema, so one compiled schema may be used by several threads at
 * once.  Remote $refs resolve only from a schema_registry (never from the
 * network).
 *
 * Ownership: cJSON documents passed in are *borrowed*; whatever the compiled
 * schema keeps is copied.  Violations belong to the schema_violations value
 * and are released by schema_violations_clear().
 */
#ifndef RETORT_SCHEMA_H
#define RETORT_SCHEMA_H

#include <stddef.h>
#include <cjson/cJSON.h>

typedef struct schema_registry schema_registry;
typedef struct schema schema;

typedef enum schema_draft {
    SCHEMA_DRAFT_2020_12 = 0,
    SCHEMA_DRAFT_7 = 1
} schema_draft;

typedef struct schema_options {
    schema_draft default_draft; /* used when the root has no $schema */
    int format_assert;          /* nonzero: `format` is an assertion */
    size_t max_violations;      /* cap on reported violations; 0 = 32 */
} schema_options;

/* Added: a validation gives up with LIMIT_EXCEEDED once its `pattern` /
 * `patternProperties` matching has taken this long (each single match is
 * also bounded by PCRE2 match/depth/heap limits, a few ms), so a hostile
 * instance with many backtracking-heavy strings cannot stall a worker. */
#define SCHEMA_REGEX_BUDGET_MS 100
/* Added: and once it has evaluated this many (sub)schemas against values
 * (the pass that reports an invalid value's violations: a tenth).  A schema that applies a subschema twice per
 * level (allOf of two $refs to the next level), or a recursive anyOf met
 * by a deep instance, costs 2^depth evaluations: a schema of 2 KB, or an
 * answer of 240 bytes, held a worker's loop for minutes and took GBs.  A
 * validation of a large answer (10,000 objects of 20 members through an
 * anyOf of 5) stays below a tenth of it. */
#define SCHEMA_EVAL_MAX 10000000
/* Longest $id, $ref, $schema or anchor a schema may hold, in bytes. */
#define SCHEMA_URI_MAX 2048

/* Violation codes: static strings, compare with strcmp or pointer. */
#define SCHEMA_NOT_JSON          "NOT_JSON"
#define SCHEMA_WRONG_TYPE        "WRONG_TYPE"
#define SCHEMA_MISSING_FIELD     "MISSING_FIELD"
#define SCHEMA_UNEXPECTED_FIELD  "UNEXPECTED_FIELD"
#define SCHEMA_INVALID_VALUE     "INVALID_VALUE"
#define SCHEMA_ENUM_MISMATCH     "ENUM_MISMATCH"
#define SCHEMA_CONST_MISMATCH    "CONST_MISMATCH"
#define SCHEMA_PATTERN_MISMATCH  "PATTERN_MISMATCH"
#define SCHEMA_FORMAT_MISMATCH   "FORMAT_MISMATCH"
#define SCHEMA_TOO_SHORT         "TOO_SHORT"
#define SCHEMA_TOO_LONG          "TOO_LONG"
#define SCHEMA_OUT_OF_RANGE      "OUT_OF_RANGE"
#define SCHEMA_NOT_UNIQUE        "NOT_UNIQUE"
#define SCHEMA_NOT_MULTIPLE      "NOT_MULTIPLE"
#define SCHEMA_TOO_FEW_ITEMS     "TOO_FEW_ITEMS"
#define SCHEMA_TOO_MANY_ITEMS    "TOO_MANY_ITEMS"
#define SCHEMA_NO_MATCH          "NO_MATCH"        /* anyOf/oneOf/not/contains */
#define SCHEMA_LIMIT_EXCEEDED    "LIMIT_EXCEEDED"  /* regex or depth limit hit */
/* Added by the validator: */
#define SCHEMA_TOO_FEW_PROPERTIES  "TOO_FEW_PROPERTIES"  /* minProperties */
#define SCHEMA_TOO_MANY_PROPERTIES "TOO_MANY_PROPERTIES" /* maxProperties */

/* Reporting conventions (added by the validator):
 * - path: where the instance is wrong.  MISSING_FIELD is reported on the
 *   object that lacks the property (expected = the name, as a JSON string);
 *   UNEXPECTED_FIELD (additionalProperties/unevaluatedProperties/a false
 *   property schema) on the property itself.
 * - keyword_location: JSON Pointer of the failing keyword where it is
 *   written in the root schema ("/$defs/money/required"), not the path of
 *   $refs that led there; for keywords in other documents it is
 *   "URI#/pointer".
 * - expected: the keyword's value as JSON text (a type, enum list, bound,
 *   pattern, format name); actual: the offending value as JSON text, cut at
 *   ~200 bytes with "..." appended.
 * - anyOf/oneOf with no matching alternative: when every alternative fails
 *   only on its type (or only on a const/enum), one merged WRONG_TYPE
 *   ("expected string or null") or ENUM_MISMATCH (all allowed values);
 *   otherwise a NO_MATCH entry followed by the violations of the closest
 *   alternative only: one not ruled out by a wrong type or a failed
 *   const/enum on the value or a direct property (a discriminator), then
 *   the one with the fewest violations.
 * - order: schema keyword order within a schema object, instance member
 *   order within properties; identical entries are reported once.
 * - the violations of a list and their strings share one allocation:
 *   never free or realloc a field; schema_violations_clear() releases
 *   everything.  Texts that do not depend on the instance (most keyword
 *   locations, `expected`, the messages of enum, const, pattern and
 *   required) are not copied: they point into the compiled schema, so a
 *   list is valid only while the schema it came from is (free the list
 *   first, or convert it with schema_violations_to_json()).
 * - validation does not allocate when out == NULL, except for scratch
 *   bitsets/hashes on large inputs (unevaluated* over more than 64 members
 *   or items, uniqueItems over more than 32 items, more than 64 required
 *   names); with out, an invalid instance costs one allocation for the
 *   list (6 KB: the violations' strings are written into it as they are
 *   found), plus scratch memory and a copy into a block of the exact size
 *   when the violations found take more than about 4.5 KB or more than 32
 *   are kept.  It is bounded to 512 nested schema
 *   evaluations and needs under 256 KB of stack at that depth. */
typedef struct schema_violation {
    const char *path;             /* instance location, JSON Pointer ("" = root) */
    const char *keyword_location; /* schema location, e.g. "/properties/a/type" */
    const char *code;             /* one of the codes above (static) */
    const char *message;          /* plain English, one line */
    const char *expected;         /* JSON text or NULL */
    const char *actual;           /* JSON text, truncated, or NULL */
} schema_violation;

typedef struct schema_violations {
    schema_violation *items;
    size_t count;           /* reported (<= max_violations) */
    size_t total;           /* found before the cap */
} schema_violations;

schema_registry *schema_registry_new(void);
void schema_registry_free(schema_registry *reg); /* accepts NULL */

/* Registers a document under an absolute URI (its $id, if any, and every
 * embedded $id/$anchor are registered too).  doc: borrowed.  0 = ok; the
 * same document under the same URI again is a no-op.  -1 with the reason
 * in err on out of memory, or when the URI or one of the document's $ids
 * is taken by another document (a $ref to it would resolve by the order
 * of loading); the registry may then hold part of doc.
 * Added: concurrent schema_compile calls may share a registry (they only
 * read it); adding to it must not overlap with them. */
int schema_registry_add(schema_registry *reg, const char *uri,
                        const cJSON *doc, char *err, size_t errlen);

/* Loads every *.json file below dir (recursively) as base_uri + relative
 * path; files that are not JSON are skipped.  0 = ok; -1 with the reason
 * in err (as schema_registry_add's, naming the file). */
int schema_registry_load_dir(schema_registry *reg, const char *dir,
                             const char *base_uri, char *err, size_t errlen);

/* Compiles doc (borrowed).  reg may be NULL.  opts may be NULL (defaults).
 * NULL on error with a message naming the location in err.
 * Added: $schema selects the dialect per schema resource: draft 2020-12,
 * 2019-09 (approximated: array items, no prefixItems, $dynamicRef or
 * $recursiveRef), draft-07 (also used for draft-06/04 URIs), or a
 * metaschema from the registry whose $vocabulary enables keyword groups
 * (an unknown required vocabulary is an error).  Keyword values are checked for shape (a negative minLength is
 * an error); the schema is not otherwise validated against its
 * metaschema. */
schema *schema_compile(schema_registry *reg, const cJSON *doc,
                       const schema_options *opts, char *err, size_t errlen);
void schema_free(schema *s); /* accepts NULL */

/* The memory s holds, in bytes, about: its arena (nodes, names, report
 * texts), its regexes (PCRE2's compiled code and JIT code) and its copies
 * of const/enum values, each allocation with the allocator's overhead.
 * Within a tenth or so of what glibc's malloc hands out for them; RSS grows
 * by about as much.  It walks the schema's blocks and kept values: ask
 * once, not per validation.  0 for NULL. */
size_t schema_mem_bytes(const schema *s);

/* Added: like schema_compile, with base_uri (absolute, e.g. "file:///x/a.json")
 * as the retrieval URI of doc, against which a root without $id resolves
 * relative $refs.  base_uri NULL = an internal default. */
schema *schema_compile_base(schema_registry *reg, const cJSON *doc,
                            const char *base_uri, const schema_options *opts,
                            char *err, size_t errlen);

/* Validates instance (borrowed) against s.  Returns 0 when valid, 1 when
 * invalid (out filled), -1 on an internal error (out has one violation with
 * code LIMIT_EXCEEDED).  out may be NULL to only ask valid/invalid (faster).
 * out must be zero-initialised or cleared before the call.
 * Added precision: the answer (0/1/-1) never depends on out.  When the
 * instance is known invalid but collecting the violations hit a limit, the
 * result is 1 and the list ends with a LIMIT_EXCEEDED entry. */
int schema_validate(const schema *s, const cJSON *instance,
                    schema_violations *out);

void schema_violations_clear(schema_violations *v); /* frees items, zeroes */

/* [{path, keyword, code, message, expected, actual}, ...]; caller frees.
 * Added: expected/actual are embedded as JSON values when their text parses
 * (a cut "actual" does not: it stays a string); null when absent. */
cJSON *schema_violations_to_json(const schema_violations *v);

#endif
