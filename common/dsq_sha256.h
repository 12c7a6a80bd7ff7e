/* dsq_sha256.h - SHA-256 through OpenSSL's EVP API (the only hash dsq uses). */
#ifndef DSQ_SHA256_H
#define DSQ_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define DSQ_SHA256_LEN 32

typedef struct dsq_sha256 { void *md_ctx; } dsq_sha256;

int  dsq_sha256_init(dsq_sha256 *h);                 /* DSQ_OK or DSQ_ERR_NOMEM */
void dsq_sha256_update(dsq_sha256 *h, const void *data, size_t n);
void dsq_sha256_final(dsq_sha256 *h, uint8_t out[DSQ_SHA256_LEN]); /* also releases */
void dsq_sha256_release(dsq_sha256 *h);              /* abandon without final */
/* One shot. Returns DSQ_OK or DSQ_ERR_NOMEM. */
int  dsq_sha256_buf(const void *data, size_t n, uint8_t out[DSQ_SHA256_LEN]);
/* 64 lowercase hex chars + NUL. */
void dsq_sha256_hex(const uint8_t d[DSQ_SHA256_LEN], char out[2 * DSQ_SHA256_LEN + 1]);
/* Parse 64 hex chars; -1 if malformed. */
int  dsq_sha256_parse_hex(const char *hex, uint8_t out[DSQ_SHA256_LEN]);

#endif
