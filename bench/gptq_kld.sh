#!/bin/sh
# gptq_kld.sh - end-to-end effect of GPTQ on the trained sample: mean, median
# and p99 KL divergence against the float model on samples/data/heldout.txt,
# and same-top-1, for RTN / GPTQ / scales (AWQ or SmoothQuant) / scales+GPTQ
# per integer scheme.
#
#   sh bench/gptq_kld.sh [MODEL]
#
# Calibration: samples/data/calib.txt, 64 x 512 tokens (as calib_quality.sh).
# "GPTQ" alone is --gptq --no-smooth --no-clip (no AWQ/SmoothQuant scales, no
# clip search). Work files in bench/out/gptq-kld/ (gitignored). Measurement,
# not a test: tests/test_gptq.c checks the solver.
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-samples/tiny-dsv3}
. bench/kld_rows.sh
kld_setup bench/out/gptq-kld

printf '| %-36s | %9s | %9s | %9s | %9s |\n' "scheme" "KLD mean" "median" "p99" "same top1"
printf '|%s|%s|%s|%s|%s|\n' "--------------------------------------" "-----------" "-----------" "-----------" "-----------"
row() {   # label args...
    kld_run "$@"
    printf '| %-36s | %9.5f | %9.3g | %9.4f | %9.4f |\n' "$1" "$(kld_num $KJ kld_mean)" \
        "$(kld_num $KJ kld_median)" "$(kld_num $KJ kld_p99)" "$(kld_num $KJ same_top1)"
}
G="--gptq --no-smooth --no-clip"
for g in 128 64; do
    row "awq-w4a16 g$g, RTN" --scheme awq-w4a16 --group-size $g
    row "awq-w4a16 g$g, GPTQ" --scheme awq-w4a16 --group-size $g $CAL $G
    row "awq-w4a16 g$g, AWQ" --scheme awq-w4a16 --group-size $g $CAL
    row "awq-w4a16 g$g, AWQ+GPTQ" --scheme awq-w4a16 --group-size $g $CAL --gptq
done
row "w4a8, RTN" --scheme w4a8
row "w4a8, GPTQ" --scheme w4a8 $CAL $G
row "w4a8, calibrated" --scheme w4a8 $CAL
row "w4a8, calibrated+GPTQ" --scheme w4a8 $CAL --gptq
row "w8a8-dynamic, RTN" --scheme w8a8-dynamic
row "w8a8-dynamic, GPTQ" --scheme w8a8-dynamic $CAL --gptq --no-smooth
row "w8a8-dynamic, smoothed" --scheme w8a8-dynamic $CAL
row "w8a8-dynamic, smoothed+GPTQ" --scheme w8a8-dynamic $CAL --gptq
row "w8a8, static ranges only" --scheme w8a8 $CAL --no-smooth
row "w8a8, static ranges + GPTQ" --scheme w8a8 $CAL --no-smooth --gptq
row "w8a8, SmoothQuant" --scheme w8a8 $CAL
row "w8a8, SmoothQuant+GPTQ" --scheme w8a8 $CAL --gptq
