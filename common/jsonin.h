/* jsonin.h - parses JSON text into a cJSON tree that lives in one block.
 *
 * The worker keeps two parsed documents per job: the job message, for the
 * whole life of the job (2 s and more with a slow model), and the model's
 * answer.  cJSON_Parse makes an allocation per node and per string, and
 * with thousands of jobs in flight each of those frees comes back cold.
 * Here the nodes and strings of a document share one allocation sized in
 * advance, so a document costs one malloc and one free.
 *
 * Grammar: RFC 8259, strictly (JSON.parse's, where cJSON is looser):
 * white space is space, tab, CR and LF only; numbers without leading
 * zeros, a bare '.', '+' or a trailing 'e'; no raw control characters in
 * strings; \u takes exactly four hex digits.  The values are cJSON's:
 * numbers are doubles (as strtod gives them) with cJSON's saturated
 * valueint, and keep their text as written in valuestring (cJSON leaves
 * it NULL for numbers; cJSON_Duplicate copies it, cJSON_Print ignores
 * it): jsonout prints that text, so a number goes out exactly as it came
 * in, digits past a double's 17 and 1e400 included.  Strings are
 * unescaped into NUL-terminated UTF-8, a \u escape of a lone surrogate
 * is an error, and so is "\u0000" (in a value or a key): a C string
 * cannot hold the NUL character, and cJSON's reading, a string cut short
 * at it, would pass a changed value on without a word.  Duplicate keys
 * are kept in order, and the first child's prev points at the last
 * child.  Nesting deeper than 1000 is an error, as in
 * cJSON.  Bytes >= 0x80 are copied as they are: check UTF-8 first.
 *
 * The tree is read-only for cJSON: read it, print it, compare it,
 * duplicate it, but never cJSON_Delete it, detach, replace or add to its
 * nodes.  Free it with jsonin_free. */
#ifndef RETORT_JSONIN_H
#define RETORT_JSONIN_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Parses one value from text[0..len) (borrowed; need not be
 * NUL-terminated), after leading white space (and a UTF-8 byte order mark
 * at the very start).  Returns the root, taken by the caller (free it with
 * jsonin_free), or NULL when the text is not JSON or memory ran out.
 * end (may be NULL): set to just after the value on success; what
 * follows is the caller's business.  err_at (may be NULL): on failure,
 * the offset of the byte where parsing stopped (len when the text ended
 * early). */
cJSON *jsonin_parse(const char *text, size_t len, const char **end, size_t *err_at);

/* jsonin_parse for a text that must be one value and nothing else but
 * white space.  On failure err_at (may be NULL) is where parsing stopped,
 * or the first byte after the value that is not white space. */
cJSON *jsonin_parse_all(const char *text, size_t len, size_t *err_at);

/* 1 when a parse of text[0..len) that failed at err_at failed on a
 * "\u0000" escape (err_at is its backslash), else 0: for an error
 * message that says so. */
int jsonin_nul_at(const char *text, size_t len, size_t err_at);

/* Frees a tree from jsonin_parse.  Accepts NULL. */
void jsonin_free(cJSON *root);

#endif
