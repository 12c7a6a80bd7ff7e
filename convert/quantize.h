/* quantize.h - the whole ds-quant workflow as one library call.
 *
 * dsq_quantize_run takes a scheme or preset with its rules, the conversion
 * options and the calibration options, and does what a conversion needs in
 * order: a llama2.c checkpoint read through its float32 Hugging Face copy;
 * the recipe; every output precondition; when calibrating, the input
 * planned first (a config.json that contradicts the tensors, a missing
 * shard or what an export format cannot hold are refused before hours of
 * calibration), then calibration with its checkpoint (default
 * OUT.calib.dsq: --resume continues it, a finished one is reused, it is
 * removed after success); the rolled-back linears kept float; then the
 * conversion (or, for a dry run, only its plan). Nothing is printed:
 * progress and reports go through the hooks. */
#ifndef DSQ_QUANTIZE_H
#define DSQ_QUANTIZE_H

#include "calib.h"
#include "convert.h"
#include "recipe.h"

typedef struct dsq_quantize_rule {
    int keep;               /* 1: --keep REGEX, 0: --scheme-for REGEX=S */
    const char *s;
} dsq_quantize_rule;

typedef struct dsq_quantize_opts {
    const char *scheme;     /* one of scheme / preset */
    const char *preset;
    int group_size;         /* DSQ_GROUP_DEFAULT: the scheme's */
    const dsq_quantize_rule *rules; /* in order: the first matching rule wins */
    size_t n_rules;
    int dry_run;            /* plan only: nothing is written, no calibration */
    /* QuaRot (quarot.h): rotate the input into a plain float model first,
     * at "<OUT>.rot" beside the output; calibration and conversion read
     * that. Removed after success, kept for --resume after a failure. */
    int rotate;             /* 0: none, 1: quarot */
    uint64_t rotate_seed;
    dsq_convert_opts conv;  /* input, output and run options; recipe, calib, progress and cancel are set here */
    dsq_calib_opts calib;   /* calibration when .calib or .load_stats is set */
} dsq_quantize_opts;

/* Where the run stopped: the program's exit status and message depend on it. */
typedef enum dsq_quantize_stage {
    DSQ_QSTAGE_INPUT = 0,   /* reading a llama2.c checkpoint */
    DSQ_QSTAGE_ROTATE,      /* the QuaRot rotation of the input */
    DSQ_QSTAGE_RECIPE,      /* the recipe (unknown scheme, bad regex): a usage error */
    DSQ_QSTAGE_OUTPUT,      /* an output precondition */
    DSQ_QSTAGE_PREFLIGHT,   /* the plan checked before calibrating */
    DSQ_QSTAGE_CALIB,       /* calibration */
    DSQ_QSTAGE_ROLLBACK,    /* keeping the rolled-back linears */
    DSQ_QSTAGE_PREPARE,     /* the conversion's plan */
    DSQ_QSTAGE_CONVERT,     /* the conversion pass */
    DSQ_QSTAGE_DONE,
} dsq_quantize_stage;

typedef struct dsq_quantize_hooks {
    volatile int *cancel;                        /* set by a signal: stop, keep what --resume needs */
    dsq_calib_progress_fn calib_progress;        /* may be NULL */
    dsq_convert_progress_fn convert_progress;    /* may be NULL */
    /* a message for the user: level 0 a warning, else information shown from that display level (2, 3) */
    void (*note)(void *ctx, int level, const char *msg);
    /* calibration finished: its result, for a report */
    void (*calibrated)(void *ctx, const dsq_calib_result *r);
    /* the conversion is planned and about to run (not called for a dry run) */
    void (*planned)(void *ctx, const dsq_convert *c);
    void *ctx;
} dsq_quantize_hooks;

typedef struct dsq_quantize_result {
    dsq_quantize_stage stage;   /* DSQ_QSTAGE_DONE on success, else where it failed */
    dsq_convert *conv;          /* the planned conversion (its plan for a dry run) */
    dsq_recipe recipe;
    int have_recipe;
    dsq_calib_result *calib;    /* NULL without calibration */
    char *calib_json;           /* calibration summary with timing, NULL without */
    char *calib_json_meta;      /* the same without timing: what the output's metadata holds */
    dsq_convert_summary summary; /* after a conversion (arrays live until release) */
    int threads;                /* worker threads used */
    char *llama2c_dir;          /* the temporary copy of a llama2.c input, removed by release */
    char *ckpt;                 /* the default calibration checkpoint (OUT.calib.dsq) */
    char *rot_dir;              /* the rotated input (OUT.rot), NULL without --rotate */
} dsq_quantize_result;

/* Run the workflow. r is filled as far as it got (release it in any case).
 * Errors: those of each stage, r->stage saying which; DSQ_ERR_INTERRUPTED
 * when hooks->cancel was set (calibration or conversion can be resumed). */
int dsq_quantize_run(const dsq_quantize_opts *o, const dsq_quantize_hooks *hooks, dsq_quantize_result *r,
                     dsq_diag *d);
void dsq_quantize_result_release(dsq_quantize_result *r);

#endif
