/* example_plugin.c - an example Retort validator plugin (see
 * worker/retort_plugin.h) for product outputs (schemas/output/product.v1):
 *   - "price" above the limit -> PRICE_TOO_HIGH at /price (fixable).  The
 *     limit is 10000, or the job's metadata.max_price when that is a
 *     number: plugins get the job for such context.
 *   - "name" equal to "TODO" -> PLACEHOLDER_NAME at /name, not fixable: the
 *     model only writes it when the source has no name, so asking again
 *     does not help.
 * Output that is not a JSON object is left to the schema (accepted);
 * text that does not parse is an internal error (-1).
 *
 * Build:  cc -shared -fPIC -Iworker -o build/example_plugin.so \
 *             tests/plugins/example_plugin.c -lcjson
 * Use:    plugins.paths=build/example_plugin.so
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "retort_plugin.h"

#define DEFAULT_MAX_PRICE 10000.0

int retort_plugin_abi(void)
{
    return RETORT_PLUGIN_ABI_VERSION;
}

const char *retort_plugin_name(void)
{
    return "example";
}

static double max_price(const char *job_json)
{
    double limit = DEFAULT_MAX_PRICE;
    cJSON *job = cJSON_Parse(job_json);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(job, "metadata");
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(meta, "max_price");
    if (cJSON_IsNumber(mp))
        limit = mp->valuedouble;
    cJSON_Delete(job);
    return limit;
}

int retort_plugin_validate(const char *output_json, const char *job_json, retort_plugin_report_fn report,
                           void *ctx)
{
    cJSON *out = cJSON_Parse(output_json);
    if (!out)
        return -1;
    int found = 0;
    const cJSON *price = cJSON_GetObjectItemCaseSensitive(out, "price");
    double limit = max_price(job_json);
    if (cJSON_IsNumber(price) && price->valuedouble > limit) {
        char msg[160];
        snprintf(msg, sizeof msg, "/price must be at most %g (it is %g); check the price in the source", limit,
                 price->valuedouble);
        report(ctx, "/price", "PRICE_TOO_HIGH", msg, 1);
        found = 1;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(out, "name");
    if (cJSON_IsString(name) && name->valuestring && !strcmp(name->valuestring, "TODO")) {
        report(ctx, "/name", "PLACEHOLDER_NAME", "/name is the placeholder \"TODO\"; the source names no product",
               0);
        found = 1;
    }
    cJSON_Delete(out);
    return found;
}
