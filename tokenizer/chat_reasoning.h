/* chat_reasoning.h - a model's output split into reasoning and answer, as
 * vLLM's reasoning parsers split it (--reasoning-parser).
 *
 *  deepseek_r1: the text through the first "<think>" is dropped when there
 *    is one; without "</think>" the whole output is reasoning and there is
 *    no content; otherwise reasoning is what precedes the first "</think>"
 *    and content what follows it (no content when that is empty).
 *  deepseek_v3: deepseek_r1 when the request's chat_template_kwargs has a
 *    true "thinking" or "enable_thinking", else everything is content.
 *
 * Streaming gives the same split piece by piece: text before the first
 * "</think>" is reasoning (a first "<think>" is dropped), text after it is
 * content, and bytes that may begin a marker are held back until the next
 * call decides them. The pieces concatenate to the whole-text split whenever
 * "<think>" occurs only at the start of the output or not at all (as the
 * DeepSeek models write it); vLLM's own streaming and whole-text answers
 * differ in the other cases too. */
#ifndef DSQ_CHAT_REASONING_H
#define DSQ_CHAT_REASONING_H

#include <stddef.h>

struct dsq_sbuf;

enum dsq_reasoning_parser {
    DSQ_REASONING_NONE = 0,        /* everything is content */
    DSQ_REASONING_DEEPSEEK_R1 = 1,
    DSQ_REASONING_DEEPSEEK_V3 = 2
};

/* "deepseek_r1" / "deepseek_v3" -> the enum; -1 for other names. */
int dsq_reasoning_parser_from_name(const char *name);
/* The parser that applies to one request: deepseek_v3 becomes deepseek_r1
 * or none by the thinking switch (thinking || enable_thinking). */
int dsq_reasoning_parser_for(int parser, int thinking);

/* Whole-text split. Pointers are into text; *has_reasoning / *has_content
 * are 0 where vLLM answers null. */
void dsq_reasoning_split(int parser, const char *text, size_t len,
                         const char **reasoning, size_t *rlen, int *has_reasoning,
                         const char **content, size_t *clen, int *has_content);

typedef struct dsq_reasoning_stream {
    int parser;
    int in_content;   /* past "</think>" (or no parser) */
    int seen_start;   /* the first "<think>" was dropped */
    size_t pos;       /* bytes of the text consumed */
} dsq_reasoning_stream;

void dsq_reasoning_stream_init(dsq_reasoning_stream *s, int parser);
/* text: all the output so far (it only grows between calls); final: nothing
 * follows. Appends the new reasoning to r and the new content to c. */
void dsq_reasoning_stream_next(dsq_reasoning_stream *s, const char *text, size_t len, int final,
                               struct dsq_sbuf *r, struct dsq_sbuf *c);

#endif
