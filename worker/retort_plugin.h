/* retort_plugin.h - the C ABI of a Retort validator plugin.
 *
 * A plugin is a shared object (cc -shared -fPIC -o my.so my.c) named in the
 * worker's configuration (plugins.paths, comma-separated).  The worker
 * loads it once at start-up with dlopen(RTLD_NOW | RTLD_LOCAL) and refuses
 * to start when it cannot be loaded, lacks one of the three functions
 * below, reports another ABI version or an unusable name.
 *
 * After an output has passed its JSON Schema and the rule validators, the
 * worker calls retort_plugin_validate of every plugin, in the configured
 * order, with the output and the job as JSON text.  Each violation the
 * plugin reports makes the attempt invalid; the violations are listed in
 * the repair prompt of the retry (code, message and path are shown to the
 * model) and in the job's events.
 *
 * This header is the whole contract: it needs only the C standard library,
 * a plugin may parse the JSON with any library it likes, and it must not
 * call into the worker except through the report callback.
 *
 * Rules for plugin authors:
 *   - The functions may be called from several threads at once: keep no
 *     mutable global state without your own locking.
 *   - Do not block for long and never exit, abort or crash: the plugin runs
 *     inside the worker process, which cannot time it out.
 *   - Do not keep output_json, job_json, report or ctx after
 *     retort_plugin_validate returns.
 *   - Strings passed to report are copied before report returns; they must
 *     be UTF-8 (invalid bytes are replaced by '?').  Long strings are cut.
 */
#ifndef RETORT_PLUGIN_H
#define RETORT_PLUGIN_H

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header.  A change to any signature or meaning below
 * increments it; the worker loads only plugins that return the version it
 * was built with. */
#define RETORT_PLUGIN_ABI_VERSION 1

/* Reports one violation.
 *   ctx      the ctx given to retort_plugin_validate, passed back as is.
 *   path     JSON Pointer (RFC 6901) of the offending value in the output,
 *            "" or NULL for the output as a whole (e.g. "/items/0/price").
 *   code     short upper-case identifier (e.g. "PRICE_TOO_HIGH"):
 *            ^[A-Z][A-Z0-9_]*$, at most 64 bytes.  NULL or "" gives
 *            "PLUGIN_VIOLATION"; so does a code of another form, which
 *            then leads the message ("[price-too-high] ...").  Codes
 *            listed in the worker's retry.critical_codes escalate the job
 *            at once.
 *   message  plain English for the model: what is wrong and what to do
 *            ("/price must be at most 10000 (it is 25000)"); NULL or "" gives
 *            a generic message naming the plugin.
 *   fixable  nonzero when asking the model again may fix it; 0 when a retry
 *            is pointless (the job escalates without another attempt).
 * Valid only during the retort_plugin_validate call that received it.  At
 * most 64 violations per call are kept. */
typedef void (*retort_plugin_report_fn)(void *ctx, const char *path, const char *code,
                                        const char *message, int fixable);

/* Returns RETORT_PLUGIN_ABI_VERSION (the value the plugin was built with). */
int retort_plugin_abi(void);

/* The plugin's name: 1 to 64 characters from [A-Za-z0-9_.-], unique among
 * the loaded plugins, static (read once at load time).  It appears in the
 * violations as keyword "plugin/<name>". */
const char *retort_plugin_name(void);

/* Validates one output.
 *   output_json  the output as compact JSON text (UTF-8, NUL-terminated);
 *                it has already passed the JSON Schema of its job.
 *   job_json     the whole job message as compact JSON text (job_id,
 *                schema, metadata, attempt, ...), for context.
 *   report, ctx  call report(ctx, ...) once per violation.
 * Returns 0 when the output is acceptable (nothing reported), 1 when
 * violations were reported, -1 on an internal error (the plugin could not
 * decide): the worker then records one PLUGIN_ERROR violation, not
 * fixable, and ignores anything reported by that call.  Violations
 * reported with a return of 0 still count; a return of 1 with nothing
 * reported, or any other value, counts as -1. */
int retort_plugin_validate(const char *output_json, const char *job_json, retort_plugin_report_fn report,
                           void *ctx);

#ifdef __cplusplus
}
#endif

#endif
