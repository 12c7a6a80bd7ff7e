#!/bin/sh
# calib_quality.sh - round-to-nearest vs calibrated scales on the trained
# sample: held-out perplexity, KL divergence against BF16 (mean and median)
# and GSM-style accuracy for each pair of the README's calibration table.
#
#   sh bench/calib_quality.sh [MODEL] [GSM_LIMIT]
#
# MODEL defaults to samples/tiny-dsv3; GSM_LIMIT (default 300, all) caps the
# GSM-style problems. Calibration: samples/data/calib.txt, 64 x 512 tokens.
# Work files go to bench/out/calib-quality/ (gitignored). Measurement, not a
# test: tests/test_calib.c asserts the orderings.
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-samples/tiny-dsv3}
LIMIT=${2:-300}
OUT=bench/out/calib-quality
mkdir -p $OUT
[ -x bin/ds-quant ] && [ -x bin/ds-eval ] || make -s all
D=samples/data
CAL="--calib $D/calib.txt --calib-samples 64 --calib-seqlen 512"
bin/ds-eval ppl -q -m "$MODEL" --data $D/heldout.txt --save-logits $OUT/base.logp --json > $OUT/base.json

num() { sed -n "s/.*\"$2\": *\([-0-9.e]*\).*/\1/p" "$1" | head -1; }
acc() { sed -n "s/.*\"$2\":{\"exact_match\":\([0-9.]*\).*/\1/p" "$1" | head -1; }

printf '| %-34s | %7s | %12s | %11s | %12s |\n' "scheme" "ppl" "KLD mean" "KLD median" "GSM strict"
printf '|%s|%s|%s|%s|%s|\n' "------------------------------------" "---------" "--------------" "-------------" "--------------"
row() {   # label scheme args...
    label=$1; shift; tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
    bin/ds-quant -q -f --json "$@" "$MODEL" $OUT/$tag.dsq > $OUT/$tag.quant.json
    bin/ds-eval kld -q -m $OUT/$tag.dsq --base $OUT/base.logp --json > $OUT/$tag.kld.json
    bin/ds-eval gsm8k -q -m $OUT/$tag.dsq --data $D/gsm_test.jsonl --train $D/gsm_fewshot.jsonl \
        --limit "$LIMIT" --json > $OUT/$tag.gsm.json
    printf '| %-34s | %7.4f | %12.5f | %11.3g | %11.1f%% |\n' "$label" "$(num $OUT/$tag.kld.json ppl)" \
        "$(num $OUT/$tag.kld.json kld_mean)" "$(num $OUT/$tag.kld.json kld_median)" \
        "$(echo "$(acc $OUT/$tag.gsm.json strict-match)" | awk '{print 100 * $1}')"
    rm -f $OUT/$tag.dsq
}
echo "base: $MODEL ppl $(num $OUT/base.json ppl)"
row "awq-w4a16 g128, RTN" --scheme awq-w4a16
row "awq-w4a16 g128, AWQ" --scheme awq-w4a16 $CAL
row "w8a8 static, no smoothing" --scheme w8a8 $CAL --no-smooth
row "w8a8 static, SmoothQuant" --scheme w8a8 $CAL
row "w4a8, RTN" --scheme w4a8
row "w4a8, calibrated" --scheme w4a8 $CAL
