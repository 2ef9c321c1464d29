#include "jsonout.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jsonout_number(sbuf *b, double d) {
    char buf[32];
    if (isnan(d) || isinf(d)) return sbuf_append(b, "null", 4);
    /* Integral values below 1e15 print the same with cJSON's %1.15g as in
     * plain decimal: write the digits. */
    if (d == floor(d) && fabs(d) < 1e15) {
        long long v = (long long)d;
        unsigned long long u = v < 0 ? (unsigned long long)(-v) : (unsigned long long)v;
        char *p = buf + sizeof(buf);
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (signbit(d)) *--p = '-'; /* -0 too, as %g prints it */
        return sbuf_append(b, p, (size_t)(buf + sizeof(buf) - p));
    }
    /* A short decimal (19.99, 0.05, 12.345): the first k for which the
     * integer m = d * 10^k divides back to exactly d.  Such a value has at
     * most 15 significant digits, so %1.15g would print the same digits;
     * outside [1e-4, 1e15) %g would use an exponent, so those go below. */
    double ad = fabs(d);
    if (ad >= 1e-4 && ad < 1e15) {
        static const double pow10[] = {1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
        for (int k = 1; k <= 9; k++) {
            double x = ad * pow10[k - 1];
            if (x >= 1e15) break;
            unsigned long long m = (unsigned long long)llround(x);
            if ((double)m / pow10[k - 1] != ad) continue;
            char *end = buf + sizeof(buf), *p = end;
            int frac = k;
            while (frac > 0 && m % 10 == 0) { m /= 10; frac--; } /* no trailing zeros */
            for (int i = 0; i < frac; i++) { *--p = (char)('0' + m % 10); m /= 10; }
            if (frac) *--p = '.';
            do { *--p = (char)('0' + m % 10); m /= 10; } while (m);
            if (d < 0) *--p = '-';
            return sbuf_append(b, p, (size_t)(end - p));
        }
    }
    /* cJSON's rule: 15 significant digits when they read back to within
     * one DBL_EPSILON (relative), else 17. */
    int n = snprintf(buf, sizeof(buf), "%1.15g", d);
    double back = strtod(buf, NULL);
    double max = fabs(back) > fabs(d) ? fabs(back) : fabs(d);
    if (!(fabs(back - d) <= max * DBL_EPSILON)) n = snprintf(buf, sizeof(buf), "%1.17g", d);
    if (n < 0 || (size_t)n >= sizeof(buf)) return -1;
    return sbuf_append(b, buf, (size_t)n);
}

static int tabs(sbuf *b, int n) {
    for (int i = 0; i < n; i++)
        if (sbuf_append(b, "\t", 1)) return -1;
    return 0;
}

/* fmt: laid out as cJSON_Print lays it out (an object's members one a
 * line, indented by tabs, a tab after the colon; an array on one line,
 * ", " between its elements). */
static int value(sbuf *b, const cJSON *v, int depth, int fmt) {
    /* A bound on the recursion, not on what may be printed: a value read
     * at jsonin's full depth (1,000) goes into events and records a few
     * levels down, and at 1,000 from the printed root it failed there. */
    if (depth > 4000) return -1;
    switch (v->type & 0xFF) {
    case cJSON_False: return sbuf_append(b, "false", 5);
    case cJSON_True: return sbuf_append(b, "true", 4);
    case cJSON_NULL: return sbuf_append(b, "null", 4);
    case cJSON_Number:
        /* a number jsonin read (or a duplicate of one) as it was written */
        if (v->valuestring) return sbuf_puts(b, v->valuestring);
        return jsonout_number(b, v->valuedouble);
    case cJSON_String:
        return v->valuestring ? sbuf_json_string(b, v->valuestring, strlen(v->valuestring))
                              : sbuf_append(b, "\"\"", 2);
    case cJSON_Raw: return v->valuestring ? sbuf_puts(b, v->valuestring) : -1;
    case cJSON_Array:
    case cJSON_Object: {
        int obj = (v->type & 0xFF) == cJSON_Object, lines = fmt && obj;
        if (sbuf_append(b, obj ? "{" : "[", 1) || (lines && sbuf_append(b, "\n", 1))) return -1;
        for (const cJSON *c = v->child; c; c = c->next) {
            if (lines && tabs(b, depth + 1)) return -1;
            if (obj) {
                const char *k = c->string ? c->string : "";
                if (sbuf_json_string(b, k, strlen(k)) || sbuf_append(b, ":\t", fmt ? 2 : 1)) return -1;
            }
            if (value(b, c, depth + 1, fmt)) return -1;
            if (c->next && sbuf_append(b, ", ", fmt && !obj ? 2 : 1)) return -1;
            if (lines && sbuf_append(b, "\n", 1)) return -1;
        }
        if (lines && tabs(b, depth)) return -1;
        return sbuf_append(b, obj ? "}" : "]", 1);
    }
    default: return -1;
    }
}

int jsonout_value(sbuf *b, const cJSON *v) { return v ? value(b, v, 0, 0) : -1; }

static char *print(const cJSON *v, int fmt) {
    sbuf b = {0};
    /* Records and events run to a few KB: skip the first doublings. */
    if (!v || sbuf_reserve(&b, 2048) || value(&b, v, 0, fmt)) {
        sbuf_free(&b);
        return NULL;
    }
    return sbuf_take(&b);
}

char *jsonout_print(const cJSON *v) { return print(v, 0); }

char *jsonout_print_formatted(const cJSON *v) { return print(v, 1); }
