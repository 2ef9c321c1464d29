/* plugins.h - loads validator plugins (shared objects implementing the ABI
 * of retort_plugin.h) and runs them on an output.
 *
 * A plugin set is loaded once (plugins_load) and is then read-only:
 * plugins_check may run from several threads at once, as long as the
 * plugins themselves honour the thread rule of retort_plugin.h.  Plugins
 * run in-process; a crashing plugin crashes the worker.
 */
#ifndef RETORT_PLUGINS_H
#define RETORT_PLUGINS_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Violation codes added by this module (plugins choose their own). */
#define PLUGINS_ERROR     "PLUGIN_ERROR"     /* the plugin failed (-1); not fixable */
#define PLUGINS_VIOLATION "PLUGIN_VIOLATION" /* reported without a code */

#define PLUGINS_MAX_REPORTS 64 /* violations kept per plugin and call */

typedef struct plugins plugins;

/* Loads every shared object of paths (borrowed): comma-separated, blanks
 * around the names ignored, empty entries skipped.  A name without '/' is
 * looked up the way dlopen(3) does (use "./x.so" for the working
 * directory).  paths NULL or empty gives an empty set.  On failure returns
 * NULL and err names the file and the reason (cannot open, missing symbol,
 * ABI version, bad or duplicate name); nothing stays loaded. */
plugins *plugins_load(const char *paths, char *err, size_t errlen);
void plugins_free(plugins *p); /* accepts NULL; dlcloses every plugin */

size_t plugins_count(const plugins *p);                /* 0 for NULL */
const char *plugins_name(const plugins *p, size_t i); /* borrowed; NULL when out of range */

/* Runs every plugin, in load order, on output with job as context (both
 * borrowed; NULL is passed to the plugin as "null").  Appends to the array
 * violations (taken) one object per reported violation:
 *   {path, keyword:"plugin/<name>", code, message, expected:null,
 *    actual:null, fixable}
 * and, for a plugin that failed, one {..., code:"PLUGIN_ERROR",
 * fixable:false}.  Returns how many were appended (0 = every plugin
 * accepted the output, also for p NULL or violations not an array). */
size_t plugins_check(const plugins *p, const cJSON *output, const cJSON *job, cJSON *violations);

#endif
