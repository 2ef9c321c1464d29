/* fuzz_llm_api.c - libFuzzer target: the answer scanner of both providers
 * (llm_api_scan) against cJSON's reading of the same bytes
 * (llm_api_parse_dom).  Whenever the scanner reads a body itself, every
 * field of its result must equal cJSON's; it may hand any body over.
 * Built and run by `make fuzz` (FUZZ_SECONDS each target). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llm_api.h"

static int same(const llm_api_result *a, const llm_api_result *b) {
    return a->category == b->category && a->prompt_tokens == b->prompt_tokens &&
           a->completion_tokens == b->completion_tokens && a->cache_read_tokens == b->cache_read_tokens &&
           a->cache_write_tokens == b->cache_write_tokens && !strcmp(a->finish_reason, b->finish_reason) &&
           !strcmp(a->error, b->error) && !a->text == !b->text && (!a->text || !strcmp(a->text, b->text));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a copy of exactly size bytes, so reading past the end is caught */
    char *body = malloc(size ? size : 1);
    if (!body) return 0;
    memcpy(body, data, size);
    for (int p = 0; p < 2; p++) {
        llm_provider provider = p ? LLM_PROVIDER_ANTHROPIC : LLM_PROVIDER_OPENAI;
        llm_api_result scan, dom;
        int rc = llm_api_scan(provider, body, size, &scan);
        llm_api_parse_dom(provider, 200, body, size, &dom);
        if (rc == 0) {
            if (!same(&scan, &dom)) abort();
            llm_api_result_clear(&scan);
        }
        llm_api_result_clear(&dom);
    }
    free(body);
    return 0;
}
