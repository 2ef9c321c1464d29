/* fuzz_schema.c - libFuzzer target: parse + compile + validate.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -Icommon tests/fuzz_schema.c
 *        common/schema*.c -lcjson -lpcre2-8 -lm
 *
 * Input layout: FLAGS SCHEMA '\0' INSTANCE.  FLAGS (one byte) picks the
 * default draft (bit 0), format assertion (bit 1) and a small violation
 * cap (bit 2).  Without a NUL the whole input (after FLAGS) is used as
 * both the schema and the instance.  Besides memory safety, the target
 * checks invariants: validation with and without a violations list gives
 * the same answer, an invalid answer has at least one violation, every
 * violation has a path, keyword location, code and message, and
 * count <= total, and the built-in matcher for simple patterns agrees
 * with PCRE2: an instance ["PATTERN", "SUBJECT", ...] is matched by both.
 */
#include "schema.h"
#include "schema_format.h"
#include "schema_regex.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static schema_registry *g_reg;

static void init_registry(void)
{
    if (g_reg)
        return;
    g_reg = schema_registry_new();
    cJSON *doc = cJSON_Parse("{\"$id\":\"http://example.com/r.json\",\"$defs\":{\"s\":{\"type\":\"string\"},"
                             "\"n\":{\"$anchor\":\"num\",\"type\":\"number\"},"
                             "\"d\":{\"$dynamicAnchor\":\"meta\",\"type\":\"object\"}}}");
    char err[128];
    if (doc)
        schema_registry_add(g_reg, "http://example.com/r.json", doc, err, sizeof err);
    cJSON_Delete(doc);
}

static void check_violations(const schema_violations *v, int r)
{
    if (r == 1 && v->count == 0)
        abort();
    if (v->count > v->total)
        abort();
    for (size_t i = 0; i < v->count; i++) {
        const schema_violation *x = &v->items[i];
        if (!x->path || !x->keyword_location || !x->code || !x->message)
            abort();
    }
}

static int utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p >= 0xC2 && *p <= 0xDF) ? 1 : (*p >= 0xE0 && *p <= 0xEF) ? 2
              : (*p >= 0xF0 && *p <= 0xF4) ? 3 : -1;
        if (n < 0)
            return 0;
        for (int k = 1; k <= n; k++)
            if ((p[k] & 0xC0) != 0x80)
                return 0;
        if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) ||
            (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] > 0x8F))
            return 0;
        p += n + 1;
    }
    return 1;
}

/* Differential check of the two regex engines. */
static void regex_differential(const cJSON *inst)
{
    const cJSON *pat = inst->child;
    if (!cJSON_IsString(pat) || !utf8_ok(pat->valuestring))
        return;
    schema_regex *fast = schema_regex_compile(pat->valuestring, 0, NULL, 0);
    schema_regex *pcre = schema_regex_compile(pat->valuestring, SCHEMA_REGEX_PCRE_ONLY, NULL, 0);
    if ((fast == NULL) != (pcre == NULL))
        abort();
    for (const cJSON *s = pat->next; fast && s; s = s->next) {
        if (!cJSON_IsString(s) || !utf8_ok(s->valuestring))
            continue;
        size_t n = strlen(s->valuestring);
        int a = schema_regex_match(fast, s->valuestring, n);
        int b = schema_regex_match(pcre, s->valuestring, n);
        if (a >= 0 && b >= 0 && a != b)
            abort();
    }
    schema_regex_free(fast);
    schema_regex_free(pcre);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_registry();
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const char *nul = memchr(text, '\0', len);
    size_t slen = nul ? (size_t)(nul - text) : len;
    const char *itext = nul ? nul + 1 : text;
    size_t ilen = nul ? len - slen - 1 : len;

    cJSON *sdoc = cJSON_ParseWithLength(text, slen);
    cJSON *inst = cJSON_ParseWithLength(itext, ilen);
    if (inst && cJSON_IsArray(inst))
        regex_differential(inst);
    if (!sdoc || !inst)
        goto done;
    schema_options opts = { (flags & 1) ? SCHEMA_DRAFT_7 : SCHEMA_DRAFT_2020_12, (flags >> 1) & 1,
                            (flags & 4) ? 2 : 0 };
    char err[256];
    schema *s = schema_compile(g_reg, sdoc, &opts, err, sizeof err);
    if (!s) {
        if (!err[0])
            abort(); /* an error must say what is wrong */
        goto done;
    }
    int fast = schema_validate(s, inst, NULL);
    schema_violations v = { 0 };
    int full = schema_validate(s, inst, &v);
    if (fast != full)
        abort();
    check_violations(&v, full);
    cJSON *j = schema_violations_to_json(&v);
    char *out = j ? cJSON_PrintUnformatted(j) : NULL;
    free(out);
    cJSON_Delete(j);
    schema_violations_clear(&v);
    schema_free(s);
    /* the format checkers on arbitrary strings */
    if (cJSON_IsString(inst)) {
        for (int id = 1; schema_format_name(id)[0]; id++)
            (void)schema_format_check(id, inst->valuestring, strlen(inst->valuestring));
    }
done:
    cJSON_Delete(sdoc);
    cJSON_Delete(inst);
    return 0;
}
