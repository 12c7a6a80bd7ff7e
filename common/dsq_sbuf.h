/* dsq_sbuf.h - a growing string: the text the library builds in memory
 * (prompts, fingerprints, padding around the JSON that json-c writes).
 *
 * Allocation failure is sticky: once oom is set every append is a no-op,
 * so a builder appends without checking and tests oom once at the end. */
#ifndef DSQ_SBUF_H
#define DSQ_SBUF_H

#include <stddef.h>

typedef struct dsq_sbuf {
    char *p;        /* NUL-terminated once anything was appended; owned */
    size_t n, cap;
    int oom;
} dsq_sbuf;

void dsq_sb_add(dsq_sbuf *b, const void *s, size_t n);
void dsq_sb_puts(dsq_sbuf *b, const char *s);
void dsq_sb_printf(dsq_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
