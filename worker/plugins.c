/* plugins.c - validator plugins via dlopen (see plugins.h, retort_plugin.h). */
#include "plugins.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"
#include "retort_plugin.h"
#include "rules.h"
#include "util.h"

#define NAME_MAX_LEN 64
#define PATH_CAP 1024    /* bytes kept of a reported path */
#define CODE_CAP 64      /* ... of a code */
#define MESSAGE_CAP 2000 /* ... of a message */

typedef int (*abi_fn)(void);
typedef const char *(*name_fn)(void);
typedef int (*validate_fn)(const char *, const char *, retort_plugin_report_fn, void *);

typedef struct plugin {
    void *handle;
    char *file;
    char *name;
    char *keyword; /* "plugin/<name>" */
    validate_fn validate;
} plugin;

struct plugins {
    plugin *items;
    size_t n;
};

/* ---- loading ------------------------------------------------------------ */

/* dlsym into a function pointer without a data/function pointer cast. */
static int lookup(void *handle, const char *sym, void *fn, size_t fnsize)
{
    dlerror();
    void *p = dlsym(handle, sym);
    if (!p || dlerror())
        return -1;
    memcpy(fn, &p, fnsize);
    return 0;
}

static int name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > NAME_MAX_LEN)
        return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-'))
            return 0;
    return 1;
}

static void plugin_clear(plugin *pl)
{
    if (pl->handle)
        dlclose(pl->handle);
    free(pl->file);
    free(pl->name);
    free(pl->keyword);
    memset(pl, 0, sizeof *pl);
}

void plugins_free(plugins *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        plugin_clear(&p->items[i]);
    free(p->items);
    free(p);
}

size_t plugins_count(const plugins *p)
{
    return p ? p->n : 0;
}

const char *plugins_name(const plugins *p, size_t i)
{
    return p && i < p->n ? p->items[i].name : NULL;
}

/* Loads file into pl (zeroed).  0 = ok; otherwise err says why. */
static int load_one(const plugins *set, plugin *pl, const char *file, char *err, size_t errlen)
{
    int rc = -1;
    abi_fn abi = NULL;
    name_fn name = NULL;
    if (!(pl->file = strdup(file))) {
        snprintf(err, errlen, "plugin %s: out of memory", file);
        goto out;
    }
    dlerror();
    pl->handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!pl->handle) {
        const char *why = dlerror();
        snprintf(err, errlen, "plugin %s: cannot load: %s", file, why ? why : "unknown dlopen error");
        goto out;
    }
    if (lookup(pl->handle, "retort_plugin_abi", &abi, sizeof abi) ||
        lookup(pl->handle, "retort_plugin_name", &name, sizeof name) ||
        lookup(pl->handle, "retort_plugin_validate", &pl->validate, sizeof pl->validate)) {
        snprintf(err, errlen, "plugin %s: missing symbol %s (every plugin defines retort_plugin_abi, "
                 "retort_plugin_name and retort_plugin_validate; see retort_plugin.h)", file,
                 !abi ? "retort_plugin_abi" : !name ? "retort_plugin_name" : "retort_plugin_validate");
        goto out;
    }
    int version = abi();
    if (version != RETORT_PLUGIN_ABI_VERSION) {
        snprintf(err, errlen, "plugin %s: built for plugin ABI version %d, this worker supports version %d",
                 file, version, RETORT_PLUGIN_ABI_VERSION);
        goto out;
    }
    const char *n = name();
    if (!name_ok(n)) {
        snprintf(err, errlen, "plugin %s: retort_plugin_name() must return 1 to %d characters from "
                 "[A-Za-z0-9_.-]", file, NAME_MAX_LEN);
        goto out;
    }
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->items[i].name, n)) {
            snprintf(err, errlen, "plugin %s: name \"%s\" is already used by %s", file, n,
                     set->items[i].file);
            goto out;
        }
    size_t kwlen = strlen(n) + sizeof "plugin/";
    pl->name = strdup(n);
    pl->keyword = malloc(kwlen);
    if (!pl->name || !pl->keyword) {
        snprintf(err, errlen, "plugin %s: out of memory", file);
        goto out;
    }
    snprintf(pl->keyword, kwlen, "plugin/%s", n);
    rc = 0;
out:
    if (rc)
        plugin_clear(pl);
    return rc;
}

plugins *plugins_load(const char *paths, char *err, size_t errlen)
{
    plugins *p = calloc(1, sizeof *p);
    char *copy = strdup(paths ? paths : "");
    if (!p || !copy) {
        snprintf(err, errlen, "plugins: out of memory");
        goto fail;
    }
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t')
            tok++;
        size_t len = strlen(tok);
        while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
            tok[--len] = '\0';
        if (!len)
            continue;
        plugin *items = realloc(p->items, (p->n + 1) * sizeof *items);
        if (!items) {
            snprintf(err, errlen, "plugin %s: out of memory", tok);
            goto fail;
        }
        p->items = items;
        memset(&p->items[p->n], 0, sizeof p->items[p->n]);
        if (load_one(p, &p->items[p->n], tok, err, errlen))
            goto fail;
        p->n++;
    }
    free(copy);
    return p;
fail:
    free(copy);
    plugins_free(p);
    return NULL;
}

/* ---- checking ----------------------------------------------------------- */

typedef struct report_ctx {
    const plugin *pl;
    cJSON *list;  /* violations of this call, moved out when it succeeds */
    size_t calls; /* report calls, kept or not */
} report_ctx;

/* A copy of s cut to cap bytes at a code point edge; when it is not valid
 * UTF-8, every non-ASCII byte becomes '?' so the events stay valid JSON. */
static char *clean_copy(const char *s, size_t cap)
{
    size_t len = strlen(s);
    size_t n = util_utf8_trim(s, len, cap);
    char *out = strndup(s, n);
    if (out && !util_utf8_valid(out, n))
        for (char *c = out; *c; c++)
            if ((unsigned char)*c >= 0x80)
                *c = '?';
    return out;
}

static cJSON *violation(const plugin *pl, const char *path, const char *code, const char *message,
                        int fixable)
{
    cJSON *v = cJSON_CreateObject();
    if (!v)
        return NULL;
    cJSON_AddStringToObject(v, "path", path);
    cJSON_AddStringToObject(v, "keyword", pl->keyword);
    cJSON_AddStringToObject(v, "code", code);
    cJSON_AddStringToObject(v, "message", message);
    cJSON_AddNullToObject(v, "expected");
    cJSON_AddNullToObject(v, "actual");
    cJSON_AddBoolToObject(v, "fixable", fixable != 0);
    return v;
}

static void on_report(void *ctx, const char *path, const char *code, const char *message, int fixable)
{
    report_ctx *rc = ctx;
    if (!rc || rc->calls++ >= PLUGINS_MAX_REPORTS)
        return;
    char fallback[128];
    snprintf(fallback, sizeof fallback, "rejected by the validator plugin %s", rc->pl->name);
    /* A code not of the events' form (a label of /metrics too: a quote or
     * a newline in it forged series) is the plugin's generic one; what the
     * plugin said leads the message. */
    char given[MESSAGE_CAP + 1];
    if (code && code[0] && !rules_code_valid(code)) {
        snprintf(given, sizeof given, "[%.*s] %s", CODE_CAP, code, message && message[0] ? message : fallback);
        util_utf8_cut_end(given);
        message = given;
        code = NULL;
    }
    char *p = clean_copy(path ? path : "", PATH_CAP);
    char *c = clean_copy(code && code[0] ? code : PLUGINS_VIOLATION, CODE_CAP);
    char *m = clean_copy(message && message[0] ? message : fallback, MESSAGE_CAP);
    if (p && c && m)
        cJSON_AddItemToArray(rc->list, violation(rc->pl, p, c, m, fixable));
    free(p);
    free(c);
    free(m);
}

size_t plugins_check(const plugins *p, const cJSON *output, const cJSON *job, cJSON *violations)
{
    if (!p || !p->n || !cJSON_IsArray(violations))
        return 0;
    size_t added = 0;
    /* Numbers as they were written (jsonin keeps their text): printed as
     * doubles, 12345678901234567890 reached the plugin as
     * 1.2345678901234567e+19 and 1e400 as null, while the final event
     * carries the digits; a plugin passed a value it never saw. */
    char *out_text = output ? jsonout_print(output) : strdup("null");
    char *job_text = job ? jsonout_print(job) : strdup("null");
    for (size_t i = 0; i < p->n; i++) {
        const plugin *pl = &p->items[i];
        char msg[256];
        report_ctx rc = { pl, cJSON_CreateArray(), 0 };
        int r = -1;
        if (out_text && job_text && rc.list)
            r = pl->validate(out_text, job_text, on_report, &rc);
        if (r == -1 || (r != 0 && r != 1) || (r == 1 && rc.calls == 0)) {
            if (r == 1)
                snprintf(msg, sizeof msg, "the validator plugin %s rejected the answer without saying why",
                         pl->name);
            else
                snprintf(msg, sizeof msg, "the validator plugin %s failed (returned %d)", pl->name, r);
            cJSON *v = violation(pl, "", PLUGINS_ERROR, msg, 0);
            if (v) {
                cJSON_AddItemToArray(violations, v);
                added++;
            }
        } else {
            cJSON *v;
            while (rc.list && (v = cJSON_DetachItemFromArray(rc.list, 0))) {
                cJSON_AddItemToArray(violations, v);
                added++;
            }
        }
        cJSON_Delete(rc.list);
    }
    free(out_text);
    free(job_text);
    return added;
}
