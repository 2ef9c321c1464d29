#include "llm_client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* Calls are spread over lanes, each its own curl multi handle with its own
 * timer and connection cache.  curl 7.88 walks every connection in a multi's
 * cache when a transfer starts (looking for one to reuse) and again when one
 * is removed, so a single multi holding 10,000 HTTP/1.1 connections costs
 * O(n) per call: measured here, 483 us of CPU per call at 10,000 in flight
 * against 67-82 us with lanes of 64-256 calls.  Low lanes are filled first so
 * that at low concurrency one lane (one cache) keeps its connections warm. */
#define LANE_SIZE 64

typedef struct lane {
    llm_client *client;
    CURLM *multi;
    uv_timer_t timer;
    size_t index;
    size_t inflight;
} lane;

/* A call and its easy handle live together and are pooled together: the
 * handle keeps the options set when it was made (no curl_easy_reset and a
 * score of setopts per call), its download buffer, and the call its
 * response buffer; only the two per-call headers are written each time.
 * Large blocks (a response, curl's 16 KiB buffer) are the ones glibc makes
 * costly (each large malloc consolidates its fast bins).  The gain was
 * within the noise of this machine's benchmarks.
 *
 * The pool keeps up to as many calls as were ever in flight at once (at
 * least IDLE_MIN): the worker's calls end in bursts (its consumer resumes
 * only below a low-water mark), and with 10,000 calls in flight a pool of
 * 1,024 made one call in eight to five build a new handle (curl_easy_init and a
 * score of setopts).  The handles were all alive at the peak anyway. */
#define IDLE_MIN 1024
#define RESP_KEEP_MAX (64 * 1024)

struct llm_call {
    llm_client *client;
    lane *ln;
    CURL *easy;
    /* The two per-call headers, ahead of the client's constant ones. */
    struct curl_slist hdr[2];
    char job_hdr[448];
    char attempt_hdr[40];
    char *body;
    char *resp;
    size_t resp_len, resp_cap;
    int too_large;
    long retry_after_ms;
    int should_retry;
    llm_client_cb cb;
    void *ud;
    char errbuf[CURL_ERROR_SIZE];
};

/* One per socket curl has opened, from the first time curl asks to watch
 * it until curl closes it (CURLOPT_CLOSESOCKETFUNCTION), so a kept-alive
 * connection keeps its poll handle from call to call: opening one costs
 * libuv an ioctl and an epoll ADD+DEL (its fd check), closing it a DEL.
 * libuv's uv_poll_start always begins with an epoll DEL, so a handle is
 * restarted only when what it watches changes.  When curl stops watching
 * a socket (a kept-alive connection between calls) its handle still
 * watches for input, which the next call on that connection wants again;
 * input while curl is not watching (the server closed the connection)
 * stops the handle, and curl sees the close when it next checks the
 * connection.  strace, per call on a warm connection: no epoll_ctl,
 * against 6 and an ioctl when the handle lived only while curl watched
 * the socket.  Closed asynchronously by libuv. */
typedef struct sock_ctx {
    uv_poll_t poll;
    curl_socket_t fd;
    lane *ln;
    int events;    /* what the poll handle watches now (0: stopped) */
    int watched;   /* curl wants events of this socket */
    int conn;      /* a connection's socket (open_socket_cb): curl closes
                      it through close_socket_cb */
} sock_ctx;

struct llm_client {
    uv_loop_t *loop;
    lane **lanes;          /* each allocated on its own: handles point at it */
    size_t nlanes, lanes_cap;
    size_t lane_hint;      /* no lane below this one has room */
    llm_provider provider;
    char *url;
    char *auth_header;     /* secret: never logged */
    char *version_header;
    long timeout_ms, connect_timeout_ms;
    size_t max_response_bytes;
    int tls;               /* https URL: HTTP/2 may be offered (ALPN) */
    int proxy_env;         /* a proxy variable is set: curl reads them per call */
    char *ca_file;         /* NULL: the system's CA store */
    size_t inflight;
    struct curl_slist *base_headers; /* the same for every call */
    size_t inflight_peak;
    llm_call **idle;       /* finished calls kept for reuse, with their handles */
    size_t idle_count, idle_cap;
    sock_ctx **socks;      /* by fd: the poll handles of curl's open sockets */
    size_t socks_cap;
};

static void check_done(lane *ln);

/* Whether the environment names a proxy curl could take for the LLM's URL.
 * curl looks for one at every call (some five getenv calls, with a copy of
 * each value found: about 1% of a job's instructions); with none set, each
 * handle says "no proxy" itself and curl reads nothing.  With one set,
 * curl's own rules (the scheme's variable, all_proxy, no_proxy) apply as
 * before: the process's environment does not change while it runs. */
static int proxy_env_set(void) {
    static const char *const names[] = {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY",
                                        "all_proxy", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (getenv(names[i])) return 1;
    return 0;
}

static void poll_cb(uv_poll_t *handle, int status, int events) {
    sock_ctx *sc = handle->data;
    if (!sc->watched) {
        uv_poll_stop(handle);
        sc->events = 0;
        return;
    }
    lane *ln = sc->ln;
    int flags = 0;
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
        sc->events = 0; /* libuv stopped the handle: started again if curl asks */
    }
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(ln->multi, sc->fd, flags, &running);
    check_done(ln);
}

static void sock_close_cb(uv_handle_t *h) { free(h->data); }

/* The poll handle of fd, made if there is none.  NULL on error. */
static sock_ctx *sock_get(llm_client *c, curl_socket_t fd) {
    if (fd < 0) return NULL;
    if ((size_t)fd >= c->socks_cap) {
        size_t cap = c->socks_cap ? c->socks_cap : 256;
        while (cap <= (size_t)fd) cap *= 2;
        sock_ctx **socks = realloc(c->socks, cap * sizeof(*socks));
        if (!socks) return NULL;
        memset(socks + c->socks_cap, 0, (cap - c->socks_cap) * sizeof(*socks));
        c->socks = socks;
        c->socks_cap = cap;
    }
    sock_ctx *sc = c->socks[fd];
    if (!sc) {
        sc = calloc(1, sizeof(*sc));
        if (!sc) return NULL;
        sc->fd = fd;
        if (uv_poll_init_socket(c->loop, &sc->poll, fd) != 0) {
            free(sc);
            return NULL;
        }
        sc->poll.data = sc;
        c->socks[fd] = sc;
    }
    return sc;
}

/* Stops watching fd for good: libuv must not watch a closed fd, whose
 * number the next socket (ours, hiredis's, the HTTP server's) may take. */
static void sock_drop(llm_client *c, curl_socket_t fd) {
    if (fd >= 0 && (size_t)fd < c->socks_cap && c->socks[fd]) {
        uv_close((uv_handle_t *)&c->socks[fd]->poll, sock_close_cb);
        c->socks[fd] = NULL;
    }
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    lane *ln = userp;
    llm_client *c = ln->client;
    sock_ctx *sc = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sc && !sc->conn) {
            /* Not a connection's (the threaded resolver's socketpair):
             * curl closes it right after this, without close_socket_cb.
             * Left watched, its stale handle kept the fd number: a new
             * Redis connection on it could not be watched (EEXIST), and
             * an HTTP client accepted on it got its events taken. */
            sock_drop(c, fd);
            return 0;
        }
        /* A connection's: kept until curl closes the socket (it may be
         * reused by the next call), still watching for input. */
        if (sc) {
            sc->watched = 0;
            if (sc->events & UV_WRITABLE) {
                uv_poll_stop(&sc->poll);
                sc->events = 0;
            }
        }
        return 0;
    }
    if (!sc) {
        if (!(sc = sock_get(c, fd))) {
            /* Not -1: curl marks the whole multi handle dead at -1, and
             * every later call of the lane failed at once.  Unwatched, this
             * call waits for its timeout; curl asks again with the next
             * change, and the socket may be watched then. */
            log_warn(NULL, 0, "cannot watch socket %d for the LLM client (out of memory?)", (int)fd);
            return 0;
        }
        sc->ln = ln;
        curl_multi_assign(ln->multi, fd, sc);
    }
    sc->watched = 1;
    int events = 0;
    if (what & CURL_POLL_IN) events |= UV_READABLE;
    if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
    if (events != sc->events) {
        uv_poll_start(&sc->poll, events, poll_cb);
        sc->events = events;
    }
    return 0;
}

/* curl opens a connection's socket: marked, so that its handle is kept
 * between calls (close_socket_cb ends it). */
static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address) {
    llm_client *c = clientp;
    (void)purpose;
    curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (fd < 0) return CURL_SOCKET_BAD;
    sock_ctx *sc = sock_get(c, fd);
    if (!sc) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    sc->conn = 1;
    return fd;
}

/* curl closes a socket: its poll handle goes first (libuv must not watch
 * a closed fd, whose number the next socket may take). */
static int close_socket_cb(void *clientp, curl_socket_t fd) {
    sock_drop(clientp, fd);
    return close(fd) ? 1 : 0;
}

static void timer_cb(uv_timer_t *t) {
    lane *ln = t->data;
    int running;
    curl_multi_socket_action(ln->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(ln);
}

static int timer_fn(CURLM *multi, long timeout_ms, void *userp) {
    lane *ln = userp;
    (void)multi;
    if (timeout_ms < 0) uv_timer_stop(&ln->timer);
    else uv_timer_start(&ln->timer, timer_cb, (uint64_t)timeout_ms, 0);
    return 0;
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
    llm_call *call = ud;
    size_t n = size * nmemb;
    if (!call->client->max_response_bytes) return n;
    if (call->resp_len + n > call->client->max_response_bytes) {
        call->too_large = 1;
        return 0; /* aborts the transfer: the cap holds whatever the server sends */
    }
    if (call->resp_len + n + 1 > call->resp_cap) {
        size_t cap = call->resp_cap ? call->resp_cap : 4096;
        while (cap < call->resp_len + n + 1) cap *= 2;
        char *p = realloc(call->resp, cap);
        if (!p) return 0;
        call->resp = p;
        call->resp_cap = cap;
    }
    memcpy(call->resp + call->resp_len, ptr, n);
    call->resp_len += n;
    call->resp[call->resp_len] = '\0';
    return n;
}

/* The value of a header of the call's last response, trimmed and copied
 * into buf (cut at its size); NULL when absent.  last: the last of
 * repeated headers, else the first. */
static const char *header_value(CURL *easy, const char *name, int last, char *buf, size_t len) {
    struct curl_header *h;
    if (curl_easy_header(easy, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK) return NULL;
    if (last && h->amount > 1 &&
        curl_easy_header(easy, name, h->amount - 1, CURLH_HEADER, -1, &h) != CURLHE_OK)
        return NULL;
    const char *v = h->value;
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r' || v[n - 1] == '\n')) n--;
    if (n >= len) n = len - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return buf;
}

/* retry-after-ms (the last one), else Retry-After (the first), and
 * x-should-retry (the last), of a response that was not a success.  curl
 * keeps every response's headers for curl_easy_header, so they are read
 * here, when wanted, rather than through a callback for every header line
 * of every answer.  Only the last response counts (a redirect's or a
 * 100-continue's do not). */
#define RETRY_AFTER_MAX_MS 86400000LL /* a day; llm.backoff_max_ms caps it further */

long llm_client_retry_after(const char *ms, const char *retry_after, int64_t now_ms) {
    char *end;
    if (ms) {
        double v = strtod(ms, &end);
        /* clamped before the cast: a server's "1e300" or "inf" is a day.
         * Not a number (empty, "abc"): Retry-After says, as if absent
         * (strtod's 0 had waived a Retry-After's pause). */
        if (end != ms && *end == '\0' && v >= 0) return (long)util_clamp_ll(v, 0, RETRY_AFTER_MAX_MS);
    }
    if (!retry_after) return -1;
    double secs = strtod(retry_after, &end);
    if (end != retry_after && *end == '\0')
        return secs >= 0 ? (long)util_clamp_ll(secs * 1000, 0, RETRY_AFTER_MAX_MS) : -1;
    time_t when = curl_getdate(retry_after, NULL);
    if (when <= 0) return -1;
    return (long)util_clamp_ll((double)((int64_t)when * 1000 - now_ms), 0, RETRY_AFTER_MAX_MS);
}

static void read_retry_headers(CURL *easy, llm_call *call) {
    char ms[256], ra[256], v[256];
    call->retry_after_ms = llm_client_retry_after(header_value(easy, "retry-after-ms", 1, ms, sizeof(ms)),
                                                  header_value(easy, "retry-after", 0, ra, sizeof(ra)),
                                                  util_wall_ms());
    if (header_value(easy, "x-should-retry", 1, v, sizeof(v)))
        call->should_retry = !strcasecmp(v, "true") ? 1 : !strcasecmp(v, "false") ? 0 : -1;
}

static void call_destroy(llm_call *call) {
    if (call->easy) curl_easy_cleanup(call->easy);
    free(call->body);
    free(call->resp);
    free(call);
}

/* A finished (or failed to start) call goes back to the pool. */
static void call_release(llm_call *call) {
    llm_client *c = call->client;
    free(call->body);
    call->body = NULL;
    if (call->resp_cap > RESP_KEEP_MAX) {
        free(call->resp);
        call->resp = NULL;
        call->resp_cap = 0;
    }
    if (call->easy && c->idle_count == c->idle_cap && c->idle_cap < c->inflight_peak) {
        size_t cap = c->idle_cap * 2 < c->inflight_peak ? c->idle_cap * 2 : c->inflight_peak;
        llm_call **idle = realloc(c->idle, cap * sizeof(*idle));
        if (idle) {
            c->idle = idle;
            c->idle_cap = cap;
        }
    }
    if (call->easy && c->idle_count < c->idle_cap) c->idle[c->idle_count++] = call;
    else call_destroy(call);
}

/* A call with its easy handle set up with everything that does not change
 * from call to call. */
static llm_call *call_new(llm_client *c) {
    llm_call *call = calloc(1, sizeof(*call));
    if (!call) return NULL;
    call->client = c;
    call->easy = curl_easy_init();
    if (!call->easy) {
        free(call);
        return NULL;
    }
    call->hdr[0].data = call->job_hdr;
    call->hdr[0].next = &call->hdr[1];
    call->hdr[1].data = call->attempt_hdr;
    call->hdr[1].next = c->base_headers;
    CURL *e = call->easy;
    curl_easy_setopt(e, CURLOPT_URL, c->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->hdr);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /* Waiting for a connection that may multiplex pays only over TLS, where
     * ALPN says so at handshake.  Over plain http curl would learn it only
     * from the first response, so every call of a burst would wait a whole
     * LLM call for it (and then time out). */
    if (c->tls) curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    /* curl's receive buffer lives as long as the handle (16 KB by
     * default): 4 KB holds most chat-completion answers in one read and
     * took RSS per in-flight call from 41 to 31 KB with 10,000 in flight;
     * a longer answer takes a few more reads. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 4096L);
    if (c->ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    if (!c->proxy_env) { /* what curl would find in the environment */
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
    return call;
}

/* A call left its lane: the lane has room again. */
static void lane_release(llm_client *c, lane *ln) {
    ln->inflight--;
    c->inflight--;
    if (ln->index < c->lane_hint) c->lane_hint = ln->index;
}

static void check_done(lane *ln) {
    llm_client *c = ln->client;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(ln->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        /* msg is valid only until the next curl call: copy what we need. */
        CURL *easy = msg->easy_handle;
        CURLcode code = msg->data.result;
        llm_call *call = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&call);
        curl_multi_remove_handle(ln->multi, easy);
        lane_release(c, ln);
        llm_response resp = {0};
        double total = 0;
        curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME, &total);
        resp.latency_ms = total * 1000.0;
        if (code == CURLE_OK) {
            curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp.status);
            if (resp.status < 200 || resp.status > 299) read_retry_headers(easy, call);
            resp.body = call->resp ? call->resp : "";
            resp.body_len = call->resp_len;
        } else if (call->too_large && code == CURLE_WRITE_ERROR &&
                   curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp.status) == CURLE_OK && resp.status >= 200 &&
                   resp.status <= 299) {
            resp.too_large = 1;
            resp.body = "";
        } else {
            resp.status = 0;
            resp.transport = code == CURLE_OPERATION_TIMEDOUT ? DECIDE_CAT_TIMEOUT : DECIDE_CAT_NETWORK;
            /* Both, to be sure: curl never reached the request's transfer,
             * and counted none of it written (at most a part of it left, in
             * a write that failed: no request to a server).  A connection
             * reset after the request went may have been counted by the
             * provider. */
            curl_off_t pre = -1;
            long sent = -1;
            resp.unsent = curl_easy_getinfo(easy, CURLINFO_PRETRANSFER_TIME_T, &pre) == CURLE_OK && pre == 0 &&
                          curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent == 0;
            if (call->too_large) resp.error = "response larger than llm.max_response_bytes";
            else resp.error = call->errbuf[0] ? call->errbuf : curl_easy_strerror(code);
        }
        resp.retry_after_ms = call->retry_after_ms;
        resp.should_retry = call->should_retry;
        call->cb(call->ud, &resp);
        call_release(call);
    }
}

static void lane_close_cb(uv_handle_t *h) { free(h->data); }

/* The lowest lane with room, made when every lane is full; NULL when out of
 * memory. */
static lane *lane_pick(llm_client *c) {
    for (size_t i = c->lane_hint; i < c->nlanes; i++) {
        if (c->lanes[i]->inflight < LANE_SIZE) {
            c->lane_hint = i;
            return c->lanes[i];
        }
    }
    if (c->nlanes == c->lanes_cap) {
        size_t cap = c->lanes_cap ? c->lanes_cap * 2 : 8;
        lane **p = realloc(c->lanes, cap * sizeof(*p));
        if (!p) return NULL;
        c->lanes = p;
        c->lanes_cap = cap;
    }
    lane *ln = calloc(1, sizeof(*ln));
    if (!ln) return NULL;
    ln->multi = curl_multi_init();
    if (!ln->multi) {
        free(ln);
        return NULL;
    }
    ln->client = c;
    ln->index = c->nlanes;
    curl_multi_setopt(ln->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(ln->multi, CURLMOPT_SOCKETDATA, ln);
    curl_multi_setopt(ln->multi, CURLMOPT_TIMERFUNCTION, timer_fn);
    curl_multi_setopt(ln->multi, CURLMOPT_TIMERDATA, ln);
    curl_multi_setopt(ln->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    curl_multi_setopt(ln->multi, CURLMOPT_MAXCONNECTS, 100000L);
    uv_timer_init(c->loop, &ln->timer);
    ln->timer.data = ln;
    c->lanes[c->nlanes++] = ln;
    c->lane_hint = ln->index;
    return ln;
}

llm_client *llm_client_new(uv_loop_t *loop, const llm_client_options *opts, char *err, size_t errlen) {
    static int global_done;
    if (!global_done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        global_done = 1;
    }
    llm_client *c = calloc(1, sizeof(*c));
    if (!c) goto fail;
    c->loop = loop;
    c->provider = opts->provider;
    c->timeout_ms = opts->timeout_ms;
    c->connect_timeout_ms = opts->connect_timeout_ms;
    c->max_response_bytes = opts->max_response_bytes;
    const char *base = opts->base_url ? opts->base_url : "";
    size_t blen = strlen(base);
    while (blen && base[blen - 1] == '/') blen--;
    const char *path = opts->provider == LLM_PROVIDER_ANTHROPIC ? "/messages" : "/chat/completions";
    if (opts->url) {
        if (!(c->url = strdup(opts->url))) goto fail;
    } else if (asprintf(&c->url, "%.*s%s", (int)blen, base, path) < 0) {
        c->url = NULL;
        goto fail;
    }
    c->tls = !strncasecmp(c->url, "https://", 8);
    c->proxy_env = proxy_env_set();
    if (opts->ca_file && opts->ca_file[0] && !(c->ca_file = strdup(opts->ca_file))) goto fail;
    if (opts->api_key && opts->api_key[0]) {
        int rc = opts->provider == LLM_PROVIDER_ANTHROPIC
                     ? asprintf(&c->auth_header, "x-api-key: %s", opts->api_key)
                     : asprintf(&c->auth_header, "Authorization: Bearer %s", opts->api_key);
        if (rc < 0) { c->auth_header = NULL; goto fail; }
    }
    if (opts->provider == LLM_PROVIDER_ANTHROPIC &&
        asprintf(&c->version_header, "anthropic-version: %s",
                 opts->anthropic_version ? opts->anthropic_version : "2023-06-01") < 0) {
        c->version_header = NULL;
        goto fail;
    }
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (!h) goto fail;
    c->base_headers = h;
    if (!(h = curl_slist_append(h, "Expect:"))) goto fail;
    if (c->auth_header && !(h = curl_slist_append(h, c->auth_header))) goto fail;
    if (c->version_header && !(h = curl_slist_append(h, c->version_header))) goto fail;
    c->idle_cap = IDLE_MIN;
    c->idle = calloc(c->idle_cap, sizeof(*c->idle));
    if (!c->idle) goto fail;
    return c;
fail:
    snprintf(err, errlen, "llm client: out of memory");
    llm_client_free(c);
    return NULL;
}

int llm_client_submit(llm_client *c, const char *job_id, int attempt, char *body, size_t body_len,
                      llm_client_cb cb, void *ud, llm_call **out) {
    lane *ln = lane_pick(c);
    llm_call *call = !ln ? NULL : c->idle_count ? c->idle[--c->idle_count] : call_new(c);
    if (!call) {
        free(body);
        return -1;
    }
    call->ln = ln;
    call->body = body;
    call->cb = cb;
    call->ud = ud;
    call->resp_len = 0;
    if (call->resp) call->resp[0] = '\0';
    call->too_large = 0;
    call->retry_after_ms = -1;
    call->should_retry = -1;
    call->errbuf[0] = '\0';
    char att[24];
    util_ltoa(attempt, att);
    util_concat(call->job_hdr, sizeof(call->job_hdr), "X-Retort-Job-Id: ", job_id, (char *)NULL);
    util_concat(call->attempt_hdr, sizeof(call->attempt_hdr), "X-Retort-Attempt: ", att, (char *)NULL);
    curl_easy_setopt(call->easy, CURLOPT_POSTFIELDS, call->body);
    curl_easy_setopt(call->easy, CURLOPT_POSTFIELDSIZE, (long)body_len);
    if (curl_multi_add_handle(ln->multi, call->easy) != CURLM_OK) {
        call_release(call);
        return -1;
    }
    ln->inflight++;
    if (++c->inflight > c->inflight_peak) c->inflight_peak = c->inflight;
    if (out) *out = call;
    return 0;
}

void llm_client_cancel(llm_client *c, llm_call *call) {
    curl_multi_remove_handle(call->ln->multi, call->easy);
    lane_release(c, call->ln);
    call_release(call);
}

size_t llm_client_inflight(const llm_client *c) { return c->inflight; }

void llm_client_free(llm_client *c) {
    if (!c) return;
    /* Calls still in flight belong to their owners, who cancel them first;
     * what remains here is the idle pool and the lanes.  A lane is freed
     * when libuv has closed its timer. */
    for (size_t i = 0; i < c->idle_count; i++) call_destroy(c->idle[i]);
    for (size_t i = 0; i < c->nlanes; i++) {
        lane *ln = c->lanes[i];
        curl_multi_cleanup(ln->multi);
        uv_timer_stop(&ln->timer);
        uv_close((uv_handle_t *)&ln->timer, lane_close_cb);
    }
    /* Sockets curl closed without the callback (none expected). */
    for (size_t fd = 0; fd < c->socks_cap; fd++)
        if (c->socks[fd]) uv_close((uv_handle_t *)&c->socks[fd]->poll, sock_close_cb);
    free(c->socks);
    free(c->lanes);
    curl_slist_free_all(c->base_headers);
    free(c->idle);
    free(c->ca_file);
    free(c->url);
    free(c->auth_header);
    free(c->version_header);
    free(c);
}
