#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "http_server.h"

static int handler(void *ud, const char *method, const char *path, sbuf *body, const char **ctype) {
    (void)ud;
    (void)method;
    (void)path;
    (void)ctype;
    sbuf_puts(body, "ok\n");
    return 200;
}

/* A port taken: NULL with the reason, and nothing left behind once the
 * loop has run (the server was never freed: the sanitized run's leak
 * check failed on it). */
static void test_a_port_taken_is_an_error(void **state) {
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256] = "";
    http_server *s = http_server_new(&loop, "127.0.0.1", ntohs(a.sin_port), handler, NULL, err, sizeof(err));
    assert_null(s);
    assert_non_null(strstr(err, "cannot listen on 127.0.0.1:"));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(fd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_port_taken_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
