/* cli.h - what every ds-* program shares: display levels, messages, progress,
 * signal handling, number parsing and exit codes. Linked into the CLIs only
 * (not libdsq): with the programs (programs/ds_*.c), the only code that prints.
 *
 * Exit codes: 0 ok, 1 error (bad input, i/o, interrupted), 2 usage. */
#ifndef DSQ_CLI_H
#define DSQ_CLI_H

#include "dsq_error.h"

#include <stdint.h>
#include <stdio.h>

enum { DSQ_EXIT_OK = 0, DSQ_EXIT_ERROR = 1, DSQ_EXIT_USAGE = 2 };

typedef struct dsq_cli {
    const char *prog;   /* "ds-quant" */
    int level;          /* 0 silent, 1 errors, 2 results+warnings (default), 3 progress info, 4 debug */
    int json;           /* --json: one JSON object on stdout */
    int threads;        /* -T, 0 = all cores */
    int progress;       /* 1 when stderr is a TTY and level >= 2 and not --no-progress */
} dsq_cli;

/* Fill defaults and install SIGINT/SIGTERM handlers: the first signal sets
 * the interrupted flag (library calls unwind and remove their own temps); a
 * second one removes every temporary (dsq_tmpfiles_unlink_all) and exits at
 * once with status 1. */
void dsq_cli_init(dsq_cli *c, const char *prog);
/* Set by the signal handler; long loops poll it (library code gets it as a
 * cancel flag pointer). */
extern volatile int dsq_cli_interrupted;

void dsq_cli_error(const dsq_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dsq_cli_warn(const dsq_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dsq_cli_info(const dsq_cli *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Print "prog: error: <diag or strerror>" and return DSQ_EXIT_ERROR. */
int dsq_cli_fail(const dsq_cli *c, int status, const dsq_diag *d);
/* Usage error: message, hint to -h, return DSQ_EXIT_USAGE. */
int dsq_cli_usage_error(const dsq_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dsq_cli_version(const dsq_cli *c);

/* Parse a non-negative integer with optional K/M/G (1024-based) suffix.
 * Returns 0 on success, -1 if malformed or outside [min, max]. */
int dsq_cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int dsq_cli_parse_int(const char *s, long min, long max, int *out);
int dsq_cli_parse_float(const char *s, double min, double max, double *out);

/* Progress line on stderr, TTY only, throttled to ~6 updates/s.
 * total may be 0 when unknown. unit "B" prints bytes with GB/s, else items/s. */
typedef struct dsq_progress {
    const dsq_cli *cli;
    const char *label;
    const char *unit;
    uint64_t total;
    double t0, last;
    int shown;
} dsq_progress;

void dsq_progress_begin(dsq_progress *p, const dsq_cli *c, const char *label,
                        const char *unit, uint64_t total);
void dsq_progress_update(dsq_progress *p, uint64_t done);
void dsq_progress_end(dsq_progress *p);

/* --json output, the one emitter of every program: o as one line on stdout
 * (indented over lines when pretty), then freed. dsq_cli_json_num: a
 * number, or null for NaN / Inf (JSON has no such numbers). */
struct json_object;
void dsq_cli_json_print(struct json_object *o, int pretty);
/* A summary object that opens with {"tool": prog, "version": .., "status": status}
 * (no status when NULL). */
struct json_object *dsq_cli_json_tool(const dsq_cli *c, const char *status);
struct json_object *dsq_cli_json_num(double v);

double dsq_now(void); /* monotonic seconds */
/* Peak resident set size of this process in bytes (VmHWM), 0 if unknown. */
uint64_t dsq_peak_rss(void);

#endif
