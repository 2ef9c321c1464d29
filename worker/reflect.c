#include "reflect.h"

#include <stdlib.h>
#include <string.h>

#include "jsonout.h"
#include "util.h"

const char reflect_default_template[] =
    "Your previous answer (attempt {attempt} of {max}) was rejected: {reason}.\n"
    "\n"
    "Fix exactly these problems:\n"
    "{violations}\n"
    "\n"
    "Answer again with only one JSON value that conforms to the JSON Schema, "
    "with no text or code fence around it. Keep every part of the previous "
    "answer that was correct.";

static const char *str_or(const cJSON *obj, const char *name, const char *def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : def;
}

/* A violation's expected/actual: strings as they are, other JSON values as
 * compact JSON text, null or absent as NULL.  malloc'd. */
static char *value_text(const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return NULL;
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    return jsonout_print(v);
}

char *reflect_violations_text(const cJSON *violations, int total) {
    sbuf b = {0};
    const cJSON *v;
    int listed = 0;
    cJSON_ArrayForEach(v, violations) {
        const char *path = str_or(v, "path", "");
        if (b.len) sbuf_puts(&b, "\n");
        sbuf_printf(&b, "- at %s: %s: %s", path[0] ? path : "/ (the whole answer)",
                    str_or(v, "code", "INVALID_VALUE"), str_or(v, "message", "invalid"));
        char *expected = value_text(cJSON_GetObjectItemCaseSensitive(v, "expected"));
        char *actual = value_text(cJSON_GetObjectItemCaseSensitive(v, "actual"));
        if (expected) sbuf_printf(&b, " (expected: %s", expected);
        if (actual) sbuf_printf(&b, "%sgot: %s", expected ? "; " : " (", actual);
        if (expected || actual) sbuf_puts(&b, ")");
        free(expected);
        free(actual);
        listed++;
    }
    if (!b.len) sbuf_puts(&b, "- the answer did not pass validation");
    /* a retry cut to fit Kafka lists the first few only: the model should
     * not take the list for all there is to fix */
    if (total > listed)
        sbuf_printf(&b, "\n- and %d more problem%s not listed here", total - listed, total - listed == 1 ? "" : "s");
    return sbuf_take(&b);
}

char *reflect_render(const reflect_input *in) {
    const char *t = in->tmpl && in->tmpl[0] ? in->tmpl : reflect_default_template;
    sbuf b = {0};
    char *vtext = NULL;
    while (*t) {
        const char *open = strchr(t, '{');
        if (!open) {
            sbuf_puts(&b, t);
            break;
        }
        const char *close = strchr(open, '}');
        if (!close) {
            sbuf_puts(&b, t);
            break;
        }
        /* the '{' nearest the '}': in {"fixed": {reason}} the first '{'
         * opens no placeholder, and {reason} went out as written */
        for (const char *p = open + 1; p < close; p++)
            if (*p == '{') open = p;
        sbuf_append(&b, t, (size_t)(open - t));
        size_t n = (size_t)(close - open - 1);
        const char *name = open + 1;
        if (n == 7 && !strncmp(name, "attempt", n)) sbuf_printf(&b, "%d", in->attempt);
        else if (n == 3 && !strncmp(name, "max", n)) sbuf_printf(&b, "%d", in->max_attempts);
        else if (n == 6 && !strncmp(name, "reason", n)) sbuf_puts(&b, in->reason ? in->reason : "");
        else if (n == 10 && !strncmp(name, "violations", n)) {
            if (!vtext) vtext = reflect_violations_text(in->violations, in->violations_total);
            sbuf_puts(&b, vtext ? vtext : "");
        } else if (n == 6 && !strncmp(name, "schema", n)) sbuf_puts(&b, in->schema_text ? in->schema_text : "");
        else if (n == 15 && !strncmp(name, "previous_output", n))
            sbuf_puts(&b, in->previous_output ? in->previous_output : "");
        else sbuf_append(&b, open, (size_t)(close - open + 1));
        t = close + 1;
    }
    free(vtext);
    return sbuf_take(&b);
}
