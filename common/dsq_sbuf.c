/* dsq_sbuf.c - a growing string (see dsq_sbuf.h). */
#include "dsq_sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsq_sb_add(dsq_sbuf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void dsq_sb_puts(dsq_sbuf *b, const char *s) { dsq_sb_add(b, s, strlen(s)); }

void dsq_sb_printf(dsq_sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) { dsq_sb_add(b, tmp, (size_t)k); return; }
    /* longer than the stack buffer (long tensor names): format again */
    char *big = malloc((size_t)k + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    dsq_sb_add(b, big, (size_t)k);
    free(big);
}
