/* fail_strdup.h - for a unit test linked with -Wl,--wrap=strdup (see the
 * Makefile): strdup fails while fail_strdup is set, as out of memory
 * would.  Included once, by the test's own file: it defines the wrapper. */
#ifndef RETORT_TEST_FAIL_STRDUP_H
#define RETORT_TEST_FAIL_STRDUP_H

char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);

static int fail_strdup;

char *__wrap_strdup(const char *s) {
    return fail_strdup ? NULL : __real_strdup(s);
}

#endif
