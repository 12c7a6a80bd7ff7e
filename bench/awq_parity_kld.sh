#!/bin/sh
# awq_parity_kld.sh - end to end: mean / median KL divergence against BF16 on
# samples/data/heldout.txt of awq-w4a16 round-to-nearest vs AWQ-calibrated
# (scale search + X^T X clip, calib.txt 64 x 512 tokens), group sizes 128
# and 64, the AWQ scales without any clip (what the clip adds), and the
# attention-input group scored on q_a / kv_a outputs (--awq-attn-block 0)
# instead of the MLA block output (the default).
#
#   sh bench/awq_parity_kld.sh [MODEL]
#
# Work files in bench/out/awq-kld/ (gitignored). Measurement, not a test; on
# this sample the mean is carried by a few near-tie tokens
# (docs/calibration.md), so read the median too.
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-samples/tiny-dsv3}
. bench/kld_rows.sh
kld_setup bench/out/awq-kld
printf '| %-32s | %7s | %9s | %11s | %9s |\n' "awq-w4a16" "ppl" "KLD mean" "KLD median" "KLD p99"
printf '|%s|%s|%s|%s|%s|\n' "----------------------------------" "---------" "-----------" "-------------" "-----------"
row() {   # label args...
    label=$1; shift
    kld_run "$label" --scheme awq-w4a16 "$@"
    printf '| %-32s | %7.4f | %9.5f | %11.3g | %9.4f |\n' "$label" "$(kld_num $KJ ppl)" \
        "$(kld_num $KJ kld_mean)" "$(kld_num $KJ kld_median)" "$(kld_num $KJ kld_p99)"
}
for g in 128 64; do
    row "g$g RTN" --group-size $g
    row "g$g AWQ scales, no clip" --group-size $g $CAL --no-clip
    row "g$g AWQ, q_a/kv_a loss (old)" --group-size $g $CAL --awq-attn-block 0
    row "g$g AWQ (scales + X^T X clip)" --group-size $g $CAL
done
