/* container.h - the .dsq container: streaming writer, mmap reader, verifier.
 *
 * A .dsq file holds tensors (quantized or not) plus one JSON metadata object.
 * docs/dsq-format.md is the normative spec; in one paragraph:
 *
 *   [header 64 B][payload 0][pad][payload 1][pad]...[index][pad][metadata][pad][footer 192 B]
 *
 * Every payload starts at a multiple of 64 bytes (DSQ_CTR_ALIGN), so an
 * uncompressed payload can be used in place from the mapping with aligned
 * SIMD loads. Each payload is stored raw or as zstd: one frame, or (a streamed
 * tensor compressed piece by piece) a sequence of independent frames.
 * The binary index (one fixed-size record per tensor + a string table) and
 * the metadata follow the last payload; the fixed-size footer at EOF holds
 * their offsets, lengths and SHA-256s, and a SHA-256 of itself. Each tensor
 * record carries the SHA-256 of the RAW (uncompressed) payload. Layout is
 * canonical: payloads tile the file in index order with minimal zero padding,
 * so overlaps and holes are impossible by construction and checked on open.
 *
 * Threading: dsq_ctr_encode() touches no shared state and may run on any
 * number of threads. A writer is used from one thread. An open reader is
 * read-only: any number of threads may call count/get/find/read/raw_ptr on it.
 *
 * Errors: every int function returns DSQ_OK (0) or a negative dsq_status and
 * fills the optional dsq_diag (file, tensor, byte offset, message). */
#ifndef DSQ_CONTAINER_H
#define DSQ_CONTAINER_H

#include "dsq_error.h"
#include "dsq_file.h"     /* DSQ_OUT_OVERWRITE, DSQ_OUT_KEEP_TMP */
#include "dsq_sha256.h"

#include <stddef.h>
#include <stdint.h>

/* ---- format constants (pinned; see docs/dsq-format.md) ---- */

#define DSQ_CTR_MAGIC          "DSQ1\r\n\x1a\n"   /* 8 bytes at offset 0 */
#define DSQ_CTR_FOOTER_MAGIC   "DSQFOOT1"          /* 8 bytes at EOF-192 */
#define DSQ_CTR_INDEX_MAGIC    "DSQINDX1"          /* 8 bytes at index start */
#define DSQ_CTR_VERSION        1u    /* format version this code writes and reads */
#define DSQ_CTR_HEADER_SIZE    64u
#define DSQ_CTR_FOOTER_SIZE    192u
#define DSQ_CTR_INDEX_HDR_SIZE 32u
#define DSQ_CTR_ENTRY_SIZE     192u  /* index record size written by v1 */
#define DSQ_CTR_ALIGN          64u   /* payload alignment */
#define DSQ_CTR_MAX_DIMS       8
#define DSQ_CTR_MAX_NAME       1024  /* tensor name bytes, excluding NUL */
#define DSQ_CTR_MAX_DTYPE      31    /* source dtype name bytes, excluding NUL */
#define DSQ_CTR_MAX_META       (256u << 20) /* metadata JSON bytes */
#define DSQ_CTR_AUX            4     /* scheme-defined u32 parameters per tensor */

/* Payload compression (u32 on disk). */
enum dsq_ctr_compression {
    DSQ_CTR_COMP_NONE = 0,  /* stored bytes are the raw bytes */
    DSQ_CTR_COMP_ZSTD = 1   /* stored bytes are one or more zstd frames */
};

/* Tensor role (u32 on disk). Pinned values: append only, never renumber;
 * a retired role keeps its number. Readers treat unknown values as OTHER. */
enum dsq_role {
    DSQ_ROLE_OTHER                = 0,  /* anything not listed */
    DSQ_ROLE_EMBED                = 1,  /* token embedding */
    DSQ_ROLE_NORM                 = 2,  /* RMSNorm/LayerNorm weights (any) */
    DSQ_ROLE_ATTN_LINEAR          = 3,  /* q/k/v/o and MLA projections */
    DSQ_ROLE_MLP_LINEAR           = 4,  /* dense MLP gate/up/down */
    DSQ_ROLE_EXPERT_LINEAR        = 5,  /* routed MoE expert gate/up/down */
    DSQ_ROLE_SHARED_EXPERT_LINEAR = 6,  /* MoE shared expert gate/up/down */
    DSQ_ROLE_ROUTER               = 7,  /* MoE gate (router) weight */
    DSQ_ROLE_ROUTER_BIAS          = 8,  /* e_score_correction_bias */
    DSQ_ROLE_LM_HEAD              = 9,  /* output projection */
    DSQ_ROLE_LINEAR_BIAS          = 10, /* additive bias of a linear (Qwen2 qkv) */
    DSQ_ROLE_MTP                  = 11, /* multi-token-prediction-only tensors */
    DSQ_ROLE_QUANT_AUX            = 12, /* separate scale/zero/smoothing tensor */
    DSQ_ROLE_CALIB_STATS          = 13, /* calibration statistics */
    DSQ_ROLE_INDEXER_LINEAR       = 14, /* DSA indexer wq_b / wk / weights_proj */
    DSQ_ROLE_COUNT                = 15  /* sentinel: first unassigned value */
};

/* A tensor's role as its name tells it (convert/recipe.h dsq_role_classify). */
typedef struct dsq_role_info {
    uint32_t role;      /* enum dsq_role */
    int64_t  layer;     /* decoder layer index, -1 if none */
    int64_t  expert;    /* routed expert index, -1 if none */
    int      mtp;       /* tensor belongs to an MTP layer */
    int      fp8_scale; /* name is an FP8 "*_scale_inv" companion */
} dsq_role_info;

/* "embed", "attn_linear", ...; "other" for unknown values. Never NULL. */
const char *dsq_role_name(uint32_t role);
/* Inverse of dsq_role_name. DSQ_OK or DSQ_ERR_NOT_FOUND. */
int dsq_role_from_name(const char *name, uint32_t *role);

/* ---- tensor description ---- */

/* One tensor. Fields marked [in] are supplied by the caller when writing;
 * [out] fields are filled by the writer (after add/end) and by the reader.
 * Strings returned by the reader or writer live as long as that object. */
typedef struct dsq_ctr_tensor_info {
    const char *name;        /* [in] unique, 1..DSQ_CTR_MAX_NAME bytes, no NUL */
    const char *src_dtype;   /* [in] source dtype name ("BF16"); NULL or "" = none */
    uint32_t role;           /* [in] enum dsq_role */
    uint32_t scheme;         /* [in] quant/scheme.h id; stored opaque */
    uint32_t ndim;           /* [in] 0..DSQ_CTR_MAX_DIMS */
    int64_t  shape[DSQ_CTR_MAX_DIMS]; /* [in] logical shape, each >= 0; unused = 0 */
    uint32_t group_size;     /* [in] packing group size (0 = n/a) */
    uint32_t pack_version;   /* [in] packing layout revision for the scheme */
    uint32_t aux[DSQ_CTR_AUX]; /* [in] scheme-defined extras, 0 when unused */
    /* filled by writer/reader: */
    uint64_t raw_size;       /* [out] uncompressed payload bytes
                              * (dsq_ctr_writer_begin: [in] expected size, 0 = unknown) */
    uint64_t stored_size;    /* [out] bytes in the file */
    uint64_t offset;         /* [out] absolute file offset of the payload */
    uint32_t compression;    /* [out] enum dsq_ctr_compression */
    uint32_t index;          /* [out] position in the index (write order) */
    uint8_t  sha256[DSQ_SHA256_LEN]; /* [out] SHA-256 of the raw payload */
} dsq_ctr_tensor_info;

/* Element count of the logical shape (1 for ndim 0); -1 on overflow. */
int64_t dsq_ctr_numel(const dsq_ctr_tensor_info *t);

/* ---- encoding (thread-safe, no writer state) ---- */

/* An encoded payload ready for dsq_ctr_writer_add_blob. The blob owns its
 * bytes (it never points at the caller's raw buffer). */
typedef struct dsq_ctr_blob {
    const uint8_t *data;     /* stored bytes (raw copy or zstd frame) */
    uint64_t stored_size;
    uint64_t raw_size;
    uint32_t compression;    /* enum dsq_ctr_compression */
    uint8_t  sha256[DSQ_SHA256_LEN]; /* of the raw bytes */
    void    *owned;          /* internal: allocation backing data */
} dsq_ctr_blob;

/* No compression: store raw (the SHA-256 is still computed). */
#define DSQ_CTR_LEVEL_NONE 0
#define DSQ_CTR_LEVEL_MAX  22

/* Hash raw[0..n) and, when zstd_level is 1..22, compress it to one zstd
 * frame. The compressed form is kept only if it pays:
 *   stored * 50 < raw * 49   (i.e. stored < 98% of raw)
 * otherwise the blob holds a copy of the raw bytes (DSQ_CTR_COMP_NONE).
 * Deterministic for a given (bytes, level). raw may be NULL when n == 0.
 * On failure *out is zeroed. Free with dsq_ctr_blob_free. */
int  dsq_ctr_encode(const void *raw, size_t n, int zstd_level, dsq_ctr_blob *out, dsq_diag *d);
/* The same into the caller's buffer: dst holds dst_cap >= dsq_ctr_encode_bound(n)
 * bytes and outlives the blob; out->data points into dst and the blob owns
 * nothing (dsq_ctr_blob_free only zeroes it). Same bytes, hash and choice
 * as dsq_ctr_encode. It lets a caller recycle output buffers: a fresh
 * allocation of a tensor's size costs a page fault per 4 KiB on first write
 * (~10% of a conversion's CPU in a VM, `perf record`). */
size_t dsq_ctr_encode_bound(size_t n);
int  dsq_ctr_encode_into(const void *raw, size_t n, int zstd_level, void *dst, size_t dst_cap,
                         dsq_ctr_blob *out, dsq_diag *d);
/* One zstd frame of raw[0..n) at zstd_level (1..22) into dst (dst_cap >=
 * dsq_ctr_encode_bound(n)), with the container's frame parameters (content
 * size, no checksum); *stored: its size. Thread-safe, deterministic: this
 * is how a streamed payload's pieces are compressed on the conversion's
 * worker threads for dsq_ctr_writer_frame. */
int  dsq_ctr_zstd_frame(const void *raw, size_t n, int zstd_level, void *dst, size_t dst_cap,
                        size_t *stored, dsq_diag *d);
/* Release the blob's memory; safe on a zeroed blob; leaves it zeroed. */
void dsq_ctr_blob_free(dsq_ctr_blob *b);

/* ---- writer ---- */

typedef struct dsq_ctr_writer dsq_ctr_writer;

/* Writer flags: DSQ_OUT_OVERWRITE (replace an existing final file) and
 * DSQ_OUT_KEEP_TMP from dsq_file.h, plus: */
enum dsq_ctr_writer_flags {
    DSQ_CTR_RESUME = 1u << 8  /* keep the partial file and a checkpoint journal
                               * so an interrupted run can continue (implies
                               * DSQ_OUT_KEEP_TMP); see dsq_ctr_writer_open_ex */
};

/* Start writing path. Bytes go to "<dir>/.<base>.partial" (dsq_outfile) and
 * appear under path only at dsq_ctr_writer_finish. Same as
 * dsq_ctr_writer_open_ex(w, path, flags, "", d).
 * @return DSQ_OK; DSQ_ERR_EXISTS if path exists without DSQ_OUT_OVERWRITE;
 *         DSQ_ERR_IO/NOSPC; with DSQ_CTR_RESUME see open_ex. */
int dsq_ctr_writer_open(dsq_ctr_writer **w, const char *path, unsigned flags, dsq_diag *d);

/* As dsq_ctr_writer_open, with a creation fingerprint for resume (a string
 * identifying input + options, e.g. a hex SHA-256; NULL means "").
 * Without DSQ_CTR_RESUME: starts empty, removes any stale journal.
 * With DSQ_CTR_RESUME: if "<tmp>.journal" exists,
 *   - its fingerprint must equal fingerprint, else DSQ_ERR_STATE;
 *   - the partial file's header and each journaled payload are re-read and
 *     checked (size, SHA-256 of the stored bytes); the writer keeps the
 *     longest prefix of entries that check out and truncates the rest;
 *   - dsq_ctr_writer_count/name/get then list the tensors already written,
 *     which the caller must skip (and must produce the others in the same
 *     order as the first run for a byte-identical result).
 * If there is no journal it starts empty, like a fresh run. Metadata is not
 * journaled: call dsq_ctr_writer_set_metadata again before finish. */
int dsq_ctr_writer_open_ex(dsq_ctr_writer **w, const char *path, unsigned flags,
                           const char *fingerprint, dsq_diag *d);

/* Tensors present in the writer (after resume: those recovered). */
size_t dsq_ctr_writer_count(const dsq_ctr_writer *w);
const char *dsq_ctr_writer_name(const dsq_ctr_writer *w, size_t i);
const dsq_ctr_tensor_info *dsq_ctr_writer_get(const dsq_ctr_writer *w, size_t i);
/* Index of name, or -1 (hash lookup). */
int64_t dsq_ctr_writer_find(const dsq_ctr_writer *w, const char *name);
/* Final and temporary path. */
const char *dsq_ctr_writer_path(const dsq_ctr_writer *w);
const char *dsq_ctr_writer_tmp_path(const dsq_ctr_writer *w);
/* Bytes written to the temporary so far. */
uint64_t dsq_ctr_writer_bytes(const dsq_ctr_writer *w);

/* Append an encoded blob as the next tensor. info supplies the [in] fields;
 * raw_size/compression/sha256 come from the blob. Validates the name
 * (non-empty, unique, no NUL, length), ndim, shape (>= 0, numel fits int64),
 * role/dtype lengths. Not allowed while a streamed tensor is open.
 * @return DSQ_OK, DSQ_ERR_INVALID_ARG (bad info, duplicate name; nothing
 *         is written and the writer stays usable), DSQ_ERR_IO / DSQ_ERR_NOSPC
 *         (the writer is then unusable: every later call repeats the error;
 *         abort it, or detach it to resume from the last checkpoint). */
int dsq_ctr_writer_add_blob(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                            const dsq_ctr_blob *blob, dsq_diag *d);

/* Convenience: dsq_ctr_encode + add_blob + free on the calling thread. */
int dsq_ctr_writer_add(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                       const void *raw, size_t n, int zstd_level, dsq_diag *d);

/* Streaming path for tensors too big to hold twice: begin, any number of
 * chunks (any sizes, including 0), end. The payload is one zstd frame
 * written incrementally (zstd_level 1..22), or raw bytes (level 0); the
 * raw SHA-256 is updated incrementally. Unlike dsq_ctr_encode there is no
 * fall back to raw when compression does not pay (the bytes are already on
 * disk). If info->raw_size is non-zero it is the promised total and end()
 * fails with DSQ_ERR_INVALID_ARG on a mismatch. For byte-identical resumes
 * feed the same chunk sizes in the same order. */
int dsq_ctr_writer_begin(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                         int zstd_level, dsq_diag *d);
int dsq_ctr_writer_chunk(dsq_ctr_writer *w, const void *raw, size_t n, dsq_diag *d);
int dsq_ctr_writer_end(dsq_ctr_writer *w, dsq_diag *d);

/* A streamed tensor stored as a sequence of independent zstd frames
 * (docs/dsq-format.md §3), so its pieces can be compressed on other threads
 * (dsq_ctr_zstd_frame) while the writer hashes and writes them in order.
 * After begin_frames: dsq_ctr_writer_frame appends a frame the caller made
 * of the next n raw bytes (the writer hashes raw and writes the frame);
 * dsq_ctr_writer_chunk compresses its bytes into a frame of their own on the
 * calling thread; end as above. zstd_level 1..22 (for chunk). The payload
 * is a function of the bytes and of where the frames are cut: feed the same
 * pieces for byte-identical resumes. frame checks that it is one zstd frame
 * of exactly n bytes (DSQ_ERR_INVALID_ARG otherwise, the stream rolled back). */
int dsq_ctr_writer_begin_frames(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                                int zstd_level, dsq_diag *d);
int dsq_ctr_writer_frame(dsq_ctr_writer *w, const void *raw, size_t n, const void *frame,
                         size_t frame_size, dsq_diag *d);
/* The same with the payload's SHA-256 taken by the caller (the conversion's
 * workers hash a streamed tensor's pieces in file order, so the writer
 * thread does not hash every streamed byte alone): the writer hashes
 * nothing, frame's raw may be NULL, and the payload ends with
 * dsq_ctr_writer_end_digest (the digest of its raw bytes) instead of end.
 * A wrong digest makes a file whose verify fails on that tensor. */
int dsq_ctr_writer_begin_frames_hashed(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                                       int zstd_level, dsq_diag *d);
int dsq_ctr_writer_end_digest(dsq_ctr_writer *w, const uint8_t digest[DSQ_SHA256_LEN], dsq_diag *d);

/* The model metadata: one JSON object (validated here, stored verbatim).
 * May be called any time before finish; the last call wins. Default "{}".
 * Conventional keys (none required): "config" (source config.json object),
 * "tokenizer" (object of file name -> content), "recipe", "tool",
 * "source" (identity of the input). */
int dsq_ctr_writer_set_metadata(dsq_ctr_writer *w, const char *json, dsq_diag *d);

/* Resume checkpoints. With DSQ_CTR_RESUME the writer checkpoints after an
 * add/end when at least 'seconds' passed since the previous checkpoint
 * (default 1.0, stretched automatically so journal writing stays under ~5%
 * of the time); 0 = after every tensor. A checkpoint makes the partial
 * file durable, then atomically replaces the journal. With an interval the
 * flush runs in the output's background syncer (dsq_syncer.h) and the
 * journal naming the tensors it covers is saved at a later add/end, once
 * the flush is done, so the writer does not wait for the disk; with 0, and
 * in dsq_ctr_writer_checkpoint, it is done in place before returning.
 * No-op without DSQ_CTR_RESUME. */
void dsq_ctr_writer_set_checkpoint_interval(dsq_ctr_writer *w, double seconds);
int  dsq_ctr_writer_checkpoint(dsq_ctr_writer *w, dsq_diag *d);
/* Called by every checkpoint after the data is durable and before the
 * journal names it: state the caller keeps beside the journal (the
 * conversion's source ledger) is made durable there, once per checkpoint
 * instead of once per tensor. A negative return fails the checkpoint. */
typedef int (*dsq_ctr_presync_fn)(void *ctx, dsq_diag *d);
void dsq_ctr_writer_set_presync(dsq_ctr_writer *w, dsq_ctr_presync_fn fn, void *ctx);

/* Write index, metadata and footer, then commit atomically (fsync, rename
 * to the final path, fsync the directory) and remove the journal.
 * Always frees w, also on failure (then the temporary and journal are
 * removed, so a failed finish does not leave resumable state), except a
 * full disk (DSQ_ERR_NOSPC) while the tail is written with DSQ_CTR_RESUME:
 * then the temporary (cut back to its tensors) and the journal are kept, as
 * dsq_ctr_writer_detach keeps them, for a resume once space is freed.
 * Fails with DSQ_ERR_INVALID_ARG if a streamed tensor is still open. */
int  dsq_ctr_writer_finish(dsq_ctr_writer *w, dsq_diag *d);
/* Give up: remove the temporary and the journal, free w. NULL is a no-op. */
void dsq_ctr_writer_abort(dsq_ctr_writer *w);
/* Interrupted resumable run: write a final checkpoint (if DSQ_CTR_RESUME and
 * no streamed tensor is open; an open one is dropped), close, keep the
 * temporary and journal, free w. Returns the checkpoint status. */
int  dsq_ctr_writer_detach(dsq_ctr_writer *w, dsq_diag *d);

/* ---- reader ---- */

typedef struct dsq_ctr dsq_ctr;

/* mmap path and validate its structure (does not hash payloads):
 * header, footer (magic, version, size, self-hash), header/index/metadata
 * SHA-256, then every index record: offsets and sizes in bounds, 64-byte
 * aligned, tiling the payload area in index order (no overlap, no gap
 * beyond alignment padding), names unique and well formed, ndim/shape sane,
 * known compression, metadata a JSON object. Cost is O(index + metadata).
 * @return DSQ_OK; DSQ_ERR_FORMAT / TRUNCATED / CHECKSUM / UNSUPPORTED
 *         (diag names the byte offset and tensor); DSQ_ERR_IO; NOMEM. */
int  dsq_ctr_open(dsq_ctr **r, const char *path, dsq_diag *d);
/* Same over a caller-owned buffer that must outlive the reader (tests,
 * fuzzing). name is used in messages (NULL = "<memory>"). */
int  dsq_ctr_open_mem(dsq_ctr **r, const void *data, size_t size, const char *name, dsq_diag *d);
void dsq_ctr_close(dsq_ctr *r);

/* Quick sniff: does the buffer start with DSQ_CTR_MAGIC? (n >= 8) */
int  dsq_ctr_is_dsq(const void *head, size_t n);

size_t dsq_ctr_count(const dsq_ctr *r);
/* i < count, else NULL. */
const dsq_ctr_tensor_info *dsq_ctr_get(const dsq_ctr *r, size_t i);
/* Hash lookup; NULL if absent. */
const dsq_ctr_tensor_info *dsq_ctr_find(const dsq_ctr *r, const char *name);
/* The metadata JSON text (NUL-terminated copy); *len may be NULL. */
const char *dsq_ctr_metadata(const dsq_ctr *r, size_t *len);
uint64_t dsq_ctr_file_size(const dsq_ctr *r);
/* Sum of raw_size and of stored_size over all tensors. */
void dsq_ctr_totals(const dsq_ctr *r, uint64_t *raw, uint64_t *stored);

/* Copy or decompress the tensor's raw bytes into dst (dst_size must be
 * >= raw_size) and check the raw SHA-256. t must come from dsq_ctr_get or
 * dsq_ctr_find on this reader. Safe to call from several threads.
 * @return DSQ_OK; DSQ_ERR_INVALID_ARG (dst too small); DSQ_ERR_FORMAT
 *         (bad zstd frame or wrong decompressed size); DSQ_ERR_CHECKSUM. */
int dsq_ctr_read(const dsq_ctr *r, const dsq_ctr_tensor_info *t,
                 void *dst, size_t dst_size, dsq_diag *d);
enum dsq_ctr_read_flags {
    DSQ_CTR_READ_NOHASH = 1u << 0  /* skip the SHA-256 check (trusted input) */
};
int dsq_ctr_read_ex(const dsq_ctr *r, const dsq_ctr_tensor_info *t,
                    void *dst, size_t dst_size, unsigned flags, dsq_diag *d);

/* Zero-copy view of an uncompressed payload in the mapping (64-byte aligned
 * when the file is mapped), valid until dsq_ctr_close; NULL if the payload
 * is compressed. Not hash-checked (use dsq_ctr_verify). For raw_size == 0
 * returns a non-NULL pointer that must not be dereferenced. */
const void *dsq_ctr_raw_ptr(const dsq_ctr *r, const dsq_ctr_tensor_info *t);
/* The stored bytes (compressed or not), stored_size long. */
const void *dsq_ctr_stored_ptr(const dsq_ctr *r, const dsq_ctr_tensor_info *t);

/* Recompute every payload's raw SHA-256 (decompressing in bounded memory)
 * and check that all padding bytes are zero, on nthreads threads
 * (<= 0: all cores) via dsq_pool. On failure *bad_index (may be NULL) is the
 * LOWEST failing tensor index (a non-zero padding byte counts against the
 * payload it follows), SIZE_MAX if none failed (e.g. interrupted), and the
 * diag names that tensor and the payload offset (for padding: the offset of
 * the bad byte).
 * @return DSQ_OK, DSQ_ERR_CHECKSUM, DSQ_ERR_FORMAT (bad frame, non-zero
 *         padding), DSQ_ERR_INTERRUPTED, DSQ_ERR_NOMEM. */
int dsq_ctr_verify(const dsq_ctr *r, int nthreads, size_t *bad_index, dsq_diag *d);

/* Extended verify: cancel (may be NULL) is polled between chunks; progress
 * (may be NULL) is called with cumulative stored bytes checked, from worker
 * threads but never concurrently (calls are serialised by the verifier). */
typedef struct dsq_ctr_verify_opts {
    int nthreads;
    const volatile int *cancel;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} dsq_ctr_verify_opts;
int dsq_ctr_verify_ex(const dsq_ctr *r, const dsq_ctr_verify_opts *o,
                      size_t *bad_index, dsq_diag *d);

#endif
