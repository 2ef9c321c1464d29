/* schema_uri.c - RFC 3986 reference resolution (section 5.2). */
#include "schema_uri.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* One parsed URI reference: each component is a [ptr, len) slice of the
 * source string, with a flag telling whether it is defined at all (an empty
 * query "?" is defined but empty, and RFC 3986 distinguishes the two). */
typedef struct uri_part {
    const char *p;
    size_t n;
    int defined;
} uri_part;

typedef struct uri_ref {
    uri_part scheme, authority, path, query, fragment;
} uri_ref;

static void uri_split(const char *s, uri_ref *u)
{
    memset(u, 0, sizeof *u);
    const char *p = s;
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" */
    if (isalpha((unsigned char)*p)) {
        const char *q = p + 1;
        while (isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.')
            q++;
        if (*q == ':') {
            u->scheme = (uri_part){ p, (size_t)(q - p), 1 };
            p = q + 1;
        }
    }
    if (p[0] == '/' && p[1] == '/') {
        const char *q = p + 2;
        while (*q && *q != '/' && *q != '?' && *q != '#')
            q++;
        u->authority = (uri_part){ p + 2, (size_t)(q - p - 2), 1 };
        p = q;
    }
    const char *q = p;
    while (*q && *q != '?' && *q != '#')
        q++;
    u->path = (uri_part){ p, (size_t)(q - p), 1 };
    p = q;
    if (*p == '?') {
        q = p + 1;
        while (*q && *q != '#')
            q++;
        u->query = (uri_part){ p + 1, (size_t)(q - p - 1), 1 };
        p = q;
    }
    if (*p == '#')
        u->fragment = (uri_part){ p + 1, strlen(p + 1), 1 };
}

/* remove_dot_segments (RFC 3986 5.2.4) on in[0..n); writes to out (n+1
 * bytes at least) and returns the output length. */
static size_t remove_dots(const char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        const char *r = in + i;
        size_t left = n - i;
        if (left >= 3 && memcmp(r, "../", 3) == 0) {
            i += 3;
        } else if (left >= 2 && memcmp(r, "./", 2) == 0) {
            i += 2;
        } else if (left >= 3 && memcmp(r, "/./", 3) == 0) {
            i += 2;
        } else if (left == 2 && memcmp(r, "/.", 2) == 0) {
            out[o++] = '/'; /* a final "/." becomes "/" */
            i = n;
        } else if (left >= 4 && memcmp(r, "/../", 4) == 0) {
            i += 3;
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else if (left == 3 && memcmp(r, "/..", 3) == 0) {
            i += 3;
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
            out[o++] = '/';
        } else if ((left == 1 && r[0] == '.') || (left == 2 && memcmp(r, "..", 2) == 0)) {
            i = n;
        } else {
            size_t j = (r[0] == '/') ? 1 : 0;
            while (j < left && r[j] != '/')
                j++;
            memcpy(out + o, r, j);
            o += j;
            i += j;
        }
    }
    out[o] = '\0';
    return o;
}

static void put(char **w, const char *p, size_t n)
{
    memcpy(*w, p, n);
    *w += n;
}

char *schema_uri_resolve(const char *base, const char *ref)
{
    uri_ref b, r;
    uri_split(base ? base : "", &b);
    uri_split(ref ? ref : "", &r);
    size_t total = strlen(base ? base : "") + strlen(ref ? ref : "") + 8;
    char *merged = malloc(total);
    char *pathbuf = malloc(total);
    char *out = malloc(total);
    if (!merged || !pathbuf || !out) {
        free(merged);
        free(pathbuf);
        free(out);
        return NULL;
    }
    uri_part scheme, authority, query, fragment = r.fragment;
    size_t pathlen;
    if (r.scheme.defined) {
        scheme = r.scheme;
        authority = r.authority;
        pathlen = remove_dots(r.path.p, r.path.n, pathbuf);
        query = r.query;
    } else {
        scheme = b.scheme;
        if (r.authority.defined) {
            authority = r.authority;
            pathlen = remove_dots(r.path.p, r.path.n, pathbuf);
            query = r.query;
        } else {
            authority = b.authority;
            if (r.path.n == 0) {
                memcpy(pathbuf, b.path.p, b.path.n);
                pathlen = b.path.n;
                pathbuf[pathlen] = '\0';
                query = r.query.defined ? r.query : b.query;
            } else {
                if (r.path.p[0] == '/') {
                    pathlen = remove_dots(r.path.p, r.path.n, pathbuf);
                } else {
                    /* merge (5.2.3) */
                    size_t m = 0;
                    if (b.authority.defined && b.path.n == 0) {
                        merged[m++] = '/';
                    } else {
                        size_t k = b.path.n;
                        while (k > 0 && b.path.p[k - 1] != '/')
                            k--;
                        memcpy(merged, b.path.p, k);
                        m = k;
                    }
                    memcpy(merged + m, r.path.p, r.path.n);
                    m += r.path.n;
                    pathlen = remove_dots(merged, m, pathbuf);
                }
                query = r.query;
            }
        }
    }
    char *w = out;
    if (scheme.defined) {
        put(&w, scheme.p, scheme.n);
        *w++ = ':';
    }
    if (authority.defined) {
        *w++ = '/';
        *w++ = '/';
        put(&w, authority.p, authority.n);
    }
    put(&w, pathbuf, pathlen);
    if (query.defined) {
        *w++ = '?';
        put(&w, query.p, query.n);
    }
    if (fragment.defined && fragment.n > 0) {
        *w++ = '#';
        put(&w, fragment.p, fragment.n);
    }
    *w = '\0';
    free(merged);
    free(pathbuf);
    return out;
}

size_t schema_uri_base_len(const char *uri)
{
    const char *h = strchr(uri, '#');
    return h ? (size_t)(h - uri) : strlen(uri);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

size_t schema_uri_percent_decode(const char *src, size_t len, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '%' && i + 2 < len) {
            int h = hexval((unsigned char)src[i + 1]);
            int l = hexval((unsigned char)src[i + 2]);
            if (h >= 0 && l >= 0) {
                dst[o++] = (char)(h * 16 + l);
                i += 2;
                continue;
            }
        }
        dst[o++] = src[i];
    }
    dst[o] = '\0';
    return o;
}

char *schema_uri_from_path(const char *prefix, const char *path)
{
    size_t pl = strlen(prefix), n = pl;
    for (const char *p = path; *p; p++)
        n += *p == '?' || *p == '#' || *p == '%' ? 3 : 1;
    char *u = malloc(n + 1), *w = u;
    if (!u)
        return NULL;
    memcpy(w, prefix, pl);
    w += pl;
    for (const char *p = path; *p; p++) {
        if (*p == '?' || *p == '#' || *p == '%') {
            *w++ = '%';
            *w++ = "0123456789ABCDEF"[(unsigned char)*p >> 4];
            *w++ = "0123456789ABCDEF"[*p & 15];
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return u;
}
