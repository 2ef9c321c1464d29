#include "extract.h"

#include <stdio.h>
#include <string.h>

#include "jsonin.h"
#include "util.h"

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* 1 when s[0..len) holds anything but blanks: it stops at the first such
 * byte, where prose_lines would read the whole answer. */
static int has_text(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!is_space(s[i])) return 1;
    return 0;
}

/* Counts the non-blank lines of s[0..len). */
static int prose_lines(const char *s, size_t len) {
    int lines = 0, blank = 1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\n') {
            if (!blank) lines++;
            blank = 1;
        } else if (!is_space(s[i])) {
            blank = 0;
        }
    }
    return lines + !blank;
}

/* jsonin_parse_all, noting in *nul when the text failed on a "\u0000". */
static cJSON *parse_all(const char *text, size_t len, int *nul) {
    size_t at = 0;
    cJSON *v = jsonin_parse_all(text, len, &at);
    if (!v && jsonin_nul_at(text, len, at)) *nul = 1;
    return v;
}

static const char *find_str(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0) return s + i;
    return NULL;
}

static int from_fence(const char *text, size_t len, cJSON **out, int *nul) {
    const char *open = find_str(text, len, "```");
    if (!open) return -1;
    const char *body = memchr(open, '\n', len - (size_t)(open - text));
    if (!body) return -1;
    /* The info string must be empty or a single word such as json. */
    for (const char *p = open + 3; p < body; p++)
        if (is_space(*p) && *p != '\r') {
            for (; p < body; p++)
                if (!is_space(*p)) return -1;
            break;
        }
    body++;
    /* The fence closes where the value ends: the first ``` after the
     * opening one may be inside a string of the value (a Markdown field),
     * and taken as the close it cut a correct answer. */
    const char *end = NULL;
    size_t at = 0;
    cJSON *v = jsonin_parse(body, len - (size_t)(body - text), &end, &at);
    if (!v) {
        if (jsonin_nul_at(body, len - (size_t)(body - text), at)) *nul = 1;
        return -1;
    }
    const char *close = end;
    while (close < text + len && is_space(*close)) close++;
    const char *after = close + 3;
    size_t after_len = after <= text + len ? len - (size_t)(after - text) : 0;
    if (after > text + len || memcmp(close, "```", 3) || find_str(after, after_len, "```") || /* one fence */
        prose_lines(text, (size_t)(open - text)) > 1 || prose_lines(after, after_len) > 1) {
        jsonin_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

/* s[0..len) opens, past blanks, with an object or array that reads whole
 * ("[Note] ..." is prose). */
static int starts_value(const char *s, size_t len) {
    size_t i = 0;
    while (i < len && is_space(s[i])) i++;
    if (i == len || (s[i] != '{' && s[i] != '[')) return 0;
    const char *end = NULL;
    size_t at = 0;
    cJSON *v = jsonin_parse(s + i, len - i, &end, &at);
    jsonin_free(v);
    return v != NULL;
}

/* One line of prose before and/or after a value that starts a line. */
static int from_prose(const char *text, size_t len, cJSON **out, int *nul) {
    size_t i = 0, broken_to = 0;
    int lines_before = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && (text[j] == ' ' || text[j] == '\t')) j++;
        if (j < len && (text[j] == '{' || text[j] == '[')) {
            /* Inside a value read as far as this line before it broke off
             * (an answer cut at max_tokens): a part of the answer, not the
             * answer, and taken it was validated as the whole. */
            if (j < broken_to) return -1;
            const char *end = NULL;
            size_t at = 0;
            cJSON *v = jsonin_parse(text + j, len - j, &end, &at);
            if (!v && jsonin_nul_at(text + j, len - j, at)) *nul = 1;
            if (!v && j + at > broken_to) broken_to = j + at;
            if (v) {
                size_t tail = len - (size_t)(end - text);
                /* A second value after it (a draft, then the answer) is
                 * no prose: which one is meant? */
                if (starts_value(end, tail)) {
                    jsonin_free(v);
                    return -1;
                }
                if (prose_lines(end, tail) <= 1) {
                    /* The value must end its line: "{...} and more" on one
                     * line counts as prose glued to the value. */
                    const char *p = end;
                    while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
                    if (p == text + len || *p == '\n') {
                        *out = v;
                        return 0;
                    }
                }
                jsonin_free(v);
            }
        }
        const char *nl = memchr(text + i, '\n', len - i);
        if (!nl) break;
        if (prose_lines(text + i, (size_t)(nl - (text + i))) > 0) lines_before++;
        if (lines_before > 1) break;
        i = (size_t)(nl - text) + 1;
    }
    return -1;
}

int extract_json(const char *text, size_t len, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    if (!text || !has_text(text, len)) {
        snprintf(err, errlen, "the answer is empty; expected a JSON value");
        return -1;
    }
    if (!util_utf8_valid(text, len)) {
        snprintf(err, errlen, "the answer is not valid UTF-8");
        return -1;
    }
    int nul = 0;
    cJSON *v = parse_all(text, len, &nul);
    if (v) {
        *out = v;
        return 0;
    }
    if (from_fence(text, len, out, &nul) == 0) return 0;
    if (from_prose(text, len, out, &nul) == 0) return 0;
    if (nul)
        snprintf(err, errlen, "a string in the JSON holds \\u0000, the NUL character, which is not "
                              "accepted: leave it out");
    else
        snprintf(err, errlen, "the answer is not a single JSON value (only JSON is accepted, "
                              "optionally inside one ```json code fence)");
    return -1;
}
