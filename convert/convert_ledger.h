/* convert_ledger.h - what makes a resumed tensor safe to reuse (issue 14.8).
 *
 * Resume used to identify inputs by name, size, mtime and header hash, so a
 * shard whose data changed with size and mtime kept (cp -p, touch -r)
 * resumed with stale tensors. The ledger records, for every tensor the
 * conversion starts writing, the SHA-256 of the source bytes it is made
 * from (weight, plus its FP8 scale); --resume re-hashes the sources of the
 * tensors it would reuse and refuses any that changed. Records are appended
 * and made durable (dsq_ledger_sync, called by the container writer before
 * each journal checkpoint and before a shard is committed) before the
 * tensor can enter a checkpoint, so every journaled tensor has one: one
 * fdatasync per checkpoint, not one per tensor (a 671B model has ~90k).
 * Text file, one "<sha256 hex> <name>" line per tensor, next to the resume
 * journal.
 *
 * The hash is a two-level SHA-256 so the conversion workers can compute it
 * in parallel while the source rows are in their cache (one serial pass
 * over the whole model on the writer thread cost ~1.2 CPU-s per 2 GB and
 * faulted every source page in a second time): the tensor's rows are cut
 * into the pipeline's pieces of piece_rows rows, and the record is
 * SHA-256(D(piece 0) || D(piece 1) || ... [|| D(scale bytes)]), D = SHA-256
 * of the piece's source bytes. piece_rows is part of the conversion's
 * fingerprint, so a resumed run cuts the same pieces. */
#ifndef DSQ_CONVERT_LEDGER_H
#define DSQ_CONVERT_LEDGER_H

#include "dsq_error.h"
#include "dsq_sha256.h"
#include "safetensors.h"

typedef struct dsq_ledger dsq_ledger;

/* Open path: resume keeps (and loads) what an earlier run recorded, else the
 * file starts empty. */
int  dsq_ledger_open(dsq_ledger **out, const char *path, int resume, dsq_diag *d);
/* Source bytes of rows [r0, r0 + n) of t viewed as `rows` rows. */
void dsq_ledger_rows(const dsq_st_tensor *t, int64_t rows, int64_t r0, int64_t n,
                     const uint8_t **p, size_t *len);
/* The record of tensor t (see above), computed in one pass on the calling
 * thread (the --resume check, bench_ledger). piece_rows >= rows: one piece. */
int  dsq_ledger_hash(const dsq_st_model *m, const dsq_st_tensor *t, int64_t rows,
                     int64_t piece_rows, uint8_t out[DSQ_SHA256_LEN]);
/* The same from piece digests already computed (by the workers): digests
 * is npieces x DSQ_SHA256_LEN bytes, in row order. */
int  dsq_ledger_combine(const dsq_st_model *m, const dsq_st_tensor *t, const uint8_t *digests,
                        size_t npieces, uint8_t out[DSQ_SHA256_LEN]);
/* Append the record for name (not yet durable: see dsq_ledger_sync). */
int  dsq_ledger_add(dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d);
/* fdatasync what was appended since the last sync (no-op when nothing was). */
int  dsq_ledger_sync(dsq_ledger *l, dsq_diag *d);
/* DSQ_OK when the recorded hash of name equals sha; DSQ_ERR_STATE naming
 * the tensor when it differs or was never recorded. */
int  dsq_ledger_check(const dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN],
                      dsq_diag *d);
/* Close; remove deletes the file (finished or failed for good). */
void dsq_ledger_close(dsq_ledger *l, int remove);

#endif
