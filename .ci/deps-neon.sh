#!/bin/sh
# Cross tools for `make neon-check` (the quant tests built for aarch64 and run
# under qemu-user): gcc-aarch64-linux-gnu, qemu-user and the arm64 cmocka and
# OpenBLAS. Root only (apt-get); exits non-zero when they cannot be installed,
# and .ci/run then skips the check with a message instead of failing.
set -e
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 && \
  [ -f /usr/lib/aarch64-linux-gnu/libcmocka.so ] && [ -f /usr/lib/aarch64-linux-gnu/libopenblas.so ] && exit 0
[ "$(id -u)" = 0 ] || { echo "deps-neon: not root"; exit 1; }
export DEBIAN_FRONTEND=noninteractive
dpkg --add-architecture arm64
apt-get update -qq
apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
  libcmocka-dev:arm64 libopenblas-dev:arm64 >/dev/null
