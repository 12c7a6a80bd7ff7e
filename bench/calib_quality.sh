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
# TEXTS picks the held-out texts (default "heldout gsm"); besides those two:
#   wiki     the last 1/8 of the lines of ../shared/data/text/wiki.test.raw
#   stories  the same of ../shared/data/text/tinystories_val.txt
#            (samples/train_gpu.py trains mid-dsv3 on the first 7/8 only)
#   gsm8k    the first 300 real GSM8K test problems (../shared/data/gsm8k)
# each scored on its first LIMIT_TOKENS tokens (default: all). CALIB sets the
# calibration text (default samples/data/calib.txt); CALIB=mix calibrates on
# text like mid-dsv3's training mix: calib.txt's first 48 KiB, then the first
# 24 KiB of each of the two ../shared text files (inside their trained 7/8),
# since calibrating a model of varied text on word problems alone tunes its
# scales to one domain. OUT defaults to
# bench/out/calib-quality, or bench/out/calib-quality-NAME for a MODEL
# other than samples/tiny-dsv3 (NAME its directory's name).
# EXTRA_FLAGS are added to every calibrated row (e.g. a --gptq variant);
# QFLAGS to every row, RTN ones included (e.g. --search / --no-search: the
# int4 rows' group parameters searched or plain min/max, quant/qsearch.c);
# EXTRA_ROWS=0 drops the rows that are not RTN/calibrated pairs; ROWS=REGEX
# runs only the rows whose label matches (grep -E), e.g. ROWS=w8a8-dynamic.
# bpw is over the quantized linears; "bpw, all linears" also counts the
# projection weights a --keep recipe left in BF16 (16 bits), so a row that
# keeps tensors float is compared at its real size.
# Work files go to bench/out/calib-quality/ (gitignored). Measurement, not a
# test: tests/test_calib_quality.c asserts the orderings that cannot flip by noise.
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-samples/tiny-dsv3}
TEXTS=${TEXTS:-heldout gsm}
if [ -z "${OUT:-}" ]; then
    OUT=bench/out/calib-quality
    [ "$MODEL" = samples/tiny-dsv3 ] || OUT=$OUT-$(basename "$MODEL")
fi
mkdir -p $OUT
command -v jq >/dev/null || { echo "calib_quality.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
[ -x bin/ds-quant ] && [ -x bin/ds-eval ] && [ -x bin/ds-inspect ] || make -s all
D=samples/data
SH=../shared/data
CALF=${CALIB:-$D/calib.txt}
if [ "$CALF" = mix ]; then
    for f in $SH/text/wiki.test.raw $SH/text/tinystories_val.txt; do
        [ -f $f ] || { echo "calib_quality.sh: CALIB=mix needs $f (../shared is absent)" >&2; exit 2; }
    done
    CALF=$OUT/calib_mix.txt
    { head -c 49152 $D/calib.txt; head -c 24576 $SH/text/wiki.test.raw
      head -c 24576 $SH/text/tinystories_val.txt; } > $CALF
fi
CAL="--calib $CALF --calib-samples 64 --calib-seqlen 512 ${EXTRA_FLAGS:-}"

# the held-out texts, as plain text files $OUT/text_NAME.txt
qa() {   # jsonl -> "Question: Q\nAnswer: A\n\n" per problem (jq decodes every JSON escape)
    jq -r '"Question: \(.question)\nAnswer: \(.answer)\n"' "$1" > "$2"
    [ "$(grep -c '^Question: ' "$2")" = "$(wc -l < "$1" | tr -d ' ')" ] ||
        { echo "calib_quality.sh: could not render every problem of $1" >&2; exit 1; }
}
need_shared() {
    [ -f "$1" ] || { echo "calib_quality.sh: text $t needs $1 (../shared is absent)" >&2; exit 2; }
}
tail8() { n=$(wc -l < "$1"); tail -n $((n / 8)) "$1"; }   # samples/train_gpu.py heldout_split
for t in $TEXTS; do
    f=$OUT/text_$t.txt
    case $t in
        heldout) cp $D/heldout.txt $f ;;
        gsm) qa $D/gsm_test.jsonl $f ;;
        wiki) need_shared $SH/text/wiki.test.raw; tail8 $SH/text/wiki.test.raw > $f ;;
        stories) need_shared $SH/text/tinystories_val.txt; tail8 $SH/text/tinystories_val.txt > $f ;;
        gsm8k) need_shared $SH/gsm8k/test.jsonl; head -n 300 $SH/gsm8k/test.jsonl > $OUT/gsm8k300.jsonl
               qa $OUT/gsm8k300.jsonl $f ;;
        *) echo "calib_quality.sh: unknown text '$t' (heldout gsm wiki stories gsm8k)" >&2; exit 2 ;;
    esac
    bin/ds-eval ppl -q -f -m "$MODEL" --data $f ${LIMIT_TOKENS:+--limit-tokens $LIMIT_TOKENS} \
        --save-logits $OUT/base_$t.logp --json > $OUT/base_$t.json
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
hdr="| scheme | bpw | bpw, all linears |"; sep="|---|---|---|"
for t in $TEXTS; do
    hdr="$hdr $t: KLD mean [95% band] | median | p99 | same top-1 |"; sep="$sep---|---|---|---|"
done
echo "$hdr"
echo "$sep"
row() {   # label args...
    label=$1; shift
    [ -z "${ROWS:-}" ] || echo "$label" | grep -Eq -- "$ROWS" || return 0
    tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
    bin/ds-quant -q -f --json "$@" ${QFLAGS:-} "$MODEL" $OUT/$tag.dsq > $OUT/$tag.quant.json
    line="| $label | $(bpw $OUT/$tag.dsq) | $(bpw_all $OUT/$tag.dsq) |"
    for t in $TEXTS; do
        bin/ds-eval kld -q -m $OUT/$tag.dsq --base $OUT/base_$t.logp --json > $OUT/$tag.$t.json
        line="$line $(kld $OUT/$tag.$t.json) |"
    done
    echo "$line"
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
# GPTQ alone (docs/calibration.md "Why smoothing hurts w8a8-dynamic on
# mid-dsv3"): on mid-dsv3 the calibrated row that beats RTN on prose
row "w8a8-dynamic, GPTQ, no smoothing" --scheme w8a8-dynamic $CAL --gptq --no-smooth
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
    # the rollback without smoothing (on mid-dsv3 smoothing does not lower
    # w8a8-dynamic's KLD; with EXTRA_FLAGS=--gptq the best 8-bit row there)
    row "w8a8-dynamic, no smoothing, --rollback 1" --scheme w8a8-dynamic --rollback 1 --no-smooth $CAL
    # the mixed recipe DeepSeek deployments on Ascend run (msModelSlim's
    # W4A8: routed experts w4a8, attention / dense / shared w8a8-dynamic)
    row "deepseek-w4a8 recipe, RTN" --recipe deepseek-w4a8
    row "deepseek-w4a8 recipe, calibrated" --recipe deepseek-w4a8 $CAL
    row "deepseek-w4a8 recipe, calibrated, --rollback 1" --recipe deepseek-w4a8 --rollback 1 $CAL
fi
