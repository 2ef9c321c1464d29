#include "http_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQ_MAX 8192
/* Connections idle or slow were never closed: each held a descriptor, and
 * enough of them (half-open peers over weeks, or a scan) left none for
 * the LLM calls.  A request must be read and answered within IDLE_MS, and
 * past CONNS_MAX open the oldest is closed to make room. */
#define IDLE_MS 5000
#define CONNS_MAX 64

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    int handles;           /* open: tcp, timer */
    http_server *srv;
    char req[REQ_MAX];
    size_t len;
    uv_write_t wr;
    char *out;
    struct conn *prev, *next;
} conn;

struct http_server {
    uv_tcp_t listener;
    http_handler handler;
    void *ud;
    int port;
    conn *conns;           /* newest first */
    int nconns;
    int closing;
};

static void listener_closed(uv_handle_t *h);

static void conn_closed(uv_handle_t *h) {
    conn *c = h->data;
    http_server *s = c->srv;
    if (--c->handles) return;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->nconns--;
    free(c->out);
    free(c);
    if (s->closing && !s->conns && s->listener.data == NULL) free(s);
}

static void conn_close(conn *c) {
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void idle_cb(uv_timer_t *t) { conn_close(t->data); }

static void on_written(uv_write_t *wr, int status) { conn_close(wr->data); }

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 503: return "Service Unavailable";
    }
    return "Error";
}

/* head: the headers alone, Content-Length that of the body a GET gets
 * (a HEAD answer has no body: a client reading one took the body for the
 * next answer). */
static void respond(conn *c, int status, const char *ctype, const char *body, size_t len, int head) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    sbuf b = {0};
    if (sbuf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                    status, reason(status), ctype, len) ||
        (!head && sbuf_append(&b, body, len)) || !b.data) {
        /* out of memory: no answer but the close (not headers promising a
         * body that is not there) */
        sbuf_free(&b);
        conn_close(c);
        return;
    }
    size_t n = b.len;
    c->out = sbuf_take(&b);
    uv_buf_t buf = uv_buf_init(c->out, (unsigned)n);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, on_written)) conn_close(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    conn *c = h->data;
    buf->base = c->req + c->len;
    buf->len = REQ_MAX - 1 - c->len;
}

static void read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    conn *c = st->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->req[c->len] = '\0';
    if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n")) {
        if (c->len >= REQ_MAX - 1) respond(c, 413, "text/plain", "request too large\n", 18, 0);
        return;
    }
    char method[16], path[1024];
    if (sscanf(c->req, "%15s %1023s", method, path) != 2) {
        respond(c, 400, "text/plain", "bad request\n", 12, 0);
        return;
    }
    char *q = strchr(path, '?');
    if (q) *q = '\0';
    sbuf body = {0};
    const char *ctype = "text/plain; charset=utf-8";
    int status = c->srv->handler(c->srv->ud, method, path, &body, &ctype);
    respond(c, status, ctype, body.data ? body.data : "", body.len, !strcmp(method, "HEAD"));
    sbuf_free(&body);
}

static void on_connection(uv_stream_t *listener, int status) {
    http_server *s = listener->data;
    if (status < 0) return;
    if (s->nconns >= CONNS_MAX) {
        /* the oldest that is not closing already */
        conn *old = s->conns;
        while (old && old->next) old = old->next;
        while (old && uv_is_closing((uv_handle_t *)&old->tcp)) old = old->prev;
        if (old) conn_close(old);
    }
    conn *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->srv = s;
    uv_tcp_init(listener->loop, &c->tcp);
    uv_timer_init(listener->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) || uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) ||
        uv_timer_start(&c->timer, idle_cb, IDLE_MS, 0))
        conn_close(c);
}

http_server *http_server_new(uv_loop_t *loop, const char *host, int port, http_handler handler,
                             void *ud, char *err, size_t errlen) {
    http_server *s = calloc(1, sizeof(*s));
    struct sockaddr_storage addr;
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->handler = handler;
    s->ud = ud;
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    if (rc) {
        snprintf(err, errlen, "metrics: bad address %s", host);
        free(s);
        return NULL;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection))) {
        snprintf(err, errlen, "metrics: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        s->closing = 1;
        /* s holds the handle: freed once the loop has closed it */
        uv_close((uv_handle_t *)&s->listener, listener_closed);
        return NULL;
    }
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen);
    s->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return s;
}

int http_server_port(const http_server *s) { return s->port; }

static void listener_closed(uv_handle_t *h) {
    http_server *s = h->data;
    s->listener.data = NULL;
    if (!s->conns) free(s);
}

void http_server_free(http_server *s) {
    if (!s) return;
    s->closing = 1;
    for (conn *c = s->conns; c; c = c->next) conn_close(c);
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}
