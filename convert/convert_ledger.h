/* convert_ledger.h - what makes a resumed tensor safe to reuse.
 *
 * A resumed tensor must come from the same source bytes, not merely from a
 * shard of the same name, size, mtime and header hash: a shard whose data
 * changed with size and mtime kept (cp -p, touch -r) must not resume with
 * stale tensors. The ledger records, for every tensor the
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
 * What is hashed (format 3): the conversion workers read the source in row
 * blocks of block_rows rows, cut from the start of each pipeline piece of
 * piece_rows rows. Each block's bytes give a 16-byte record, the CRC-32C of
 * each of its quarters (dsq_crc32c_x4); a piece's digest D is SHA-256 over
 * its blocks' records in order, and the ledger record is
 * SHA-256(D(piece 0) || D(piece 1) || ... [|| SHA-256(scale bytes)]).
 * The workers take the records while the block is in their cache, in
 * parallel; piece_rows and block_rows follow from the plan, which the
 * conversion's fingerprint covers, so a resumed run cuts the same blocks.
 *
 * Why CRC-32C and not SHA-256 of the source bytes (formats 1-2): SHA-256
 * cost ~0.6 CPU-s per GB of input, more than half of what a conversion may
 * spend at a throughput goal of 2 GB/s, while the ledger guards against
 * accidents, not attacks: any change within a 32-bit span, and any change
 * that replaces a tensor (a different checkpoint, a re-download), is found
 * for certain or with 2^-128 odds of missing it; a random rewrite of one
 * span longer than 32 bits inside a single quarter of one block (at most
 * ~128 KiB) is missed with probability 2^-32. dsq_crc32c.h says more. The
 * output tensors keep their SHA-256 in the container. */
#ifndef DSQ_CONVERT_LEDGER_H
#define DSQ_CONVERT_LEDGER_H

#include "dsq_crc32c.h"
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
/* One block's record: DSQ_CRC32C_X4_LEN bytes (see above). */
void dsq_ledger_block(const uint8_t *p, size_t len, uint8_t rec[DSQ_CRC32C_X4_LEN]);
/* The record of tensor t (see above), computed in one pass on the calling
 * thread (the --resume check, bench_ledger). piece_rows >= rows: one piece;
 * block_rows >= piece_rows: one block per piece. */
int  dsq_ledger_hash(const dsq_st_model *m, const dsq_st_tensor *t, int64_t rows,
                     int64_t piece_rows, int64_t block_rows, uint8_t out[DSQ_SHA256_LEN]);
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
