/* calib_fixture.h - helpers shared by the calibration tests
 * (test_calib_unit.c, test_calib_driver.c, test_calib_quality.c). */
#ifndef DSQ_CALIB_FIXTURE_H
#define DSQ_CALIB_FIXTURE_H

#include "dsq_test.h"
#include "calib.h"
#include "model.h"
#include "safetensors.h"
#include "stats.h"
#include "fixtures/synth_ckpt.h"
#include "tokenizer.h"

/* The test's scratch directory (setup makes it, teardown removes it). */
extern char *g_dir;
int setup(void **state);
int teardown(void **state);
/* name inside g_dir (caller frees) */
char *path(const char *name);

/* A byte-level tokenizer.json with no merges: one token per byte (id = byte). */
void write_byte_tokenizer(const char *dir);
/* Synthetic DeepSeek-V3 (no MTP) and Llama shapes, float32. */
void tiny_v3(dsq_synth_opts *o);
void tiny_llama(dsq_synth_opts *o, int kv_heads);
/* so written to g_dir/name with the byte tokenizer (caller frees the path). */
char *make_model(const dsq_synth_opts *so, const char *name);
/* n seeded token ids below vocab (caller frees). */
int32_t *rand_tokens(size_t n, int vocab, uint64_t seed);
/* Test options: scheme, n samples of L pre-tokenized tokens, 2 threads,
 * small sample caps and grid. */
void base_opts(dsq_calib_opts *o, const char *scheme, const int32_t *tok, int n, int L);
/* dsq_calib_run, asserting success (the diag printed otherwise). */
dsq_calib_result *calibrate(const char *model, const dsq_calib_opts *o);
/* a and b hold the same n floats (or are both NULL). */
int arr_eq(const float *a, const float *b, int64_t n);
/* Two results hold identical entries for every tensor of a. */
void assert_same_result(const dsq_calib_result *a, const dsq_calib_result *b, const char *model);
/* Every scale in the result is finite and in range; returns the number of
 * entries with scales. */
int check_finite(const dsq_calib_result *r, const char *model);
/* Rewrites tensor t (rows x cols float32 values w) in place. */
typedef void (*tensor_edit)(void *ctx, const dsq_st_tensor *t, float *w, int64_t rows, int64_t cols);
/* A float32 copy of model at out (config + tokenizer copied), each tensor
 * passed through edit first (NULL: copied unchanged). */
void edit_copy(const char *model, const char *out, tensor_edit edit, void *ctx);
/* Fold the result into a float32 copy of model at out (config + tokenizer copied). */
void fold_copy(const char *model, const dsq_calib_result *r, const char *out);
/* DSA mode of the models logits_of opens (V3.2 fold checks run the float
 * indexer: e4m3 round trips turn the fold's float rounding into jumps) */
extern int g_dsa_mode;
/* The float logits of tok[0..n) (caller frees; *vocab their width). */
float *logits_of(const char *model, const int32_t *tok, int n, int64_t *vocab);
/* Calibration target: the scheme ctx for every linear but the router
 * (awq-w4a16 at group 64). */
int target(void *ctx, const char *name, int64_t r, int64_t c, const dsq_scheme **o, int32_t *gs);
/* The model with layers loaded on demand (as calibration opens it), 2 threads. */
dsq_model *open_lazy(const char *model);
/* 1 when the sample MODEL and the data files (a NULL-terminated list) are
 * there; else one skip line and 0 (the sample tests need them all). */
int sample_present(const char *model, ...);
/* Hidden states of n_samples windows of T tokens of text, embedded. */
dsq_hstore *text_states(dsq_model *m, dsq_tokenizer *tk, const char *file, int n_samples, int T);

#endif
