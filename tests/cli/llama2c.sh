#!/bin/sh
# A llama2.c checkpoint (.bin) as a model for ds-eval and ds-quant,
# on ../shared/data/stories260K (skipped with a message when absent): the
# tokenizer is found beside it by llama2.c's names (tok512.bin), ppl of the
# .bin equals ppl with that tokenizer given explicitly, ds-quant converts it
# (plain and AWQ-calibrated) to .dsq files that score close to the source,
# and the temporary Hugging Face copy is always removed.
set -u
S=../shared/data/stories260K
TXT=../shared/data/text/tinystories_val.txt
if [ ! -f "$S/stories260K.bin" ] || [ ! -f "$S/tok512.bin" ] || [ ! -f "$TXT" ]; then
  echo "llama2c.sh: skipped ($S or $TXT absent)"; exit 0
fi
EVAL=./bin/ds-eval
QUANT=./bin/ds-quant
fails=0
fail() { echo "llama2c.sh: FAIL: $*"; fails=$((fails+1)); }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-llama2c-test-XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir "$T/tmp"
export TMPDIR="$T/tmp"        # where the temporary copies go: must stay empty
ppl() { sed -n 's/.*"ppl":\([0-9.e+-]*\).*/\1/p' "$1"; }
P="--data $TXT --ctx 256 --limit-tokens 4096 --json"

$EVAL ppl -m "$S/stories260K.bin" $P > "$T/bin.json" 2> "$T/err" || fail "ds-eval ppl on the .bin: $(cat "$T/err")"
$EVAL ppl -m "$S/stories260K.bin" --tokenizer "$S/tok512.bin" $P > "$T/bin2.json" 2> "$T/err" || fail "with --tokenizer: $(cat "$T/err")"
base=$(ppl "$T/bin.json")
[ -n "$base" ] && [ "$base" = "$(ppl "$T/bin2.json")" ] || fail "tokenizer found beside the .bin ($base) != explicit ($(ppl "$T/bin2.json"))"
grep -q '"bos_id":1' "$T/bin.json" || fail "llama2.c BOS (1) not used: $(cat "$T/bin.json")"
# a real trained model on its own kind of text: low perplexity, not noise
awk -v p="$base" 'BEGIN { exit !(p > 1 && p < 10) }' || fail "stories260K ppl $base is implausible"

$QUANT -q --scheme w8a8-dynamic "$S/stories260K.bin" "$T/w8.dsq" 2> "$T/err" || fail "ds-quant on the .bin: $(cat "$T/err")"
$QUANT -q --scheme awq-w4a16 --calib "$TXT" --calib-samples 16 --calib-seqlen 256 "$S/stories260K.bin" "$T/awq.dsq" 2> "$T/err" ||
  fail "ds-quant --calib on the .bin: $(cat "$T/err")"
./bin/ds-inspect --json "$T/awq.dsq" | jq -e '.recipe.calibration.method == "awq"' > /dev/null ||
  fail "the calibrated .dsq lacks its AWQ summary"
# int8 costs little; int4 on this 260K-parameter model (dim 64) costs ~11%
for q in w8:1.02 awq:1.25; do
  n=${q%:*}; lim=${q#*:}
  $EVAL ppl -m "$T/$n.dsq" --tokenizer "$S/tok512.bin" $P > "$T/$n.json" 2> "$T/err" || fail "ppl of $n.dsq: $(cat "$T/err")"
  awk -v a="$(ppl "$T/$n.json")" -v b="$base" -v l="$lim" 'BEGIN { r = a / b; exit !(r > 1 / l && r < l) }' ||
    fail "$n.dsq ppl $(ppl "$T/$n.json") is not within x$lim of the source's $base"
done

# not a checkpoint: a .bin of the wrong size is refused, not read as safetensors
head -c 1000 "$S/stories260K.bin" > "$T/cut.bin"
if $EVAL ppl -m "$T/cut.bin" --tokenizer "$S/tok512.bin" $P > /dev/null 2> "$T/err"; then fail "a cut .bin was accepted"; fi
grep -q "safetensors" "$T/err" && fail "a cut .bin is diagnosed as safetensors: $(cat "$T/err")"
if $QUANT -q --scheme bf16 "$T/cut.bin" "$T/cut.dsq" 2> "$T/err"; then fail "ds-quant accepted a cut .bin"; fi
left=$(ls -A "$TMPDIR")
[ -z "$left" ] || fail "temporary copies left in TMPDIR: $left"

if [ $fails -ne 0 ]; then echo "llama2c.sh: $fails failure(s)"; exit 1; fi
echo "llama2c.sh: ok (stories260K ppl $base, w8a8-dynamic $(ppl "$T/w8.json"), AWQ $(ppl "$T/awq.json"))"
