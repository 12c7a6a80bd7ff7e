#!/bin/sh
# dsa_export.sh - DeepSeek-V3.2 (samples/tiny-dsv32; skipped when absent)
# through every serving export:
#   - AscendV1: every indexer tensor (wq_b, wk, weights_proj, k_norm weight
#     and bias) described FLOAT, config.json keeps model_type deepseek_v32;
#   - compressed-tensors: each layer's indexer linears in `ignore`;
#   - AutoAWQ: wq_b, wk and weights_proj in `modules_to_not_convert`;
#   - each export read back by ds-eval within 1% of the source's perplexity;
#   - quantizing wk / weights_proj for a vLLM target is refused (vLLM builds
#     them unquantized), and nothing is written.
set -u
Q=${DSQ_QUANT:-./bin/ds-quant}
E=${DSQ_EVAL:-./bin/ds-eval}
M=samples/tiny-dsv32
D=samples/data
if [ ! -f "$M/config.json" ]; then echo "dsa_export.sh: skipped ($M absent)"; exit 0; fi
command -v jq >/dev/null 2>&1 || { echo "dsa_export.sh: skipped (jq absent)"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-dsa.XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/../fixtures/cli_expect.sh"
L=$(jq -r .num_hidden_layers $M/config.json)
p0=$($E ppl -q -T 2 --json -m $M --data $D/heldout.txt | jq -r .ppl)
readback() {   # DIR LABEL
    p=$($E ppl -q -T 2 --json -m "$1" --data $D/heldout.txt | jq -r .ppl)
    echo "dsa_export.sh: $2: ppl $p (source $p0)"
    awk -v a="$p0" -v b="$p" 'BEGIN { exit !(b > 0 && b < a * 1.01 && b > a * 0.99) }' || fail "$2: ppl $p not within 1% of $p0"
}

$Q -q -T 2 --scheme w8a8-dynamic --format ascend $M "$T/a" || fail "ascend export"
if [ -f "$T/a/quant_model_description.json" ]; then
    n=$(jq '[to_entries[] | select(.key | test("\\.indexer\\.")) | select(.value == "FLOAT")] | length' \
        "$T/a/quant_model_description.json")
    all=$(jq '[to_entries[] | select(.key | test("\\.indexer\\."))] | length' "$T/a/quant_model_description.json")
    [ "$n" = $((L * 5)) ] && [ "$all" = "$n" ] || fail "ascend: $n of $all indexer entries FLOAT, expected $((L * 5))"
    [ "$(jq -r .model_type "$T/a/config.json")" = deepseek_v32 ] || fail "ascend: model_type not kept"
    readback "$T/a" "w8a8-dynamic -> ascend"
fi

$Q -q -T 2 --scheme w8a8-dynamic --format compressed-tensors $M "$T/c" || fail "compressed-tensors export"
if [ -f "$T/c/config.json" ]; then
    for l in $(seq 0 $((L - 1))); do
        for x in wq_b wk weights_proj; do
            jq -e --arg m "model.layers.$l.self_attn.indexer.$x" '.quantization_config.ignore | index($m)' \
                "$T/c/config.json" > /dev/null || fail "compressed-tensors: layer $l indexer $x not in ignore"
        done
    done
    readback "$T/c" "w8a8-dynamic -> compressed-tensors"
fi

$Q -q -T 2 --scheme awq-w4a16 --group-size 64 --keep q_b_proj --format awq $M "$T/w" || fail "awq export"
if [ -f "$T/w/config.json" ]; then
    for x in wq_b wk weights_proj; do
        jq -e --arg m "$x" '.quantization_config.modules_to_not_convert | index($m)' "$T/w/config.json" > /dev/null ||
            fail "awq: indexer $x not in modules_to_not_convert"
    done
    readback "$T/w" "awq-w4a16 g64 -> awq"
fi

$Q -q --scheme w8a8-dynamic --scheme-for 'indexer\.wk=w8a8-dynamic' --format compressed-tensors $M "$T/r" 2> "$T/err"
rc=$?
[ $rc = 2 ] || fail "quantized indexer wk for compressed-tensors: exit $rc, expected 2"
grep -q "unquantized" "$T/err" || fail "quantized indexer wk: message was: $(cat "$T/err")"
[ -e "$T/r" ] && fail "a refused export wrote its output"

if [ $fails -ne 0 ]; then echo "dsa_export.sh: $fails failed"; exit 1; fi
echo "dsa_export.sh: ok"
