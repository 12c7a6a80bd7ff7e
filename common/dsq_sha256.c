/* dsq_sha256.c - EVP wrapper. */
#include "dsq_sha256.h"
#include "dsq_error.h"

#include <openssl/evp.h>
#include <string.h>

int dsq_sha256_init(dsq_sha256 *h)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        h->md_ctx = NULL;
        return DSQ_ERR_NOMEM;
    }
    h->md_ctx = c;
    return DSQ_OK;
}

void dsq_sha256_update(dsq_sha256 *h, const void *data, size_t n)
{
    if (n) EVP_DigestUpdate((EVP_MD_CTX *)h->md_ctx, data, n);
}

void dsq_sha256_final(dsq_sha256 *h, uint8_t out[DSQ_SHA256_LEN])
{
    unsigned int len = 0;
    EVP_DigestFinal_ex((EVP_MD_CTX *)h->md_ctx, out, &len);
    dsq_sha256_release(h);
}

void dsq_sha256_release(dsq_sha256 *h)
{
    EVP_MD_CTX_free((EVP_MD_CTX *)h->md_ctx);
    h->md_ctx = NULL;
}

int dsq_sha256_buf(const void *data, size_t n, uint8_t out[DSQ_SHA256_LEN])
{
    dsq_sha256 h;
    DSQ_TRY(dsq_sha256_init(&h));
    dsq_sha256_update(&h, data, n);
    dsq_sha256_final(&h, out);
    return DSQ_OK;
}

void dsq_sha256_hex(const uint8_t d[DSQ_SHA256_LEN], char out[2 * DSQ_SHA256_LEN + 1])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < DSQ_SHA256_LEN; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * DSQ_SHA256_LEN] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int dsq_sha256_parse_hex(const char *hex, uint8_t out[DSQ_SHA256_LEN])
{
    if (!hex || strlen(hex) != 2 * DSQ_SHA256_LEN) return -1;
    for (int i = 0; i < DSQ_SHA256_LEN; i++) {
        int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0) return -1;
        out[i] = (uint8_t)(a << 4 | b);
    }
    return 0;
}
