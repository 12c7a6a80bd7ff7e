/* convert_ledger.h - what makes a resumed tensor safe to reuse (issue 14.8).
 *
 * Resume used to identify inputs by name, size, mtime and header hash, so a
 * shard whose data changed with size and mtime kept (cp -p, touch -r)
 * resumed with stale tensors. The ledger records, for every tensor the
 * conversion starts writing, the SHA-256 of the source bytes it is made
 * from (weight, plus its FP8 scale); --resume re-hashes the sources of the
 * tensors it would reuse and refuses any that changed. Records are appended
 * and made durable before the tensor can enter a journal checkpoint, so
 * every journaled tensor has one. Text file, one "<sha256 hex> <name>" line
 * per tensor, next to the resume journal. */
#ifndef DSQ_CONVERT_LEDGER_H
#define DSQ_CONVERT_LEDGER_H

#include "dsq_error.h"
#include "dsq_sha256.h"
#include "safetensors.h"

typedef struct dsq_ledger dsq_ledger;

/* Open path: resume keeps (and loads) what an earlier run recorded, else the
 * file starts empty. */
int  dsq_ledger_open(dsq_ledger **out, const char *path, int resume, dsq_diag *d);
/* SHA-256 of tensor t's source bytes (and its scale tensor's, if any). */
int  dsq_ledger_hash(const dsq_st_model *m, const dsq_st_tensor *t, uint8_t out[DSQ_SHA256_LEN]);
/* Append (and fdatasync) the record for name. */
int  dsq_ledger_add(dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d);
/* DSQ_OK when the recorded hash of name equals sha; DSQ_ERR_STATE naming
 * the tensor when it differs or was never recorded. */
int  dsq_ledger_check(const dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN],
                      dsq_diag *d);
/* Close; remove deletes the file (finished or failed for good). */
void dsq_ledger_close(dsq_ledger *l, int remove);

#endif
