/* schema_regex.h - ECMA-262 flavoured regular expressions on top of PCRE2.
 *
 * JSON Schema patterns are ECMA-262 regexes.  The pattern is translated to
 * PCRE2 syntax so that the ECMA meaning holds where the two differ: \d \w \b
 * are ASCII-only, \s is the ECMA (Unicode) white-space set, '.' excludes
 * the four ECMA line terminators, '$' matches only at the very end, \uXXXX,
 * \u{X..} and surrogate pairs denote code points, '[]' matches nothing and
 * '[^]' anything, a backreference to a group that did not take part
 * matches the empty string, a group name is any identifier of any length
 * (\u escapes decoded; PCRE2 gets short names of its own, an error message
 * the user's) and groups in different alternatives may share one (ES2025).
 * Without SCHEMA_REGEX_STRICT, ECMA-262's Annex B holds as in a browser:
 * \N with fewer than N groups is an octal escape (\8 and \9 the digit),
 * \k in a pattern without named groups the letter, and a '-' next to a
 * class escape ([\s-a]) a member of the class; and PCRE2's own syntax
 * works, though a pattern that refers to a name in it (\k'n', (?P=n),
 * (?&n) ...) keeps PCRE2's limits on names.  Matching is by code point
 * (PCRE2_UTF) and unanchored, and is bounded by match, depth and heap
 * limits: a pathological pattern yields -1 from schema_regex_match
 * instead of hanging.
 *
 * Simple anchored patterns (ASCII literals and classes with quantifiers,
 * like ^[A-Z]{2}-[0-9]{4,8}$) are matched by a small built-in matcher when
 * greedy matching is provably exact for them; everything else runs on
 * PCRE2 (JIT when available).
 *
 * A compiled regex is immutable and may be matched from several threads at
 * once (match data is kept per thread and released at thread exit).
 */
#ifndef RETORT_SCHEMA_REGEX_H
#define RETORT_SCHEMA_REGEX_H

#include <stddef.h>

typedef struct schema_regex schema_regex;

/* Flags for schema_regex_compile. */
#define SCHEMA_REGEX_STRICT 1 /* reject escapes and groups ECMA-262 (u mode)
                                 does not know, e.g. \a \Z (?i) */
#define SCHEMA_REGEX_PCRE_ONLY 2 /* never use the built-in matcher for simple
                                    patterns (for differential tests) */

/* Compiles pattern (NUL-terminated UTF-8).  NULL on error with a message
 * in err. */
schema_regex *schema_regex_compile(const char *pattern, int flags,
                                   char *err, size_t errlen);
void schema_regex_free(schema_regex *re); /* accepts NULL */

/* Searches s[0..len) (must be valid UTF-8).  1 = match, 0 = no match,
 * -1 = a match/depth/heap limit was hit or PCRE2 failed. */
int schema_regex_match(const schema_regex *re, const char *s, size_t len);

/* The source pattern as given to schema_regex_compile (borrowed, valid
 * while re lives). */
const char *schema_regex_source(const schema_regex *re);

/* Nonzero when re runs on the built-in matcher rather than PCRE2
 * (diagnostics and tests). */
int schema_regex_is_simple(const schema_regex *re);

/* The memory re holds, in bytes, about: PCRE2's compiled pattern
 * (PCRE2_INFO_SIZE), its JIT code (PCRE2_INFO_JITSIZE), the source and
 * the built-in matcher's tables, each with the allocator's overhead.
 * (For schema_mem_bytes: a cache bounds the compiled schemas it keeps by
 * it.) */
size_t schema_regex_mem_bytes(const schema_regex *re);

/* Nonzero when pattern is a valid ECMA-262 regex (format "regex"). */
int schema_regex_is_valid(const char *pattern);

#endif
