/* bench_curl.c - the HTTP floor of `make bench`: a bare libcurl-multi client
 * on a libuv loop (the same integration the worker's llm_client uses) that
 * posts chat-completion bodies to the mock LLM and reads the answers, with
 * nothing else: no Kafka, no Redis, no JSON parsing, no validation.
 *
 * Usage:
 *   bench-curl --url URL --bodies FILE [--requests N] [--concurrency C]
 *              [--id-prefix P] [--api-key KEY] [--lane-size N]
 *
 * Calls are spread over curl multi handles of at most N calls each (default
 * 64, as in the worker's llm_client: see its comment on lanes).
 *
 * FILE holds one request body per line; request i sends line i % lines.
 * Each request carries the headers the worker sends (Content-Type, an empty
 * Expect, Authorization, X-Retort-Job-Id: P-i, X-Retort-Attempt: 1).
 *
 * Prints one JSON line: requests, ok (HTTP 200), errors, elapsed_s,
 * req_per_s, cpu_user_s, cpu_sys_s, cpu_us_per_req (this process only,
 * from getrusage, measured from the first request to the last answer).
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

typedef struct bench bench;

/* One curl multi handle and its timer. curl 7.88 walks every connection of a
 * multi's cache when a transfer starts (looking for one to reuse) and again
 * when one is removed, so one multi holding 10,000 HTTP/1.1 connections costs
 * O(n) per request. Transfers are spread over lanes of at most lane_size. */
typedef struct lane {
    bench *b;
    CURLM *multi;
    uv_timer_t timer;
    long inflight;
} lane;

typedef struct req {
    bench *b;
    lane *ln;
    CURL *easy;
    struct curl_slist *headers;
    char *resp;
    size_t resp_len, resp_cap;
} req;

/* As in worker/llm_client.c: a socket's poll handle lives as long as the
 * socket, and is restarted only when what it watches changes, so a call
 * on a warm connection costs no epoll_ctl. */
typedef struct sock_ctx {
    uv_poll_t poll;
    curl_socket_t fd;
    lane *ln;
    int events;
    int watched;
} sock_ctx;

struct bench {
    uv_loop_t *loop;
    lane *lanes;
    long nlanes, lane_size;
    const char *url;
    char *auth_header;
    const char *id_prefix;
    char **bodies;
    size_t nbodies;
    long total, started, done, ok, errors;
    long concurrency, inflight;
    CURL **idle;
    size_t idle_count, idle_cap;
    sock_ctx **socks;      /* by fd */
    size_t socks_cap;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void start_more(bench *b);
static void check_done(lane *ln);

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
    req *r = ud;
    size_t n = size * nmemb;
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + n + 1) cap *= 2;
        char *p = realloc(r->resp, cap);
        if (!p) return 0;
        r->resp = p;
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, ptr, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    return n;
}

static void poll_cb(uv_poll_t *h, int status, int events) {
    sock_ctx *sc = h->data;
    int flags = 0, running;
    if (!sc->watched) {
        uv_poll_stop(h);
        sc->events = 0;
        return;
    }
    if (status < 0) flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(sc->ln->multi, sc->fd, flags, &running);
    check_done(sc->ln);
}

static void sock_close_cb(uv_handle_t *h) { free(h->data); }

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    lane *ln = userp;
    bench *b = ln->b;
    sock_ctx *sc = socketp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
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
        if (fd < 0) return -1;
        if ((size_t)fd >= b->socks_cap) {
            size_t cap = b->socks_cap ? b->socks_cap : 256;
            while (cap <= (size_t)fd) cap *= 2;
            sock_ctx **socks = realloc(b->socks, cap * sizeof(*socks));
            if (!socks) return -1;
            memset(socks + b->socks_cap, 0, (cap - b->socks_cap) * sizeof(*socks));
            b->socks = socks;
            b->socks_cap = cap;
        }
        sc = b->socks[fd];
        if (!sc) {
            sc = calloc(1, sizeof(*sc));
            if (!sc) return -1;
            sc->fd = fd;
            if (uv_poll_init_socket(b->loop, &sc->poll, fd)) {
                free(sc);
                return -1;
            }
            sc->poll.data = sc;
            b->socks[fd] = sc;
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

static int close_socket_cb(void *clientp, curl_socket_t fd) {
    bench *b = clientp;
    if (fd >= 0 && (size_t)fd < b->socks_cap && b->socks[fd]) {
        uv_close((uv_handle_t *)&b->socks[fd]->poll, sock_close_cb);
        b->socks[fd] = NULL;
    }
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

static void req_free(req *r) {
    bench *b = r->b;
    curl_easy_reset(r->easy);
    if (b->idle_count < b->idle_cap) b->idle[b->idle_count++] = r->easy;
    else curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->resp);
    free(r);
}

static void check_done(lane *ln) {
    bench *b = ln->b;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(ln->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *easy = msg->easy_handle;
        CURLcode code = msg->data.result;
        req *r = NULL;
        long status = 0;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        curl_multi_remove_handle(ln->multi, easy);
        ln->inflight--;
        if (code == CURLE_OK && status == 200 && r->resp_len > 0) b->ok++;
        else b->errors++;
        b->done++;
        b->inflight--;
        req_free(r);
    }
    start_more(b);
}

/* The first lane with room: filling low lanes first keeps their idle
 * connections warm for reuse at low concurrency. */
static lane *lane_pick(bench *b) {
    for (long i = 0; i < b->nlanes; i++)
        if (b->lanes[i].inflight < b->lane_size) return &b->lanes[i];
    return &b->lanes[b->nlanes - 1];
}

static int start_one(bench *b) {
    long i = b->started;
    req *r = calloc(1, sizeof(*r));
    if (!r) return -1;
    r->b = b;
    r->ln = lane_pick(b);
    r->easy = b->idle_count ? b->idle[--b->idle_count] : curl_easy_init();
    if (!r->easy) {
        free(r);
        return -1;
    }
    char line[256];
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    if (b->auth_header) h = curl_slist_append(h, b->auth_header);
    snprintf(line, sizeof(line), "X-Retort-Job-Id: %s-%ld", b->id_prefix, i);
    h = curl_slist_append(h, line);
    h = curl_slist_append(h, "X-Retort-Attempt: 1");
    r->headers = h;
    const char *body = b->bodies[(size_t)i % b->nbodies];
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, b->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    if (!strncasecmp(b->url, "https://", 8)) curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 4096L); /* as the worker */
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, b);
    if (curl_multi_add_handle(r->ln->multi, e) != CURLM_OK) {
        req_free(r);
        return -1;
    }
    r->ln->inflight++;
    b->started++;
    b->inflight++;
    return 0;
}

static void start_more(bench *b) {
    while (b->started < b->total && b->inflight < b->concurrency) {
        if (start_one(b)) {
            /* Count it as failed so the run still ends. */
            b->started++;
            b->done++;
            b->errors++;
        }
    }
    if (b->done >= b->total) uv_stop(b->loop);
}

static int load_bodies(bench *b, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (!n) continue;
        char **p = realloc(b->bodies, (b->nbodies + 1) * sizeof(*p));
        if (!p) break;
        b->bodies = p;
        b->bodies[b->nbodies++] = strdup(line);
    }
    free(line);
    fclose(f);
    return b->nbodies ? 0 : -1;
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
    bench b = {0};
    const char *bodies = NULL, *api_key = NULL;
    b.total = 10000;
    b.concurrency = 64;
    b.id_prefix = "curl";
    b.lane_size = 64; /* as the worker's llm_client */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--url") && v) b.url = argv[++i];
        else if (!strcmp(a, "--bodies") && v) bodies = argv[++i];
        else if (!strcmp(a, "--requests") && v) b.total = atol(argv[++i]);
        else if (!strcmp(a, "--concurrency") && v) b.concurrency = atol(argv[++i]);
        else if (!strcmp(a, "--id-prefix") && v) b.id_prefix = argv[++i];
        else if (!strcmp(a, "--api-key") && v) api_key = argv[++i];
        else if (!strcmp(a, "--lane-size") && v) b.lane_size = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-curl --url URL --bodies FILE [--requests N] "
                            "[--concurrency C] [--id-prefix P] [--api-key KEY] [--lane-size N]\n");
            return 2;
        }
    }
    if (!b.url || !bodies || b.total <= 0 || b.concurrency <= 0 || b.lane_size <= 0) {
        fprintf(stderr, "bench-curl: --url and --bodies are required\n");
        return 2;
    }
    if (load_bodies(&b, bodies)) {
        fprintf(stderr, "bench-curl: cannot read bodies from %s\n", bodies);
        return 1;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (api_key && asprintf(&b.auth_header, "Authorization: Bearer %s", api_key) < 0) return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    b.loop = uv_default_loop();
    b.nlanes = (b.concurrency + b.lane_size - 1) / b.lane_size;
    b.lanes = calloc((size_t)b.nlanes, sizeof(*b.lanes));
    b.idle_cap = 1024;
    b.idle = calloc(b.idle_cap, sizeof(*b.idle));
    if (!b.lanes || !b.idle) return 1;
    for (long i = 0; i < b.nlanes; i++) {
        lane *ln = &b.lanes[i];
        ln->b = &b;
        ln->multi = curl_multi_init();
        if (!ln->multi) return 1;
        curl_multi_setopt(ln->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
        curl_multi_setopt(ln->multi, CURLMOPT_SOCKETDATA, ln);
        curl_multi_setopt(ln->multi, CURLMOPT_TIMERFUNCTION, timer_fn);
        curl_multi_setopt(ln->multi, CURLMOPT_TIMERDATA, ln);
        curl_multi_setopt(ln->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
        curl_multi_setopt(ln->multi, CURLMOPT_MAXCONNECTS, 100000L);
        uv_timer_init(b.loop, &ln->timer);
        ln->timer.data = ln;
    }

    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_s();
    start_more(&b);
    uv_run(b.loop, UV_RUN_DEFAULT);
    double t1 = now_s();
    getrusage(RUSAGE_SELF, &r1);

    double user = tv_s(r1.ru_utime) - tv_s(r0.ru_utime);
    double sys = tv_s(r1.ru_stime) - tv_s(r0.ru_stime);
    double el = t1 - t0;
    printf("{\"requests\": %ld, \"ok\": %ld, \"errors\": %ld, \"concurrency\": %ld, "
           "\"elapsed_s\": %.3f, \"req_per_s\": %.1f, \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, "
           "\"cpu_us_per_req\": %.1f}\n",
           b.done, b.ok, b.errors, b.concurrency, el, el > 0 ? (double)b.done / el : 0.0, user, sys,
           b.done ? (user + sys) * 1e6 / (double)b.done : 0.0);
    fflush(stdout);

    for (size_t i = 0; i < b.idle_count; i++) curl_easy_cleanup(b.idle[i]);
    for (long i = 0; i < b.nlanes; i++) {
        curl_multi_cleanup(b.lanes[i].multi);
        uv_timer_stop(&b.lanes[i].timer);
        uv_close((uv_handle_t *)&b.lanes[i].timer, NULL);
    }
    for (size_t fd = 0; fd < b.socks_cap; fd++)
        if (b.socks[fd]) uv_close((uv_handle_t *)&b.socks[fd]->poll, sock_close_cb);
    uv_run(b.loop, UV_RUN_DEFAULT);
    uv_loop_close(b.loop);
    for (size_t i = 0; i < b.nbodies; i++) free(b.bodies[i]);
    free(b.bodies);
    free(b.idle);
    free(b.socks);
    free(b.lanes);
    free(b.auth_header);
    curl_global_cleanup();
    return b.errors ? 1 : 0;
}
