/* prof.c - per-op timers of a forward (prof.h). */
#include "prof.h"

#include <string.h>
#include <time.h>

static double clk(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dsq_prof_begin(const dsq_prof *p, dsq_prof_mark *mk)
{
    if (!p) return;
    mk->wall = clk(CLOCK_MONOTONIC);
    mk->cpu = clk(CLOCK_PROCESS_CPUTIME_ID);
}

/* name with each run of digits replaced by one '*', truncated to fit */
static void fold(const char *name, char *out)
{
    size_t o = 0;
    for (const char *s = name; *s && o + 1 < DSQ_PROF_NAME; s++) {
        if (*s >= '0' && *s <= '9') {
            if (o == 0 || out[o - 1] != '*') out[o++] = '*';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = 0;
}

void dsq_prof_end(dsq_prof *p, const dsq_prof_mark *mk, const char *name, double flop)
{
    dsq_prof_end_io(p, mk, name, flop, 0.0);
}

void dsq_prof_end_io(dsq_prof *p, const dsq_prof_mark *mk, const char *name, double flop, double bytes)
{
    if (!p) return;
    const double wall = clk(CLOCK_MONOTONIC) - mk->wall, cpu = clk(CLOCK_PROCESS_CPUTIME_ID) - mk->cpu;
    char key[DSQ_PROF_NAME];
    fold(name ? name : "?", key);
    int i = 0;
    while (i < p->n && strcmp(p->op[i].name, key) != 0) i++;
    if (i == p->n) {
        if (p->n < DSQ_PROF_MAX) p->n++;
        i = p->n - 1;
        if (strcmp(p->op[i].name, key) != 0) {   /* new slot, or the overflow slot */
            if (p->op[i].calls == 0) memcpy(p->op[i].name, key, sizeof key);
            else memcpy(p->op[i].name, "(other)", 8);
        }
    }
    p->op[i].wall += wall;
    p->op[i].cpu += cpu;
    p->op[i].flop += flop;
    p->op[i].bytes += bytes;
    p->op[i].calls++;
}

void dsq_prof_reset(dsq_prof *p)
{
    if (p) memset(p, 0, sizeof *p);
}
