/* fuzz_journal.c - libFuzzer target: the ds-eval gsm8k --endpoint journal
 * reader (dsq_ep_journal_parse, endpoint_journal.c) on arbitrary bytes,
 * against a fixed three-question dataset and a run of n = 2 items.
 * Invariants (else abort): on success the bytes kept end on a line, the
 * items read are n_have, each doc < n with its completion NUL-terminated at
 * its length, and the tail holds only whole lines of the input beyond the
 * run's items (every one parses again as a record of a doc >= n); on
 * failure nothing is left allocated in tail. Must never crash, leak or read
 * out of bounds. Seeds: corpus/journal/. */
#include "endpoint.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define N 2

static const dsq_gsm8k_set *dataset(void)
{
    static dsq_gsm8k_set set;
    static int done;
    if (!done) {
        const char *t = "{\"question\": \"q0\", \"answer\": \"#### 1\"}\n{\"question\": \"q1\", \"answer\": \"#### 2\"}\n"
                        "{\"question\": \"q2\", \"answer\": \"#### 3\"}\n";
        if (dsq_gsm8k_parse(&set, t, strlen(t), "t", NULL) != DSQ_OK) abort();
        done = 1;
    }
    return &set;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const dsq_gsm8k_set *set = dataset();
    dsq_ep_item items[N];
    memset(items, 0, sizeof items);
    size_t have = 99, tail_len = 99, keep = 99;
    char *tail = (char *)1;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_ep_journal_parse((const char *)data, size, "j", set, N, items, &have, &tail, &tail_len, &keep, &d);
    if (rc == DSQ_OK) {
        CHECK(keep <= size && (keep == 0 || data[keep - 1] == '\n'));
        size_t count = 0;
        for (int i = 0; i < N; i++) {
            if (!items[i].have) { CHECK(!items[i].completion); continue; }
            count++;
            CHECK(items[i].completion && items[i].completion[items[i].len] == 0);
        }
        CHECK(count == have);
        CHECK(tail_len <= keep && (tail_len == 0) == (tail == NULL));
        if (tail_len) {
            CHECK(tail[tail_len - 1] == '\n');
            /* the tail read as a journal of a run of n: no item below n, nothing dropped */
            dsq_ep_item none[N];
            memset(none, 0, sizeof none);
            size_t h2, t2l, k2;
            char *t2;
            CHECK(dsq_ep_journal_parse(tail, tail_len, "tail", set, N, none, &h2, &t2, &t2l, &k2, NULL) == DSQ_OK);
            CHECK(h2 == 0 && t2l == tail_len && k2 == tail_len && !memcmp(t2, tail, tail_len));
            free(t2);
        }
    } else {
        CHECK(rc < 0 && tail == NULL && tail_len == 0);
    }
    for (int i = 0; i < N; i++) free(items[i].completion);
    free(tail);
    return 0;
}
