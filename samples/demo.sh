#!/bin/sh
# make demo: the main job end to end on the bundled sample.
#   1. convert samples/tiny-dsv3 (BF16, DeepSeek-V3 architecture) to every scheme
#      (and the FP8 variant to w8a8-dynamic straight from F8_E4M3 + block scales)
#   2. evaluate each: held-out perplexity, KL divergence vs BF16, GSM-style accuracy
#      (5-shot greedy, lm-eval gsm8k rules), decode speed
#   3. print one results table (also written to build/demo/results.md)
# Environment: DEMO_GSM_LIMIT (default 100 problems), DEMO_THREADS (default all cores).
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
for b in ds-quant ds-eval ds-inspect; do
  [ -x bin/$b ] || { echo "demo: bin/$b missing (run make)"; exit 1; }
done
if [ ! -f $MODEL/config.json ]; then
  echo "demo: $MODEL is missing (make samples regenerates it)"; exit 1
fi
command -v node >/dev/null 2>&1 || { echo "demo: node is needed to format the table (sh .ci/deps.sh)"; exit 1; }
mkdir -p $OUT
json() { node -e 'const o=JSON.parse(require("fs").readFileSync(0,"utf8"));let v=o;for(const k of process.argv[1].split(".")){v=v==null?undefined:v[k]};console.log(v===undefined?"":v)' "$1"; }

SCHEMES="bf16 w8a8-dynamic w4a8 awq-w4a16"
echo "demo: converting $MODEL to: $SCHEMES"
for s in $SCHEMES; do
  bin/ds-quant -q -f $TFLAG --json --scheme $s $MODEL $OUT/$s.dsq > $OUT/$s.quant.json
  bin/ds-inspect -q --verify $OUT/$s.dsq >/dev/null
done
bin/ds-quant -q -f $TFLAG --json --scheme w8a8-dynamic $FP8 $OUT/fp8-w8a8-dynamic.dsq > $OUT/fp8-w8a8-dynamic.quant.json
bin/ds-inspect -q --verify $OUT/fp8-w8a8-dynamic.dsq >/dev/null

echo "demo: base log-probs and perplexity of the BF16 source on $DATA/heldout.txt"
bin/ds-eval ppl -q $TFLAG --json -m $MODEL --data $DATA/heldout.txt --save-logits $OUT/base.logp -f > $OUT/source.ppl.json

row() { # label key model
  label=$1; name=$2; m=$3
  if [ "$m" = "$MODEL" ]; then size=$(du -cb $MODEL/*.safetensors | tail -1 | cut -f1); ppl=$(json ppl < $OUT/source.ppl.json); kld="(base)";
  else
    size=$(stat -c %s $m)
    bin/ds-eval kld -q -f $TFLAG --json --tokenizer $MODEL -m $m --base $OUT/base.logp > $OUT/$name.kld.json
    ppl=$(json ppl < $OUT/$name.kld.json); kld=$(printf "%.6f" "$(json kld_mean < $OUT/$name.kld.json)")
  fi
  bin/ds-eval gsm8k -q -f $TFLAG --json --tokenizer $MODEL -m $m --data $DATA/gsm_test.jsonl \
    --train $DATA/gsm_fewshot.jsonl --limit $LIMIT --out $OUT/$name.gsm8k.jsonl > $OUT/$name.gsm8k.json
  acc=$(json flexible-extract.exact_match < $OUT/$name.gsm8k.json)
  strict=$(json strict-match.exact_match < $OUT/$name.gsm8k.json)
  tps=$(json gen_tokens_per_s < $OUT/$name.gsm8k.json)
  printf '| %-20s | %9.2f MB | %9.4f | %-11s | %6.1f%% | %6.1f%% | %7.1f |\n' "$label" \
    "$(echo "$size" | awk '{print $1/1e6}')" "$ppl" "$kld" "$(echo $strict | awk '{print $1*100}')" \
    "$(echo $acc | awk '{print $1*100}')" "$tps" >> $OUT/results.md
}
{
  echo "Sample: $MODEL, held-out text $DATA/heldout.txt, GSM-style test $DATA/gsm_test.jsonl (first $LIMIT, 5-shot greedy)"
  echo
  echo "| scheme               |      size    |    ppl    | KLD vs BF16 | strict | flexible | gen tok/s |"
  echo "|----------------------|--------------|-----------|-------------|--------|----------|-----------|"
} > $OUT/results.md
echo "demo: evaluating (ppl, KLD, GSM-style accuracy) — a few minutes per scheme"
row "source (BF16)" source $MODEL
for s in $SCHEMES; do row $s $s $OUT/$s.dsq; done
row "fp8 -> w8a8-dynamic" fp8-w8a8-dynamic $OUT/fp8-w8a8-dynamic.dsq
echo
cat $OUT/results.md
