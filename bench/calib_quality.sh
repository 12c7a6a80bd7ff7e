#!/bin/sh
# calib_quality.sh - round-to-nearest vs calibrated scales on the trained
# sample, on two held-out texts: bits per weight over the quantized linears,
# KL divergence against BF16 (mean with its 95% noise band, median, p99) and
# same top-1, for each pair of the README's calibration table.
#
#   sh bench/calib_quality.sh [MODEL]
#   EXTRA_FLAGS="--gptq" sh bench/calib_quality.sh    # extra ds-quant flags
#                                                     # for the calibrated rows
#
# MODEL defaults to samples/tiny-dsv3. Texts: samples/data/heldout.txt and the
# 300 GSM test problems (samples/data/gsm_test.jsonl) rendered as the sample
# was trained on them, "Question: Q\nAnswer: A\n\n" (samples/corpus.py).
# Calibration: samples/data/calib.txt, 64 x 512 tokens. The band is ds-eval
# kld's bootstrap over whole 512-token windows (eval/eval_metrics.h).
# EXTRA_FLAGS are added to every calibrated row (e.g. a --gptq variant);
# EXTRA_ROWS=0 drops the rows that are not RTN/calibrated pairs; ROWS=REGEX
# runs only the rows whose label matches (grep -E), e.g. ROWS=w8a8-dynamic.
# bpw is over the quantized linears; "bpw, all linears" also counts the
# projection weights a --keep recipe left in BF16 (16 bits), so a row that
# keeps tensors float is compared at its real size.
# Work files go to bench/out/calib-quality/ (gitignored). Measurement, not a
# test: tests/test_calib.c asserts the orderings that cannot flip by noise.
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-samples/tiny-dsv3}
OUT=bench/out/calib-quality
mkdir -p $OUT
command -v jq >/dev/null || { echo "calib_quality.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
[ -x bin/ds-quant ] && [ -x bin/ds-eval ] && [ -x bin/ds-inspect ] || make -s all
D=samples/data
CAL="--calib $D/calib.txt --calib-samples 64 --calib-seqlen 512 ${EXTRA_FLAGS:-}"

# the GSM test problems as plain text (jq decodes every JSON escape)
jq -r '"Question: \(.question)\nAnswer: \(.answer)\n"' $D/gsm_test.jsonl > $OUT/gsm_test.txt
[ "$(grep -c '^Question: ' $OUT/gsm_test.txt)" = "$(wc -l < $D/gsm_test.jsonl | tr -d ' ')" ] ||
    { echo "calib_quality.sh: could not render every GSM test problem" >&2; exit 1; }

for t in heldout gsm; do
    f=$D/heldout.txt; [ $t = gsm ] && f=$OUT/gsm_test.txt
    bin/ds-eval ppl -q -f -m "$MODEL" --data $f --save-logits $OUT/base_$t.logp --json > $OUT/base_$t.json
    echo "base $t: $(jq -r '"\(.tokens_scored) positions in \(.windows) windows, ppl \(.ppl)"' $OUT/base_$t.json)"
done

# bits per weight over the quantized (integer-scheme) tensors: stored blob
# bytes before zstd (scales and zero points included) over their elements
bpw() {
    bin/ds-inspect --json "$1" | jq -r '[.tensors[] | select(.scheme != "f32" and .scheme != "bf16")
        | {b: .raw_bytes, n: (.shape | reduce .[] as $x (1; . * $x))}]
        | if length == 0 then "-" else ((map(.b) | add) * 8 / (map(.n) | add) * 100 | round / 100 | tostring) end'
}
# the same over every projection weight (quantized, or kept BF16 / f32 by a
# recipe); the MoE router (mlp.gate), embeddings and norms are not linears
# that any row quantizes, so they are left out of both columns
bpw_all() {
    bin/ds-inspect --json "$1" | jq -r '[.tensors[] | select((.scheme != "f32" and .scheme != "bf16")
            or (.name | test("(_proj|_proj_with_mqa)\\.weight$")))
        | {b: .raw_bytes, n: (.shape | reduce .[] as $x (1; . * $x))}]
        | if length == 0 then "-" else ((map(.b) | add) * 8 / (map(.n) | add) * 100 | round / 100 | tostring) end'
}
kld() {   # json-file -> "mean [lo, hi] | median | p99 | same top-1"
    jq -r '"\(.kld_mean * 1e5 | round / 1e5) [\(.kld_mean_lo * 1e5 | round / 1e5), \(.kld_mean_hi * 1e5 | round / 1e5)] | \(.kld_median * 1e8 | round / 1e8) | \(.kld_p99 * 1e5 | round / 1e5) | \(.same_top1 * 1e4 | round / 100)%"' "$1"
}

echo
echo "| scheme | bpw | bpw, all linears | heldout: KLD mean [95% band] | median | p99 | same top-1 | GSM test: KLD mean [95% band] | median | p99 | same top-1 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row() {   # label args...
    label=$1; shift
    [ -z "${ROWS:-}" ] || echo "$label" | grep -Eq -- "$ROWS" || return 0
    tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
    bin/ds-quant -q -f --json "$@" "$MODEL" $OUT/$tag.dsq > $OUT/$tag.quant.json
    for t in heldout gsm; do
        bin/ds-eval kld -q -m $OUT/$tag.dsq --base $OUT/base_$t.logp --json > $OUT/$tag.$t.json
    done
    echo "| $label | $(bpw $OUT/$tag.dsq) | $(bpw_all $OUT/$tag.dsq) | $(kld $OUT/$tag.heldout.json) | $(kld $OUT/$tag.gsm.json) |"
    rm -f $OUT/$tag.dsq
}
row "awq-w4a16 g128, RTN" --scheme awq-w4a16
row "awq-w4a16 g128, AWQ" --scheme awq-w4a16 $CAL
row "awq-w4a16 g64, RTN" --scheme awq-w4a16 --group-size 64
row "awq-w4a16 g64, AWQ" --scheme awq-w4a16 --group-size 64 $CAL
row "w8a8 static, no smoothing" --scheme w8a8 $CAL --no-smooth
row "w8a8 static, SmoothQuant" --scheme w8a8 $CAL
row "w8a8-dynamic, RTN" --scheme w8a8-dynamic
row "w8a8-dynamic, smoothed" --scheme w8a8-dynamic $CAL
row "w4a8, RTN" --scheme w4a8
row "w4a8, calibrated" --scheme w4a8 $CAL
if [ "${EXTRA_ROWS:-1}" != 0 ]; then
    # what carries w8a8-dynamic's KLD on the sample: the dense layers'
    # down_proj input (per-token int8 of silu(gate) * up); kept in BF16
    # (routed and shared experts' down_proj stay quantized)
    row "w8a8-dynamic, RTN, dense down_proj BF16" --scheme w8a8-dynamic --keep '\.mlp\.down_proj\.weight$'
    row "w8a8-dynamic, smoothed, dense down_proj BF16" --scheme w8a8-dynamic --keep '\.mlp\.down_proj\.weight$' $CAL
    # the same choice made by calibration: the N linears of largest measured
    # sensitivity (calib/sens.h) stay float
    row "w8a8-dynamic, smoothed, --rollback 1" --scheme w8a8-dynamic --rollback 1 $CAL
    row "w8a8-dynamic, smoothed, --rollback 3" --scheme w8a8-dynamic --rollback 3 $CAL
fi
