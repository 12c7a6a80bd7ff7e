/* http_client.c - libcurl transport for ds-eval --endpoint (http_client.h). */
#include "http_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dsq_http {
    dsq_http_opts o;
    char *base;
    char *auth;                /* "Authorization: Bearer ..." */
    CURL *curl;
    size_t max_body;
};

#define DEFAULT_MAX_BODY ((size_t)256 << 20)

void dsq_http_set_max_body(dsq_http *h, size_t bytes) { h->max_body = bytes ? bytes : DEFAULT_MAX_BODY; }

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int dsq_http_create(dsq_http **out, const dsq_http_opts *o, dsq_diag *d)
{
    *out = NULL;
    pthread_once(&once, global_init);
    dsq_http *h = calloc(1, sizeof *h);
    if (!h) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    h->o = *o;
    h->max_body = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
    size_t n = strlen(o->base_url);
    while (n && o->base_url[n - 1] == '/') n--;
    h->base = strndup(o->base_url, n);
    if (o->api_key) {
        size_t al = strlen(o->api_key) + 32;
        if ((h->auth = malloc(al))) snprintf(h->auth, al, "Authorization: Bearer %s", o->api_key);
    }
    h->curl = curl_easy_init();
    if (!h->base || !h->curl || (o->api_key && !h->auth)) {
        dsq_http_free(h);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "cannot create an HTTP client");
    }
    *out = h;
    return DSQ_OK;
}

void dsq_http_free(dsq_http *h)
{
    if (!h) return;
    if (h->curl) curl_easy_cleanup(h->curl);
    if (h->auth) memset(h->auth, 0, strlen(h->auth));
    free(h->auth);
    free(h->base);
    free(h);
}

typedef struct buf { char *p; size_t n, cap, max; int oom, big; } buf;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *u)
{
    buf *b = u;
    size_t n = size * nmemb;
    if (n > b->max - b->n) { b->big = 1; return 0; } /* bounded: a body past max is never held */
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        if (cap > b->max + 1) cap = b->max + 1;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return 0; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, ptr, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

/* Sleep s seconds in small steps so an interrupt is noticed; 1 if cancelled. */
static int nap(double s, volatile int *cancel)
{
    while (s > 0) {
        if (cancel && *cancel) return 1;
        double step = s < 0.05 ? s : 0.05;
        struct timespec ts = { 0, (long)(step * 1e9) };
        nanosleep(&ts, NULL);
        s -= step;
    }
    return cancel && *cancel;
}

int dsq_http_call(dsq_http *h, const char *path, const char *body, size_t body_len,
                  long *status, char **resp, size_t *resp_len, dsq_diag *d)
{
    *resp = NULL;
    if (resp_len) *resp_len = 0;
    *status = 0;
    size_t ul = strlen(h->base) + strlen(path) + 1;
    char *url = malloc(ul);
    if (!url) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(url, ul, "%s%s", h->base, path);
    double wait = h->o.backoff_s > 0 ? h->o.backoff_s : 0.5;
    char why[CURL_ERROR_SIZE + 64] = "";
    int rc = DSQ_ERR_IO;
    for (int attempt = 0; attempt <= h->o.retries; attempt++) {
        if (attempt && nap(wait, h->o.cancel)) { rc = DSQ_ERR_INTERRUPTED; break; }
        if (attempt) wait = wait * 2 < 30 ? wait * 2 : 30;
        if (h->o.cancel && *h->o.cancel) { rc = DSQ_ERR_INTERRUPTED; break; }
        CURL *c = h->curl;
        curl_easy_reset(c);
        buf b = { .max = h->max_body };
        char err[CURL_ERROR_SIZE] = "";
        struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
        if (h->auth) hd = curl_slist_append(hd, h->auth);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(h->o.timeout_s * 1000));
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)h->max_body); /* a Content-Length past it: refused unread */
        if (body) {
            curl_easy_setopt(c, CURLOPT_POST, 1L);
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
        CURLcode cc = curl_easy_perform(c);
        curl_slist_free_all(hd);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        if (b.oom) { free(b.p); rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory reading %s", url); break; }
        if (b.big || cc == CURLE_FILESIZE_EXCEEDED) {
            free(b.p);
            rc = dsq_fail(d, DSQ_ERR_FORMAT, url, NULL, -1, "the response is larger than %zu MiB: refused unread "
                          "(not the OpenAI-compatible server expected?)", h->max_body >> 20);
            break;
        }
        if (cc != CURLE_OK) {
            /* DNS, refused, reset, timeout: the server may come back */
            snprintf(why, sizeof why, "%s", err[0] ? err : curl_easy_strerror(cc));
            free(b.p);
            if (cc == CURLE_UNSUPPORTED_PROTOCOL || cc == CURLE_URL_MALFORMAT) { attempt = h->o.retries; }
            continue;
        }
        if (code == 429 || code >= 500) {
            snprintf(why, sizeof why, "HTTP %ld", code);
            int fixed = code >= 500 && h->o.permanent && h->o.permanent(code, b.p ? b.p : "", b.n);
            if (attempt < h->o.retries && !fixed) { free(b.p); continue; }
        }
        *status = code;
        *resp = b.p ? b.p : calloc(1, 1);
        if (resp_len) *resp_len = b.n;
        rc = *resp ? DSQ_OK : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        break;
    }
    if (rc == DSQ_ERR_IO)
        dsq_fail(d, DSQ_ERR_IO, url, NULL, -1, "cannot reach the server after %d attempt%s: %s", h->o.retries + 1,
                 h->o.retries ? "s" : "", why);
    else if (rc == DSQ_ERR_INTERRUPTED)
        dsq_fail(d, rc, url, NULL, -1, "interrupted");
    free(url);
    return rc;
}
