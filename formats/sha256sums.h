/* sha256sums.h - the checksum manifest of an export directory: SHA256SUMS
 * in `sha256sum -c` format ("<64 hex>  <name>\n" per file, sorted by name).
 * ds-quant --format / ds-export write it; ds-inspect --verify checks it. */
#ifndef DSQ_SHA256SUMS_H
#define DSQ_SHA256SUMS_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_SUMS_NAME "SHA256SUMS"

/* Check dir/SHA256SUMS (hostile input): every line well formed (64 lowercase
 * or uppercase hex digits, two spaces or " *", a plain file name: no '/',
 * no leading '.', no duplicates), every listed file present with that
 * SHA-256, and every other visible regular file of dir listed.
 * *nfiles (may be NULL) gets the number of files checked.
 * DSQ_ERR_NOT_FOUND (no manifest, missing file), DSQ_ERR_FORMAT (bad line,
 * unlisted file), DSQ_ERR_CHECKSUM (mismatch; diag names the file). */
int dsq_sums_verify(const char *dir, size_t *nfiles, dsq_diag *d);

/* The parsed manifest: n entries, names[i] with digest sha[i]. */
typedef struct dsq_sums {
    size_t n;
    char **names;
    uint8_t (*sha)[32];
} dsq_sums;

/* Parse manifest text (hostile input; the rules above: well-formed lines,
 * plain unique names; empty lines skipped). path names the manifest in
 * messages, which carry the byte offset of the bad line. On failure *out is
 * empty. DSQ_ERR_FORMAT, DSQ_ERR_NOMEM. Release with dsq_sums_free. */
int dsq_sums_parse(const char *txt, size_t len, const char *path, dsq_sums *out, dsq_diag *d);
void dsq_sums_free(dsq_sums *s);

#endif
