/* fuzz_sums.c - libFuzzer target: the SHA256SUMS manifest parser
 * (formats/sha256sums.c) on arbitrary bytes. Whatever parses must hold only
 * plain, unique, non-empty names without '/' or a leading '.' (else abort).
 * Must never crash, leak or read out of bounds; any status is acceptable. */
#include "sha256sums.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_sums s;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_sums_parse((const char *)data, size, "SHA256SUMS", &s, &d) != DSQ_OK) {
        if (s.n || s.names) abort();
        return 0;
    }
    for (size_t i = 0; i < s.n; i++) {
        const char *nm = s.names[i];
        if (!nm[0] || nm[0] == '.' || strchr(nm, '/')) abort();
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s.names[j], nm)) abort();
    }
    dsq_sums_free(&s);
    return 0;
}
