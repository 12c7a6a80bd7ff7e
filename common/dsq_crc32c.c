/* dsq_crc32c.c - CRC-32C: byte-table reference, and the crc32 instruction
 * (x86 SSE4.2, ARMv8 CRC) picked at run time, so the file builds without
 * -march flags like the quant kernels (see dsq_crc32c.h for why). */
#include "dsq_crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define HAVE_HW 1
#define HW_TARGET __attribute__((target("sse4.2")))
#define HW_CRC64(c, v) ((uint32_t)_mm_crc32_u64((c), (v)))
#define HW_CRC8(c, v) _mm_crc32_u8((c), (v))
static int hw_ok(void) { return __builtin_cpu_supports("sse4.2"); }
#elif defined(__aarch64__) && defined(__linux__)
#include <arm_acle.h>
#include <sys/auxv.h>
#define HAVE_HW 1
#ifdef __clang__
#define HW_TARGET __attribute__((target("crc")))
#else
#define HW_TARGET __attribute__((target("+crc")))
#endif
#define HW_CRC64(c, v) __crc32cd((c), (v))
#define HW_CRC8(c, v) __crc32cb((c), (v))
static int hw_ok(void) { return (getauxval(AT_HWCAP) & (1ul << 7)) != 0; /* HWCAP_CRC32 */ }
#else
#define HAVE_HW 0
#endif

/* ---------------- reference ---------------- */

static uint32_t g_table[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        g_table[i] = c;
    }
}

/* On the un-inverted register, like the instruction. */
static uint32_t ref_raw(uint32_t c, const uint8_t *p, size_t n)
{
    pthread_once(&g_once, table_init);
    for (size_t i = 0; i < n; i++) c = g_table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c;
}

uint32_t dsq_crc32c_ref(uint32_t crc, const void *p, size_t n)
{
    return ~ref_raw(~crc, p, n);
}

/* ---------------- crc32 instruction ---------------- */

#if HAVE_HW
static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);   /* the instruction takes the word little-endian */
    return v;
}

HW_TARGET static uint32_t hw_raw(uint32_t c, const uint8_t *p, size_t n)
{
    for (; n >= 8; n -= 8, p += 8) c = HW_CRC64(c, load64(p));
    for (; n; n--, p++) c = HW_CRC8(c, *p);
    return c;
}

/* Four spans at once: each crc32 has a latency of ~3 cycles and issues one
 * per cycle, so four chains keep the unit busy. */
HW_TARGET static void hw_raw4(uint32_t c[4], const uint8_t *const s[4], const size_t len[4])
{
    size_t m = len[0];
    for (int k = 1; k < 4; k++) m = len[k] < m ? len[k] : m;
    m &= ~(size_t)7;
    uint32_t a = c[0], b = c[1], e = c[2], f = c[3];
    const uint8_t *p0 = s[0], *p1 = s[1], *p2 = s[2], *p3 = s[3];
    for (size_t i = 0; i < m; i += 8) {
        a = HW_CRC64(a, load64(p0 + i));
        b = HW_CRC64(b, load64(p1 + i));
        e = HW_CRC64(e, load64(p2 + i));
        f = HW_CRC64(f, load64(p3 + i));
    }
    c[0] = hw_raw(a, p0 + m, len[0] - m);
    c[1] = hw_raw(b, p1 + m, len[1] - m);
    c[2] = hw_raw(e, p2 + m, len[2] - m);
    c[3] = hw_raw(f, p3 + m, len[3] - m);
}
#endif

uint32_t dsq_crc32c(uint32_t crc, const void *p, size_t n)
{
#if HAVE_HW
    if (hw_ok()) return ~hw_raw(~crc, p, n);
#endif
    return dsq_crc32c_ref(crc, p, n);
}

static void quarters(const uint8_t *p, size_t n, const uint8_t *s[4], size_t len[4])
{
    for (int k = 0; k < 4; k++) {
        /* n*k/4 without overflowing n*k */
        size_t a = n / 4 * (size_t)k + n % 4 * (size_t)k / 4;
        size_t b = n / 4 * (size_t)(k + 1) + n % 4 * (size_t)(k + 1) / 4;
        s[k] = p ? p + a : p;
        len[k] = b - a;
    }
}

static void put(uint8_t out[DSQ_CRC32C_X4_LEN], const uint32_t c[4])
{
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) out[4 * k + j] = (uint8_t)(~c[k] >> (8 * j));
}

void dsq_crc32c_x4_ref(const void *p, size_t n, uint8_t out[DSQ_CRC32C_X4_LEN])
{
    const uint8_t *s[4];
    size_t len[4];
    uint32_t c[4];
    quarters(p, n, s, len);
    for (int k = 0; k < 4; k++) c[k] = ref_raw(~0u, s[k], len[k]);
    put(out, c);
}

void dsq_crc32c_x4(const void *p, size_t n, uint8_t out[DSQ_CRC32C_X4_LEN])
{
#if HAVE_HW
    if (hw_ok()) {
        const uint8_t *s[4];
        size_t len[4];
        uint32_t c[4] = { ~0u, ~0u, ~0u, ~0u };
        quarters(p, n, s, len);
        hw_raw4(c, s, len);
        put(out, c);
        return;
    }
#endif
    dsq_crc32c_x4_ref(p, n, out);
}
