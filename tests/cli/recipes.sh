#!/bin/sh
# recipes.sh - the msModelSlim DeepSeek recipes end to end on the bundled
# sample (skipped when samples/tiny-dsv3 is absent):
#   - ds-quant --recipe deepseek-w8a8 --calib ... --format ascend, on tiny-dsv3
#     and on tiny-dsv32 (whose indexer must stay FLOAT), writes a
#     quant_model_description.json whose keys and types equal the set this
#     script derives from the recipe's rules and the source's tensor names
#     (attention linears W8A8 static with input_scale / input_offset /
#     deq_scale / quant_bias, kv_b_proj FLOAT, every MLP linear W8A8_DYNAMIC
#     with weight_scale / weight_offset, router, norms, embeddings and
#     lm_head FLOAT), model_quant_type W8A8;
#   - ds-eval reads the export back (perplexity within 2% of the source's);
#   - without calibration the recipe is refused and nothing is written;
#   - --smooth flex searches flex smoothing (a different output from the
#     default --smooth sq, which is byte for byte the default);
#   - --rotate quarot gives a model within 2% of the source's perplexity and
#     removes its OUT.rot; a foreign OUT.rot is refused and left alone.
set -u
Q=${DSQ_QUANT:-./bin/ds-quant}
E=${DSQ_EVAL:-./bin/ds-eval}
M=samples/tiny-dsv3
D=samples/data
if [ ! -f "$M/config.json" ]; then echo "recipes.sh: skipped ($M absent)"; exit 0; fi
command -v jq >/dev/null 2>&1 || { echo "recipes.sh: skipped (jq absent)"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-recipes.XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/../fixtures/cli_expect.sh"

for RM in $M samples/tiny-dsv32; do
[ -f $RM/config.json ] || { echo "recipes.sh: $RM absent, its deepseek-w8a8 check skipped"; continue; }
rm -rf "$T/x"
$Q -q -T 2 --recipe deepseek-w8a8 --calib $D/calib.txt --calib-samples 8 --calib-seqlen 128 --format ascend \
    $RM "$T/x" || fail "ds-quant --recipe deepseek-w8a8 --format ascend"
desc="$T/x/quant_model_description.json"
if [ -f "$desc" ]; then
    # the expected description from the source's tensor names and the recipe's rules
    jq -r '.weight_map | keys[]' $RM/model.safetensors.index.json | awk '
        function w8a8(p)  { print p ".weight W8A8"; print p ".input_scale W8A8"; print p ".input_offset W8A8";
                            print p ".deq_scale W8A8"; print p ".quant_bias W8A8" }
        function dyn(p)   { print p ".weight W8A8_DYNAMIC"; print p ".weight_scale W8A8_DYNAMIC";
                            print p ".weight_offset W8A8_DYNAMIC" }
        {
            n = $0; p = n; sub(/\.weight$/, "", p)
            if (n ~ /\.self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|o_proj|q_proj)\.weight$/) w8a8(p)
            else if (n ~ /\.mlp\.(experts\.[0-9]+\.|shared_experts\.)?(gate_proj|up_proj|down_proj)\.weight$/) dyn(p)
            else print n " FLOAT"
        }' | sort > "$T/want"
    jq -r 'to_entries[] | select(.key != "version" and .key != "model_quant_type" and .key != "metadata"
            and .key != "group_size" and .key != "optional") | "\(.key) \(.value)"' "$desc" | sort > "$T/got"
    if ! cmp -s "$T/want" "$T/got"; then
        fail "description differs from the recipe's rules (< expected, > written):"
        diff "$T/want" "$T/got" | head -20
    fi
    [ "$(jq -r .model_quant_type "$desc")" = W8A8 ] || fail "model_quant_type is not W8A8"
    grep -q '"quantization_config"' "$T/x/config.json" && fail "config.json keeps quantization_config"
    p0=$($E ppl -q -T 2 --json -m $RM --data $D/heldout.txt | jq -r .ppl)
    p1=$($E ppl -q -T 2 --json -m "$T/x" --data $D/heldout.txt | jq -r .ppl)
    echo "recipes.sh: deepseek-w8a8 ($RM) -> ascend: ppl $p1 (source $p0)"
    awk -v a="$p0" -v b="$p1" 'BEGIN { exit !(b > 0 && b < a * 1.02) }' || fail "ppl $p1 not within 2% of $p0"
fi
done

# --rotate quarot: a plain model of the scheme, OUT.rot gone after success;
# anything in the way of OUT.rot is refused and left alone
$Q -q -T 2 --scheme w8a8-dynamic --rotate quarot $M "$T/r.dsq" || fail "ds-quant --rotate quarot"
[ -e "$T/r.dsq.rot" ] && fail "OUT.rot left after a successful run"
if [ -f "$T/r.dsq" ]; then
    p0=$($E ppl -q -T 2 --json -m $M --data $D/heldout.txt | jq -r .ppl)
    pr=$($E ppl -q -T 2 --json -m "$T/r.dsq" --data $D/heldout.txt | jq -r .ppl)
    echo "recipes.sh: w8a8-dynamic --rotate quarot: ppl $pr (source $p0)"
    awk -v a="$p0" -v b="$pr" 'BEGIN { exit !(b > 0 && b < a * 1.02) }' || fail "rotated ppl $pr not within 2% of $p0"
fi
mkdir "$T/s.dsq.rot" && echo mine > "$T/s.dsq.rot/notes.txt"
$Q -q --scheme w8a8-dynamic --rotate quarot $M "$T/s.dsq" 2> "$T/err" && fail "--rotate over a foreign OUT.rot exited 0"
grep -q "in the way" "$T/err" || fail "foreign OUT.rot: message was: $(cat "$T/err")"
[ -f "$T/s.dsq.rot/notes.txt" ] || fail "a file in a foreign OUT.rot was removed"
$Q -q --scheme w8a8-dynamic --rotate-seed 5 $M "$T/u.dsq" 2> "$T/err" && fail "--rotate-seed without --rotate exited 0"

# --smooth flex: the int8 groups search flex smoothing (the summary says so,
# and the output differs from SmoothQuant's); --smooth sq is the default
C8="--calib $D/calib.txt --calib-samples 8 --calib-seqlen 128"
$Q -q -T 2 --json --scheme w8a8-dynamic --smooth flex $C8 $M "$T/f.dsq" > "$T/f.json" || fail "--smooth flex"
[ "$(jq -r .calibration.method "$T/f.json")" = flex-smooth-search ] || fail "--smooth flex: method $(jq -c .calibration.method "$T/f.json")"
$Q -q -T 2 --scheme w8a8-dynamic $C8 $M "$T/g.dsq" || fail "w8a8-dynamic calibrated"
$Q -q -T 2 --scheme w8a8-dynamic --smooth sq $C8 $M "$T/h.dsq" || fail "--smooth sq"
cmp -s "$T/g.dsq" "$T/h.dsq" || fail "--smooth sq is not the default"
cmp -s "$T/f.dsq" "$T/g.dsq" && fail "--smooth flex gave SmoothQuant's output"

# without calibration: refused, nothing written
$Q -q --recipe deepseek-w8a8 --format ascend $M "$T/y" 2> "$T/err"
rc=$?
[ $rc -ne 0 ] || fail "deepseek-w8a8 without --calib exited 0"
grep -q "needs calibration" "$T/err" || fail "no calibration message: $(cat "$T/err")"
[ -e "$T/y" ] && fail "an output was written without calibration"
ls -a "$T" | grep -q partial && fail "partial directory left behind"

if [ $fails -ne 0 ]; then echo "recipes.sh: $fails failed"; exit 1; fi
echo "recipes.sh: ok"
