/* state_format_command writes what hiredis's redisFormatCommandArgv
 * writes, byte for byte, and reuses its buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "state.h"

static void same_as_hiredis(sbuf *b, int argc, const char *const *argv, const size_t *lens)
{
    char *want = NULL;
    long long wl = redisFormatCommandArgv(&want, argc, (const char **)argv, lens);
    assert_true(wl > 0);
    assert_int_equal(state_format_command(b, argc, argv, lens), 0);
    assert_int_equal(b->len, (size_t)wl);
    assert_memory_equal(b->data, want, b->len);
    redisFreeCommand(want);
}

static void test_format_command(void **s)
{
    (void)s;
    sbuf b = { 0 };
    static const char bin[] = "a\0b\r\n$3\r\n";
    const char *a1[] = { "EVALSHA", "0123456789012345678901234567890123456789", "2", "r:job:{j-1}",
                         "r:job:{j-1}:history", "", bin };
    size_t l1[] = { 7, 40, 1, 11, 19, 0, sizeof bin - 1 };
    same_as_hiredis(&b, 7, a1, l1);
    const char *a2[] = { "PING" };
    size_t l2[] = { 4 };
    same_as_hiredis(&b, 1, a2, l2); /* shorter than before: replaced, not appended */
    /* many arguments and a long one */
    const char *a3[40];
    size_t l3[40];
    char *big = malloc(100000);
    memset(big, 'x', 100000);
    for (int i = 0; i < 40; i++) {
        a3[i] = i == 17 ? big : "key";
        l3[i] = i == 17 ? 100000 : 3;
    }
    same_as_hiredis(&b, 40, a3, l3);
    free(big);
    sbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
