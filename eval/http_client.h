/* http_client.h - a small JSON-over-HTTP client on libcurl for ds-eval
 * --endpoint: one handle per thread, a per-request timeout, and retries
 * with exponential backoff on connection errors, timeouts, 429 and 5xx
 * (an evaluation of a big model is hours long and must survive a dropped
 * connection or a restarted server). The API key is sent as a bearer token
 * and never appears in messages. Library code: nothing prints. */
#ifndef DSQ_HTTP_CLIENT_H
#define DSQ_HTTP_CLIENT_H

#include "dsq_error.h"

#include <stddef.h>

typedef struct dsq_http_opts {
    const char *base_url;      /* "http://host:port/v1" (no trailing slash needed) */
    const char *api_key;       /* NULL: no Authorization header */
    double timeout_s;          /* per request, > 0 */
    int retries;               /* further attempts after the first */
    double backoff_s;          /* first wait; doubles, capped at 30 s */
    volatile int *cancel;      /* polled while waiting; may be NULL */
    size_t max_body;           /* a longer response is refused unread; 0: 256 MiB */
    /* 1 when a 5xx answer is the server's deterministic refusal (retrying
     * gives the same): returned at once, not retried; NULL: always retried */
    int (*permanent)(long status, const char *body, size_t len);
} dsq_http_opts;

typedef struct dsq_http dsq_http;

int  dsq_http_create(dsq_http **out, const dsq_http_opts *o, dsq_diag *d);
/* Change the response bound for the calls that follow (0: the default). */
void dsq_http_set_max_body(dsq_http *h, size_t bytes);
void dsq_http_free(dsq_http *h);

/* GET (body NULL) or POST a JSON body to base_url + path. Transport errors,
 * 429 and 5xx are retried; the final HTTP status is in *status and the
 * response body in *resp (malloc'd, NUL-terminated). DSQ_ERR_IO when the
 * server cannot be reached after the retries (diag names the URL),
 * DSQ_ERR_INTERRUPTED when *cancel became set, DSQ_ERR_FORMAT when the
 * response is longer than the bound (not retried). Statuses other than 2xx are
 * not errors here: the caller interprets them. */
int  dsq_http_call(dsq_http *h, const char *path, const char *body, size_t body_len,
                   long *status, char **resp, size_t *resp_len, dsq_diag *d);

#endif
