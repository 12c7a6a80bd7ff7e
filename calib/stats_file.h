/* stats_file.h - calibration statistics on disk (--save-stats / --stats /
 * --resume), in the .dsq container (formats/container.h): every payload has
 * a SHA-256, the index and metadata are hashed, writes are atomic.
 *
 * Tensors (role DSQ_ROLE_CALIB_STATS, stored raw, written layer by layer):
 *   "L<l>/site/<site>"     activation statistics of one linear input:
 *        u8[4] "DSQS", u32 version 1, u64 count, u64 in, u32 flags (0),
 *        u32 reserved, then f64 sum_abs[in], f64 sum_sq[in], f32 absmax[in],
 *        f32 min[in], f32 max[in]   (little-endian; 32-byte header)
 *   "L<l>/experts"         u64 [n_experts] tokens routed to each expert
 *   "L<l>/scale/<prev>"    f32 [n] the searched scales of the scaling group
 *                          whose input <prev> produces (AWQ or the w4a8
 *                          alpha search); aux[0] = search id (awq.h)
 *   "L<l>/loss/<prev>"     f64 [2] that search's output MSE with s = 1 and
 *                          with the chosen s
 *   "L<l>/clip"            u8 per linear of the layer (engine order): the
 *                          clip decision (0/1) checked on sampled outputs,
 *                          255 where none applies
 *   "L<l>/done"            struct dsq_stats_done: the layer is complete, and
 *                          the SHA-256 of the hidden states after it
 * Metadata: {"format": "dsq-calib-stats", "version": 1, ...} (calib.c).
 *
 * Checkpoints: the writer keeps a resume journal (DSQ_CTR_RESUME) and is
 * checkpointed only at layer ends, after "L<l>/done"; a resumed writer lists
 * the tensors of complete layers. Re-putting a recovered tensor checks that
 * its bytes are identical (DSQ_ERR_STATE otherwise) and skips it. */
#ifndef DSQ_STATS_FILE_H
#define DSQ_STATS_FILE_H

#include "container.h"
#include "dsq_error.h"
#include "stats.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_STATS_FORMAT  "dsq-calib-stats"
#define DSQ_STATS_VERSION 1

/* "L<layer>/<kind>[/<what>]" into buf. */
void dsq_stats_name(char *buf, size_t n, int layer, const char *kind, const char *what);

/* ---- payloads ---------------------------------------------------------- */

int dsq_stats_encode_site(const dsq_act_stats *s, uint8_t **buf, size_t *n);
/* Validate and decode (hostile input): header, size, finite values, min <=
 * max, absmax >= |min|,|max| consistency. out is initialised with name. */
int dsq_stats_decode_site(const void *buf, size_t n, const char *name, dsq_act_stats *out, dsq_diag *d);
/* f32 vector of exactly n finite values > 0 when positive != 0 (>= 0 otherwise). */
int dsq_stats_decode_f32(const void *buf, size_t bytes, int64_t n, int positive, const char *name, float *out,
                         dsq_diag *d);

typedef struct dsq_stats_done {
    char     magic[4];        /* "DSQL" */
    uint32_t layer;
    uint32_t hidden_file;     /* 0/1: spill file holding the layer output */
    uint32_t reserved;
    uint64_t samples;
    uint64_t tokens;
    uint8_t  hidden_sha256[DSQ_SHA256_LEN];
} dsq_stats_done;
_Static_assert(sizeof(dsq_stats_done) == 64, "dsq_stats_done is 64 bytes");

/* ---- writer ------------------------------------------------------------- */

typedef struct dsq_stats_writer dsq_stats_writer;

enum dsq_stats_writer_flags {
    DSQ_STATS_RESUME    = 1u << 0,   /* continue from the journal if there is one */
    DSQ_STATS_OVERWRITE = 1u << 1    /* replace an existing final file */
};

/* The hidden-state spill files of path's checkpoint are "<base>.h0" and
 * "<base>.h1", base "<dir>/.<name>.partial.hidden" (malloc'd; NULL: out of
 * memory): beside the partial file, so the run that continues or replaces
 * the checkpoint finds them. */
char *dsq_stats_spill_base(const char *path);
/* Remove what an interrupted writer of path left: the partial file, its
 * journal and the two spill files, each only under those names and only
 * when it is a regular file or a link (never followed). Returns how many
 * were removed. */
int  dsq_stats_remove_partial(const char *path);

/* Open path for writing (bytes go to a hidden partial file until finish).
 * Without DSQ_STATS_RESUME a stale partial file, its journal and the spill
 * files are removed (dsq_stats_remove_partial).
 * With it, the journal's fingerprint must equal fingerprint (else
 * DSQ_ERR_STATE) and the tensors it lists are recovered. */
int  dsq_stats_writer_open(dsq_stats_writer **w, const char *path, const char *fingerprint, unsigned flags,
                           dsq_diag *d);
/* 1 when name was recovered from an earlier run. */
int  dsq_stats_writer_has(const dsq_stats_writer *w, const char *name);
/* Append a tensor (1-D, n bytes; elem is the element size for the shape),
 * or verify and skip a recovered one. */
int  dsq_stats_writer_put(dsq_stats_writer *w, const char *name, const void *data, size_t n, int elem,
                          uint32_t aux0, dsq_diag *d);
/* Read back a recovered tensor (malloc'd copy, SHA-256 checked). */
int  dsq_stats_writer_get(dsq_stats_writer *w, const char *name, void **data, size_t *n, uint32_t *aux0,
                          dsq_diag *d);
int  dsq_stats_writer_checkpoint(dsq_stats_writer *w, dsq_diag *d);
const char *dsq_stats_writer_tmp_path(const dsq_stats_writer *w);
/* Commit with metadata (a JSON object). Frees w, also on failure. */
int  dsq_stats_writer_finish(dsq_stats_writer *w, const char *meta_json, dsq_diag *d);
/* Interrupted: keep the partial file and journal (resumable). Frees w. */
void dsq_stats_writer_detach(dsq_stats_writer *w);
/* Failed: remove the partial file and journal. Frees w. NULL is a no-op. */
void dsq_stats_writer_abort(dsq_stats_writer *w);

/* ---- reader ------------------------------------------------------------- */

typedef struct dsq_stats_reader dsq_stats_reader;

/* Open a finished stats file: container checks plus format/version in the
 * metadata. */
int  dsq_stats_reader_open(dsq_stats_reader **r, const char *path, dsq_diag *d);
const char *dsq_stats_reader_meta(const dsq_stats_reader *r);
const char *dsq_stats_reader_path(const dsq_stats_reader *r);
/* malloc'd raw bytes of name, SHA-256 checked (DSQ_ERR_CHECKSUM);
 * DSQ_ERR_NOT_FOUND when absent. */
int  dsq_stats_reader_get(const dsq_stats_reader *r, const char *name, void **data, size_t *n, uint32_t *aux0,
                          dsq_diag *d);
void dsq_stats_reader_close(dsq_stats_reader *r);

#endif
