#!/bin/sh
# bench_qsearch.sh - what the searched int4 group parameters (quant/qsearch.c,
# docs/calibration-notes.md "Searched group parameters") cost in a conversion: CPU seconds of
# `ds-quant -T 1` with --no-search and --search per int4 scheme, on the
# real-shape one-layer checkpoint of bench/synth_layer.sh (16 experts: 2.1 GB
# BF16), and the difference per GB of BF16 input.
#
#   sh bench/bench_qsearch.sh [CHECKPOINT]      (default bench/out/ds-v3-1moe-e16)
#
# Environment: SCHEMES (default "w4a8 awq-w4a16"), ROUNDS (default 2; each
# round runs both modes back to back). CPU seconds (user + sys) hold up on a
# shared machine better than wall time; the load average is printed.
set -e
cd "$(dirname "$0")/.."
IN=${1:-bench/out/ds-v3-1moe-e16}
SCHEMES=${SCHEMES:-w4a8 awq-w4a16}
ROUNDS=${ROUNDS:-2}
[ -d "$IN" ] || { echo "bench_qsearch.sh: no $IN (sh bench/synth_layer.sh makes it)" >&2; exit 2; }
[ -x bin/ds-quant ] || { echo "bench_qsearch.sh: build first (make)" >&2; exit 2; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/bench_qsearch.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
GB=$(du -Lbc "$IN"/*.safetensors | tail -1 | awk '{ printf "%.3f", $1 / 1e9 }')
echo "input $IN: $GB GB BF16; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| scheme | round | --no-search CPU-s | --search CPU-s | search CPU-s per GB |"
echo "|---|---|---|---|---|"
for s in $SCHEMES; do
    r=1
    while [ $r -le "$ROUNDS" ]; do
        for m in --no-search --search; do
            /usr/bin/time -f '%U %S' -o "$OUT/t$m" bin/ds-quant --scheme "$s" -T 1 -f -q $m "$IN" "$OUT/q" >/dev/null
            rm -rf "$OUT/q"
        done
        a=$(awk '{ print $1 + $2 }' "$OUT/t--no-search")
        b=$(awk '{ print $1 + $2 }' "$OUT/t--search")
        echo "| $s | $r | $a | $b | $(echo "$a $b $GB" | awk '{ printf "%.2f", ($2 - $1) / $3 }') |"
        r=$((r + 1))
    done
done
