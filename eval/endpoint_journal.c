/* endpoint_journal.c - the resumable per-item file of ds-eval gsm8k
 * --endpoint (endpoint.h). Appends are fsync'd one line at a time: an
 * evaluation of a big model is hours long, and a kill or a dropped
 * connection must cost at most the items in flight. */
#include "endpoint.h"
#include "dsq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_JOURNAL ((size_t)1 << 31)

static int parse_line(const char *line, size_t len, const dsq_gsm8k_set *test, size_t n, dsq_ep_item *items,
                      size_t *n_have, const char *path, size_t lineno, dsq_diag *d)
{
    json_tokener *tk = json_tokener_new_ex(16);
    json_object *o = tk ? json_tokener_parse_ex(tk, line, (int)len) : NULL;
    int ok = tk && json_tokener_get_error(tk) == json_tokener_success && json_object_is_type(o, json_type_object);
    json_tokener_free(tk);
    json_object *id, *q, *c, *x;
    int rc = DSQ_OK;
    if (!ok || !json_object_object_get_ex(o, "doc_id", &id) || !json_object_is_type(id, json_type_int) ||
        json_object_get_int64(id) < 0 || !json_object_object_get_ex(o, "completion", &c) || !json_object_is_type(c, json_type_string)) {
        rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu is not a ds-eval gsm8k record (another file? -f starts over)", lineno);
    } else {
        size_t doc = (size_t)json_object_get_int64(id);
        if (doc < n) {
            if (doc >= test->n || !json_object_object_get_ex(o, "question", &q) || !json_object_is_type(q, json_type_string) ||
                (size_t)json_object_get_string_len(q) != test->items[doc].question_len ||
                memcmp(json_object_get_string(q), test->items[doc].question, test->items[doc].question_len)) {
                rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu: doc %zu's question differs from --data "
                              "(a file from another dataset? -f starts over)", lineno, doc);
            } else if (!items[doc].have) {
                dsq_ep_item *it = &items[doc];
                it->len = (size_t)json_object_get_string_len(c);
                it->completion = malloc(it->len + 1);
                if (!it->completion) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
                else {
                    memcpy(it->completion, json_object_get_string(c), it->len);
                    it->completion[it->len] = 0;
                    it->prompt_tokens = json_object_object_get_ex(o, "prompt_tokens", &x) && json_object_is_type(x, json_type_int)
                                        ? json_object_get_int64(x) : -1;
                    it->gen_tokens = json_object_object_get_ex(o, "gen_tokens", &x) && json_object_is_type(x, json_type_int)
                                     ? json_object_get_int64(x) : -1;
                    if (json_object_object_get_ex(o, "stop", &x) && json_object_is_type(x, json_type_string))
                        snprintf(it->finish, sizeof it->finish, "%s", json_object_get_string(x));
                    it->have = 1;
                    (*n_have)++;
                }
            }
        }
    }
    json_object_put(o);
    return rc;
}

int dsq_ep_journal_open(dsq_ep_journal *j, const char *path, int restart, const dsq_gsm8k_set *test,
                        size_t n, dsq_ep_item *items, size_t *n_have, dsq_diag *d)
{
    j->fd = -1;
    j->path = strdup(path);
    *n_have = 0;
    if (!j->path) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    size_t keep = 0;
    if (!restart && dsq_path_exists(path)) {
        char *buf = NULL;
        size_t len = 0;
        DSQ_TRY(dsq_read_file(path, MAX_JOURNAL, &buf, &len, d));
        size_t at = 0, lineno = 0;
        int rc = DSQ_OK;
        while (at < len && rc == DSQ_OK) {
            const char *nl = memchr(buf + at, '\n', len - at);
            lineno++;
            if (!nl) break; /* a last line cut short by a kill: dropped */
            size_t ll = (size_t)(nl - (buf + at));
            int blank = 1;
            for (size_t i = 0; i < ll; i++) blank &= buf[at + i] == ' ' || buf[at + i] == '\r' || buf[at + i] == '\t';
            if (!blank) rc = parse_line(buf + at, ll, test, n, items, n_have, path, lineno, d);
            at += ll + 1;
            if (rc == DSQ_OK) keep = at;
        }
        free(buf);
        if (rc < 0) return rc;
    }
    j->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (restart ? O_TRUNC : 0), 0644);
    if (j->fd < 0) return dsq_fail_errno(d, errno, path, "cannot open for appending");
    if (!restart && ftruncate(j->fd, (off_t)keep) < 0) return dsq_fail_errno(d, errno, path, "cannot truncate");
    if (lseek(j->fd, 0, SEEK_END) < 0) return dsq_fail_errno(d, errno, path, "cannot seek");
    return DSQ_OK;
}

int dsq_ep_journal_append(dsq_ep_journal *j, size_t doc, const dsq_gsm8k_item *it, const dsq_ep_item *item, dsq_diag *d)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "doc_id", json_object_new_int64((int64_t)doc));
    json_object_object_add(o, "question", json_object_new_string_len(it->question, (int)it->question_len));
    json_object_object_add(o, "completion", json_object_new_string_len(item->completion, (int)item->len));
    json_object_object_add(o, "prompt_tokens", json_object_new_int64(item->prompt_tokens));
    json_object_object_add(o, "gen_tokens", json_object_new_int64(item->gen_tokens));
    json_object_object_add(o, "stop", json_object_new_string(item->finish));
    size_t n;
    const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    char *line = malloc(n + 1);
    int rc = DSQ_OK;
    if (!line) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else {
        memcpy(line, s, n);
        line[n] = '\n';
        size_t off = 0;
        while (off < n + 1 && rc == DSQ_OK) {
            ssize_t w = write(j->fd, line + off, n + 1 - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) rc = dsq_fail_errno(d, errno, j->path, "cannot append");
            else off += (size_t)w;
        }
        if (rc == DSQ_OK && fdatasync(j->fd) < 0) rc = dsq_fail_errno(d, errno, j->path, "cannot sync");
    }
    free(line);
    json_object_put(o);
    return rc;
}

void dsq_ep_journal_close(dsq_ep_journal *j)
{
    if (j->fd >= 0) close(j->fd);
    free(j->path);
    j->fd = -1;
    j->path = NULL;
}
