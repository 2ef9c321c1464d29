/* fuzz_jsonin.c - libFuzzer target: jsonin_parse against cJSON.
 *
 * Whatever value jsonin reads, cJSON must read too from the same bytes
 * (the text up to where jsonin's value ends), ending at the same byte
 * with the same tree (types, keys, strings, numbers bit for bit).  What
 * cJSON accepts and jsonin does not must be one of cJSON's looser
 * readings (jsonin.h): the same text with the loose pieces made strict is
 * not re-checked here, but the unit tests list each.  The input is
 * copied into a block of its exact size, so any read past it is caught.
 */
#include "jsonin.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void same(const cJSON *a, const cJSON *b)
{
    /* b is jsonin's: its numbers keep their text, which must read back as
     * the same double (cJSON keeps none) */
    int num = (b->type & 0xFF) == cJSON_Number;
    if ((a->type & 0xFF) != (b->type & 0xFF) || a->valueint != b->valueint ||
        memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) != 0 ||
        (num ? a->valuestring || !b->valuestring || strtod(b->valuestring, NULL) != b->valuedouble
             : !a->valuestring != !b->valuestring || (a->valuestring && strcmp(a->valuestring, b->valuestring))) ||
        !a->string != !b->string || (a->string && strcmp(a->string, b->string)))
        abort();
    const cJSON *ca = a->child, *cb = b->child, *la = NULL, *lb = NULL;
    for (; ca && cb; la = ca, lb = cb, ca = ca->next, cb = cb->next) {
        if (la && (ca->prev != la || cb->prev != lb))
            abort();
        same(ca, cb);
    }
    if (ca || cb || (a->child && (a->child->prev != la || b->child->prev != lb)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    const char *end_j = NULL, *end_c = NULL;
    size_t at = 0;
    cJSON *j = jsonin_parse(text, size, &end_j, &at);
    if (j) {
        /* cJSON reads on where jsonin stops ("01"): give it the value only */
        size_t vlen = (size_t)(end_j - text);
        if (end_j < text || vlen > size)
            abort();
        /* cJSON skips a byte order mark only when more than 4 bytes follow */
        size_t bom = size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
        cJSON *c = cJSON_ParseWithLengthOpts(text + bom, vlen - bom, &end_c, 0);
        if (!c || end_c != end_j)
            abort();
        same(c, j);
        cJSON_Delete(c);
    } else if (at > size) {
        abort();
    }
    jsonin_free(j);
    free(text);
    return 0;
}
