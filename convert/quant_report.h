/* quant_report.h - what ds-quant reports, built here so the program only
 * prints: a dry run's plan and a finished run's summary as members of the
 * --json object (added after the head the caller put in it) or as text on
 * a FILE the caller chooses, and the calibration's warnings and notes
 * through a callback. */
#ifndef DSQ_QUANT_REPORT_H
#define DSQ_QUANT_REPORT_H

#include "calib.h"
#include "convert.h"
#include "recipe.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>

/* dry_run, tensors, source_bytes, estimated_output_bytes,
 * estimated_peak_rss_bytes, num_hidden_layers, by_scheme, plan (one
 * object per tensor: name, role, mtp, dtype, shape, scheme, group_size,
 * source_bytes, estimated_bytes, rule). */
void dsq_plan_report_json(json_object *o, const dsq_convert *c, const dsq_recipe *r);
/* The plan table (level 2) and its totals line. */
void dsq_plan_report_text(FILE *f, const dsq_convert *c, const dsq_recipe *r, int level);

typedef struct dsq_run_report {
    const dsq_convert_summary *s;
    const char *input, *output;
    int threads;            /* worker threads used */
    int error_sample;       /* the error was measured on 1 row in N */
    const char *calib_json; /* the calibration summary (JSON text), NULL without */
    uint64_t peak_rss;      /* bytes */
    int level;              /* 3: every tensor's result too (JSON) */
} dsq_run_report;

/* input, output, shards, tensors, resumed, by_scheme, the byte counts and
 * ratios, seconds, gb_per_s, peak_rss_bytes, threads, error (the measured
 * relative error: mean, max, the 10 worst), tensor_results (level 3),
 * calibration, export. */
void dsq_run_report_json(json_object *o, const dsq_run_report *r);
/* Counts, throughput, the export and the 5 worst errors, for people. */
void dsq_run_report_text(FILE *f, const dsq_run_report *r);

/* The calibration's expert fallbacks (warnings: level 0), per-layer expert
 * coverage (level 3), totals and rolled-back modules (level 2), one
 * message per call of note. */
void dsq_calib_notes(const dsq_calib_result *r, void (*note)(void *ctx, int level, const char *msg), void *ctx);

#endif
