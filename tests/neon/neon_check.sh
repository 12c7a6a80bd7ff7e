#!/bin/sh
# neon_check.sh - the quant tests (tests/test_quant.c: every kernel level ==
# the scalar reference bit for bit, gemm within its bound, pack round trips)
# cross-compiled for aarch64 and run under qemu-user, so the NEON kernels
# that Kunpeng hosts dispatch to are checked on an x86 machine.
#
#   make neon-check        (or: sh tests/neon/neon_check.sh)
#
# Needs, on Debian 12 (not installed by .ci/deps.sh: emulation makes this a
# run of many minutes, so it is not part of make test / CI):
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install gcc-aarch64-linux-gnu qemu-user libcmocka-dev:arm64 libopenblas-dev:arm64
# Exits 0 with a message when the tools are absent. Only quant/ and the two
# common files it uses are built: the module has no other dependency.
set -u
cd "$(dirname "$0")/../.."
CC=${AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_AARCH64:-qemu-aarch64}
SYSROOT=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
LIBDIR=/usr/lib/aarch64-linux-gnu
for t in "$CC" "$QEMU"; do
  command -v "$t" >/dev/null 2>&1 || { echo "neon_check: skip: $t not installed (see the top of $0)"; exit 0; }
done
[ -f "$LIBDIR/libcmocka.so" ] || { echo "neon_check: skip: libcmocka-dev:arm64 not installed"; exit 0; }
OUT=${BUILD:-build}/neon
mkdir -p "$OUT"
$CC -std=c11 -D_GNU_SOURCE -pthread -O2 -g -Wall -Wextra -Icommon -Iformats -Iquant -Iinclude -Itests \
  tests/test_quant.c tests/dsq_test.c common/dsq_error.c common/dsq_thread.c quant/*.c \
  tests/neon/nothreads.c -Wl,--wrap=pthread_create \
  -o "$OUT/test_quant" -lcmocka -lopenblas -lm -lpthread || exit 1
# The dispatcher must pick NEON on this emulated CPU; test_primitives_match_ref
# prints the levels it compared.
$QEMU -L "$SYSROOT" -E LD_LIBRARY_PATH="$LIBDIR:$LIBDIR/openblas-pthread" -E OPENBLAS_NUM_THREADS=1 \
  "$OUT/test_quant" > "$OUT/test_quant.log" 2>&1
rc=$?
cat "$OUT/test_quant.log"
grep -q "kernel levels on this CPU: ref neon" "$OUT/test_quant.log" || { echo "neon_check: NEON level not found"; exit 1; }
exit $rc
