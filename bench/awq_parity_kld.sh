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
OUT=bench/out/awq-kld
mkdir -p $OUT
[ -x bin/ds-quant ] && [ -x bin/ds-eval ] || make -s all
D=samples/data
CAL="--calib $D/calib.txt --calib-samples 64 --calib-seqlen 512"
bin/ds-eval ppl -q -f -m "$MODEL" --data $D/heldout.txt --save-logits $OUT/base.logp --json > $OUT/base.json
num() { sed -n "s/.*\"$2\": *\([-0-9.e]*\).*/\1/p" "$1" | head -1; }
printf '| %-32s | %7s | %9s | %11s | %9s |\n' "awq-w4a16" "ppl" "KLD mean" "KLD median" "KLD p99"
printf '|%s|%s|%s|%s|%s|\n' "----------------------------------" "---------" "-----------" "-------------" "-----------"
row() {   # label args...
    label=$1; shift; tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
    bin/ds-quant -q -f --json --scheme awq-w4a16 "$@" "$MODEL" $OUT/$tag.dsq > $OUT/$tag.quant.json
    bin/ds-eval kld -q -m $OUT/$tag.dsq --base $OUT/base.logp --json > $OUT/$tag.kld.json
    printf '| %-32s | %7.4f | %9.5f | %11.3g | %9.4f |\n' "$label" "$(num $OUT/$tag.kld.json ppl)" \
        "$(num $OUT/$tag.kld.json kld_mean)" "$(num $OUT/$tag.kld.json kld_median)" \
        "$(num $OUT/$tag.kld.json kld_p99)"
    rm -f $OUT/$tag.dsq
}
for g in 128 64; do
    row "g$g RTN" --group-size $g
    row "g$g AWQ scales, no clip" --group-size $g $CAL --no-clip
    row "g$g AWQ, q_a/kv_a loss (old)" --group-size $g $CAL --awq-attn-block 0
    row "g$g AWQ (scales + X^T X clip)" --group-size $g $CAL
done
