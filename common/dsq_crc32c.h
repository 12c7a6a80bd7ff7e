/* dsq_crc32c.h - CRC-32C (Castagnoli), the resume ledger's checksum of the
 * source bytes (convert_ledger.h).
 *
 * Why not SHA-256 there: the ledger only has to notice a source file that
 * changed by accident between an interrupted run and its --resume (a
 * re-download or copy that kept size and mtime); SHA-256 of every source
 * byte cost ~0.6 CPU-s per GB of input (1.66 GB/s per core with SHA-NI),
 * more than half of the conversion's budget. CRC-32C runs in the CPU's
 * crc32 instruction (SSE4.2, ARMv8 CRC) at ~15-20 GB/s per core over data in
 * cache. It finds every change of up to 32 consecutive bits and every odd
 * number of flipped bits; a random change of a longer span goes unnoticed
 * with probability 2^-32 per checked span. It is not a defence against
 * someone who edits the sources on purpose. The output tensors themselves
 * keep their SHA-256 in the container. */
#ifndef DSQ_CRC32C_H
#define DSQ_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue crc (0 to start) over p[0..n): the usual CRC-32C (reflected
 * polynomial 0x82F63B78, register preset and final value inverted), so
 * dsq_crc32c(0, "123456789", 9) == 0xE3069283. The crc32 instruction where
 * the CPU has one, else dsq_crc32c_ref. */
uint32_t dsq_crc32c(uint32_t crc, const void *p, size_t n);
/* Scalar reference (byte table): same results on every CPU. */
uint32_t dsq_crc32c_ref(uint32_t crc, const void *p, size_t n);

/* The ledger's digest of one span: the CRC-32C of each of its four quarters
 * (quarter k is bytes [n*k/4, n*(k+1)/4)), little-endian, 16 bytes. Four
 * independent CRCs run interleaved, which hides the instruction's latency
 * (one CRC is a serial chain: ~8 GB/s), and 128 bits are checked per span. */
#define DSQ_CRC32C_X4_LEN 16
void dsq_crc32c_x4(const void *p, size_t n, uint8_t out[DSQ_CRC32C_X4_LEN]);
/* The same through dsq_crc32c_ref (the tests compare the two). */
void dsq_crc32c_x4_ref(const void *p, size_t n, uint8_t out[DSQ_CRC32C_X4_LEN]);

#endif
