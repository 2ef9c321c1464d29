/* http_server.h - a very small HTTP/1.1 server on the worker's libuv loop,
 * for /metrics, /healthz and /readyz.  One request per connection
 * (Connection: close); requests larger than 8 KiB are refused. */
#ifndef RETORT_HTTP_SERVER_H
#define RETORT_HTTP_SERVER_H

#include <uv.h>

#include "util.h"

typedef struct http_server http_server;

/* Fills *body (an empty sbuf, taken by the server) and returns the status;
 * *content_type is a static string.  method and path are valid until the
 * handler returns. */
typedef int (*http_handler)(void *ud, const char *method, const char *path, sbuf *body,
                            const char **content_type);

/* Listens on host:port (port 0 picks one; see http_server_port).  NULL on
 * error (err filled). */
http_server *http_server_new(uv_loop_t *loop, const char *host, int port, http_handler handler,
                             void *ud, char *err, size_t errlen);
int http_server_port(const http_server *s);
void http_server_free(http_server *s); /* accepts NULL; open connections are closed */

#endif
