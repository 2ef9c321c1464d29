/* rules.h - rule validators: checks on an output that JSON Schema cannot
 * express well (forbidden phrases, patterns at a pointer, "not blank",
 * length in code points), run after the output passed its schema.
 *
 * A rule set is compiled once from a JSON array (rules_compile) into an
 * immutable form; rules_check may then run on any number of outputs, from
 * several threads at once (each call uses its own match data).
 *
 * Spec: a JSON array of rule objects.  Fields common to every rule:
 *   "type"     required; one of the types below.
 *   "code"     optional non-empty string (at most 64 bytes): replaces the
 *              rule's violation code (every code below except
 *              LIMIT_EXCEEDED).
 *   "message"  optional non-empty string: replaces the generated message,
 *              used verbatim (the violation's path still says where).
 *   "fixable"  optional boolean, default true: copied into every violation
 *              of the rule.  false tells the worker that asking the model
 *              again is pointless (the job escalates at once).
 * Any other field is an error, so that a typo ("pointr") is not silently
 * ignored.
 *
 * "pointer" is a JSON Pointer (RFC 6901): "" is the whole output, "/a/0/b"
 * walks object members and array indexes, "~1" stands for '/' and "~0" for
 * '~' in a member name.  An array index is "0" or a decimal without leading
 * zeros; "-" and out-of-range indexes resolve to nothing.
 *
 * Rule types:
 *   {"type":"forbid_phrases", "phrases":["I don't know","as an AI"],
 *    "pointer":"/summary", "case_sensitive":false}
 *       Every string value at or below pointer (default "": every string in
 *       the output; member names are not checked) is searched for each
 *       phrase; each string containing a phrase gives one FORBIDDEN_PHRASE
 *       violation at the string's own path ("/items/2/note").  A phrase
 *       matches only as whole words where it begins or ends with a letter,
 *       digit or '_' ("AI" does not match "said"); a run of white space in
 *       a phrase matches any run of white space; an ASCII apostrophe also
 *       matches U+2019 (’).  case_sensitive defaults to false (Unicode
 *       case folding).  A missing pointer target is not a violation.
 *   {"type":"must_match", "pointer":"/sku", "regex":"^[A-Z]{3}-\\d{4}$"}
 *       PATTERN_MISMATCH when the string at pointer does not match;
 *       WRONG_TYPE when the value there is not a string.
 *   {"type":"must_not_match", "pointer":"/sku", "regex":"^TEST-"}
 *       FORBIDDEN_PATTERN when the string at pointer matches; other types
 *       are not checked.
 *       Both: nothing happens when pointer resolves to nothing (add a
 *       not_empty rule or a schema "required" to demand the value).  regex
 *       is PCRE2 syntax in UTF mode, searched unanchored (use ^ and $);
 *       \d \w \s and [[:alpha:]] are ASCII-only (use \p{L} etc. for
 *       Unicode).  Matching is bounded by match, depth and heap limits: a
 *       pathological pattern gives one LIMIT_EXCEEDED violation, fixable
 *       false, within milliseconds instead of hanging.
 *   {"type":"not_empty", "pointer":"/summary"}
 *       EMPTY_VALUE when the value is null, "", [], {} or a string of only
 *       white space (Unicode white space and zero-width space/BOM);
 *       MISSING_FIELD when pointer resolves to nothing.  false and 0 are
 *       not empty.
 *   {"type":"length", "pointer":"/tags", "min":1, "max":5}
 *       TOO_SHORT / TOO_LONG for a string (counted in Unicode code points)
 *       or an array (counted in items); WRONG_TYPE for any other value;
 *       nothing when pointer resolves to nothing.  min and max are
 *       non-negative integers, at least one of them given, min <= max.
 *
 * Violations (appended by rules_check) have the shape of
 * schema_violations_to_json plus "fixable":
 *   {"path": JSON Pointer of the offending value,
 *    "keyword": "rules/<index in the spec array>/<type>" (see
 *                rules_compile_prefix),
 *    "code": see above, "message": plain English for the model,
 *    "expected": the bound (length), the regex (must_match) or null,
 *    "actual": the offending value (a copy, or a string of its first
 *              bytes when long; for forbid_phrases the text around the
 *              phrase) or null,
 *    "fixable": bool}
 * At most RULES_MAX_PER_RULE violations are reported per rule and call.
 */
#ifndef RETORT_RULES_H
#define RETORT_RULES_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Violation codes (the shared ones have the same text as in schema.h). */
#define RULES_FORBIDDEN_PHRASE  "FORBIDDEN_PHRASE"
#define RULES_PATTERN_MISMATCH  "PATTERN_MISMATCH"
#define RULES_FORBIDDEN_PATTERN "FORBIDDEN_PATTERN"
#define RULES_EMPTY_VALUE       "EMPTY_VALUE"
#define RULES_MISSING_FIELD     "MISSING_FIELD"
#define RULES_TOO_SHORT         "TOO_SHORT"
#define RULES_TOO_LONG          "TOO_LONG"
#define RULES_WRONG_TYPE        "WRONG_TYPE"
#define RULES_LIMIT_EXCEEDED    "LIMIT_EXCEEDED"

#define RULES_MAX_PER_RULE 32

typedef struct rules rules;

/* Compiles spec (borrowed; a JSON array of rule objects, may be empty).
 * Returns the rule set (free with rules_free) or NULL with a message in
 * err naming the rule and field, e.g. `rules[2].regex: missing ) at offset
 * 4`.  Nothing of spec is kept. */
rules *rules_compile(const cJSON *spec, char *err, size_t errlen);

/* Like rules_compile, with prefix (borrowed; NULL or "" = "rules") in
 * place of "rules" in keywords ("<prefix>/<i>/<type>") and errors
 * ("<prefix>[i].field"), so that rule sets from several sources (a global
 * rules file, a schema's "x-retort") can be told apart. */
rules *rules_compile_prefix(const cJSON *spec, const char *prefix, char *err, size_t errlen);
void rules_free(rules *r); /* accepts NULL */

/* Number of rules in r (0 for NULL). */
size_t rules_count(const rules *r);

/* Runs every rule of r on output (borrowed) and appends a violation object
 * (taken by violations) for each failure to the array violations.  Returns
 * how many were appended; 0 = the output passes (also for r NULL, or
 * violations NULL or not an array). */
size_t rules_check(const rules *r, const cJSON *output, cJSON *violations);

/* The value at pointer (RFC 6901) in doc, or NULL when pointer is malformed
 * or resolves to nothing.  Borrowed from doc. */
const cJSON *rules_pointer_get(const cJSON *doc, const char *pointer);

/* Longest violation code, in bytes. */
#define RULES_CODE_MAX 64
/* 1 when code is a violation code as events carry them: ^[A-Z][A-Z0-9_]*$, at
 * most RULES_CODE_MAX bytes (metrics use it as a label value, the events'
 * schema gives the pattern). */
int rules_code_valid(const char *code);

#endif
