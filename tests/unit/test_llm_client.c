#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "llm_client.h"

/* 2015-10-21 07:28:00 UTC, in ms */
#define DATE_MS 1445412480000LL

static void test_retry_after(void **state) {
    (void)state;
    static const struct {
        const char *ms, *ra;
        long want;
    } cases[] = {
        {NULL, NULL, -1},
        {"1500", NULL, 1500},
        {"250.7", NULL, 250},
        {"0", "30", 0},                 /* retry-after-ms wins, 0 included */
        {"1500", "30", 1500},
        /* not a number: Retry-After says (strtod's 0 waived its 30 s) */
        {"", "30", 30000},
        {"abc", "2", 2000},
        {"12ms", "2", 2000},
        {"-5", "2", 2000},
        {"-5", NULL, -1},
        {"nan", NULL, -1},
        {"1e300", NULL, 86400000},
        {"inf", NULL, 86400000},
        {NULL, "0", 0},
        {NULL, "1.5", 1500},
        {NULL, "-3", -1},
        {NULL, "1e300", 86400000},
        {NULL, "Wed, 21 Oct 2015 07:28:05 GMT", 5000},
        {NULL, "Wed, 21 Oct 2015 07:27:00 GMT", 0},   /* past */
        {NULL, "Thu, 22 Oct 2015 07:28:01 GMT", 86400000}, /* a day and a second: capped */
        {"x", "Wed, 21 Oct 2015 07:28:05 GMT", 5000},
        {NULL, "soon", -1},
        {NULL, "", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long got = llm_client_retry_after(cases[i].ms, cases[i].ra, DATE_MS);
        if (got != cases[i].want)
            fail_msg("retry-after-ms %s, Retry-After %s: %ld, expected %ld", cases[i].ms ? cases[i].ms : "(none)",
                     cases[i].ra ? cases[i].ra : "(none)", got, cases[i].want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
