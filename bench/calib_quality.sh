#!/bin/sh
# calib_quality.sh - round-to-nearest vs calibrated scales on the trained
# sample, on two held-out texts: bits per weight over the quantized linears,
# KL divergence against BF16 (mean with its 95% noise band, median, p99) and
# same top-1, for each round-to-nearest / calibrated pair. It writes
# docs/quality.md (PAGE; PAGE= for none) with a header naming the machine,
# date, commit and command: that page is never edited by hand.
#
#   nice sh bench/calib_quality.sh [MODEL]
#   EXTRA_FLAGS="--gptq" sh bench/calib_quality.sh    # extra ds-quant flags
#                                                     # for the calibrated rows
#   QUICK=1 nice sh bench/calib_quality.sh            # heldout.txt only, the
#                                                     # pairs without extra rows
#
# MODEL defaults to samples/tiny-dsv3. Texts: samples/data/heldout.txt and the
# 300 GSM test problems (samples/data/gsm_test.jsonl) rendered as the sample
# was trained on them, "Question: Q\nAnswer: A\n\n" (samples/corpus.py).
# Calibration: samples/data/calib.txt, 64 x 512 tokens. The band is ds-eval
# kld's bootstrap over whole 512-token windows (eval/eval_metrics.h).
# TEXTS picks the held-out texts (default "heldout gsm"); besides those two,
# from the data directory DSQ_DATA (text/ and gsm8k/ of the sample-training
# data, samples/README.md; these texts are skipped with a message without it):
#   wiki     the last 1/8 of the lines of $DSQ_DATA/text/wiki.test.raw
#   stories  the same of $DSQ_DATA/text/tinystories_val.txt
#            (samples/train_gpu.py trains mid-dsv3 on the first 7/8 only)
#   gsm8k    the first 300 real GSM8K test problems ($DSQ_DATA/gsm8k)
# each scored on its first LIMIT_TOKENS tokens (default: all). CALIB sets the
# calibration text (default samples/data/calib.txt); CALIB=mix calibrates on
# text like mid-dsv3's training mix: calib.txt's first 48 KiB, then the first
# 24 KiB of each of the two DSQ_DATA text files (inside their trained 7/8),
# since calibrating a model of varied text on word problems alone tunes its
# scales to one domain. OUT defaults to
# bench/out/calib-quality, or bench/out/calib-quality-NAME for a MODEL
# other than samples/tiny-dsv3 (NAME its directory's name).
# EXTRA_FLAGS are added to every calibrated row (e.g. a --gptq variant);
# QFLAGS to every row, RTN ones included (e.g. --search / --no-search: the
# int4 rows' group parameters searched or plain min/max, quant/qsearch.c);
# EXTRA_ROWS=0 drops the rows that are not RTN/calibrated pairs, RECIPE_ROWS=0
# the recipe rows (deepseek-w8a8 with SmoothQuant / flex, QuaRot, GPTQ), KV_ROWS=0
# the KV cache table (--kv-cache: KLD and bytes per position); ROWS=REGEX
# runs only the rows whose label matches (grep -E), e.g. ROWS=w8a8-dynamic.
# bpw is over the quantized linears; "bpw, all linears" also counts the
# projection weights a --keep recipe left in BF16 (16 bits), so a row that
# keeps tensors float is compared at its real size.
# Work files go to bench/out/calib-quality/ (gitignored). Measurement, not a
# test: tests/test_calib_quality.c asserts the orderings that cannot flip by noise.
set -e
cd "$(dirname "$0")/.."
. bench/doc_page.sh
doc_init bench/calib_quality.sh QUICK DSQ_DATA TEXTS LIMIT_TOKENS CALIB EXTRA_FLAGS QFLAGS EXTRA_ROWS RECIPE_ROWS KV_ROWS ROWS OUT -- "$@"
MODEL=${1:-samples/tiny-dsv3}
if [ "${QUICK:-0}" = 1 ]; then
    TEXTS=${TEXTS:-heldout}
    EXTRA_ROWS=${EXTRA_ROWS:-0}
    DOC_NOTE="reduced run (QUICK=1): the held-out texts are $TEXTS (the full run adds the 300 GSM test problems as text)"
    [ "$EXTRA_ROWS" != 0 ] || DOC_NOTE="$DOC_NOTE, and only the round-to-nearest / calibrated pairs and the recipe rows (the full run adds the rows that keep the dense down_proj in BF16 and the --rollback rows)"
fi
TEXTS=${TEXTS:-heldout gsm}
if [ -z "${OUT:-}" ]; then
    OUT=bench/out/calib-quality
    [ "$MODEL" = samples/tiny-dsv3 ] || OUT=$OUT-$(basename "$MODEL")
fi
mkdir -p $OUT
command -v jq >/dev/null || { echo "calib_quality.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
[ -x bin/ds-quant ] && [ -x bin/ds-eval ] && [ -x bin/ds-inspect ] || make -s all
D=samples/data
SH=${DSQ_DATA:-}
CALF=${CALIB:-$D/calib.txt}
if [ "$CALF" = mix ]; then
    for f in "$SH/text/wiki.test.raw" "$SH/text/tinystories_val.txt"; do
        [ -n "$SH" ] && [ -f "$f" ] || { echo "calib_quality.sh: CALIB=mix needs $f (set DSQ_DATA to the sample-training data)" >&2; exit 2; }
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
need_data() {
    [ -n "$SH" ] && [ -f "$1" ] || { echo "calib_quality.sh: text $t needs $1 (set DSQ_DATA to the sample-training data)" >&2; exit 2; }
}
tail8() { n=$(wc -l < "$1"); tail -n $((n / 8)) "$1"; }   # samples/train_gpu.py heldout_split
for t in $TEXTS; do
    f=$OUT/text_$t.txt
    case $t in
        heldout) cp $D/heldout.txt $f ;;
        gsm) qa $D/gsm_test.jsonl $f ;;
        wiki) need_data $SH/text/wiki.test.raw; tail8 $SH/text/wiki.test.raw > $f ;;
        stories) need_data $SH/text/tinystories_val.txt; tail8 $SH/text/tinystories_val.txt > $f ;;
        gsm8k) need_data $SH/gsm8k/test.jsonl; head -n 300 $SH/gsm8k/test.jsonl > $OUT/gsm8k300.jsonl
               qa $OUT/gsm8k300.jsonl $f ;;
        *) echo "calib_quality.sh: unknown text '$t' (heldout gsm wiki stories gsm8k)" >&2; exit 2 ;;
    esac
    bin/ds-eval ppl -q -f -m "$MODEL" --data $f ${LIMIT_TOKENS:+--limit-tokens $LIMIT_TOKENS} \
        --save-logits $OUT/base_$t.logp --json > $OUT/base_$t.json
    say '%s\n' "- $t: $(jq -r '"\(.tokens_scored) positions in \(.windows) windows, float model ppl \(.ppl)"' $OUT/base_$t.json)"
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

say '\n'
hdr="| scheme | bpw | bpw, all linears |"; sep="|---|---|---|"
for t in $TEXTS; do
    hdr="$hdr $t: KLD mean [95% band] | median | p99 | same top-1 |"; sep="$sep---|---|---|---|"
done
say '%s\n' "$hdr" "$sep"
: > $OUT/plot.tsv
row() {   # label args...
    label=$1; shift
    [ -z "${ROWS:-}" ] || echo "$label" | grep -Eq -- "$ROWS" || return 0
    tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
    bin/ds-quant -q -f --json "$@" ${QFLAGS:-} "$MODEL" $OUT/$tag.dsq > $OUT/$tag.quant.json
    b=$(bpw $OUT/$tag.dsq)
    line="| $label | $b | $(bpw_all $OUT/$tag.dsq) |"
    for t in $TEXTS; do
        bin/ds-eval kld -q -m $OUT/$tag.dsq --base $OUT/base_$t.logp --json > $OUT/$tag.$t.json
        line="$line $(kld $OUT/$tag.$t.json) |"
    done
    t1=${TEXTS%% *}   # the plot: mean KLD on the first text against bpw
    printf '%s\t%s\t%s\n' "$b" "$(jq -r .kld_mean $OUT/$tag.$t1.json)" "$label" >> $OUT/plot.tsv
    say '%s\n' "$line"
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
    row "deepseek-w4a8 recipe, calibrated, --rollback 1" --recipe deepseek-w4a8 --rollback 1 $CAL
fi
if [ "${RECIPE_ROWS:-1}" != 0 ]; then
    # the recipes behind the published DeepSeek weights: msModelSlim's W8A8
    # (attention static, MLP dynamic) with SmoothQuant or flex smoothing, with
    # and without QuaRot; flex on w8a8-dynamic; deepseek-w4a8 with QuaRot and GPTQ
    row "deepseek-w8a8 recipe, SmoothQuant" --recipe deepseek-w8a8 $CAL
    row "deepseek-w8a8 recipe, flex" --recipe deepseek-w8a8 --smooth flex $CAL
    row "deepseek-w8a8 recipe, QuaRot + SmoothQuant" --recipe deepseek-w8a8 --rotate quarot $CAL
    row "deepseek-w8a8 recipe, QuaRot + flex" --recipe deepseek-w8a8 --rotate quarot --smooth flex $CAL
    row "w8a8-dynamic, flex" --scheme w8a8-dynamic --smooth flex $CAL
    row "w8a8-dynamic, QuaRot, RTN" --scheme w8a8-dynamic --rotate quarot
    row "deepseek-w4a8 recipe, RTN" --recipe deepseek-w4a8
    row "deepseek-w4a8 recipe, calibrated" --recipe deepseek-w4a8 $CAL
    row "deepseek-w4a8 recipe, QuaRot, RTN" --recipe deepseek-w4a8 --rotate quarot
    row "deepseek-w4a8 recipe, QuaRot, calibrated" --recipe deepseek-w4a8 --rotate quarot $CAL
    row "deepseek-w4a8 recipe, calibrated, GPTQ" --recipe deepseek-w4a8 --gptq $CAL
    row "deepseek-w4a8 recipe, QuaRot, calibrated, GPTQ" --recipe deepseek-w4a8 --rotate quarot --gptq $CAL
fi
say '\n'
# what each technique did in this run, read from the table's numbers: a
# difference inside the noise band of the rows is called a tie
verdict() {   # label-with label-without technique
    a=$(awk -F'\t' -v l="$1" '$3 == l { print $2 }' $OUT/plot.tsv); b=$(awk -F'\t' -v l="$2" '$3 == l { print $2 }' $OUT/plot.tsv)
    [ -n "$a" ] && [ -n "$b" ] || return 0
    ta=$(echo "$1" | tr -c 'a-zA-Z0-9\n' '_'); tb=$(echo "$2" | tr -c 'a-zA-Z0-9\n' '_'); t1=${TEXTS%% *}
    lo=$(jq -r .kld_mean_lo $OUT/$tb.$t1.json); hi=$(jq -r .kld_mean_hi $OUT/$tb.$t1.json)
    w=$(awk -v a="$a" -v b="$b" -v lo="$lo" -v hi="$hi" 'BEGIN { if (a < lo) print "lowers"; else if (a > hi) print "raises"; else print "leaves within the noise band" }')
    [ "$w" = lowers ] && VERDICT_HELPS="$VERDICT_HELPS $3"
    say '%s\n' "- $3 $w the mean KLD on $t1: $(printf '%.3g' "$b") ($2) -> $(printf '%.3g' "$a") ($1)."
}
if [ "${RECIPE_ROWS:-1}" != 0 ]; then
    say '%s\n\n' "What each technique did on this run (\"lowers\" / \"raises\": outside the 95% band of the row without it):"
    verdict "deepseek-w8a8 recipe, flex" "deepseek-w8a8 recipe, SmoothQuant" "Flex smoothing, on the deepseek-w8a8 recipe,"
    verdict "w8a8-dynamic, flex" "w8a8-dynamic, smoothed" "Flex smoothing, on w8a8-dynamic,"
    verdict "deepseek-w8a8 recipe, QuaRot + SmoothQuant" "deepseek-w8a8 recipe, SmoothQuant" "QuaRot, on the deepseek-w8a8 recipe,"
    verdict "w8a8-dynamic, QuaRot, RTN" "w8a8-dynamic, RTN" "QuaRot, on w8a8-dynamic RTN,"
    verdict "deepseek-w4a8 recipe, QuaRot, calibrated" "deepseek-w4a8 recipe, calibrated" "QuaRot, on the calibrated deepseek-w4a8 recipe,"
    verdict "deepseek-w4a8 recipe, calibrated, GPTQ" "deepseek-w4a8 recipe, calibrated" "GPTQ, on the calibrated deepseek-w4a8 recipe,"
    if [ -z "${VERDICT_HELPS:-}" ]; then
        say '\n%s\n' "None of these lowers the KLD beyond the noise band on this sample, so the recipes keep their defaults (SmoothQuant, no rotation, no GPTQ); the options are there for models whose activations have the outlier channels that rotations and smoothing were made for."
    else
        say '\n%s\n' "Outside the noise band on this sample:$VERDICT_HELPS."
    fi
    say '\n'
fi
# MLA's KV cache in 16 / 8 bits (--kv-cache): the float model's KLD against
# its own float32 cache, and what a position costs; the 671B column is
# DeepSeek-V3's shape (61 layers, 512 + 64 values; V3.2 adds its indexer's
# 128 e4m3 keys and a scale, 132 bytes, per layer)
if [ "${KV_ROWS:-1}" != 0 ] && [ "$(jq -r '.kv_lora_rank // 0' $MODEL/config.json 2>/dev/null)" != 0 ]; then
    R=$(jq -r .kv_lora_rank $MODEL/config.json); P=$(jq -r .qk_rope_head_dim $MODEL/config.json)
    NL=$(jq -r .num_hidden_layers $MODEL/config.json)
    say '%s\n\n' "MLA's KV cache (\`ds-eval --kv-cache\`), the float model against its own float32 cache; bytes per position over all layers, and a 128K-token context of DeepSeek-V3 (61 layers, V3.2 adds 132 bytes of indexer keys per layer):"
    t1=${TEXTS%% *}
    say '%s\n%s\n' "| cache | $t1: KLD mean [95% band] | median | p99 | same top-1 | bytes / position ($(basename $MODEL)) | 128K context, 671B (V3 / V3.2) |" "|---|---|---|---|---|---|---|"
    for kv in bf16 int8 fp8 f32; do
        case $kv in f32) b=4; x=0 ;; bf16) b=2; x=0 ;; *) b=1; x=8 ;; esac
        bin/ds-eval kld -q --kv-cache $kv -m "$MODEL" --base $OUT/base_$t1.logp --json > $OUT/kv_$kv.json
        per=$(( NL * ((R + P) * b + x) ))
        big=$(awk -v b=$b -v x=$x 'BEGIN { v3 = 61 * (576 * b + x) * 131072 / 2^30; v32 = v3 + 61 * 132 * 131072 / 2^30;
                                           printf "%.2f / %.2f GiB", v3, v32 }')
        say '%s\n' "| $kv | $(kld $OUT/kv_$kv.json) | $per | $big |"
    done
    say '\n'
fi
# mean KLD against bits per weight, every row (gnuplot, when installed)
SVG=${PAGE-docs/quality.md}
SVG=${SVG%.md}-kld-bpw.svg
if [ -n "${PAGE-docs/quality.md}" ] && command -v gnuplot >/dev/null 2>&1 && [ -s $OUT/plot.tsv ]; then
    gnuplot -e "set terminal svg size 900,600 font 'sans,11'; set output '$SVG.tmp';
        set datafile separator '\t'; set logscale y; set xlabel 'bits per weight (quantized linears)';
        set ylabel 'mean KLD vs the float model (${TEXTS%% *}, log scale)'; set key off; set grid;
        plot '$OUT/plot.tsv' using 1:2 with points pt 7 ps 0.8, '' using 1:2:3 with labels left offset 0.6,0 font 'sans,7'" &&
        mv $SVG.tmp $SVG
    say '%s\n\n' "![mean KLD against bits per weight]($(basename $SVG))"
    say '%s\n\n' "Every row above, mean KLD on ${TEXTS%% *} against bits per weight. llama.cpp's quant types are not measured on this sample (their KLD on the same texts would need the sample converted to GGUF), so they are not drawn."
fi
doc_finish "${PAGE-docs/quality.md}" "Quality: round-to-nearest, calibrated scales and recipes" \
"KL divergence of each quantized model against the float model, from one run of \`bench/calib_quality.sh\` on \`$MODEL\`: the mean with its 95% noise band (a bootstrap over whole 512-token windows), the median, p99 and same top-1 (the share of positions whose argmax agrees with the float model). bpw: stored bits per weight of the quantized linears, scales included (the sample's 64-column tensors are padded to the group for awq-w4a16); \"bpw, all linears\" also counts the projections a recipe kept in BF16. Calibrated rows use 64 x 512 tokens of \`${CALF}\`${EXTRA_FLAGS:+ and \`$EXTRA_FLAGS\`}. What these figures mean: [calibration-notes.md](calibration-notes.md). Held-out texts:"
