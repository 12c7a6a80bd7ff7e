/* prof.h - optional per-op wall / CPU time and FLOP counts of a forward
 * (engine internals; bench_engine's -P prints them).
 *
 * Off unless the model's prof pointer is set: every hook below is one NULL
 * test per op (per gemm call, not per element), so the hot paths are
 * unchanged. On: two clock reads (CLOCK_MONOTONIC and the process CPU
 * clock, which counts every thread, spinning pool workers included) per op.
 * Ops are keyed by name; linears by their HF name with digit runs replaced
 * by '*' ("model.layers.*.mlp.experts.*.gate_proj.weight"), so all experts
 * of a layer add up to one line. */
#ifndef DSQ_PROF_H
#define DSQ_PROF_H

#include <stdint.h>

#define DSQ_PROF_MAX 48
#define DSQ_PROF_NAME 64

typedef struct dsq_prof_op {
    char name[DSQ_PROF_NAME];
    double wall, cpu;   /* seconds */
    double flop;        /* 2 x rows x cols x tokens for linears; attention: 2 x its products */
    double bytes;       /* weight bytes read (linears: the blob), for GB/s of decode */
    long calls;
} dsq_prof_op;

typedef struct dsq_prof {
    dsq_prof_op op[DSQ_PROF_MAX];
    int n;              /* ops in use; an op past DSQ_PROF_MAX goes to the last slot */
} dsq_prof;

typedef struct dsq_prof_mark {
    double wall, cpu;
} dsq_prof_mark;

/* Start an op: mk gets the clocks (nothing when p is NULL). */
void dsq_prof_begin(const dsq_prof *p, dsq_prof_mark *mk);
/* End it: add the time since mk and flop to the op called name (digit
 * runs folded to '*'). Nothing when p is NULL. */
void dsq_prof_end(dsq_prof *p, const dsq_prof_mark *mk, const char *name, double flop);
/* The same, with the weight bytes the op read (a linear's blob). */
void dsq_prof_end_io(dsq_prof *p, const dsq_prof_mark *mk, const char *name, double flop, double bytes);
/* Zero every op. */
void dsq_prof_reset(dsq_prof *p);

#endif
