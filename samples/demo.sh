#!/bin/sh
# make demo: the main job end to end on the bundled sample.
#   1. convert samples/tiny-dsv3 (BF16, DeepSeek-V3 architecture) to every scheme,
#      round-to-nearest and calibrated (AWQ, SmoothQuant, calibrated w4a8) side by
#      side, and the FP8 variant to w8a8-dynamic straight from F8_E4M3 + block scales
#   2. evaluate each: held-out perplexity, KL divergence vs BF16, GSM-style accuracy
#      (5-shot greedy, lm-eval gsm8k rules), decode speed
#   3. print one results table (also written to build/demo/results.md)
# One table row is one call:
#   row LABEL NAME [ds-quant arguments...]
# converts with those arguments to build/demo/NAME.dsq (timed: the "convert"
# column, calibration included), verifies it, evaluates it and appends the
# row; without arguments the row is the BF16 source itself. With --format F
# among the arguments, ds-quant writes a serving export directory
# build/demo/NAME/ instead, and the row evaluates that directory. An export
# row made from an existing .dsq is one call too:
#   xrow LABEL NAME FORMAT SRC    ds-export --format FORMAT build/demo/SRC.dsq build/demo/NAME/
# The table is read from the CLIs' --json output with jq.
# Environment: DEMO_GSM_LIMIT (default 100 problems), DEMO_THREADS (default all cores),
# DEMO_README=1: also rewrite README.md's demo table (between its demo-table
# markers) from this run; README.md's numbers are only ever written this way.
set -e
cd "$(dirname "$0")/.."
MODEL=samples/tiny-dsv3
FP8=samples/tiny-dsv3-fp8
DATA=samples/data
OUT=build/demo
LIMIT=${DEMO_GSM_LIMIT:-100}
T=${DEMO_THREADS:-0}
TFLAG=""
[ "$T" != 0 ] && TFLAG="-T $T"
# the calibration set: 64 x 512 tokens of samples/data/calib.txt (as bench/calib_quality.sh)
CALIB="--calib $DATA/calib.txt --calib-samples 64 --calib-seqlen 512"
for b in ds-quant ds-eval ds-inspect; do
  [ -x bin/$b ] || { echo "demo: bin/$b missing (run make)"; exit 1; }
done
if [ ! -f $MODEL/config.json ]; then
  echo "demo: $MODEL is missing (make samples regenerates it)"; exit 1
fi
command -v jq >/dev/null 2>&1 || { echo "demo: jq is needed to read the CLIs' JSON (sh .ci/deps.sh, or apt-get install jq)"; exit 1; }
mkdir -p $OUT
now() { date +%s.%N; }
# jqf FILE FILTER: one value from a --json output (empty when null)
jqf() { jq -r "$2 // empty" "$1"; }

echo "demo: base log-probs and perplexity of the BF16 source on $DATA/heldout.txt"
bin/ds-eval ppl -q $TFLAG --json -m $MODEL --data $DATA/heldout.txt --save-logits $OUT/base.logp -f > $OUT/source.ppl.json

row() { # LABEL NAME [ds-quant args...]
  label=$1; name=$2; shift 2
  if [ $# -eq 0 ]; then
    m=$MODEL; secs="-"
    size=$(du -cb $MODEL/*.safetensors | tail -1 | cut -f1)
    ppl=$(jqf $OUT/source.ppl.json .ppl); kld="(base)"
  else
    m=$OUT/$name.dsq
    case " $* " in *" --format "*) m=$OUT/$name ;; esac
    t0=$(now)
    if [ "$1" = "--export-from" ]; then     # (xrow) ds-export of an earlier row's .dsq
      bin/ds-export -q -f $TFLAG --json --format "$2" "$OUT/$3.dsq" $m > $OUT/$name.quant.json
    else
      bin/ds-quant -q -f $TFLAG --json "$@" $m > $OUT/$name.quant.json
    fi
    secs=$(echo "$t0 $(now)" | awk '{printf "%.1f", $2 - $1}')
    bin/ds-inspect -q --verify $m >/dev/null
    size=$(du -sb $m | cut -f1)
    bin/ds-eval kld -q -f $TFLAG --json --tokenizer $MODEL -m $m --base $OUT/base.logp > $OUT/$name.kld.json
    ppl=$(jqf $OUT/$name.kld.json .ppl); kld=$(printf "%.6f" "$(jqf $OUT/$name.kld.json .kld_mean)")
  fi
  bin/ds-eval gsm8k -q -f $TFLAG --json --tokenizer $MODEL -m $m --data $DATA/gsm_test.jsonl \
    --train $DATA/gsm_fewshot.jsonl --limit $LIMIT --out $OUT/$name.gsm8k.jsonl > $OUT/$name.gsm8k.json
  strict=$(jqf $OUT/$name.gsm8k.json '."strict-match".exact_match * 100')
  flex=$(jqf $OUT/$name.gsm8k.json '."flexible-extract".exact_match * 100')
  tps=$(jqf $OUT/$name.gsm8k.json .gen_tokens_per_s)
  printf '| %-28s | %9.2f MB | %9.4f | %-11s | %6.1f%% | %6.1f%% | %7.1f | %7s |\n' "$label" \
    "$(echo "$size" | awk '{print $1/1e6}')" "$ppl" "$kld" "$strict" "$flex" "$tps" "$secs" >> $OUT/results.md
  printf '| %s | %.2f MB | %.4f | %s | %.1f%% |\n' "$label" "$(echo "$size" | awk '{print $1/1e6}')" "$ppl" "$kld" \
    "$strict" >> $OUT/readme-rows.md
  echo "demo: $label done"
}
xrow() { # LABEL NAME FORMAT SRC: ds-export --format FORMAT build/demo/SRC.dsq build/demo/NAME/
  row "$1" "$2" --export-from "$3" "$4" --format "$3"
}

{
  echo "Sample: $MODEL, held-out text $DATA/heldout.txt, GSM-style test $DATA/gsm_test.jsonl (first $LIMIT, 5-shot greedy);"
  echo "calibrated rows: 64 x 512 tokens of $DATA/calib.txt; convert = ds-quant wall seconds, calibration included"
  echo
  echo "| scheme                       |      size    |    ppl    | KLD vs BF16 | strict | flexible | gen tok/s | convert |"
  echo "|------------------------------|--------------|-----------|-------------|--------|----------|-----------|---------|"
} > $OUT/results.md
: > $OUT/readme-rows.md
echo "demo: converting and evaluating (ppl, KLD, GSM-style accuracy), one row at a time"
t_all=$(now)
row "source (BF16)"                source
row "bf16"                         bf16       --scheme bf16 $MODEL
row "w8a8-dynamic"                 w8a8-dyn   --scheme w8a8-dynamic $MODEL
row "w8a8 static (no smoothing)"   w8a8-rtn   --scheme w8a8 $CALIB --no-smooth $MODEL
row "w8a8 static + SmoothQuant"    w8a8-sq    --scheme w8a8 $CALIB $MODEL
row "w4a8 (RTN)"                   w4a8       --scheme w4a8 $MODEL
row "w4a8 calibrated"              w4a8-cal   --scheme w4a8 $CALIB $MODEL
row "awq-w4a16 (RTN)"              awq-rtn    --scheme awq-w4a16 $MODEL
row "awq-w4a16 + AWQ"              awq-cal    --scheme awq-w4a16 $CALIB $MODEL
row "fp8 -> w8a8-dynamic"          fp8-w8a8   --scheme w8a8-dynamic $FP8
# serving exports (docs/serving-exports.md), each read back by ds-eval from its directory
xrow "w8a8-dynamic -> ascend"       x-ascend-w8a8 ascend w8a8-dyn
row  "deepseek-w4a8 -> ascend"      x-ascend-w4a8 --recipe deepseek-w4a8 --format ascend $MODEL
row  "deepseek-w8a8 -> ascend"      x-ascend-w8a8r --recipe deepseek-w8a8 $CALIB --format ascend $MODEL
row  "awq-w4a16 g64 -> awq"         x-awq      --scheme awq-w4a16 --group-size 64 --keep q_b_proj --format awq $MODEL
xrow "w8a8-dynamic -> compr.-tens." x-ct-w8a8  compressed-tensors w8a8-dyn
echo
cat $OUT/results.md
echo
echo "demo: total $(echo "$t_all $(now)" | awk '{printf "%.0f", $2 - $1}') s"
if [ "${DEMO_README:-0}" = 1 ]; then
  # README.md's table: the rows of this run between the markers, the rest of the file as it is
  begin='<!-- demo table: written by DEMO_README=1 make demo -->'
  end='<!-- end of demo table -->'
  [ "$(grep -c -F -x -e "$begin" -e "$end" README.md)" = 2 ] || { echo "demo: README.md lacks the demo-table markers"; exit 1; }
  {
    echo "| scheme | size | ppl | KLD vs BF16 | GSM-style strict |"
    echo "|---|---|---|---|---|"
    cat $OUT/readme-rows.md
  } > $OUT/readme-table.md
  awk -v b="$begin" -v e="$end" -v t="$OUT/readme-table.md" '
    $0 == b { print; while ((getline l < t) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 }
    !skip' README.md > README.md.tmp && mv README.md.tmp README.md
  echo "demo: README.md's demo table rewritten"
fi
