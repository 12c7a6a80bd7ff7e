/* chat_reasoning.c - reasoning / content split (see chat_reasoning.h). */
#include "chat_reasoning.h"

#include "dsq_sbuf.h"

#include <string.h>

#define START "<think>"
#define END "</think>"
#define START_N (sizeof START - 1)
#define END_N (sizeof END - 1)

int dsq_reasoning_parser_from_name(const char *name)
{
    if (!name) return -1;
    if (strcmp(name, "deepseek_r1") == 0) return DSQ_REASONING_DEEPSEEK_R1;
    if (strcmp(name, "deepseek_v3") == 0) return DSQ_REASONING_DEEPSEEK_V3;
    return -1;
}

int dsq_reasoning_parser_for(int parser, int thinking)
{
    if (parser == DSQ_REASONING_DEEPSEEK_V3)
        return thinking ? DSQ_REASONING_DEEPSEEK_R1 : DSQ_REASONING_NONE;
    return parser;
}

void dsq_reasoning_split(int parser, const char *text, size_t len,
                         const char **reasoning, size_t *rlen, int *has_reasoning,
                         const char **content, size_t *clen, int *has_content)
{
    *reasoning = text;
    *rlen = 0;
    *has_reasoning = 0;
    *content = text;
    *clen = len;
    *has_content = 1;
    if (parser != DSQ_REASONING_DEEPSEEK_R1) return;
    const char *p = text, *end = text + len;
    const char *st = memmem(p, len, START, START_N);
    if (st) p = st + START_N;
    const char *en = memmem(p, (size_t)(end - p), END, END_N);
    *has_reasoning = 1;
    *reasoning = p;
    if (!en) {
        *rlen = (size_t)(end - p);
        *content = end;
        *clen = 0;
        *has_content = 0;
        return;
    }
    *rlen = (size_t)(en - p);
    *content = en + END_N;
    *clen = (size_t)(end - *content);
    *has_content = *clen > 0;
}

void dsq_reasoning_stream_init(dsq_reasoning_stream *s, int parser)
{
    memset(s, 0, sizeof *s);
    s->parser = parser;
    s->in_content = parser != DSQ_REASONING_DEEPSEEK_R1;
}

/* Bytes at the end of [p, e) that are a proper prefix of marker m. */
static size_t partial_tail(const char *p, const char *e, const char *m, size_t mn)
{
    size_t n = (size_t)(e - p);
    for (size_t k = mn - 1; k > 0; k--)
        if (k <= n && memcmp(e - k, m, k) == 0) return k;
    return 0;
}

void dsq_reasoning_stream_next(dsq_reasoning_stream *s, const char *text, size_t len, int final,
                               dsq_sbuf *r, dsq_sbuf *c)
{
    while (s->pos < len) {
        const char *p = text + s->pos, *e = text + len;
        if (s->in_content) {
            dsq_sb_add(c, p, (size_t)(e - p));
            s->pos = len;
            return;
        }
        const char *en = memmem(p, (size_t)(e - p), END, END_N);
        const char *st = s->seen_start ? NULL : memmem(p, (size_t)(e - p), START, START_N);
        if (st && (!en || st < en)) { /* reasoning before the first <think>, which is dropped */
            dsq_sb_add(r, p, (size_t)(st - p));
            s->seen_start = 1;
            s->pos = (size_t)(st + START_N - text);
            continue;
        }
        if (en) {
            dsq_sb_add(r, p, (size_t)(en - p));
            s->in_content = 1;
            s->pos = (size_t)(en + END_N - text);
            continue;
        }
        size_t hold = final ? 0 : partial_tail(p, e, END, END_N);
        if (!final && !s->seen_start) {
            size_t h2 = partial_tail(p, e, START, START_N);
            if (h2 > hold) hold = h2;
        }
        size_t take = (size_t)(e - p) - hold;
        dsq_sb_add(r, p, take);
        s->pos += take;
        return;
    }
}
