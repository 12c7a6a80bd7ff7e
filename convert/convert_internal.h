/* convert_internal.h - state shared by convert.c (planning, metadata, output
 * files, resume) and convert_pool.c (the worker pipeline). Not a public API. */
#ifndef DSQ_CONVERT_INTERNAL_H
#define DSQ_CONVERT_INTERNAL_H

#include "container.h"
#include "convert.h"
#include "safetensors.h"

#include <pthread.h>

/* Row blocks handed to quantize are about this many bytes of float32: small
 * enough to stay in L2 between read, quantize and error measurement. */
#define DSQ_CONV_BLOCK_BYTES (1u << 20)
#define DSQ_CONV_DROP_BYTES (8u << 20)   /* source bytes unmapped per madvise */

/* Per-tensor execution plan, parallel to plan.v. */
typedef struct dsq_conv_tensor {
    int      stream;        /* output streamed in pieces (blob > stream_bytes) */
    int      measure;       /* quantization error is measured */
    int      shard;         /* output shard index (0 for a single file) */
    int64_t  piece_rows;    /* rows per piece (all rows when !stream) */
    size_t   npieces;
    size_t   first_item;    /* index of its first item in the item list */
    int64_t  block_rows;    /* rows per quantize call */
    dsq_qlayout layout;     /* of the whole blob */
} dsq_conv_tensor;

/* One unit of work: rows [row0, row0 + nrows) of tensor `tensor`. */
typedef struct dsq_conv_item {
    size_t   tensor;
    size_t   piece;
    int64_t  row0, nrows;
    uint64_t mem;           /* bytes reserved while in flight */
} dsq_conv_item;

/* A finished item. Whole tensors come back encoded; streamed pieces come
 * back as a valid blob of just their rows ("piece blob"). */
typedef struct dsq_conv_result {
    int status;
    dsq_diag diag;
    dsq_ctr_blob blob;      /* whole tensor: encoded */
    uint8_t *piece;         /* streamed: piece blob, piece_size bytes */
    size_t piece_size;
    size_t piece_cap;       /* its allocation (dsq_conv_buf_put) */
    uint8_t *zframe;        /* streamed with zstd: the piece's W rows as one frame */
    size_t zframe_size, zframe_cap;
    void *blob_buf;         /* whole tensor: the buffer blob.data points into */
    size_t blob_cap;
    double err2, ref2;
    uint8_t src_sha[DSQ_SHA256_LEN]; /* ledger digest of the item's source rows */
} dsq_conv_result;

/* A streamed tensor's payload SHA-256 (zstd, .dsq output), taken on the
 * workers in file order: the worker of piece k waits until piece k-1 is
 * hashed, hashes its rows (piece 0 also the blob header and the gap after
 * it), and passes the turn on; the writer adds the S / Z / R sections at the
 * last piece and ends the payload with the digest. Pieces of one tensor
 * hash one after another, different tensors at once: before, the writer
 * thread hashed every streamed byte alone. */
typedef struct dsq_conv_hash {
    dsq_sha256 h;
    size_t next;            /* pieces hashed (the turn) */
    int broken;             /* a piece failed or no context: nothing more hashed */
} dsq_conv_hash;

struct dsq_convert {
    dsq_convert_opts o;
    dsq_st_model *m;
    dsq_plan plan;
    dsq_conv_tensor *ct;
    int nshards;              /* 0: single file */
    int have_config;
    int64_t num_hidden_layers;
    char *meta;               /* metadata JSON */
    char fingerprint[2 * DSQ_SHA256_LEN + 1];
    size_t max_block_floats;  /* per-thread float32 scratch */
    size_t max_block_blob;    /* per-thread block blob scratch */
    dsq_tensor_result *results;
    int ran;
    int ledger_on;            /* workers hash source rows for the resume ledger */
    dsq_conv_hash *hash;      /* per tensor, while a pipeline runs (NULL: writer hashes) */
    pthread_mutex_t hash_mu;
    pthread_cond_t hash_cv;
    /* export (convert_export.c) */
    const char *xformat;      /* NULL: .dsq container */
    uint64_t xshard;          /* export shard size (o.shard_bytes is 0 then) */
    dsq_export_src *xsrc;     /* plan as export sources */
};

/* Hand each finished item of the plan's tensors [from, n) to fn, in order,
 * instead of the container writer. Returns the pipeline's status. */
typedef int (*dsq_conv_item_fn)(void *ctx, const dsq_conv_item *it, dsq_conv_result *r, dsq_diag *d);
int dsq_conv_run_items(dsq_convert *c, size_t from, dsq_conv_item_fn fn, void *ctx, dsq_diag *d);

/* Export side (convert_export.c): plan check at prepare, the run. */
int dsq_conv_export_prepare(dsq_convert *c, dsq_diag *d);
int dsq_conv_export_run(dsq_convert *c, dsq_convert_summary *s, dsq_diag *d);

/* Writer side of the pipeline, implemented in convert.c: called on the
 * writer thread for each finished item, in item order. */
typedef struct dsq_conv_sink dsq_conv_sink;
int dsq_conv_sink_item(dsq_conv_sink *s, const dsq_conv_item *it, dsq_conv_result *r,
                       dsq_diag *d);

/* Run items [0, nitems) through `threads` workers, handing results to the
 * sink in order. Returns the first error in item order (or the sink's, or
 * DSQ_ERR_INTERRUPTED). */
int dsq_conv_pipeline_run(dsq_convert *c, const dsq_conv_item *items, size_t nitems,
                          dsq_conv_sink *sink, dsq_diag *d);

/* Output buffers handed from the workers to the writer and back
 * (convert_pool.c). A fresh allocation of a tensor's size is a fresh
 * mapping: glibc serves it by mmap and unmaps it on free, so each item paid
 * a page fault per 4 KiB of its output (a tenth or more of a conversion's
 * CPU, `perf record` shows it), and glibc's adaptive threshold makes the
 * count vary 2x between runs. Recycled buffers are faulted in once. */
#define DSQ_CONV_BUFS_MAX 64
typedef struct dsq_conv_bufs {
    pthread_mutex_t mu;
    void *p[DSQ_CONV_BUFS_MAX];
    size_t cap[DSQ_CONV_BUFS_MAX];
    int n;
    uint64_t held, limit;   /* bytes cached, and the most that may be */
} dsq_conv_bufs;

/* A buffer of at least need bytes (*cap: its size), or NULL; bufs may be NULL. */
void *dsq_conv_buf_get(dsq_conv_bufs *b, size_t need, size_t *cap);
/* Give a buffer back (kept for reuse or freed); NULL p is ignored. */
void dsq_conv_buf_put(dsq_conv_bufs *b, void *p, size_t cap);

/* A worker's reusable output buffer. */
typedef struct dsq_conv_scratch {
    uint8_t *buf;
    size_t cap;
    uint8_t *src;           /* source bytes of one row block (dsq_st_pread_rows) */
    size_t src_cap;
    dsq_conv_bufs *bufs;    /* where output buffers come from (may be NULL) */
} dsq_conv_scratch;

/* Process one item on the calling thread (exposed for the pipeline only). */
int dsq_conv_process(dsq_convert *c, const dsq_conv_item *it, float *fbuf, uint8_t *bbuf,
                     dsq_conv_scratch *ws, dsq_conv_result *r);

#endif
