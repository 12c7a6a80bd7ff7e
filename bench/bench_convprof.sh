#!/bin/sh
# bench_convprof.sh - where a conversion's CPU time goes, per scheme (issue
# 16: measure before optimising): ds-quant under `perf record` on the
# real-shape one-layer checkpoint of bench/synth_layer.sh (16 experts, 2.1 GB
# BF16), its CPU samples split by library:
#   zstd    libzstd (the payload's compression, level 1 by default)
#   sha256  libcrypto (SHA-256 of every payload)
#   kernel  reads (the page-cache copy), page faults, writes, fsync
#   dsq     ds-quant itself (quantization, the scale search, error sampling)
#   other   libc (memcpy) and the rest
# each as CPU-s per GB of BF16 input (the share of samples times the run's
# user + sys CPU seconds), and the conversion speed that zstd + SHA-256
# alone would allow on all of this machine's cores: the floor no change to
# dsq's own code can go under.
#
#   sh bench/bench_convprof.sh [CHECKPOINT]      (default: the e16 layer)
#
# Environment: SCHEMES (default "w8a8-dynamic w4a8 awq-w4a16"), THREADS (2),
# EXTRA (more ds-quant flags, e.g. "--zstd-level 0"), KEEP=1 (keep the temporary
# directory with perf.data and the output). Needs perf (Debian:
# linux-perf) and permission to sample (root, or perf_event_paranoid <= 1).
set -e
cd "$(dirname "$0")/.."
SCHEMES=${SCHEMES:-w8a8-dynamic w4a8 awq-w4a16}
THREADS=${THREADS:-2}
command -v perf >/dev/null || { echo "bench_convprof.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
[ -x bin/ds-quant ] || { echo "bench_convprof.sh: build first (make)" >&2; exit 2; }
if [ $# -ge 1 ]; then
    MODEL=$1
    BYTES=$(du -Lbc "$MODEL"/*.safetensors | tail -1 | cut -f1)
else
    . bench/synth_layer.sh
    synth_layer 16
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/bench_convprof.XXXXXX")
[ -n "$KEEP" ] || trap 'rm -rf "$OUT"' EXIT
cat "$MODEL"/*.safetensors > /dev/null   # page cache warm, as bench_speed.sh
NCPU=$(nproc)
echo "bench_convprof: $(date -u '+%Y-%m-%d %H:%M UTC'), $NCPU cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "input $MODEL, $(awk -v b="$BYTES" 'BEGIN { printf "%.2f", b / 1e9 }') GB BF16; ds-quant -T $THREADS $EXTRA"
echo "| scheme | CPU-s | per GB: zstd | sha256 | kernel | dsq | other | total | zstd + sha256 alone allow on $NCPU cores |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in $SCHEMES; do
    rm -f "$OUT/o.dsq"
    # shellcheck disable=SC2086
    /usr/bin/time -f '%U %S' -o "$OUT/time" perf record -q -F 1999 -o "$OUT/perf.data" -- \
        bin/ds-quant --scheme $s $EXTRA -T "$THREADS" -f -q --no-progress "$MODEL" "$OUT/o.dsq" 2>/dev/null
    perf report -i "$OUT/perf.data" --stdio --sort dso -g none 2>/dev/null | grep '%' | grep -v '^#' > "$OUT/dso"
    awk -v s="$s" -v bytes="$BYTES" -v ncpu="$NCPU" -v tf="$OUT/time" '
        BEGIN { getline t < tf; split(t, a, " "); cpu = a[1] + a[2] }
        { p = $1; sub("%", "", p); d = $2
          if (d ~ /libzstd/) z += p; else if (d ~ /libcrypto/) h += p
          else if (d ~ /kernel/) k += p; else if (d ~ /ds-quant/) q += p; else o += p }
        END { gb = bytes / 1e9; n = z + h + k + q + o; if (n <= 0) n = 100
              f = cpu / gb / n
              lim = (z + h) * f
              cap = lim > 0 ? sprintf("%.2f GB/s", ncpu / lim) : "-"
              printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", s, cpu,
                     z * f, h * f, k * f, q * f, o * f, cpu / gb, cap }' "$OUT/dso"
done
