/* mock_llm.c - scripted fake LLM server for Retort's tests and benchmarks.
 *
 * Speaks the OpenAI chat-completions API (POST /v1/chat/completions and
 * POST /chat/completions) and the Anthropic Messages API (POST /v1/messages),
 * answering with JSON generated from the JSON Schema found in the request.
 * Tests script failures with a `[[mock k=v ...]]` token in the first user
 * message.  As Anthropic does, a Messages request without the
 * anthropic-version header, `model` or `max_tokens` is answered with 400
 * invalid_request_error.
 *
 * Usage:
 *   mock-llm [--port N] [--host ADDR] [--latency-ms N] [--jitter-ms N]
 *            [--max-conns N] [--threads N] [--api-key KEY] [--log]
 *
 * Prints `LISTENING http://HOST:PORT` on stdout once it accepts connections
 * and runs until SIGINT/SIGTERM.
 *
 * Other endpoints: GET /healthz, GET /stats, POST /stats/reset.
 * GET /stats?calls=0 leaves out `calls` (one member per job and attempt:
 * tens of thousands in a bench run, which a sampler polling twice a second
 * made the mock print, taking a tenth of its CPU, for nothing).
 * GET /stats?times=1 adds `times`: for each member of `calls`, its first
 * CALL_TIMES calls as [arrival, in flight]: the wall-clock milliseconds
 * (Unix epoch) when the whole request had arrived, and how many LLM
 * requests were in flight then, this one included (so tests see when a
 * call was made, not when the worker said it would make it).
 * `in_flight` is the number of LLM requests arrived and not yet answered
 * (or dropped); `peak_in_flight` the most at once since the start or the
 * last reset.
 *
 * Directives (keys of the [[mock ...]] token of the FIRST user message):
 *   defect=missing_field|wrong_type|invalid_value|extra_field|not_json|
 *          fenced|prose|refusal|empty|truncated|nul_char|nul_text
 *                  (nul_char: the first string value, depth first, ends
 *                  with the escape \u0000; the rest of the answer holds;
 *                  nul_text: the answer's text, not its JSON, ends with
 *                  U+0000, escaped in the body)
 *   until=K        defect on attempts 1..K only (attempt = X-Retort-Attempt
 *                  when sent, else 1 + number of assistant messages)
 *   field=NAME     field the defect applies to (a/b for nested)
 *   repair=0       disable the repair rule: on an attempt > until the answer
 *                  is valid only if the LAST user message contains the
 *                  violated JSON pointer (NOT_JSON for not_json); this rule
 *                  applies to missing_field, wrong_type, invalid_value,
 *                  extra_field and not_json; the other defects are simply
 *                  valid after `until`
 *   answer_b64=B64 the answer's text is B64 decoded (exact bytes, up to
 *                  767 of them; no defect applies)
 *   latency_ms=N jitter_ms=N
 *   http=STATUS times=K retry_after=S retry_after_ms=N should_retry=true|false
 *   quota=1        answer as the provider does once the account's quota or
 *                  credit is spent: OpenAI a 429 with code and type
 *                  insufficient_quota, Anthropic a 400 invalid_request_error
 *                  "Your credit balance is too low ..." (with times= and
 *                  the retry headers as http=)
 *   hang=1         never answer; the peer is checked every second and the
 *                  connection dropped once the client has gone
 *   tool_calls=N   (1..16) a request that forces a tool is answered with N
 *                  calls of it, each with the same arguments, on every
 *                  attempt (a client must not take one of several as the
 *                  answer); refused (400) in a request that forces none
 * An unknown key or value is answered with 400 so a typo in a test shows.
 * The field of missing_field/wrong_type/invalid_value is field=, else the
 * root's first `required`, else its first property; a non-object root gets
 * no field defect.  invalid_value on a field without enum/const/pattern/
 * format/minimum/maximum/minLength/maxLength breaks the first top-level
 * property that has one (and that one's path is the violated path).
 * Forced tools: a request whose tool_choice forces a tool of its own
 * (OpenAI: tools [{"type":"function","function":{"name","parameters"}}]
 * and tool_choice {"type":"function","function":{"name"}} or "required";
 * Anthropic: tools [{"name","input_schema"}] and tool_choice
 * {"type":"tool","name"} or {"type":"any"}; "required" and "any" call the
 * first tool) is answered as the APIs answer it: the JSON goes out as the
 * call's arguments, a string (OpenAI: content null, finish_reason stop
 * for a named tool as OpenAI sends it, tool_calls for "required" as vLLM
 * does; length when truncated cut the arguments), or as the tool_use
 * block's input object (Anthropic: stop_reason tool_use).  It is
 * generated from the tool's parameters / input_schema, the schema the
 * model is held to when it calls the tool (from the usual schema when the
 * tool has none); the directives apply as to a text answer.  Anthropic's
 * input is an object: an answer that is none (not_json, fenced, prose,
 * empty, truncated, nul_text; answer_b64 that is not a JSON object) goes
 * out as a text block as without tools, and refusal is a refusal in both.
 * Malformed tools or tool_choice (a tool without its name or schema, a
 * choice naming no tool of the request, tool_choice without tools) are
 * answered 400 invalid_request_error, as the APIs answer them.
 * `calls` of /stats count requests by X-Retort-Job-Id:X-Retort-Attempt;
 * http=STATUS times=K counts the same way (without those headers: by the
 * first user message and the computed attempt).
 *
 * Design: one MHD epoll thread (or --threads N of them) does all the HTTP
 * work; a delayed answer is computed at once, the connection is suspended
 * and ONE timer thread with a min-heap of due times resumes it.  So 10,000
 * waiting requests cost 10,000 heap entries, never 10,000 threads.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pcre2.h>

#include "jsonout.h" /* cJSON_PrintUnformatted's bytes, without its sprintf + sscanf per number */

#define MAX_BODY (8u << 20)  /* larger uploads are answered with 413 */
#define MAX_DEPTH 16         /* generator recursion limit */
#define HANG_RECHECK_MS 1000 /* how often a hanging request checks its peer */
#define DEFAULT_ANSWER "{\"answer\":\"mock answer\"}"
#define REFUSAL_TEXT "I'm sorry, I can't help with that."
#define NOT_JSON_TEXT "Sorry, I cannot produce that right now."

/* ------------------------------------------------------------------------ */
/* options and global state                                                 */

static struct {
    const char *host;
    unsigned port;
    long latency_ms;
    long jitter_ms;
    unsigned max_conns;
    unsigned threads;
    const char *api_key;
    int log;
    unsigned idle_timeout_s;   /* closes connections idle this long (0: never), as uvicorn does after 5 s */
} g_opt = {"127.0.0.1", 0, 0, 0, 20000, 1, NULL, 0, 0};

static atomic_int g_stopping;      /* set once shutdown began */
static atomic_long g_suspended;    /* connections suspended right now */
static atomic_ullong g_id_counter; /* response ids */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* FNV-1a, then a splitmix finaliser: cheap and good enough for seeds. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return mix64(h);
}

static uint64_t hash_str(const char *s)
{
    return hash_bytes(s, strlen(s));
}

static uint64_t hash_child(uint64_t h, uint64_t k)
{
    return mix64(h ^ (k * 0x9e3779b97f4a7c15ull));
}

/* ------------------------------------------------------------------------ */
/* growable string buffer                                                   */

typedef struct mbuf {
    char *p;
    size_t n, cap;
    int oom;
} mbuf;

static void sb_reserve(mbuf *b, size_t extra)
{
    size_t want = b->n + extra + 1;
    char *np;

    if (b->oom || want <= b->cap)
        return;
    if (want < 64)
        want = 64;
    if (want < b->cap * 2)
        want = b->cap * 2;
    np = realloc(b->p, want);
    if (!np) {
        b->oom = 1;
        return;
    }
    b->p = np;
    b->cap = want;
}

static void sb_add(mbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_adds(mbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_addc(mbuf *b, char c)
{
    sb_add(b, &c, 1);
}

/* ------------------------------------------------------------------------ */
/* statistics                                                               */

#define CALL_TIMES 4 /* the calls of a job and attempt whose times are kept */

typedef struct call_ent {
    struct call_ent *next;
    long count;
    int visible; /* keyed by the worker's headers: shown in /stats */
    int64_t at_ms[CALL_TIMES]; /* arrival, wall clock */
    int in_flight[CALL_TIMES]; /* LLM requests in flight then, itself included */
    char key[];
} call_ent;

static struct {
    pthread_mutex_t mu;
    long requests;
    long by_status[600];
    call_ent **buckets;
    size_t nbuckets, nents;
    long in_flight, peak_in_flight;
} g_stats = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* An LLM request has arrived whole (returns the number in flight, itself
 * included) or has ended (answered or dropped). */
static int stats_request_begins(void)
{
    int n;

    pthread_mutex_lock(&g_stats.mu);
    n = (int)++g_stats.in_flight;
    if (g_stats.in_flight > g_stats.peak_in_flight)
        g_stats.peak_in_flight = g_stats.in_flight;
    pthread_mutex_unlock(&g_stats.mu);
    return n;
}

static void stats_request_ends(void)
{
    pthread_mutex_lock(&g_stats.mu);
    g_stats.in_flight--;
    pthread_mutex_unlock(&g_stats.mu);
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void stats_free_calls_locked(void)
{
    size_t i;

    for (i = 0; i < g_stats.nbuckets; i++) {
        call_ent *e = g_stats.buckets[i];

        while (e) {
            call_ent *nx = e->next;

            free(e);
            e = nx;
        }
    }
    free(g_stats.buckets);
    g_stats.buckets = NULL;
    g_stats.nbuckets = g_stats.nents = 0;
}

static void stats_grow_locked(void)
{
    size_t nb = g_stats.nbuckets ? g_stats.nbuckets * 2 : 1024, i;
    call_ent **b = calloc(nb, sizeof(*b));

    if (!b)
        return;
    for (i = 0; i < g_stats.nbuckets; i++) {
        call_ent *e = g_stats.buckets[i];

        while (e) {
            call_ent *nx = e->next;
            size_t k = (size_t)hash_str(e->key) & (nb - 1);

            e->next = b[k];
            b[k] = e;
            e = nx;
        }
    }
    free(g_stats.buckets);
    g_stats.buckets = b;
    g_stats.nbuckets = nb;
}

/* Counts one call for key, with its arrival time and the requests in
 * flight then, and returns the new count (1 for the first). */
static long stats_count_call(const char *key, int visible, int in_flight)
{
    call_ent *e;
    size_t k, len = strlen(key);
    long n = 1;
    int64_t at = wall_ms();

    pthread_mutex_lock(&g_stats.mu);
    if (g_stats.nents >= g_stats.nbuckets)
        stats_grow_locked();
    if (!g_stats.nbuckets)
        goto out;
    k = (size_t)hash_str(key) & (g_stats.nbuckets - 1);
    for (e = g_stats.buckets[k]; e; e = e->next) {
        if (strcmp(e->key, key) == 0) {
            n = ++e->count;
            if (n <= CALL_TIMES) {
                e->at_ms[n - 1] = at;
                e->in_flight[n - 1] = in_flight;
            }
            goto out;
        }
    }
    e = malloc(sizeof(*e) + len + 1);
    if (!e)
        goto out;
    memcpy(e->key, key, len + 1);
    e->count = 1;
    e->at_ms[0] = at;
    e->in_flight[0] = in_flight;
    e->visible = visible;
    e->next = g_stats.buckets[k];
    g_stats.buckets[k] = e;
    g_stats.nents++;
out:
    pthread_mutex_unlock(&g_stats.mu);
    return n;
}

static void stats_count_request(unsigned status)
{
    pthread_mutex_lock(&g_stats.mu);
    g_stats.requests++;
    if (status > 0 && status < 600)
        g_stats.by_status[status]++;
    pthread_mutex_unlock(&g_stats.mu);
}

static void stats_reset(void)
{
    pthread_mutex_lock(&g_stats.mu);
    g_stats.requests = 0;
    memset(g_stats.by_status, 0, sizeof(g_stats.by_status));
    g_stats.peak_in_flight = g_stats.in_flight;
    stats_free_calls_locked();
    pthread_mutex_unlock(&g_stats.mu);
}

static char *stats_json(int with_calls, int with_times)
{
    cJSON *o = cJSON_CreateObject(), *bs, *calls, *times;
    struct rusage ru;
    char key[16];
    size_t i;
    char *out;

    pthread_mutex_lock(&g_stats.mu);
    cJSON_AddNumberToObject(o, "requests", (double)g_stats.requests);
    bs = cJSON_AddObjectToObject(o, "by_status");
    for (i = 0; i < 600; i++) {
        if (g_stats.by_status[i]) {
            snprintf(key, sizeof(key), "%zu", i);
            cJSON_AddNumberToObject(bs, key, (double)g_stats.by_status[i]);
        }
    }
    cJSON_AddNumberToObject(o, "in_flight", (double)g_stats.in_flight);
    cJSON_AddNumberToObject(o, "peak_in_flight", (double)g_stats.peak_in_flight);
    calls = with_calls ? cJSON_AddObjectToObject(o, "calls") : NULL;
    times = with_times ? cJSON_AddObjectToObject(o, "times") : NULL;
    for (i = 0; (calls || times) && i < g_stats.nbuckets; i++) {
        const call_ent *e;

        for (e = g_stats.buckets[i]; e; e = e->next) {
            if (!e->visible)
                continue;
            if (calls)
                cJSON_AddNumberToObject(calls, e->key, (double)e->count);
            if (times) {
                cJSON *list = cJSON_AddArrayToObject(times, e->key);
                long t;

                for (t = 0; t < e->count && t < CALL_TIMES; t++) {
                    cJSON *pair = cJSON_CreateArray();

                    cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)e->at_ms[t]));
                    cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)e->in_flight[t]));
                    cJSON_AddItemToArray(list, pair);
                }
            }
        }
    }
    pthread_mutex_unlock(&g_stats.mu);
    getrusage(RUSAGE_SELF, &ru);
    cJSON_AddNumberToObject(o, "cpu_user_s", (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6);
    cJSON_AddNumberToObject(o, "cpu_sys_s", (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    cJSON_AddNumberToObject(o, "suspended", (double)atomic_load(&g_suspended));
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

/* ------------------------------------------------------------------------ */
/* regular expressions (pattern keyword)                                    */

/* Compiled patterns are cached per thread: MHD may run several threads and
 * a benchmark sends the same schema thousands of times.  The cache hangs
 * off a pthread key so that it is freed when MHD's threads exit. */
#define RX_CACHE 32
typedef struct rx_slot {
    char *pat;
    pcre2_code *code; /* NULL: the pattern does not compile */
} rx_slot;

typedef struct rx_cache {
    rx_slot slot[RX_CACHE];
    unsigned next;
    pcre2_match_data *md;
} rx_cache;

static pthread_key_t g_rx_key;
static pthread_once_t g_rx_once = PTHREAD_ONCE_INIT;

static void rx_cache_free(void *p)
{
    rx_cache *c = p;
    unsigned i;

    if (!c)
        return;
    for (i = 0; i < RX_CACHE; i++) {
        free(c->slot[i].pat);
        if (c->slot[i].code)
            pcre2_code_free(c->slot[i].code);
    }
    if (c->md)
        pcre2_match_data_free(c->md);
    free(c);
}

static void rx_key_init(void)
{
    pthread_key_create(&g_rx_key, rx_cache_free);
}

static rx_cache *rx_cache_get(void)
{
    rx_cache *c;

    pthread_once(&g_rx_once, rx_key_init);
    c = pthread_getspecific(g_rx_key);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (c)
            pthread_setspecific(g_rx_key, c);
    }
    return c;
}

static pcre2_code *rx_get(rx_cache *c, const char *pat, int *ok)
{
    unsigned i;
    int ec;
    PCRE2_SIZE eo;
    rx_slot *s;

    for (i = 0; i < RX_CACHE; i++) {
        if (c->slot[i].pat && strcmp(c->slot[i].pat, pat) == 0) {
            *ok = c->slot[i].code != NULL;
            return c->slot[i].code;
        }
    }
    s = &c->slot[c->next++ % RX_CACHE];
    free(s->pat);
    if (s->code)
        pcre2_code_free(s->code);
    s->pat = strdup(pat);
    s->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    *ok = s->code != NULL;
    return s->code;
}

/* 1: str matches pat (unanchored search, as JSON Schema wants); 0: no;
 * -1: the pattern cannot be used. */
static int rx_match(const char *pat, const char *str)
{
    int ok, rc;
    rx_cache *c = rx_cache_get();
    pcre2_code *code;

    if (!c)
        return -1;
    code = rx_get(c, pat, &ok);
    if (!ok)
        return -1;
    if (!c->md)
        c->md = pcre2_match_data_create(4, NULL);
    if (!c->md)
        return -1;
    rc = pcre2_match(code, (PCRE2_SPTR)str, strlen(str), 0, 0, c->md, NULL);
    if (rc >= 0)
        return 1;
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

/* A small generator for the regular expressions schemas actually use:
 * literals, escapes (\d \w \s ...), classes, groups with alternation (the
 * first alternative is taken) and quantifiers.  Lookarounds and
 * backreferences make it give up; the result is always checked with PCRE2. */
typedef struct rxgen {
    const char *p, *end;
    mbuf out;
    long stretch; /* >0: unbounded quantifiers repeat up to this */
    uint64_t h;
    int fail;
} rxgen;

static void rx_alternation(rxgen *x);

static void rx_emit_utf8(mbuf *b, unsigned long cp)
{
    char u[4];

    if (cp < 0x80) {
        sb_addc(b, (char)cp);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 2);
    } else {
        u[0] = (char)(0xE0 | ((cp >> 12) & 0x0F));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 3);
    }
}

/* Parses an escape after the backslash.  In a class (set != NULL) the
 * members are added to set; outside, one matching character is emitted. */
static void rx_escape(rxgen *x, unsigned char *set)
{
    char c;
    const char *members = NULL;
    char lit[2] = {0, 0};
    unsigned long cp;

    if (x->p >= x->end) {
        x->fail = 1;
        return;
    }
    c = *x->p++;
    switch (c) {
    case 'd': members = "0123456789"; break;
    case 'w': members = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"; break;
    case 's': members = " "; break;
    case 'D': members = "x"; break;
    case 'W': members = "-"; break;
    case 'S': members = "x"; break;
    case 'n': lit[0] = '\n'; break;
    case 't': lit[0] = '\t'; break;
    case 'r': lit[0] = '\r'; break;
    case 'f': lit[0] = '\f'; break;
    case 'v': lit[0] = '\v'; break;
    case 'b':
    case 'B':
        if (set) {
            lit[0] = '\b';
            break;
        }
        return; /* word boundary: zero width */
    case 'p':
    case 'P':
        /* \p{L} and friends: one plain letter or digit will do. */
        if (x->p < x->end && *x->p == '{') {
            const char *close = memchr(x->p, '}', (size_t)(x->end - x->p));

            if (!close) {
                x->fail = 1;
                return;
            }
            members = (c == 'p' && close - x->p > 1 && x->p[1] == 'N') ? "1" : "a";
            if (c == 'p' && close - x->p > 2 && x->p[1] == 'L' && x->p[2] == 'u')
                members = "A";
            x->p = close + 1;
        } else {
            x->fail = 1;
            return;
        }
        break;
    case 'x':
    case 'u': {
        int digits = c == 'x' ? 2 : 4, i;

        cp = 0;
        if (x->p < x->end && *x->p == '{') {
            x->fail = 1;
            return;
        }
        for (i = 0; i < digits; i++) {
            if (x->p >= x->end || !isxdigit((unsigned char)*x->p)) {
                x->fail = 1;
                return;
            }
            cp = cp * 16 + (unsigned long)(isdigit((unsigned char)*x->p)
                                               ? *x->p - '0'
                                               : (tolower((unsigned char)*x->p) - 'a' + 10));
            x->p++;
        }
        if (set) {
            if (cp < 128)
                set[cp] = 1;
            return;
        }
        rx_emit_utf8(&x->out, cp);
        return;
    }
    default:
        if (c >= '1' && c <= '9') { /* backreference */
            x->fail = 1;
            return;
        }
        lit[0] = c;
        break;
    }
    if (set) {
        const char *m = members ? members : lit;

        for (; *m; m++)
            set[(unsigned char)*m] = 1;
        return;
    }
    if (members) {
        size_t n = strlen(members);

        sb_addc(&x->out, members[x->h % n]);
        x->h = mix64(x->h);
    } else {
        sb_addc(&x->out, lit[0]);
    }
}

static void rx_class(rxgen *x)
{
    unsigned char set[256];
    int neg = 0, first = 1, count = 0, i;
    int prev = -1;

    memset(set, 0, sizeof(set));
    if (x->p < x->end && *x->p == '^') {
        neg = 1;
        x->p++;
    }
    while (x->p < x->end && (*x->p != ']' || first)) {
        unsigned char c = (unsigned char)*x->p++;

        first = 0;
        if (c == '\\') {
            rx_escape(x, set);
            if (x->fail)
                return;
            prev = -1;
            continue;
        }
        if (c >= 0x80) { /* non-ASCII in a class: out of our depth */
            x->fail = 1;
            return;
        }
        if (c == '-' && prev >= 0 && x->p < x->end && *x->p != ']') {
            unsigned char hi = (unsigned char)*x->p++;

            if (hi == '\\' || hi >= 0x80 || hi < prev) {
                x->fail = 1;
                return;
            }
            for (i = prev; i <= hi; i++)
                set[i] = 1;
            prev = -1;
            continue;
        }
        set[c] = 1;
        prev = c;
    }
    if (x->p >= x->end) {
        x->fail = 1;
        return;
    }
    x->p++; /* ] */
    if (neg) {
        static const char pref[] = "xaA0-_ .";
        const char *q;

        for (q = pref; *q; q++) {
            if (!set[(unsigned char)*q]) {
                sb_addc(&x->out, *q);
                return;
            }
        }
        for (i = 33; i < 127; i++) {
            if (!set[i]) {
                sb_addc(&x->out, (char)i);
                return;
            }
        }
        x->fail = 1;
        return;
    }
    for (i = 32; i < 127; i++)
        count += set[i];
    if (!count) {
        for (i = 0; i < 128; i++) {
            if (set[i]) {
                sb_addc(&x->out, (char)i);
                return;
            }
        }
        x->fail = 1;
        return;
    }
    count = (int)(x->h % (uint64_t)count);
    x->h = mix64(x->h);
    for (i = 32; i < 127; i++) {
        if (set[i] && count-- == 0) {
            sb_addc(&x->out, (char)i);
            return;
        }
    }
}

/* Reads a quantifier if one follows; returns 0 and leaves *lo=*hi=1 if not. */
static int rx_quant(rxgen *x, long *lo, long *hi)
{
    const char *p = x->p;

    *lo = *hi = 1;
    if (p >= x->end)
        return 0;
    if (*p == '*' || *p == '+' || *p == '?') {
        *lo = *p == '+' ? 1 : 0;
        *hi = *p == '?' ? 1 : -1;
        p++;
    } else if (*p == '{') {
        char *e;
        long a, b;

        p++;
        if (p >= x->end || !isdigit((unsigned char)*p))
            return 0;
        a = strtol(p, &e, 10);
        p = e;
        b = a;
        if (p < x->end && *p == ',') {
            p++;
            if (p < x->end && isdigit((unsigned char)*p)) {
                b = strtol(p, &e, 10);
                p = e;
            } else {
                b = -1;
            }
        }
        if (p >= x->end || *p != '}')
            return 0;
        p++;
        *lo = a;
        *hi = b;
    } else {
        return 0;
    }
    if (p < x->end && (*p == '?' || *p == '+'))
        p++; /* lazy / possessive: same strings */
    x->p = p;
    return 1;
}

static void rx_sequence(rxgen *x)
{
    while (!x->fail && x->p < x->end && *x->p != '|' && *x->p != ')') {
        size_t start = x->out.n;
        unsigned char c = (unsigned char)*x->p;
        long lo, hi, count, i;
        size_t alen;

        if (c == '^' || c == '$') {
            x->p++;
            continue;
        }
        if (c == '(') {
            x->p++;
            if (x->p < x->end && *x->p == '?') {
                if (x->p + 1 < x->end && x->p[1] == ':') {
                    x->p += 2;
                } else if (x->p + 2 < x->end && x->p[1] == '<' && x->p[2] != '=' && x->p[2] != '!') {
                    const char *gt = memchr(x->p, '>', (size_t)(x->end - x->p));

                    if (!gt) {
                        x->fail = 1;
                        return;
                    }
                    x->p = gt + 1;
                } else {
                    x->fail = 1; /* lookaround, flags, ... */
                    return;
                }
            }
            rx_alternation(x);
            if (x->fail || x->p >= x->end || *x->p != ')') {
                x->fail = 1;
                return;
            }
            x->p++;
        } else if (c == '[') {
            x->p++;
            rx_class(x);
        } else if (c == '\\') {
            x->p++;
            rx_escape(x, NULL);
        } else if (c == '.') {
            x->p++;
            sb_addc(&x->out, 'a');
        } else if (c == '*' || c == '+' || c == '?') {
            x->fail = 1;
            return;
        } else {
            /* literal, a whole UTF-8 sequence at once */
            size_t n = 1;

            if (c >= 0xC0)
                while (x->p + n < x->end && ((unsigned char)x->p[n] & 0xC0) == 0x80)
                    n++;
            sb_add(&x->out, x->p, n);
            x->p += n;
        }
        if (x->fail)
            return;
        if (!rx_quant(x, &lo, &hi))
            continue;
        if (x->stretch > 0)
            count = hi >= 0 ? hi : (lo > x->stretch ? lo : x->stretch);
        else
            count = lo;
        if (count > 1000)
            count = 1000;
        alen = x->out.n - start;
        if (count == 0) {
            x->out.n = start;
            if (x->out.p)
                x->out.p[start] = '\0';
            continue;
        }
        for (i = 1; i < count && !x->out.oom; i++) {
            sb_reserve(&x->out, alen);
            if (!x->out.oom)
                sb_add(&x->out, x->out.p + start, alen);
        }
    }
}

/* Skips the remaining alternatives (up to the closing paren at this level). */
static void rx_skip_alt(rxgen *x)
{
    int depth = 0, in_class = 0;

    while (x->p < x->end) {
        char c = *x->p;

        if (c == '\\') {
            x->p += 2;
            continue;
        }
        if (in_class) {
            if (c == ']')
                in_class = 0;
        } else if (c == '[') {
            in_class = 1;
        } else if (c == '(') {
            depth++;
        } else if (c == ')') {
            if (depth == 0)
                return;
            depth--;
        }
        x->p++;
    }
    if (x->p > x->end)
        x->p = x->end;
}

static void rx_alternation(rxgen *x)
{
    rx_sequence(x);
    if (!x->fail && x->p < x->end && *x->p == '|')
        rx_skip_alt(x);
}

/* Returns a malloc'd string generated from pat, or NULL. */
static char *rx_generate(const char *pat, long stretch, uint64_t h)
{
    rxgen x;

    memset(&x, 0, sizeof(x));
    x.p = pat;
    x.end = pat + strlen(pat);
    x.stretch = stretch;
    x.h = h;
    sb_reserve(&x.out, 16);
    rx_alternation(&x);
    if (!x.fail && x.p < x.end)
        x.fail = 1; /* unbalanced ')' */
    if (x.fail || x.out.oom) {
        free(x.out.p);
        return NULL;
    }
    return x.out.p;
}

/* ------------------------------------------------------------------------ */
/* schema helpers                                                           */

typedef struct gen {
    const cJSON *root;
    cJSON *tmp;    /* owns every merged schema made while answering */
    uint64_t seed; /* hash of the first user message */
} gen;

static const cJSON *obj_get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static int get_num(const cJSON *o, const char *k, double *out)
{
    const cJSON *v = obj_get(o, k);

    if (!cJSON_IsNumber(v))
        return 0;
    *out = v->valuedouble;
    return 1;
}

static long get_long(const cJSON *o, const char *k, long dflt)
{
    double d;

    if (!get_num(o, k, &d) || d < 0)
        return dflt;
    return d > 1e9 ? 1000000000L : (long)d;
}

/* Resolves a local reference ("#", "#/a/b", with ~0 ~1 and %XX escapes). */
static const cJSON *resolve_ref(const gen *g, const char *ref)
{
    const cJSON *cur = g->root;
    const char *p;
    char seg[256];

    if (!ref || ref[0] != '#')
        return NULL;
    p = ref + 1;
    if (*p == '\0')
        return cur;
    if (*p != '/')
        return NULL; /* plain-name anchors are not supported */
    while (*p == '/') {
        size_t n = 0;

        p++;
        while (*p && *p != '/') {
            char c = *p++;

            if (c == '~' && (*p == '0' || *p == '1')) {
                c = *p == '0' ? '~' : '/';
                p++;
            } else if (c == '%' && isxdigit((unsigned char)p[0]) && isxdigit((unsigned char)p[1])) {
                char hex[3] = {p[0], p[1], 0};

                c = (char)strtol(hex, NULL, 16);
                p += 2;
            }
            if (n + 1 >= sizeof(seg))
                return NULL;
            seg[n++] = c;
        }
        seg[n] = '\0';
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        } else if (cJSON_IsArray(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);

            cur = (*e || i < 0) ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = NULL;
        }
        if (!cur)
            return NULL;
    }
    return cur;
}

static int is_composition_key(const char *k)
{
    return strcmp(k, "$ref") == 0 || strcmp(k, "allOf") == 0 || strcmp(k, "anyOf") == 0 ||
           strcmp(k, "oneOf") == 0;
}

static void replace_ref(cJSON *dst, const char *k, const cJSON *src)
{
    if (cJSON_GetObjectItemCaseSensitive(dst, k))
        cJSON_DeleteItemFromObjectCaseSensitive(dst, k);
    cJSON_AddItemReferenceToObject(dst, k, (cJSON *)src);
}

/* Merges the keywords of schema src into dst (an object owned by the
 * generator).  Children are added as cJSON references, so nothing of the
 * request is copied.  Both constraints hold in allOf, so bounds are
 * tightened and a property defined on both sides becomes an allOf. */
static void merge_in(cJSON *dst, const cJSON *src)
{
    const cJSON *it;

    if (!cJSON_IsObject(src))
        return;
    cJSON_ArrayForEach(it, src) {
        const char *k = it->string;
        cJSON *have;

        if (!k || is_composition_key(k))
            continue;
        have = cJSON_GetObjectItemCaseSensitive(dst, k);
        if (strcmp(k, "properties") == 0 && cJSON_IsObject(it)) {
            const cJSON *p;
            cJSON *props = have;

            if (!props || props->type & cJSON_IsReference) {
                /* Make an owned map so more properties can be added. */
                cJSON *np = cJSON_CreateObject();
                const cJSON *q;

                if (props)
                    cJSON_ArrayForEach(q, props) cJSON_AddItemReferenceToObject(np, q->string, (cJSON *)q);
                if (props)
                    cJSON_DeleteItemFromObjectCaseSensitive(dst, k);
                cJSON_AddItemToObject(dst, k, np);
                props = np;
            }
            cJSON_ArrayForEach(p, it) {
                cJSON *old = cJSON_GetObjectItemCaseSensitive(props, p->string);

                if (old) {
                    cJSON *both = cJSON_CreateObject();
                    cJSON *arr = cJSON_AddArrayToObject(both, "allOf");

                    cJSON_DetachItemViaPointer(props, old);
                    cJSON_AddItemToArray(arr, old);
                    cJSON_AddItemReferenceToArray(arr, (cJSON *)p);
                    cJSON_AddItemToObject(props, p->string, both);
                } else {
                    cJSON_AddItemReferenceToObject(props, p->string, (cJSON *)p);
                }
            }
        } else if (strcmp(k, "required") == 0 && cJSON_IsArray(it)) {
            cJSON *req = have;
            const cJSON *r;

            if (!req || req->type & cJSON_IsReference) {
                cJSON *nr = cJSON_CreateArray();

                if (req)
                    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r))
                        cJSON_AddItemToArray(nr, cJSON_CreateString(r->valuestring));
                if (req)
                    cJSON_DeleteItemFromObjectCaseSensitive(dst, k);
                cJSON_AddItemToObject(dst, k, nr);
                req = nr;
            }
            cJSON_ArrayForEach(r, it) {
                const cJSON *q;
                int dup = 0;

                if (!cJSON_IsString(r))
                    continue;
                cJSON_ArrayForEach(q, req) if (cJSON_IsString(q) && strcmp(q->valuestring, r->valuestring) == 0) dup = 1;
                if (!dup)
                    cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring));
            }
        } else if (!have) {
            cJSON_AddItemReferenceToObject(dst, k, (cJSON *)it);
        } else if (strcmp(k, "type") == 0) {
            if (cJSON_IsString(have) && cJSON_IsString(it) && strcmp(have->valuestring, "number") == 0 &&
                strcmp(it->valuestring, "integer") == 0)
                replace_ref(dst, k, it);
        } else if (cJSON_IsNumber(have) && cJSON_IsNumber(it) &&
                   (strncmp(k, "min", 3) == 0 || strcmp(k, "exclusiveMinimum") == 0)) {
            if (it->valuedouble > have->valuedouble)
                replace_ref(dst, k, it);
        } else if (cJSON_IsNumber(have) && cJSON_IsNumber(it) &&
                   (strncmp(k, "max", 3) == 0 || strcmp(k, "exclusiveMaximum") == 0)) {
            if (it->valuedouble < have->valuedouble)
                replace_ref(dst, k, it);
        } else if (strcmp(k, "additionalProperties") == 0 && cJSON_IsFalse(it)) {
            replace_ref(dst, k, it);
        }
        /* any other keyword: the first one seen wins */
    }
}

/* The schema with $ref / allOf / anyOf / oneOf folded in (anyOf and oneOf
 * contribute their first branch).  Returns s itself when it has none. */
static const cJSON *effective(gen *g, const cJSON *s, int depth)
{
    const cJSON *ref, *all, *any, *one, *it;
    cJSON *m;
    int nkeys = 0;

    if (!cJSON_IsObject(s) || depth > MAX_DEPTH)
        return s;
    ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (!ref && !all && !any && !one)
        return s;
    cJSON_ArrayForEach(it, s) {
        if (strcmp(it->string, "$ref") && strcmp(it->string, "$comment") && strcmp(it->string, "description") &&
            strcmp(it->string, "title") && strcmp(it->string, "$schema") && strcmp(it->string, "$defs") &&
            strcmp(it->string, "definitions") && strcmp(it->string, "$id"))
            nkeys++;
    }
    if (ref && nkeys == 0) {
        /* a plain reference: no merging needed */
        const cJSON *t = cJSON_IsString(ref) ? resolve_ref(g, ref->valuestring) : NULL;

        return t ? effective(g, t, depth + 1) : s;
    }
    m = cJSON_CreateObject();
    if (!m)
        return s;
    cJSON_AddItemToArray(g->tmp, m);
    merge_in(m, s);
    if (cJSON_IsString(ref)) {
        const cJSON *t = resolve_ref(g, ref->valuestring);

        if (t)
            merge_in(m, effective(g, t, depth + 1));
    }
    if (cJSON_IsArray(all)) {
        cJSON_ArrayForEach(it, all) merge_in(m, effective(g, it, depth + 1));
    }
    if (cJSON_IsArray(any) && cJSON_GetArraySize(any) > 0)
        merge_in(m, effective(g, cJSON_GetArrayItem(any, 0), depth + 1));
    if (cJSON_IsArray(one) && cJSON_GetArraySize(one) > 0)
        merge_in(m, effective(g, cJSON_GetArrayItem(one, 0), depth + 1));
    return m;
}

static int has_any(const cJSON *s, const char *const *keys)
{
    for (; *keys; keys++)
        if (obj_get(s, *keys))
            return 1;
    return 0;
}

/* The instance type the generator produces for an (effective) schema. */
static const char *schema_type(const cJSON *s)
{
    static const char *const obj_keys[] = {"properties", "required", "additionalProperties",
                                           "minProperties", "patternProperties", NULL};
    static const char *const arr_keys[] = {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", NULL};
    static const char *const num_keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                           "multipleOf", NULL};
    const cJSON *t = obj_get(s, "type");

    if (cJSON_IsString(t))
        return t->valuestring;
    if (cJSON_IsArray(t) && cJSON_IsString(cJSON_GetArrayItem(t, 0)))
        return cJSON_GetArrayItem(t, 0)->valuestring;
    if (has_any(s, obj_keys))
        return "object";
    if (has_any(s, arr_keys))
        return "array";
    if (has_any(s, num_keys))
        return "number";
    return "string";
}

static int value_has_type(const cJSON *v, const char *t)
{
    if (strcmp(t, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(t, "number") == 0)
        return cJSON_IsNumber(v);
    if (strcmp(t, "integer") == 0)
        return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9e15;
    if (strcmp(t, "boolean") == 0)
        return cJSON_IsBool(v);
    if (strcmp(t, "null") == 0)
        return cJSON_IsNull(v);
    if (strcmp(t, "object") == 0)
        return cJSON_IsObject(v);
    if (strcmp(t, "array") == 0)
        return cJSON_IsArray(v);
    return 0;
}

/* Does v fit the schema's `type` keyword (any type if there is none)? */
static int type_ok(const cJSON *v, const cJSON *s)
{
    const cJSON *t = obj_get(s, "type"), *it;

    if (!t)
        return 1;
    if (cJSON_IsString(t))
        return value_has_type(v, t->valuestring);
    if (cJSON_IsArray(t)) {
        cJSON_ArrayForEach(it, t) if (cJSON_IsString(it) && value_has_type(v, it->valuestring)) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* instance generator                                                       */

static cJSON *gen_value(gen *g, const cJSON *s, int depth, uint64_t h);

static void format_value(const char *fmt, uint64_t h, char *buf, size_t len)
{
    unsigned n = (unsigned)(h % 1000);
    uint64_t h2 = mix64(h);

    if (!strcmp(fmt, "email") || !strcmp(fmt, "idn-email"))
        snprintf(buf, len, "user%u@example.com", n);
    else if (!strcmp(fmt, "date"))
        snprintf(buf, len, "2024-%02u-%02u", 1 + n % 12, 1 + (unsigned)(h2 % 28));
    else if (!strcmp(fmt, "date-time"))
        snprintf(buf, len, "2024-%02u-%02uT%02u:%02u:%02uZ", 1 + n % 12, 1 + (unsigned)(h2 % 28),
                 (unsigned)(h2 >> 8) % 24, (unsigned)(h2 >> 16) % 60, (unsigned)(h2 >> 24) % 60);
    else if (!strcmp(fmt, "time"))
        snprintf(buf, len, "%02u:%02u:%02uZ", n % 24, (unsigned)(h2 >> 16) % 60, (unsigned)(h2 >> 24) % 60);
    else if (!strcmp(fmt, "uri") || !strcmp(fmt, "iri") || !strcmp(fmt, "url"))
        snprintf(buf, len, "https://example.com/items/%u", n);
    else if (!strcmp(fmt, "uri-reference") || !strcmp(fmt, "iri-reference"))
        snprintf(buf, len, "/items/%u", n);
    else if (!strcmp(fmt, "uri-template"))
        snprintf(buf, len, "https://example.com/items/{id}");
    else if (!strcmp(fmt, "uuid"))
        snprintf(buf, len, "%08x-%04x-4%03x-%x%03x-%012" PRIx64, (unsigned)(h >> 32), (unsigned)(h >> 16) & 0xffff,
                 (unsigned)h & 0xfff, 8 + (unsigned)(h2 & 3), (unsigned)(h2 >> 4) & 0xfff,
                 (uint64_t)((h2 >> 16) & 0xffffffffffffull));
    else if (!strcmp(fmt, "ipv4"))
        snprintf(buf, len, "192.0.2.%u", 1 + n % 254);
    else if (!strcmp(fmt, "ipv6"))
        snprintf(buf, len, "2001:db8::%x", 1 + n);
    else if (!strcmp(fmt, "hostname") || !strcmp(fmt, "idn-hostname"))
        snprintf(buf, len, "host%u.example.com", n);
    else if (!strcmp(fmt, "duration"))
        snprintf(buf, len, "P%uD", 1 + n % 30);
    else if (!strcmp(fmt, "regex"))
        snprintf(buf, len, "^[a-z]+$");
    else if (!strcmp(fmt, "json-pointer"))
        snprintf(buf, len, "/items/%u", n % 10);
    else if (!strcmp(fmt, "relative-json-pointer"))
        snprintf(buf, len, "0/items");
    else
        buf[0] = '\0';
}

static size_t utf8_len(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

static int string_fits(const cJSON *s, const char *str)
{
    long minl = get_long(s, "minLength", 0), maxl = get_long(s, "maxLength", -1);
    size_t n = utf8_len(str);
    const cJSON *pat = obj_get(s, "pattern");

    if ((long)n < minl || (maxl >= 0 && (long)n > maxl))
        return 0;
    if (cJSON_IsString(pat) && rx_match(pat->valuestring, str) == 0)
        return 0;
    return 1;
}

static cJSON *gen_string(const cJSON *s, uint64_t h)
{
    const cJSON *fmt = obj_get(s, "format"), *pat = obj_get(s, "pattern");
    long minl = get_long(s, "minLength", 0), maxl = get_long(s, "maxLength", -1);
    char base[128];
    mbuf b = {0};
    cJSON *out;

    if (cJSON_IsString(pat)) {
        /* examples/default were tried by the caller; generate from the
         * expression, first with minimal repetitions, then stretched to
         * reach minLength; then a few generic candidates. */
        static const char *const cands[] = {"mock", "abc", "ABC", "a1", "A1", "123", "x", "mock-1", "a", ""};
        long stretches[3] = {0, minl > 0 ? minl : 3, 8};
        size_t i;

        for (i = 0; i < 3; i++) {
            char *str = rx_generate(pat->valuestring, stretches[i], h);

            if (str && string_fits(s, str)) {
                out = cJSON_CreateString(str);
                free(str);
                return out;
            }
            free(str);
        }
        for (i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
            if (string_fits(s, cands[i]))
                return cJSON_CreateString(cands[i]);
    }
    base[0] = '\0';
    if (cJSON_IsString(fmt))
        format_value(fmt->valuestring, h, base, sizeof(base));
    if (!base[0])
        snprintf(base, sizeof(base), "mock-%06" PRIx64, h & 0xffffff);
    sb_adds(&b, base);
    while (!b.oom && (long)b.n < minl)
        sb_addc(&b, 'x');
    if (b.oom)
        return cJSON_CreateString("");
    if (maxl >= 0 && (long)b.n > maxl)
        b.p[maxl] = '\0';
    out = cJSON_CreateString(b.p);
    free(b.p);
    return out;
}

typedef struct numrange {
    double lo, hi;
    int lo_ex, hi_ex;
    double mult; /* 0: none */
} numrange;

static void num_range(const cJSON *s, numrange *r)
{
    const cJSON *emin = obj_get(s, "exclusiveMinimum"), *emax = obj_get(s, "exclusiveMaximum");
    double v;

    r->lo = -INFINITY;
    r->hi = INFINITY;
    r->lo_ex = r->hi_ex = 0;
    r->mult = 0;
    if (get_num(s, "minimum", &v))
        r->lo = v;
    if (get_num(s, "maximum", &v))
        r->hi = v;
    if (cJSON_IsNumber(emin) && emin->valuedouble >= r->lo) {
        r->lo = emin->valuedouble;
        r->lo_ex = 1;
    } else if (cJSON_IsTrue(emin)) { /* draft-04 */
        r->lo_ex = 1;
    }
    if (cJSON_IsNumber(emax) && emax->valuedouble <= r->hi) {
        r->hi = emax->valuedouble;
        r->hi_ex = 1;
    } else if (cJSON_IsTrue(emax)) {
        r->hi_ex = 1;
    }
    if (get_num(s, "multipleOf", &v) && v > 0)
        r->mult = v;
}

static int num_fits(const numrange *r, double v, int is_int)
{
    if (!isfinite(v))
        return 0;
    if (v < r->lo || (r->lo_ex && v == r->lo) || v > r->hi || (r->hi_ex && v == r->hi))
        return 0;
    if (is_int && v != floor(v))
        return 0;
    if (r->mult > 0) {
        double q = v / r->mult;

        if (q != floor(q))
            return 0;
    }
    return 1;
}

static cJSON *gen_number(const cJSON *s, uint64_t h, int is_int)
{
    numrange r;
    double lo, hi, span, v;
    int i;

    num_range(s, &r);
    lo = isfinite(r.lo) ? r.lo : (isfinite(r.hi) ? r.hi - 100 : 1);
    hi = isfinite(r.hi) ? r.hi : lo + 100;
    if (hi < lo)
        hi = lo;
    if (r.mult > 0) {
        double klo = ceil(lo / r.mult), khi = floor(hi / r.mult);

        span = khi - klo;
        for (i = 0; i < 64 && span >= 0; i++) {
            double k = klo + (span > 0 ? (double)(h % ((uint64_t)fmin(span, 1e9) + 1)) : 0);

            v = k * r.mult;
            if (num_fits(&r, v, is_int))
                return cJSON_CreateNumber(v);
            h = mix64(h);
            if (i > 32)
                span = fmin(span, (double)(i - 32)); /* drift towards klo */
        }
    }
    if (is_int) {
        double ilo = ceil(lo), ihi = floor(hi);

        if (ihi >= ilo) {
            span = fmin(ihi - ilo, 1e12);
            v = ilo + (double)(h % ((uint64_t)span + 1));
            if (num_fits(&r, v, 1))
                return cJSON_CreateNumber(v);
            for (v = ilo; v <= ilo + 2; v++)
                if (num_fits(&r, v, 1))
                    return cJSON_CreateNumber(v);
            if (num_fits(&r, ihi, 1))
                return cJSON_CreateNumber(ihi);
        }
    } else {
        /* one decimal place, so the number looks like a price */
        span = fmin((hi - lo) * 10, 1e12);
        if (span >= 1) {
            v = floor(lo) + (double)(h % ((uint64_t)span + 1)) / 10.0;
            if (num_fits(&r, v, 0))
                return cJSON_CreateNumber(v);
        }
        v = (lo + hi) / 2;
        if (num_fits(&r, v, 0))
            return cJSON_CreateNumber(v);
    }
    /* Fall back to the bounds themselves. */
    if (num_fits(&r, lo, is_int))
        return cJSON_CreateNumber(lo);
    if (num_fits(&r, hi, is_int))
        return cJSON_CreateNumber(hi);
    return cJSON_CreateNumber(is_int ? ceil(lo) : lo);
}

static cJSON *gen_array(gen *g, const cJSON *s, int depth, uint64_t h, int minimal)
{
    const cJSON *prefix = obj_get(s, "prefixItems"), *items = obj_get(s, "items");
    const cJSON *extra = NULL;
    long minn = get_long(s, "minItems", 0), maxn = get_long(s, "maxItems", -1), count, i, npre = 0;
    int unique = cJSON_IsTrue(obj_get(s, "uniqueItems"));
    cJSON *arr = cJSON_CreateArray();

    if (cJSON_IsArray(items)) { /* draft-07 tuple form */
        prefix = items;
        extra = obj_get(s, "additionalItems");
    } else {
        extra = items;
    }
    if (cJSON_IsArray(prefix))
        npre = cJSON_GetArraySize(prefix);
    count = minimal ? minn : (minn > 1 ? minn : 1);
    if (!minimal && npre > count)
        count = npre;
    if (cJSON_IsFalse(extra) && count > npre)
        count = npre;
    if (maxn >= 0 && count > maxn)
        count = maxn;
    if (count > 1000)
        count = 1000;
    for (i = 0; i < count; i++) {
        const cJSON *sub = i < npre ? cJSON_GetArrayItem(prefix, (int)i) : extra;
        uint64_t hi = hash_child(h, (uint64_t)i + 1);
        cJSON *v = gen_value(g, sub, depth + 1, hi);
        int tries;

        for (tries = 0; unique && v && tries < 16; tries++) {
            const cJSON *o;
            int dup = 0;

            cJSON_ArrayForEach(o, arr) if (cJSON_Compare(o, v, 1)) dup = 1;
            if (!dup)
                break;
            cJSON_Delete(v);
            hi = mix64(hi);
            v = gen_value(g, sub, depth + 1, hi);
        }
        if (!v)
            break;
        cJSON_AddItemToArray(arr, v);
    }
    return arr;
}

static cJSON *gen_object(gen *g, const cJSON *s, int depth, uint64_t h, int minimal)
{
    const cJSON *props = obj_get(s, "properties"), *req = obj_get(s, "required");
    const cJSON *addl = obj_get(s, "additionalProperties"), *p;
    long minp = get_long(s, "minProperties", 0), i;
    cJSON *o = cJSON_CreateObject();

    if (cJSON_IsObject(props)) {
        cJSON_ArrayForEach(p, props) {
            int required = 0;
            const cJSON *r;

            if (minimal) {
                cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0) required = 1;
                if (!required)
                    continue;
            }
            cJSON_AddItemToObject(o, p->string, gen_value(g, p, depth + 1, hash_child(h, hash_str(p->string))));
        }
    }
    cJSON_ArrayForEach(p, req) {
        if (!cJSON_IsString(p) || cJSON_GetObjectItemCaseSensitive(o, p->valuestring))
            continue;
        /* required but not declared: additionalProperties says what fits */
        cJSON_AddItemToObject(o, p->valuestring,
                              gen_value(g, cJSON_IsObject(addl) ? addl : NULL, depth + 1,
                                        hash_child(h, hash_str(p->valuestring))));
    }
    for (i = 0; cJSON_GetArraySize(o) < minp && !cJSON_IsFalse(addl) && i < 1000; i++) {
        char name[32];

        snprintf(name, sizeof(name), "extra_%ld", i + 1);
        if (!cJSON_GetObjectItemCaseSensitive(o, name))
            cJSON_AddItemToObject(o, name, gen_value(g, cJSON_IsObject(addl) ? addl : NULL, depth + 1,
                                                     hash_child(h, (uint64_t)i)));
    }
    return o;
}

/* Generates an instance of s.  h mixes the request's seed with the path, so
 * different jobs and different fields get different values. */
static cJSON *gen_value(gen *g, const cJSON *s, int depth, uint64_t h)
{
    const cJSON *c, *en, *ex, *df;
    const char *t;
    int minimal = depth > MAX_DEPTH / 2; /* recursive schemas: only what is required */

    if (depth > MAX_DEPTH)
        return cJSON_CreateNull();
    if (cJSON_IsFalse(s))
        return cJSON_CreateNull();
    if (!cJSON_IsObject(s))
        return cJSON_CreateString("mock");
    s = effective(g, s, depth);
    if ((c = obj_get(s, "const")) != NULL)
        return cJSON_Duplicate(c, 1);
    en = obj_get(s, "enum");
    if (cJSON_IsArray(en) && cJSON_GetArraySize(en) > 0) {
        int n = cJSON_GetArraySize(en);

        return cJSON_Duplicate(cJSON_GetArrayItem(en, (int)(h % (uint64_t)n)), 1);
    }
    ex = obj_get(s, "examples");
    if (cJSON_IsArray(ex) && cJSON_GetArraySize(ex) > 0 && type_ok(ex->child, s) &&
        (!cJSON_IsString(ex->child) || string_fits(s, ex->child->valuestring)))
        return cJSON_Duplicate(ex->child, 1);
    df = obj_get(s, "default");
    if (df && type_ok(df, s) && (!cJSON_IsString(df) || string_fits(s, df->valuestring)))
        return cJSON_Duplicate(df, 1);
    t = schema_type(s);
    if (!strcmp(t, "object"))
        return gen_object(g, s, depth, h, minimal);
    if (!strcmp(t, "array"))
        return gen_array(g, s, depth, h, minimal);
    if (!strcmp(t, "integer"))
        return gen_number(s, h, 1);
    if (!strcmp(t, "number"))
        return gen_number(s, h, 0);
    if (!strcmp(t, "boolean"))
        return cJSON_CreateBool((h >> 7) & 1);
    if (!strcmp(t, "null"))
        return cJSON_CreateNull();
    return gen_string(s, h);
}

/* ------------------------------------------------------------------------ */
/* defects                                                                  */

enum defect {
    D_NONE,
    D_MISSING_FIELD,
    D_WRONG_TYPE,
    D_INVALID_VALUE,
    D_EXTRA_FIELD,
    D_NOT_JSON,
    D_FENCED,
    D_PROSE,
    D_REFUSAL,
    D_EMPTY,
    D_TRUNCATED,
    D_NUL_CHAR,
    D_NUL_TEXT
};

static const char *const defect_names[] = {"",       "missing_field", "wrong_type", "invalid_value",
                                           "extra_field", "not_json", "fenced",     "prose",
                                           "refusal", "empty",    "truncated",  "nul_char", "nul_text"};

typedef struct directives {
    enum defect defect;
    long until; /* -1: every attempt */
    char field[256];
    int repair;
    long latency_ms, jitter_ms; /* -1: not given */
    int http;
    int quota;
    long times; /* -1: every call */
    long retry_after, retry_after_ms;
    char should_retry[8];
    char answer[768]; /* answer_b64, decoded; "" = none */
    int hang;
    long tool_calls; /* 0: not given (one call when a tool is forced) */
    int bad; /* an unknown key or value: answered 400 so tests notice */
    char bad_what[96];
} directives;

static int parse_dir_long(const char *v, long *out)
{
    char *e;
    long x;

    errno = 0;
    x = strtol(v, &e, 10);
    if (errno || e == v || *e || x < 0)
        return -1;
    *out = x;
    return 0;
}

/* Standard base64 (padding optional) into out (NUL-terminated); -1 on a
 * bad character or when it does not fit. */
static int b64_decode(const char *in, char *out, size_t cap)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned acc = 0;
    int bits = 0;
    size_t n = 0;

    for (; *in && *in != '='; in++) {
        const char *c = strchr(abc, *in);

        if (!c)
            return -1;
        acc = (acc << 6) | (unsigned)(c - abc);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n + 1 >= cap)
                return -1;
            out[n++] = (char)((acc >> bits) & 0xFF);
        }
    }
    out[n] = '\0';
    return 0;
}

static void directives_parse(const char *text, directives *d)
{
    const char *p, *end;

    memset(d, 0, sizeof(*d));
    d->until = d->latency_ms = d->jitter_ms = d->times = d->retry_after = d->retry_after_ms = -1;
    d->repair = 1;
    if (!text || !(p = strstr(text, "[[mock")))
        return;
    p += 6;
    end = strstr(p, "]]");
    if (!end)
        end = p + strlen(p);
    while (p < end) {
        char key[32], val[1024];
        const char *tok, *eq;
        size_t kl, vl;
        long n = 0;

        while (p < end && isspace((unsigned char)*p))
            p++;
        if (p >= end)
            break;
        tok = p;
        while (p < end && !isspace((unsigned char)*p))
            p++;
        eq = memchr(tok, '=', (size_t)(p - tok));
        if (!eq || (kl = (size_t)(eq - tok)) >= sizeof(key) || (vl = (size_t)(p - eq - 1)) >= sizeof(val)) {
            d->bad = 1;
            snprintf(d->bad_what, sizeof(d->bad_what), "bad token %.*s", (int)(p - tok > 60 ? 60 : p - tok), tok);
            continue;
        }
        memcpy(key, tok, kl);
        key[kl] = '\0';
        memcpy(val, eq + 1, vl);
        val[vl] = '\0';
        if (!strcmp(key, "defect")) {
            size_t i;

            d->defect = D_NONE;
            for (i = 1; i < sizeof(defect_names) / sizeof(defect_names[0]); i++)
                if (!strcmp(val, defect_names[i]))
                    d->defect = (enum defect)i;
            if (d->defect == D_NONE)
                goto bad;
        } else if (!strcmp(key, "answer_b64")) {
            if (b64_decode(val, d->answer, sizeof(d->answer)))
                goto bad;
        } else if (!strcmp(key, "field")) {
            snprintf(d->field, sizeof(d->field), "%.255s", val);
        } else if (!strcmp(key, "repair")) {
            d->repair = strcmp(val, "0") != 0 && strcmp(val, "off") != 0 && strcmp(val, "false") != 0;
        } else if (!strcmp(key, "should_retry")) {
            if (!strcmp(val, "true"))
                strcpy(d->should_retry, "true");
            else if (!strcmp(val, "false"))
                strcpy(d->should_retry, "false");
            else
                goto bad;
        } else {
            if (parse_dir_long(val, &n))
                goto bad;
            if (!strcmp(key, "until"))
                d->until = n;
            else if (!strcmp(key, "latency_ms"))
                d->latency_ms = n;
            else if (!strcmp(key, "jitter_ms"))
                d->jitter_ms = n;
            else if (!strcmp(key, "http")) {
                if (n < 100 || n > 599)
                    goto bad;
                d->http = (int)n;
            } else if (!strcmp(key, "times"))
                d->times = n;
            else if (!strcmp(key, "retry_after"))
                d->retry_after = n;
            else if (!strcmp(key, "retry_after_ms"))
                d->retry_after_ms = n;
            else if (!strcmp(key, "hang"))
                d->hang = n != 0;
            else if (!strcmp(key, "quota"))
                d->quota = n != 0;
            else if (!strcmp(key, "tool_calls")) {
                if (n < 1 || n > 16)
                    goto bad;
                d->tool_calls = n;
            } else
                goto bad;
        }
        continue;
bad:
        d->bad = 1;
        snprintf(d->bad_what, sizeof(d->bad_what), "bad directive %.40s=%.40s", key, val);
    }
}

/* A JSON pointer from a field= path ("a/b" -> "/a/b"), escaping ~ only:
 * "/" already separates the segments. */
static void field_pointer(const char *field, char *out, size_t len)
{
    size_t n = 0;

    if (len < 2)
        return;
    out[n++] = '/';
    for (; *field && n + 3 < len; field++) {
        if (*field == '~') {
            out[n++] = '~';
            out[n++] = '0';
        } else {
            out[n++] = *field;
        }
    }
    out[n] = '\0';
}

/* Finds the value at the field path ("a/b") in inst: its parent and key. */
static cJSON *locate(cJSON *inst, const char *field, cJSON **parent)
{
    char seg[256];
    const char *p = field;
    cJSON *cur = inst;

    *parent = NULL;
    while (cur && *p) {
        size_t n = 0;

        while (*p && *p != '/' && n + 1 < sizeof(seg))
            seg[n++] = *p++;
        seg[n] = '\0';
        if (*p == '/')
            p++;
        *parent = cur;
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        } else if (cJSON_IsArray(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);

            cur = (*e || i < 0) ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = NULL;
        }
    }
    return cur;
}

/* The effective schema at a field path, following the same rules as the
 * generator. */
static const cJSON *schema_at(gen *g, const cJSON *root_eff, const char *field)
{
    char seg[256];
    const char *p = field;
    const cJSON *s = root_eff;

    while (s && *p) {
        size_t n = 0;
        const cJSON *props, *sub = NULL;

        while (*p && *p != '/' && n + 1 < sizeof(seg))
            seg[n++] = *p++;
        seg[n] = '\0';
        if (*p == '/')
            p++;
        props = obj_get(s, "properties");
        if (props)
            sub = cJSON_GetObjectItemCaseSensitive(props, seg);
        if (!sub && cJSON_IsObject(obj_get(s, "additionalProperties")))
            sub = obj_get(s, "additionalProperties");
        if (!sub && isdigit((unsigned char)seg[0])) {
            const cJSON *pre = obj_get(s, "prefixItems"), *items = obj_get(s, "items");
            long i = strtol(seg, NULL, 10);

            if (cJSON_IsArray(items))
                pre = items;
            sub = cJSON_IsArray(pre) ? cJSON_GetArrayItem(pre, (int)i) : NULL;
            if (!sub && cJSON_IsObject(items))
                sub = items;
        }
        s = sub ? effective(g, sub, 1) : NULL;
    }
    return s;
}

/* The first string value in v, depth first (the nul_char defect). */
static cJSON *first_string(cJSON *v)
{
    if (cJSON_IsString(v))
        return v;
    for (cJSON *c = v ? v->child : NULL; c; c = c->next) {
        cJSON *s = first_string(c);
        if (s)
            return s;
    }
    return NULL;
}

#define NUL_MARK "@@nul-char@@"

/* Turns the first NUL_MARK in s (printed as it is, being plain ASCII)
 * into the escape \u0000, in place: the nul_char and nul_text defects. */
static void nul_mark_to_escape(char *s)
{
    char *m = s ? strstr(s, NUL_MARK) : NULL;

    if (!m)
        return;
    memcpy(m, "\\u0000", 6);
    memmove(m + 6, m + strlen(NUL_MARK), strlen(m + strlen(NUL_MARK)) + 1);
}

/* A value of another type than v (the wrong_type defect). */
static cJSON *wrong_type_value(const cJSON *v)
{
    if (cJSON_IsString(v))
        return cJSON_CreateNumber(12345);
    if (cJSON_IsNumber(v))
        return cJSON_CreateString("not a number");
    if (cJSON_IsBool(v))
        return cJSON_CreateString("yes");
    if (cJSON_IsArray(v))
        return cJSON_CreateObject();
    if (cJSON_IsObject(v))
        return cJSON_CreateString("object");
    return cJSON_CreateNumber(0);
}

/* A value of the schema's type that breaks one of its constraints, or NULL
 * when it has none of enum/const/pattern/format/minimum/maximum/
 * exclusiveMinimum/exclusiveMaximum/minLength/maxLength. */
static cJSON *invalid_value_for(const cJSON *s)
{
    const cJSON *en = obj_get(s, "enum"), *cn = obj_get(s, "const"), *pat = obj_get(s, "pattern");
    const cJSON *fmt = obj_get(s, "format"), *it;
    int is_int = !strcmp(schema_type(s), "integer");
    double v;

    if (cJSON_IsArray(en) && cJSON_GetArraySize(en) > 0) {
        if (cJSON_IsNumber(en->child)) {
            double mx = -INFINITY;

            cJSON_ArrayForEach(it, en) if (cJSON_IsNumber(it) && it->valuedouble > mx) mx = it->valuedouble;
            return cJSON_CreateNumber(floor(mx) + 1);
        } else {
            char buf[64] = "invalid-enum-value";
            int clash;

            do {
                clash = 0;
                cJSON_ArrayForEach(it, en) if (cJSON_IsString(it) && !strcmp(it->valuestring, buf)) clash = 1;
                if (clash)
                    strncat(buf, "x", sizeof(buf) - strlen(buf) - 1);
            } while (clash && strlen(buf) < sizeof(buf) - 1);
            return cJSON_CreateString(buf);
        }
    }
    if (cn) {
        if (cJSON_IsString(cn)) {
            mbuf b = {0};
            cJSON *o;

            sb_adds(&b, cn->valuestring);
            sb_adds(&b, "-invalid");
            o = cJSON_CreateString(b.p ? b.p : "invalid-const");
            free(b.p);
            return o;
        }
        if (cJSON_IsNumber(cn))
            return cJSON_CreateNumber(cn->valuedouble + 1);
        if (cJSON_IsBool(cn))
            return cJSON_CreateBool(!cJSON_IsTrue(cn));
        return cJSON_CreateString("invalid-const");
    }
    if (cJSON_IsString(pat)) {
        static const char *const cands[] = {"!!", "invalid value", "", "0", "zzzz", "-", "A", "~ ~"};
        size_t i;

        for (i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
            if (rx_match(pat->valuestring, cands[i]) == 0)
                return cJSON_CreateString(cands[i]);
    }
    if (cJSON_IsString(fmt))
        return cJSON_CreateString("not a valid value");
    if (get_num(s, "minimum", &v))
        return cJSON_CreateNumber(is_int ? ceil(v) - 1 : v - 1);
    if (get_num(s, "exclusiveMinimum", &v))
        return cJSON_CreateNumber(is_int ? floor(v) : v);
    if (get_num(s, "maximum", &v))
        return cJSON_CreateNumber(is_int ? floor(v) + 1 : v + 1);
    if (get_num(s, "exclusiveMaximum", &v))
        return cJSON_CreateNumber(is_int ? ceil(v) : v);
    {
        long minl = get_long(s, "minLength", 0), maxl = get_long(s, "maxLength", -1);

        if (minl > 0 || (maxl >= 0 && maxl < 100000)) {
            long n = minl > 0 ? minl - 1 : maxl + 1, i;
            char *str = malloc((size_t)n + 1);
            cJSON *o;

            if (!str)
                return NULL;
            for (i = 0; i < n; i++)
                str[i] = 'x';
            str[n] = '\0';
            o = cJSON_CreateString(str);
            free(str);
            return o;
        }
    }
    return NULL;
}

static void put_value(cJSON *parent, const char *field, cJSON *v)
{
    const char *slash = strrchr(field, '/');
    const char *key = slash ? slash + 1 : field;

    if (cJSON_IsObject(parent)) {
        if (cJSON_GetObjectItemCaseSensitive(parent, key))
            cJSON_ReplaceItemInObjectCaseSensitive(parent, key, v);
        else
            cJSON_AddItemToObject(parent, key, v);
    } else if (cJSON_IsArray(parent)) {
        int i = atoi(key);

        if (i < cJSON_GetArraySize(parent))
            cJSON_ReplaceItemInArray(parent, i, v);
        else
            cJSON_AddItemToArray(parent, v);
    } else {
        cJSON_Delete(v);
    }
}

/* Applies a structural defect to inst.  ptr receives the violated JSON
 * pointer (what the repair rule looks for). */
static void apply_defect(gen *g, cJSON *inst, const cJSON *root_eff, const directives *d, char *ptr,
                         size_t ptrlen)
{
    char field[256] = "";
    cJSON *parent = NULL, *target = NULL;

    ptr[0] = '\0';
    if (d->defect == D_EXTRA_FIELD) {
        if (cJSON_IsObject(inst))
            cJSON_AddTrueToObject(inst, "unexpected_field");
        snprintf(ptr, ptrlen, "/unexpected_field");
        return;
    }
    if (!cJSON_IsObject(inst))
        return; /* a non-object root has no field to break: left valid */
    if (d->field[0]) {
        snprintf(field, sizeof(field), "%s", d->field);
        target = locate(inst, field, &parent);
    }
    if (!target) {
        /* default field (also when field= names nothing in the answer):
         * first required, else first property, else first key */
        const cJSON *req = obj_get(root_eff, "required"), *props = obj_get(root_eff, "properties");

        if (cJSON_IsArray(req) && cJSON_IsString(req->child))
            snprintf(field, sizeof(field), "%s", req->child->valuestring);
        else if (cJSON_IsObject(props) && props->child)
            snprintf(field, sizeof(field), "%s", props->child->string);
        else if (inst->child)
            snprintf(field, sizeof(field), "%s", inst->child->string);
        else
            field[0] = '\0';
        target = locate(inst, field, &parent);
    }
    if (!field[0])
        return;
    field_pointer(field, ptr, ptrlen);
    switch (d->defect) {
    case D_MISSING_FIELD:
        if (target)
            cJSON_Delete(cJSON_DetachItemViaPointer(parent, target));
        break;
    case D_WRONG_TYPE:
        if (target)
            put_value(parent, field, wrong_type_value(target));
        break;
    case D_INVALID_VALUE: {
        const cJSON *fs = schema_at(g, root_eff, field);
        cJSON *bad = fs ? invalid_value_for(fs) : NULL;

        if (!bad) {
            /* the field has no constraint: break the first property that has */
            const cJSON *props = obj_get(root_eff, "properties"), *p;

            cJSON_ArrayForEach(p, props) {
                bad = invalid_value_for(effective(g, p, 1));
                if (bad) {
                    snprintf(field, sizeof(field), "%s", p->string);
                    field_pointer(field, ptr, ptrlen);
                    parent = inst;
                    break;
                }
            }
        }
        if (bad) {
            put_value(parent ? parent : inst, field, bad);
        } else if (target) {
            put_value(parent, field, wrong_type_value(target)); /* nothing to break: wrong type */
        }
        break;
    }
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* request parsing                                                          */

enum api { API_OPENAI, API_ANTHROPIC };

/* Appends the text of a message content (string or blocks) to b. */
static void content_text(const cJSON *c, mbuf *b)
{
    const cJSON *it;

    if (cJSON_IsString(c)) {
        sb_adds(b, c->valuestring);
        return;
    }
    cJSON_ArrayForEach(it, c) {
        const cJSON *t = obj_get(it, "text");

        if (cJSON_IsString(t)) {
            if (b->n)
                sb_addc(b, '\n');
            sb_adds(b, t->valuestring);
        } else if (cJSON_IsString(it)) {
            sb_adds(b, it->valuestring);
        }
    }
}

typedef struct chat {
    mbuf first_user, last_user, system_schema_src;
    size_t content_bytes;
    int attempt;
    int have_user;
} chat;

static void chat_free(chat *c)
{
    free(c->first_user.p);
    free(c->last_user.p);
    free(c->system_schema_src.p);
}

static void chat_read(const cJSON *req, enum api api, chat *c)
{
    const cJSON *msgs = obj_get(req, "messages"), *m;
    int have_sys = 0;

    memset(c, 0, sizeof(*c));
    c->attempt = 1;
    if (api == API_ANTHROPIC) {
        const cJSON *sys = obj_get(req, "system");

        if (sys) {
            content_text(sys, &c->system_schema_src);
            c->content_bytes += c->system_schema_src.n;
            have_sys = strstr(c->system_schema_src.p ? c->system_schema_src.p : "", "JSON Schema:") != NULL;
        }
    }
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = obj_get(m, "role");
        mbuf t = {0};

        content_text(obj_get(m, "content"), &t);
        c->content_bytes += t.n;
        if (!cJSON_IsString(role)) {
            free(t.p);
            continue;
        }
        if (!strcmp(role->valuestring, "assistant")) {
            c->attempt++;
        } else if (!strcmp(role->valuestring, "user")) {
            if (!c->have_user) {
                c->have_user = 1;
                sb_add(&c->first_user, t.p ? t.p : "", t.n);
            }
            c->last_user.n = 0;
            sb_add(&c->last_user, t.p ? t.p : "", t.n);
        } else if ((!strcmp(role->valuestring, "system") || !strcmp(role->valuestring, "developer")) &&
                   !have_sys && t.p && strstr(t.p, "JSON Schema:")) {
            have_sys = 1;
            c->system_schema_src.n = 0;
            sb_add(&c->system_schema_src, t.p, t.n);
        }
        free(t.p);
    }
    if (!c->first_user.p)
        sb_adds(&c->first_user, "");
    if (!c->last_user.p)
        sb_adds(&c->last_user, "");
}

/* The request's schema: a duplicate owned by the caller, or NULL. */
static cJSON *find_schema(const cJSON *req, enum api api, const chat *c)
{
    const cJSON *s = NULL;
    const char *src = c->system_schema_src.p, *at;

    if (api == API_OPENAI)
        s = obj_get(obj_get(obj_get(req, "response_format"), "json_schema"), "schema");
    else if (!(s = obj_get(obj_get(obj_get(req, "output_config"), "format"), "schema")))
        s = obj_get(obj_get(req, "output_format"), "schema"); /* the beta form */
    if (cJSON_IsObject(s) || cJSON_IsBool(s))
        return cJSON_Duplicate(s, 1);
    if (src && (at = strstr(src, "JSON Schema:")) != NULL) {
        const char *end = NULL;

        at += strlen("JSON Schema:");
        while (isspace((unsigned char)*at))
            at++;
        return cJSON_ParseWithOpts(at, &end, 0);
    }
    return NULL;
}

/* The tool a request forces the model to call (the header's "Forced
 * tools").  With it, a real model answers with a call of that tool, its
 * arguments held to the tool's schema, and never with text. */
typedef struct forced_tool {
    const char *name;    /* NULL: no tool forced, the answer is text */
    const cJSON *schema; /* its parameters / input_schema; may be NULL */
    int named;           /* tool_choice named it ("required"/"any" did not) */
} forced_tool;

/* A tool's name and schema, or NULL for a tool the mock does not call:
 * OpenAI's other kinds (custom), Anthropic's server tools (a type other
 * than custom: web_search_..., bash_...). */
static const char *tool_name(const cJSON *t, enum api api, const cJSON **schema)
{
    const cJSON *type = obj_get(t, "type"), *fn = t, *name;

    if (api == API_OPENAI) {
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return NULL;
        fn = obj_get(t, "function");
    } else if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom"))) {
        return NULL;
    }
    name = obj_get(fn, "name");
    *schema = obj_get(fn, api == API_OPENAI ? "parameters" : "input_schema");
    return cJSON_IsString(name) ? name->valuestring : NULL;
}

/* Reads the tool req forces into *ft.  -1, with the message into err, for
 * tools or a tool_choice the API refuses with 400 (so a client that
 * sends them wrong fails here as it would there). */
static int forced_tool_read(const cJSON *req, enum api api, forced_tool *ft, char *err, size_t errlen)
{
    const cJSON *tools = obj_get(req, "tools"), *choice = obj_get(req, "tool_choice"), *t, *type, *name;
    const char *want = NULL; /* the tool tool_choice names; NULL: any */
    int i = 0;

    memset(ft, 0, sizeof(*ft));
    if (cJSON_IsNull(tools))
        tools = NULL;
    if (cJSON_IsNull(choice))
        choice = NULL;
    if (tools && !cJSON_IsArray(tools)) {
        snprintf(err, errlen, "%s", api == API_OPENAI ? "Invalid type for 'tools': expected an array."
                                                      : "tools: Input should be a valid list");
        return -1;
    }
    if (api == API_OPENAI && tools && !tools->child) {
        snprintf(err, errlen, "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an "
                              "empty array instead.");
        return -1;
    }
    cJSON_ArrayForEach(t, tools) {
        type = obj_get(t, "type");
        if (!cJSON_IsObject(t)) {
            snprintf(err, errlen, api == API_OPENAI ? "Invalid type for 'tools[%d]': expected an object."
                                                    : "tools.%d: Input should be a valid dictionary", i);
            return -1;
        }
        if (api == API_OPENAI) {
            if (!cJSON_IsString(type)) {
                snprintf(err, errlen, "Missing required parameter: 'tools[%d].type'.", i);
                return -1;
            }
            if (!strcmp(type->valuestring, "function") &&
                !cJSON_IsString(obj_get(obj_get(t, "function"), "name"))) {
                snprintf(err, errlen, "Missing required parameter: 'tools[%d].function.name'.", i);
                return -1;
            }
        } else if (!type || (cJSON_IsString(type) && !strcmp(type->valuestring, "custom"))) {
            if (!cJSON_IsString(obj_get(t, "name"))) {
                snprintf(err, errlen, "tools.%d.custom.name: Field required", i);
                return -1;
            }
            if (!cJSON_IsObject(obj_get(t, "input_schema"))) {
                snprintf(err, errlen, "tools.%d.custom.input_schema: Field required", i);
                return -1;
            }
        }
        i++;
    }
    if (!choice)
        return 0;
    if (api == API_OPENAI) {
        if (!tools) {
            snprintf(err, errlen, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
                                  "specified.");
            return -1;
        }
        if (cJSON_IsString(choice)) {
            if (!strcmp(choice->valuestring, "none") || !strcmp(choice->valuestring, "auto"))
                return 0;
            if (strcmp(choice->valuestring, "required")) {
                snprintf(err, errlen, "Invalid value: '%.60s'. Supported values are: 'none', 'auto', and "
                                      "'required'.", choice->valuestring);
                return -1;
            }
        } else if (cJSON_IsObject(choice)) {
            type = obj_get(choice, "type");
            if (!cJSON_IsString(type)) {
                snprintf(err, errlen, "Missing required parameter: 'tool_choice.type'.");
                return -1;
            }
            if (strcmp(type->valuestring, "function"))
                return 0; /* allowed_tools, custom: not modelled, answered in text */
            name = obj_get(obj_get(choice, "function"), "name");
            if (!cJSON_IsString(name)) {
                snprintf(err, errlen, "Missing required parameter: 'tool_choice.function.name'.");
                return -1;
            }
            want = name->valuestring;
        } else {
            snprintf(err, errlen, "Invalid type for 'tool_choice': expected one of a string or an object.");
            return -1;
        }
    } else {
        type = obj_get(choice, "type");
        if (!cJSON_IsString(type)) {
            snprintf(err, errlen, "tool_choice.type: Field required");
            return -1;
        }
        if (!strcmp(type->valuestring, "auto") || !strcmp(type->valuestring, "none"))
            return 0;
        if (!strcmp(type->valuestring, "tool")) {
            name = obj_get(choice, "name");
            if (!cJSON_IsString(name)) {
                snprintf(err, errlen, "tool_choice.tool.name: Field required");
                return -1;
            }
            want = name->valuestring;
        } else if (strcmp(type->valuestring, "any")) {
            snprintf(err, errlen, "tool_choice: Input tag '%.40s' found using 'type' does not match any of the "
                                  "expected tags: 'auto', 'any', 'tool', 'none'", type->valuestring);
            return -1;
        }
        if (!tools) {
            snprintf(err, errlen, "tool_choice: a tool_choice that forces tool use needs tools");
            return -1;
        }
    }
    cJSON_ArrayForEach(t, tools) {
        const cJSON *schema = NULL;
        const char *n = tool_name(t, api, &schema);

        if (n && (!want || !strcmp(n, want))) {
            ft->name = n;
            ft->schema = schema;
            ft->named = want != NULL;
            break;
        }
    }
    if (want && !ft->name) {
        snprintf(err, errlen, "tool_choice: no tool named '%.100s' in tools", want);
        return -1;
    }
    /* As Anthropic: extended thinking cannot be forced into a tool call */
    if (api == API_ANTHROPIC && ft->name) {
        type = obj_get(obj_get(req, "thinking"), "type");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "enabled")) {
            snprintf(err, errlen, "Thinking may not be enabled when tool_choice forces tool use.");
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* answers                                                                  */

typedef struct answer {
    unsigned status;
    char *body; /* malloc'd */
    long delay_ms;
    int hang;
    char retry_after[24], retry_after_ms[24], should_retry[8];
    char job[128];
    int attempt;
    char defect[24];
} answer;

static void error_body(answer *a, enum api api, unsigned status, const char *msg)
{
    const char *oa_type = "invalid_request_error", *oa_code = NULL, *an_type = "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *e;

    switch (status) {
    case 400: oa_code = "context_length_exceeded"; break;
    case 401: oa_code = "invalid_api_key"; an_type = "authentication_error"; break;
    case 403: oa_code = "permission_denied"; an_type = "permission_error"; break;
    case 404: oa_code = "not_found"; an_type = "not_found_error"; break;
    case 408: oa_type = "timeout"; oa_code = "timeout"; an_type = "timeout_error"; break;
    case 409: oa_type = "conflict"; oa_code = "conflict"; an_type = "conflict_error"; break;
    case 413: oa_code = "request_too_large"; an_type = "request_too_large"; break;
    case 429: oa_type = "requests"; oa_code = "rate_limit_exceeded"; an_type = "rate_limit_error"; break;
    case 529: oa_type = "overloaded_error"; oa_code = "overloaded"; an_type = "overloaded_error"; break;
    default:
        if (status >= 500) {
            oa_type = "server_error";
            oa_code = status == 503 ? "service_unavailable" : "server_error";
            an_type = status == 503 ? "overloaded_error" : "api_error";
        }
        break;
    }
    a->status = status;
    if (api == API_ANTHROPIC) {
        cJSON_AddStringToObject(o, "type", "error");
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "type", an_type);
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(o, "request_id", "req_mock");
    } else {
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", oa_type);
        cJSON_AddNullToObject(e, "param");
        if (oa_code)
            cJSON_AddStringToObject(e, "code", oa_code);
        else
            cJSON_AddNullToObject(e, "code");
    }
    free(a->body);
    a->body = jsonout_print(o);
    cJSON_Delete(o);
}

/* The account's quota or credit spent, as each provider says it. */
static void quota_body(answer *a, enum api api)
{
    cJSON *o = cJSON_CreateObject(), *e;

    if (api == API_ANTHROPIC) {
        a->status = 400;
        cJSON_AddStringToObject(o, "type", "error");
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "type", "invalid_request_error");
        cJSON_AddStringToObject(e, "message", "Your credit balance is too low to access the Anthropic API. Please go "
                                              "to Plans & Billing to upgrade or purchase credits. (mock)");
        cJSON_AddStringToObject(o, "request_id", "req_mock");
    } else {
        a->status = 429;
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", "You exceeded your current quota, please check your plan and billing "
                                              "details. (mock)");
        cJSON_AddStringToObject(e, "type", "insufficient_quota");
        cJSON_AddNullToObject(e, "param");
        cJSON_AddStringToObject(e, "code", "insufficient_quota");
    }
    free(a->body);
    a->body = jsonout_print(o);
    cJSON_Delete(o);
}

/* A 400 that is a plain bad request, not context_length_exceeded. */
static void plain_invalid_request(answer *a, enum api api)
{
    cJSON *o = a->body ? cJSON_Parse(a->body) : NULL;
    cJSON *e = o ? cJSON_GetObjectItemCaseSensitive(o, "error") : NULL;

    if (api == API_OPENAI && e)
        cJSON_ReplaceItemInObjectCaseSensitive(e, "code", cJSON_CreateNull());
    if (o) {
        free(a->body);
        a->body = jsonout_print(o);
        cJSON_Delete(o);
    }
}

static const char *status_message(unsigned status)
{
    switch (status) {
    case 400: return "This model's maximum context length is 128000 tokens (mock).";
    case 401: return "Incorrect API key provided (mock).";
    case 404: return "Not found (mock).";
    case 413: return "Request too large (mock).";
    case 429: return "Rate limit reached for requests (mock).";
    case 529: return "Overloaded";
    default: return status >= 500 ? "The server had an error while processing your request (mock)."
                                  : "Mock error.";
    }
}

static long tokens(size_t bytes)
{
    return (long)((bytes + 3) / 4);
}

/* How the answer goes out when the request forces a tool: ft->name NULL
 * (or a refusal) as text; else `calls` calls of it, OpenAI's arguments
 * being the text, Anthropic's input the object `input` (NULL: the answer
 * is no object, and goes out as text). */
typedef struct tool_out {
    const forced_tool *ft;
    int calls;
    const cJSON *input;
} tool_out;

/* The calls of an answer to a forced tool, into o (the message / the
 * Messages response).  0, or -1 out of memory. */
static int tool_calls_add(cJSON *o, enum api api, const tool_out *to, const char *text, unsigned long long id)
{
    cJSON *list = cJSON_AddArrayToObject(o, api == API_ANTHROPIC ? "content" : "tool_calls");
    char idbuf[64];
    int i;

    if (!list)
        return -1;
    for (i = 0; i < to->calls; i++) {
        cJSON *call = cJSON_CreateObject(), *fn;

        if (!call)
            return -1;
        cJSON_AddItemToArray(list, call);
        if (api == API_ANTHROPIC) {
            cJSON *input = cJSON_Duplicate(to->input, 1);

            snprintf(idbuf, sizeof(idbuf), "toolu_mock%016llx%02d", id, i);
            if (!input || !cJSON_AddStringToObject(call, "type", "tool_use") ||
                !cJSON_AddStringToObject(call, "id", idbuf) || !cJSON_AddStringToObject(call, "name", to->ft->name)) {
                cJSON_Delete(input);
                return -1;
            }
            if (!cJSON_AddItemToObject(call, "input", input)) {
                cJSON_Delete(input);
                return -1;
            }
        } else {
            snprintf(idbuf, sizeof(idbuf), "call_mock%016llx%02d", id, i);
            if (!cJSON_AddStringToObject(call, "id", idbuf) || !cJSON_AddStringToObject(call, "type", "function") ||
                !(fn = cJSON_AddObjectToObject(call, "function")) ||
                !cJSON_AddStringToObject(fn, "name", to->ft->name) || !cJSON_AddStringToObject(fn, "arguments", text))
                return -1;
        }
    }
    return 0;
}

static void success_body(answer *a, enum api api, const cJSON *req, const char *text, int refusal,
                         int cut, size_t prompt_bytes, const tool_out *to)
{
    const cJSON *model = obj_get(req, "model");
    const char *mname = cJSON_IsString(model) ? model->valuestring : "mock-model";
    unsigned long long id = atomic_fetch_add(&g_id_counter, 1) + 1;
    /* a call of a forced tool: never a refusal; Anthropic's only when its
     * input is an object */
    int tool = to && to->ft->name && !refusal && (api == API_OPENAI || to->input);
    long pt = tokens(prompt_bytes), ct = tokens(strlen(text) * (size_t)(tool ? to->calls : 1));
    char idbuf[48];
    cJSON *o = cJSON_CreateObject(), *u;

    a->status = 200;
    if (api == API_ANTHROPIC) {
        cJSON *content, *blk;

        snprintf(idbuf, sizeof(idbuf), "msg_mock%016llx", id);
        cJSON_AddStringToObject(o, "id", idbuf);
        cJSON_AddStringToObject(o, "type", "message");
        cJSON_AddStringToObject(o, "role", "assistant");
        cJSON_AddStringToObject(o, "model", mname);
        if (tool) {
            if (tool_calls_add(o, api, to, text, id))
                goto oom;
        } else {
            content = cJSON_AddArrayToObject(o, "content");
            blk = cJSON_CreateObject();
            cJSON_AddStringToObject(blk, "type", "text");
            cJSON_AddStringToObject(blk, "text", text);
            cJSON_AddItemToArray(content, blk);
        }
        cJSON_AddStringToObject(o, "stop_reason",
                                refusal ? "refusal" : cut ? "max_tokens" : tool ? "tool_use" : "end_turn");
        cJSON_AddNullToObject(o, "stop_sequence");
        u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", (double)pt);
        cJSON_AddNumberToObject(u, "output_tokens", (double)ct);
    } else {
        cJSON *choices, *ch, *msg;

        snprintf(idbuf, sizeof(idbuf), "chatcmpl-mock%llx", id);
        cJSON_AddStringToObject(o, "id", idbuf);
        cJSON_AddStringToObject(o, "object", "chat.completion");
        cJSON_AddNumberToObject(o, "created", (double)time(NULL));
        cJSON_AddStringToObject(o, "model", mname);
        choices = cJSON_AddArrayToObject(o, "choices");
        ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", 0);
        msg = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (refusal) {
            cJSON_AddNullToObject(msg, "content");
            cJSON_AddStringToObject(msg, "refusal", text);
        } else if (tool) {
            cJSON_AddNullToObject(msg, "content");
            cJSON_AddNullToObject(msg, "refusal");
            if (tool_calls_add(msg, api, to, text, id))
                goto oom;
        } else {
            cJSON_AddStringToObject(msg, "content", text);
            cJSON_AddNullToObject(msg, "refusal");
        }
        cJSON_AddNullToObject(ch, "logprobs");
        /* OpenAI says stop when tool_choice named the function (not
         * tool_calls: a client that looks for the call only after
         * tool_calls misses it); vLLM says tool_calls for "required" */
        cJSON_AddStringToObject(ch, "finish_reason",
                                cut ? "length" : tool && !to->ft->named ? "tool_calls" : "stop");
        cJSON_AddItemToArray(choices, ch);
        u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)pt);
        cJSON_AddNumberToObject(u, "completion_tokens", (double)ct);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(pt + ct));
    }
    free(a->body);
    a->body = jsonout_print(o);
    cJSON_Delete(o);
    return;
oom:
    cJSON_Delete(o);
    error_body(a, api, 500, "out of memory building the answer (mock)");
}

/* The defects that change the answer's text rather than its value: their
 * answer is no JSON object (or, refusal, no answer). */
static int defect_breaks_text(enum defect d)
{
    return d == D_NOT_JSON || d == D_FENCED || d == D_PROSE || d == D_REFUSAL || d == D_EMPTY ||
           d == D_TRUNCATED || d == D_NUL_TEXT;
}

static int defect_has_repair_rule(enum defect d)
{
    return d == D_MISSING_FIELD || d == D_WRONG_TYPE || d == D_INVALID_VALUE || d == D_EXTRA_FIELD ||
           d == D_NOT_JSON;
}

static __thread uint64_t t_rng;

static long jitter(long max)
{
    if (max <= 0)
        return 0;
    if (!t_rng)
        t_rng = now_ns() ^ (uint64_t)(uintptr_t)&t_rng;
    t_rng = mix64(t_rng);
    return (long)(t_rng % (uint64_t)(max + 1));
}

typedef struct llm_in {
    enum api api;
    const char *body;
    size_t len;
    const char *job_id, *attempt_hdr, *authorization, *x_api_key, *anthropic_version, *anthropic_beta;
    int in_flight; /* LLM requests in flight, this one included */
} llm_in;

/* Produces the complete answer of one LLM request (status, body, delay). */
static void llm_answer(const llm_in *in, answer *a)
{
    cJSON *req = NULL, *schema = NULL, *inst = NULL;
    chat c;
    directives d;
    gen g;
    char key[300], ptr[300] = "";
    const char *text;
    char *printed = NULL, *owned = NULL;
    int active, refusal = 0, cut = 0;
    long n;
    const cJSON *root_eff = NULL;
    forced_tool ft;
    tool_out to;
    cJSON *b64_input = NULL;
    char err[256];

    memset(&c, 0, sizeof(c));
    memset(&g, 0, sizeof(g));
    a->delay_ms = g_opt.latency_ms + jitter(g_opt.jitter_ms);
    if (g_opt.api_key) {
        char want[512];
        const char *got = in->api == API_OPENAI ? in->authorization : in->x_api_key;

        if (in->api == API_OPENAI)
            snprintf(want, sizeof(want), "Bearer %s", g_opt.api_key);
        else
            snprintf(want, sizeof(want), "%s", g_opt.api_key);
        if (!got || strcmp(got, want) != 0) {
            error_body(a, in->api, 401, status_message(401));
            return;
        }
    }
    /* As Anthropic: no version header, no request (the SDKs send one) */
    if (in->api == API_ANTHROPIC && (!in->anthropic_version || !in->anthropic_version[0])) {
        error_body(a, in->api, 400, "anthropic-version: header is required");
        return;
    }
    req = cJSON_ParseWithLength(in->body ? in->body : "", in->len);
    if (!cJSON_IsObject(req) || !cJSON_IsArray(obj_get(req, "messages"))) {
        error_body(a, in->api, 400, "invalid request: the body must be a JSON object with messages (mock)");
        plain_invalid_request(a, in->api);
        goto done;
    }
    /* and model and max_tokens are required fields of a Messages request */
    if (in->api == API_ANTHROPIC && !obj_get(req, "model")) {
        error_body(a, in->api, 400, "model: Field required");
        goto done;
    }
    if (in->api == API_ANTHROPIC && !obj_get(req, "max_tokens")) {
        error_body(a, in->api, 400, "max_tokens: Field required");
        goto done;
    }
    /* As Anthropic: structured outputs are output_config.format; the beta
     * form, output_format, needs its beta header. */
    if (in->api == API_ANTHROPIC && obj_get(req, "output_format") &&
        (!in->anthropic_beta || !strstr(in->anthropic_beta, "structured-outputs-2025-11-13"))) {
        error_body(a, in->api, 400, "output_format: Extra inputs are not permitted (mock: send output_config.format, "
                                    "or the anthropic-beta header structured-outputs-2025-11-13)");
        goto done;
    }
    if (forced_tool_read(req, in->api, &ft, err, sizeof(err))) {
        error_body(a, in->api, 400, err);
        plain_invalid_request(a, in->api);
        goto done;
    }
    chat_read(req, in->api, &c);
    /* Retort's retries carry only the last output, never every past one:
     * its X-Retort-Attempt header says which attempt this is. */
    if (in->attempt_hdr && atoi(in->attempt_hdr) > 0)
        c.attempt = atoi(in->attempt_hdr);
    directives_parse(c.first_user.p, &d);
    a->attempt = c.attempt;
    snprintf(a->defect, sizeof(a->defect), "%s", defect_names[d.defect]);
    if (d.latency_ms >= 0 || d.jitter_ms >= 0)
        a->delay_ms = (d.latency_ms >= 0 ? d.latency_ms : g_opt.latency_ms) +
                      jitter(d.jitter_ms >= 0 ? d.jitter_ms : g_opt.jitter_ms);
    if (d.tool_calls && !ft.name && !d.bad) {
        d.bad = 1; /* a test that asks for calls must send a request that makes them */
        snprintf(d.bad_what, sizeof(d.bad_what), "tool_calls=%ld in a request whose tool_choice forces no tool",
                 d.tool_calls);
    }
    if (d.bad) {
        error_body(a, in->api, 400, d.bad_what);
        plain_invalid_request(a, in->api);
        goto done;
    }

    /* count the call: by the worker's headers, else by prompt + attempt */
    if (in->job_id && in->attempt_hdr) {
        snprintf(key, sizeof(key), "%.200s:%.40s", in->job_id, in->attempt_hdr);
        snprintf(a->job, sizeof(a->job), "%.100s:%.20s", in->job_id, in->attempt_hdr);
        n = stats_count_call(key, 1, in->in_flight);
    } else {
        snprintf(key, sizeof(key), "#%016" PRIx64 ":%d", hash_str(c.first_user.p), c.attempt);
        n = stats_count_call(key, 0, in->in_flight);
    }
    if (d.hang) {
        a->hang = 1;
        goto done;
    }
    if ((d.http || d.quota) && (d.times < 0 || n <= d.times)) {
        if (d.quota)
            quota_body(a, in->api);
        else
            error_body(a, in->api, (unsigned)d.http, status_message((unsigned)d.http));
        if (d.retry_after >= 0)
            snprintf(a->retry_after, sizeof(a->retry_after), "%ld", d.retry_after);
        if (d.retry_after_ms >= 0)
            snprintf(a->retry_after_ms, sizeof(a->retry_after_ms), "%ld", d.retry_after_ms);
        snprintf(a->should_retry, sizeof(a->should_retry), "%s", d.should_retry);
        goto done;
    }

    /* the answer proper */
    g.seed = hash_str(c.first_user.p);
    g.tmp = cJSON_CreateArray();
    /* a forced call's arguments are held to the tool's schema, not to
     * response_format's (which shapes text the model does not write) */
    if (ft.name && cJSON_IsObject(ft.schema) && ft.schema->child)
        schema = cJSON_Duplicate(ft.schema, 1);
    else
        schema = find_schema(req, in->api, &c);
    if (schema) {
        g.root = schema;
        root_eff = effective(&g, schema, 0);
        inst = gen_value(&g, schema, 0, g.seed);
    } else {
        inst = cJSON_Parse(DEFAULT_ANSWER);
    }
    active = d.defect != D_NONE && (d.until < 0 || c.attempt <= d.until);
    if (!active && d.defect != D_NONE && d.repair && defect_has_repair_rule(d.defect)) {
        /* Repair rule: fixed only if the feedback names what was wrong. */
        if (d.defect == D_NOT_JSON) {
            active = strstr(c.last_user.p, "NOT_JSON") == NULL;
        } else {
            cJSON *probe = cJSON_Duplicate(inst, 1);

            apply_defect(&g, probe, root_eff, &d, ptr, sizeof(ptr));
            cJSON_Delete(probe);
            active = ptr[0] && strstr(c.last_user.p, ptr) == NULL;
        }
    }
    if (!active)
        snprintf(a->defect, sizeof(a->defect), "%s", "");
    if (active && (d.defect == D_MISSING_FIELD || d.defect == D_WRONG_TYPE || d.defect == D_INVALID_VALUE ||
                   d.defect == D_EXTRA_FIELD))
        apply_defect(&g, inst, root_eff, &d, ptr, sizeof(ptr));
    if (active && d.defect == D_NUL_CHAR) {
        cJSON *str = first_string(inst);
        if (str) {
            size_t l = strlen(str->valuestring);
            char *v = malloc(l + sizeof NUL_MARK);
            if (v) {
                memcpy(v, str->valuestring, l);
                memcpy(v + l, NUL_MARK, sizeof NUL_MARK);
                cJSON_SetValuestring(str, v);
                free(v);
            }
        }
    }
    printed = jsonout_print(inst);
    if (active && d.defect == D_NUL_CHAR)
        nul_mark_to_escape(printed);
    text = printed ? printed : "{}";
    if (d.answer[0]) {
        text = d.answer;
        active = 0;
        snprintf(a->defect, sizeof(a->defect), "%s", "");
    }
    if (active) {
        mbuf b = {0};

        switch (d.defect) {
        case D_NOT_JSON: text = NOT_JSON_TEXT; break;
        case D_FENCED:
            sb_adds(&b, "```json\n");
            sb_adds(&b, text);
            sb_adds(&b, "\n```");
            text = owned = b.p;
            break;
        case D_PROSE:
            sb_adds(&b, "Here is the JSON you asked for:\n");
            sb_adds(&b, text);
            text = owned = b.p;
            break;
        case D_REFUSAL:
            text = REFUSAL_TEXT;
            refusal = 1;
            break;
        case D_EMPTY: text = ""; break;
        case D_NUL_TEXT:
            sb_adds(&b, text);
            sb_adds(&b, NUL_MARK);
            text = owned = b.p;
            break;
        case D_TRUNCATED:
            sb_add(&b, text, strlen(text) / 2);
            text = owned = b.p ? b.p : "";
            cut = 1;
            break;
        default: break;
        }
    }
    to.ft = &ft;
    to.calls = d.tool_calls ? (int)d.tool_calls : 1;
    to.input = NULL;
    if (ft.name && in->api == API_ANTHROPIC) {
        /* Anthropic's input is an object: the value, defects and all, when
         * it is one; the defects that make the text no JSON value (and an
         * answer_b64 that is no object) leave the answer in text */
        if (d.answer[0]) {
            b64_input = cJSON_Parse(d.answer);
            to.input = cJSON_IsObject(b64_input) ? b64_input : NULL;
        } else if (!(active && defect_breaks_text(d.defect)) && cJSON_IsObject(inst)) {
            to.input = inst;
        }
    }
    success_body(a, in->api, req, text, refusal, cut, c.content_bytes, &to);
    /* in the body: an escape in the text's JSON string (nul_text, every
     * call's arguments), or in a string of Anthropic's input (nul_char,
     * whose mark is still in inst) */
    if (active && (d.defect == D_NUL_TEXT || d.defect == D_NUL_CHAR))
        while (a->body && strstr(a->body, NUL_MARK))
            nul_mark_to_escape(a->body);

done:
    cJSON_Delete(b64_input);
    free(owned);
    free(printed);
    cJSON_Delete(inst);
    cJSON_Delete(g.tmp);
    cJSON_Delete(schema);
    cJSON_Delete(req);
    chat_free(&c);
}

/* ------------------------------------------------------------------------ */
/* timer thread: one min-heap of due times for all suspended connections   */

struct req;
typedef struct tent {
    uint64_t due;
    struct req *r;
} tent;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tent *a;
    size_t n, cap;
    int stop;
} g_tm = {.mu = PTHREAD_MUTEX_INITIALIZER};

enum endpoint { EP_OPENAI, EP_ANTHROPIC, EP_STATS, EP_RESET, EP_HEALTH, EP_NOT_FOUND, EP_BAD_METHOD };
enum rstate { RS_BODY, RS_WAIT, RS_HANG };

typedef struct req {
    struct MHD_Connection *conn;
    enum endpoint ep;
    enum rstate state;
    char *body;
    size_t len, cap;
    int too_large;
    int in_flight; /* counted in g_stats.in_flight until it ends */
    uint64_t t0;
    answer ans;
} req;

static void heap_up(size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        tent t;

        if (g_tm.a[p].due <= g_tm.a[i].due)
            break;
        t = g_tm.a[p];
        g_tm.a[p] = g_tm.a[i];
        g_tm.a[i] = t;
        i = p;
    }
}

static void heap_down(size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        tent t;

        if (l < g_tm.n && g_tm.a[l].due < g_tm.a[m].due)
            m = l;
        if (r < g_tm.n && g_tm.a[r].due < g_tm.a[m].due)
            m = r;
        if (m == i)
            return;
        t = g_tm.a[m];
        g_tm.a[m] = g_tm.a[i];
        g_tm.a[i] = t;
        i = m;
    }
}

/* Suspends r's connection until due (MHD thread only, inside the handler). */
static void suspend_until(req *r, uint64_t due)
{
    int resume_now = 0;

    atomic_fetch_add(&g_suspended, 1);
    MHD_suspend_connection(r->conn);
    pthread_mutex_lock(&g_tm.mu);
    if (g_tm.stop) {
        resume_now = 1;
    } else {
        if (g_tm.n == g_tm.cap) {
            size_t nc = g_tm.cap ? g_tm.cap * 2 : 1024;
            tent *na = realloc(g_tm.a, nc * sizeof(*na));

            if (!na) {
                resume_now = 1;
                goto unlock;
            }
            g_tm.a = na;
            g_tm.cap = nc;
        }
        g_tm.a[g_tm.n].due = due;
        g_tm.a[g_tm.n].r = r;
        heap_up(g_tm.n++);
        if (g_tm.a[0].r == r)
            pthread_cond_signal(&g_tm.cv); /* new earliest deadline */
    }
unlock:
    pthread_mutex_unlock(&g_tm.mu);
    if (resume_now)
        MHD_resume_connection(r->conn);
}

static void *timer_main(void *arg)
{
    tent batch[256];

    (void)arg;
    pthread_mutex_lock(&g_tm.mu);
    for (;;) {
        size_t nb = 0, i;
        uint64_t now;

        if (g_tm.stop && g_tm.n == 0)
            break;
        if (g_tm.n == 0) {
            pthread_cond_wait(&g_tm.cv, &g_tm.mu);
            continue;
        }
        now = now_ns();
        /* MHD (0.9.75) walks its whole list of suspended connections each
         * time it handles resumes, so with thousands suspended the walks,
         * not the answers, cost the most (13% of the mock's CPU at 10,000
         * suspended, resumed one by one).  Then wake a little late and
         * resume everything due by then in one go. */
        uint64_t slack = g_tm.n >= 1000 ? 2000000u : 0;
        if (g_tm.a[0].due + slack > now && !g_tm.stop) {
            struct timespec ts;
            uint64_t due = g_tm.a[0].due + slack;

            ts.tv_sec = (time_t)(due / 1000000000ull);
            ts.tv_nsec = (long)(due % 1000000000ull);
            pthread_cond_timedwait(&g_tm.cv, &g_tm.mu, &ts);
            continue;
        }
        while (g_tm.n > 0 && nb < 256 && (g_tm.stop || g_tm.a[0].due <= now)) {
            batch[nb++] = g_tm.a[0];
            g_tm.a[0] = g_tm.a[--g_tm.n];
            heap_down(0);
        }
        pthread_mutex_unlock(&g_tm.mu);
        for (i = 0; i < nb; i++)
            MHD_resume_connection(batch[i].r->conn);
        pthread_mutex_lock(&g_tm.mu);
    }
    pthread_mutex_unlock(&g_tm.mu);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* HTTP glue                                                                */

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status, char *body, const char *ctype,
                                 const answer *a)
{
    struct MHD_Response *resp;
    enum MHD_Result rc;

    if (!body)
        return MHD_NO;
    resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (a) {
        if (a->retry_after[0])
            MHD_add_response_header(resp, "Retry-After", a->retry_after);
        if (a->retry_after_ms[0])
            MHD_add_response_header(resp, "retry-after-ms", a->retry_after_ms);
        if (a->should_retry[0])
            MHD_add_response_header(resp, "x-should-retry", a->should_retry);
    }
    rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void log_line(const req *r, const char *method, const char *url, unsigned status)
{
    if (!g_opt.log)
        return;
    fprintf(stderr, "mock-llm %s %s %u %.1fms attempt=%d job=%s%s%s\n", method, url, status,
            (double)(now_ns() - r->t0) / 1e6, r->ans.attempt, r->ans.job[0] ? r->ans.job : "-",
            r->ans.defect[0] ? " defect=" : "", r->ans.defect);
}

static enum MHD_Result send_answer(req *r, const char *method, const char *url)
{
    char *body = r->ans.body;

    r->ans.body = NULL;
    log_line(r, method, url, r->ans.status);
    return send_text(r->conn, r->ans.status, body ? body : strdup("{}"), "application/json", &r->ans);
}

static enum endpoint classify(const char *method, const char *url)
{
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");

    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"))
        return post ? EP_OPENAI : EP_BAD_METHOD;
    if (!strcmp(url, "/v1/messages") || !strcmp(url, "/messages"))
        return post ? EP_ANTHROPIC : EP_BAD_METHOD;
    if (!strcmp(url, "/stats"))
        return get ? EP_STATS : EP_BAD_METHOD;
    if (!strcmp(url, "/stats/reset"))
        return post ? EP_RESET : EP_BAD_METHOD;
    if (!strcmp(url, "/healthz"))
        return get ? EP_HEALTH : EP_BAD_METHOD;
    return EP_NOT_FOUND;
}

/* Peer closed its end?  (Checked for hanging requests only.) */
static int peer_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char c;
    ssize_t n;

    if (!ci)
        return 1;
    n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return 1;
    return 0;
}

static enum MHD_Result handle_complete(req *r, const char *method, const char *url)
{
    struct MHD_Connection *conn = r->conn;
    llm_in in;

    switch (r->ep) {
    case EP_HEALTH:
        return send_text(conn, 200, strdup("ok"), "text/plain", NULL);
    case EP_STATS: {
        const char *with = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "calls");
        const char *tm = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "times");
        char *s = stats_json(!with || strcmp(with, "0") != 0, tm && strcmp(tm, "0") != 0);

        return send_text(conn, s ? 200 : 500, s ? s : strdup("{}"), "application/json", NULL);
    }
    case EP_RESET:
        stats_reset();
        return send_text(conn, 200, strdup("{\"reset\":true}"), "application/json", NULL);
    case EP_NOT_FOUND:
    case EP_BAD_METHOD:
        error_body(&r->ans, API_OPENAI, r->ep == EP_NOT_FOUND ? 404 : 405,
                   r->ep == EP_NOT_FOUND ? "Unknown path (mock)." : "Method not allowed (mock).");
        stats_count_request(r->ans.status);
        return send_answer(r, method, url);
    default:
        break;
    }
    memset(&in, 0, sizeof(in));
    in.api = r->ep == EP_ANTHROPIC ? API_ANTHROPIC : API_OPENAI;
    in.in_flight = stats_request_begins();
    r->in_flight = 1;
    in.body = r->body;
    in.len = r->len;
    in.job_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Retort-Job-Id");
    in.attempt_hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Retort-Attempt");
    in.authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    in.x_api_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    in.anthropic_version = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "anthropic-version");
    in.anthropic_beta = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "anthropic-beta");
    if (r->too_large) {
        error_body(&r->ans, in.api, 413, status_message(413));
        r->ans.delay_ms = 0;
    } else {
        llm_answer(&in, &r->ans);
    }
    if (r->ans.hang) {
        stats_count_request(0);
        if (atomic_load(&g_stopping))
            return MHD_NO;
        r->state = RS_HANG;
        suspend_until(r, now_ns() + HANG_RECHECK_MS * 1000000ull);
        return MHD_YES;
    }
    stats_count_request(r->ans.status);
    if (r->ans.delay_ms > 0 && !atomic_load(&g_stopping)) {
        r->state = RS_WAIT;
        suspend_until(r, r->t0 + (uint64_t)r->ans.delay_ms * 1000000ull);
        return MHD_YES;
    }
    return send_answer(r, method, url);
}

/* MHD 0.9.75's epoll loop takes events 128 at a time and, when it gets
 * exactly 128, calls epoll_wait again, with the same timeout, before
 * handling any of them.  With exactly 128 clients each waiting for its
 * answer and nothing else to come, that second wait never ends: the 128
 * requests stay unread (a worker with llm.max_inflight=128 had every call
 * time out, in a quarter of its runs).  The loop skips events whose
 * data.ptr is NULL, so an eventfd of ours in its epoll set, written every
 * 5 ms by a thread of its own (edge-triggered, never read: each write is
 * one event), ends such a wait.  (A periodic timerfd would not do: unread,
 * it fires once.)  Single-threaded daemons only: a pool's threads keep
 * their epoll sets to themselves. */
static int g_unstick_fd = -1;
/* Set once MHD_stop_daemon returned: the wake-ups go on through the
 * shutdown's drain, when every held connection is resumed at once. */
static atomic_int g_unstick_stop;

static void *unstick_main(void *arg)
{
    struct timespec every = {0, 5000000};
    uint64_t one = 1;

    (void)arg;
    while (!atomic_load(&g_unstick_stop)) {
        nanosleep(&every, NULL);
        if (write(g_unstick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
            fprintf(stderr, "mock-llm: the 5 ms wake-up stopped: %s\n", strerror(errno));
            break;
        }
    }
    return NULL;
}

/* 0 when the wake-ups run; -1 when they could not be set up (the daemon
 * then runs as before). */
static int epoll_unstick(struct MHD_Daemon *d, pthread_t *thread)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
    struct epoll_event ev;

    if (!info || info->epoll_fd < 0)
        return -1;
    g_unstick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g_unstick_fd < 0)
        return -1;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLET;
    ev.data.ptr = NULL;
    if (epoll_ctl(info->epoll_fd, EPOLL_CTL_ADD, g_unstick_fd, &ev) != 0 ||
        pthread_create(thread, NULL, unstick_main, NULL) != 0) {
        close(g_unstick_fd);
        g_unstick_fd = -1;
        return -1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    req *r = *con_cls;

    (void)cls;
    (void)version;
    if (!r) {
        const char *cl;

        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        r->conn = conn;
        r->t0 = now_ns();
        r->ep = classify(method, url);
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            unsigned long want = strtoul(cl, NULL, 10);

            if (want > 0 && want <= MAX_BODY) {
                r->body = malloc(want + 1);
                r->cap = r->body ? want + 1 : 0;
            }
        }
        *con_cls = r;
        return MHD_YES;
    }
    if (r->state == RS_BODY) {
        if (*upload_data_size) {
            size_t n = *upload_data_size;

            if (!r->too_large && r->len + n > MAX_BODY) {
                r->too_large = 1;
            } else if (!r->too_large) {
                if (r->len + n + 1 > r->cap) {
                    size_t nc = r->cap ? r->cap * 2 : 4096;
                    char *nb;

                    while (nc < r->len + n + 1)
                        nc *= 2;
                    nb = realloc(r->body, nc);
                    if (!nb)
                        return MHD_NO;
                    r->body = nb;
                    r->cap = nc;
                }
                memcpy(r->body + r->len, upload_data, n);
                r->len += n;
                r->body[r->len] = '\0';
            }
            *upload_data_size = 0;
            return MHD_YES;
        }
        return handle_complete(r, method, url);
    }
    /* resumed by the timer thread */
    atomic_fetch_sub(&g_suspended, 1);
    if (r->state == RS_HANG) {
        if (atomic_load(&g_stopping) || peer_gone(conn))
            return MHD_NO;
        suspend_until(r, now_ns() + HANG_RECHECK_MS * 1000000ull);
        return MHD_YES;
    }
    return send_answer(r, method, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req *r = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (!r)
        return;
    if (r->in_flight)
        stats_request_ends();
    free(r->body);
    free(r->ans.body);
    free(r);
    *con_cls = NULL;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */

static void on_signal_unused(int sig)
{
    (void)sig; /* never runs: the signals stay blocked and go to sigwait() */
}

/* MHD's own messages (e.g. for every connection a hanging request drops on
 * purpose) are noise unless --log asked for details. */
__attribute__((format(printf, 2, 0))) static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (!g_opt.log)
        return;
    fputs("mock-llm: mhd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mock-llm [--port N] [--host ADDR] [--latency-ms N] [--jitter-ms N]\n"
               "                [--max-conns N] [--threads N] [--api-key KEY] [--idle-timeout-s N] [--log]\n");
}

static int opt_long(const char *v, long lo, long hi, long *out)
{
    char *e;
    long x;

    if (!v)
        return -1;
    errno = 0;
    x = strtol(v, &e, 10);
    if (errno || e == v || *e || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    struct rlimit rl;
    struct MHD_Daemon *d = NULL;
    const union MHD_DaemonInfo *di;
    pthread_t timer, unstick;
    pthread_condattr_t ca;
    sigset_t sigs;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    int i, sig = 0, ipv6 = 0, timer_started = 0, unstick_started = 0;
    uint64_t deadline;
    long v;

    for (i = 1; i < argc; i++) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(o, "--log")) {
            g_opt.log = 1;
            continue;
        }
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!val)
            goto bad;
        if (!strcmp(o, "--port") && !opt_long(val, 0, 65535, &v))
            g_opt.port = (unsigned)v;
        else if (!strcmp(o, "--host"))
            g_opt.host = val;
        else if (!strcmp(o, "--latency-ms") && !opt_long(val, 0, 86400000L, &v))
            g_opt.latency_ms = v;
        else if (!strcmp(o, "--jitter-ms") && !opt_long(val, 0, 86400000L, &v))
            g_opt.jitter_ms = v;
        else if (!strcmp(o, "--max-conns") && !opt_long(val, 1, 1000000, &v))
            g_opt.max_conns = (unsigned)v;
        else if (!strcmp(o, "--threads") && !opt_long(val, 1, 64, &v))
            g_opt.threads = (unsigned)v;
        else if (!strcmp(o, "--api-key"))
            g_opt.api_key = val;
        else if (!strcmp(o, "--idle-timeout-s") && !opt_long(val, 0, 86400, &v))
            g_opt.idle_timeout_s = (unsigned)v;
        else
            goto bad;
        i++;
        continue;
bad:
        fprintf(stderr, "mock-llm: bad or incomplete option %s\n", o);
        usage(stderr);
        return 2;
    }

    /* 10,000 connections need more descriptors than the usual soft limit. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    /* Only the main thread takes SIGINT/SIGTERM (via sigwait).  A handler is
     * installed first because a signal whose action is SIG_IGN (as a shell
     * sets SIGINT for background jobs) is discarded, not left pending. */
    signal(SIGINT, on_signal_unused);
    signal(SIGTERM, on_signal_unused);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    memset(&ss, 0, sizeof(ss));
    if (!strcmp(g_opt.host, "localhost"))
        g_opt.host = "127.0.0.1";
    if (inet_pton(AF_INET, g_opt.host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)g_opt.port);
    } else if (inet_pton(AF_INET6, g_opt.host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)g_opt.port);
        ipv6 = 1;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "mock-llm: --host must be a numeric address: %s\n", g_opt.host);
        return 2;
    }

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_tm.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&timer, NULL, timer_main, NULL) != 0) {
        fprintf(stderr, "mock-llm: cannot start the timer thread\n");
        return 1;
    }
    timer_started = 1;

    if (g_opt.threads > 1)
        d = MHD_start_daemon(flags, (uint16_t)g_opt.port, NULL, NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned int)g_opt.max_conns,
                             MHD_OPTION_CONNECTION_TIMEOUT, g_opt.idle_timeout_s, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                             (unsigned int)4096, MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)g_opt.threads,
                             MHD_OPTION_END);
    else
        d = MHD_start_daemon(flags, (uint16_t)g_opt.port, NULL, NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned int)g_opt.max_conns,
                             MHD_OPTION_CONNECTION_TIMEOUT, g_opt.idle_timeout_s, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                             (unsigned int)4096, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "mock-llm: cannot listen on %s:%u\n", g_opt.host, g_opt.port);
        goto stop_timer;
    }
    if (g_opt.threads <= 1 && epoll_unstick(d, &unstick) == 0)
        unstick_started = 1;
    else if (g_opt.threads <= 1)
        fprintf(stderr, "mock-llm: cannot add the 5 ms wake-up to MHD's epoll set: 128 clients at once may stall it\n");
    di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (di)
        g_opt.port = di->port;
    printf(ipv6 ? "LISTENING http://[%s]:%u\n" : "LISTENING http://%s:%u\n", g_opt.host, g_opt.port);
    fflush(stdout);

    while (sigwait(&sigs, &sig) != 0)
        ;

    /* Shutdown: MHD_stop_daemon() must not meet suspended connections, so
     * wake them all and wait until MHD has taken them back. */
    atomic_store(&g_stopping, 1);
stop_timer:
    pthread_mutex_lock(&g_tm.mu);
    g_tm.stop = 1;
    pthread_cond_signal(&g_tm.cv);
    pthread_mutex_unlock(&g_tm.mu);
    if (timer_started)
        pthread_join(timer, NULL);
    deadline = now_ns() + 3000000000ull;
    while (d && atomic_load(&g_suspended) > 0 && now_ns() < deadline) {
        struct timespec ts = {0, 5000000};

        nanosleep(&ts, NULL);
    }
    if (d)
        MHD_stop_daemon(d);
    if (unstick_started) {
        atomic_store(&g_unstick_stop, 1);
        pthread_join(unstick, NULL);
        close(g_unstick_fd);
    }
    free(g_tm.a);
    stats_reset();
    return d ? 0 : 1;
}
