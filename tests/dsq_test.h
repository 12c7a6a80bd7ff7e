/* dsq_test.h - helpers shared by the cmocka tests: temp dirs, ../shared lookup. */
#ifndef DSQ_TEST_H
#define DSQ_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* mkdtemp under $TMPDIR (or /tmp); returned path is static per call index. */
char *dsq_test_tmpdir(void);
/* Remove a directory tree created by the tests (best effort). */
void dsq_test_rmtree(const char *path);
/* Path of ../shared/data/<rel> relative to the repo root, or NULL if absent
 * (tests then skip with a message naming what is missing). Caller frees. */
char *dsq_test_shared(const char *rel);
/* Write bytes to path (asserts on failure). */
void dsq_test_write(const char *path, const void *data, size_t n);
/* GPT-2 bytes_to_unicode: the code point a byte-level BPE spells byte b
 * with (written independently of the library's). */
unsigned dsq_test_b2u(unsigned b);
/* One xorshift64 step, high 32 bits. Each test file keeps its own state and
 * seed, so its data do not depend on which other tests ran before it. */
static inline uint32_t dsq_test_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

#endif
