#!/bin/sh
# export_read.sh - the engine reads serving exports back (the reader side).
#
# 1. Independent exports: tests/export_reader.mjs (Node, written from
#    docs/serving-exports.md alone) RTN-writes samples/tiny-dsv3 in every format/scheme; the
#    C reader loads each (ds-eval ppl, eager == lazy logits) and its
#    dequantization must equal the Node reader's (bit for bit, or within f32
#    rounding for Ascend W8A8 static where the formulas differ).
# 2. Round trip through dsq's writer: for every (format, scheme) pair, .dsq ->
#    ds-export -> read back: dequantized weights equal the .dsq's within the
#    scale dtype's rounding (F32: exact; F16: 2^-11; BF16: 2^-8), the Node
#    reader agrees with the C reader, and ppl / GSM-style accuracy are printed
#    next to the .dsq's (equal where every weight is equal).
# 3. Hostile directories: an export with a broken contract is refused by
#    ds-eval with a message naming the file and tensor.
# Skips (with a message) without node, or without ds-export (writer absent).
# DSQ_EXPORT_FULL=1: whole heldout text and 30 GSM problems (slower).
set -u
BUILD=${BUILD:-build}
H=$BUILD/tests/test_export_read
EVAL=./bin/ds-eval QUANT=./bin/ds-quant EXPORT=./bin/ds-export
SRC=samples/tiny-dsv3
fails=0
fail() { echo "export_read.sh: FAIL: $*"; fails=$((fails+1)); }
[ -x "$EVAL" ] && [ -x "$QUANT" ] || { echo "export_read.sh: FAIL: bin/ not built"; exit 1; }
[ -x "$H" ] || make -s "$H" >/dev/null 2>&1 || { echo "export_read.sh: FAIL: $H not built"; exit 1; }
[ -f "$SRC/config.json" ] || { echo "export_read.sh: skipped: $SRC absent"; exit 0; }
if ! command -v node >/dev/null 2>&1; then echo "export_read.sh: skipped: node not installed"; exit 0; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-export-read-XXXXXX")
trap 'rm -rf "$T"' EXIT
if [ "${DSQ_EXPORT_FULL:-0}" = 1 ]; then PPL_LIMIT=""; GSM_LIMIT=30; else PPL_LIMIT="--limit-tokens 2048"; GSM_LIMIT=5; fi

nll() { # model -> mean NLL (or ERR)
  $EVAL ppl -q -T 2 -m "$1" --data samples/data/heldout.txt $PPL_LIMIT --json 2>"$T/eval.err" |
    sed -n 's/.*"mean_nll": *\([0-9.eE+-]*\).*/\1/p' | head -1 | grep . || { echo ERR; cat "$T/eval.err" >&2; }
}
gsm() {
  $EVAL gsm8k -T 2 -m "$1" --data samples/data/gsm_test.jsonl --train samples/data/gsm_fewshot.jsonl \
    --limit $GSM_LIMIT 2>/dev/null | sed -n 's/.*flexible-extract *exact_match \([0-9.]*\).*(\([0-9]*\/[0-9]*\)).*/\1 \2/p'
}
agree() { # export dir: C dump vs Node reader
  mkdir -p "$1.dump"
  if ! "$H" --dump "$1" "$1.dump" >"$T/dump.log" 2>&1; then fail "C dump of $1: $(tail -1 "$T/dump.log")"; return; fi
  node tests/export_reader.mjs compare "$1" "$1.dump" >"$T/cmp.log" 2>&1 || fail "Node vs C on $1: $(grep FAIL "$T/cmp.log" | head -3)"
  tail -1 "$T/cmp.log" | sed "s|$T/||"
  rm -rf "$1.dump"
}

# ---- 1. independent (Node-written) exports ---------------------------------------------
BASE=$(nll $SRC)
echo "bf16 source: mean NLL $BASE"
for fs in "ascend w8a8-dynamic" "ascend w4a8" "ascend w8a8" "awq awq-w4a16" "compressed-tensors awq-w4a16" \
          "compressed-tensors w4a16-sym" "compressed-tensors w8a8-dynamic" "compressed-tensors w4a8"; do
  set -- $fs
  D="$T/node-$1-$2"
  node tests/export_reader.mjs write "$1" "$2" $SRC "$D" 64 || { fail "node writer $1 $2"; continue; }
  agree "$D"
  "$H" --lazy-check "$D" >/dev/null || fail "$1 $2: eager and lazy loads disagree"
  n=$(nll "$D")
  echo "node $1 $2: mean NLL $n"
  # RTN of a tiny model stays near the bf16 NLL; W8A8 static uses made-up
  # activation parameters (no calibration), so it is only required to load
  [ "$2" = w8a8 ] || awk -v a="$n" -v b="$BASE" 'BEGIN { exit !(a != "ERR" && a - b < 0.05 && b - a < 0.05) }' ||
    fail "$1 $2: mean NLL $n far from the source's $BASE"
done

# ---- 2. round trip through dsq's writer ---------------------------------------------------
if [ ! -x "$EXPORT" ]; then
  echo "export_read.sh: round trip skipped: bin/ds-export absent (writer not merged)"
else
  q() { n=$1; shift; $QUANT -q -f -T 2 "$@" $SRC "$T/$n.dsq" >"$T/q.log" 2>&1 || fail "ds-quant $*: $(tail -1 "$T/q.log")"; }
  # kv_b_proj kept float: vllm-ascend needs it unquantized (docs/serving-exports.md,
  # "DeepSeek-V3 placement rules"), so
  # an Ascend export of a quantized kv_b_proj holds BF16(dequantized) and cannot
  # equal the .dsq (the engine runs a quantized kv_b_proj as its exact F32 dequantization)
  q w8dyn --scheme w8a8-dynamic --keep kv_b_proj
  q w8st --scheme w8a8 --keep kv_b_proj --calib samples/data/calib.txt --calib-samples 16 --calib-seqlen 128
  q w4rec --recipe deepseek-w4a8
  q w4a8 --scheme w4a8
  q awq --scheme awq-w4a16 --group-size 64 --keep q_b_proj
  # format:dsq:tolerance (scale dtype: ascend F32, awq F16, compressed-tensors BF16 = model dtype)
  for p in ascend:w8dyn:2.4e-7 ascend:w8st:2.4e-7 ascend:w4rec:2.4e-7 awq:awq:4.9e-4 compressed-tensors:awq:3.91e-3 \
           compressed-tensors:w8dyn:3.91e-3 compressed-tensors:w4a8:3.91e-3 compressed-tensors:w4rec:3.91e-3; do
    f=${p%%:*}; r=${p#*:}; n=${r%%:*}; tol=${r#*:}
    D="$T/$f-$n"
    $EXPORT -q -T 2 --format "$f" "$T/$n.dsq" "$D" >"$T/x.log" 2>&1 || { fail "ds-export $f $n: $(tail -1 "$T/x.log")"; continue; }
    "$H" --compare-dsq "$D" "$T/$n.dsq" "$tol" 2>"$T/c.err" | sed "s|$T/||g" || fail "$f $n: weights differ from the .dsq: $(grep FAIL "$T/c.err" | head -2)"
    agree "$D"
    a=$(nll "$D"); b=$(nll "$T/$n.dsq"); ga=$(gsm "$D"); gb=$(gsm "$T/$n.dsq")
    echo "$f $n: mean NLL export $a / .dsq $b; gsm flexible export $ga / .dsq $gb"
    [ "$a" != ERR ] || fail "$f $n: ds-eval cannot read the export"
    # equal weights and schemes give equal numbers; Ascend runs w8a8 experts
    # dynamically (no static MoE scheme), F16/BF16 scales round: near, not equal
    case "$tol" in
      2.4e-7) [ "$n" = w8st ] || [ "$a" = "$b" ] || fail "$f $n: NLL $a != .dsq $b"
              [ "$n" = w8st ] || [ "$ga" = "$gb" ] || fail "$f $n: gsm $ga != .dsq $gb" ;;
    esac
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a - b < 0.02 && b - a < 0.02) }' || fail "$f $n: NLL $a far from the .dsq's $b"
  done
fi

# ---- 3. hostile directories are refused by the engine -------------------------------------
D="$T/node-ascend-w8a8-dynamic"
if [ -d "$D" ]; then
  sed 's/"model.layers.1.self_attn.o_proj.weight": "W8A8_DYNAMIC",//' "$D/quant_model_description.json" >"$T/d.json"
  cp "$T/d.json" "$D/quant_model_description.json"
  $EVAL ppl -q -m "$D" --data samples/data/heldout.txt >/dev/null 2>"$T/err" && fail "missing description entry accepted"
  grep -q "quant_model_description.json.*model.layers.1.self_attn.o_proj.weight.*no description entry" "$T/err" ||
    fail "missing entry message: $(cat "$T/err")"
fi
D="$T/node-ascend-w8a8"
if [ -d "$D" ]; then
  # gate_proj and up_proj are fused by vllm-ascend: they must share one type
  sed 's/"model.layers.0.mlp.up_proj.weight": "W8A8"/"model.layers.0.mlp.up_proj.weight": "W8A8_DYNAMIC"/' \
    "$D/quant_model_description.json" >"$T/d.json" && cp "$T/d.json" "$D/quant_model_description.json"
  $EVAL ppl -q -m "$D" --data samples/data/heldout.txt >/dev/null 2>"$T/err" && fail "fused pair of two types accepted"
  grep -q "model.layers.0.mlp.gate_proj.*stored unlike model.layers.0.mlp.up_proj" "$T/err" || fail "fused pair message: $(cat "$T/err")"
fi
D="$T/node-awq-awq-w4a16"
if [ -d "$D" ]; then
  sed 's/"version": "gemm"/"version": "gemv"/' "$D/config.json" >"$T/c.json" && cp "$T/c.json" "$D/config.json"
  $EVAL ppl -q -m "$D" --data samples/data/heldout.txt >/dev/null 2>"$T/err" && fail "AWQ GEMV accepted"
  grep -q "config.json.*quantization_config.version.*GEMM only" "$T/err" || fail "GEMV message: $(cat "$T/err")"
fi

[ $fails = 0 ] && echo "export_read.sh: ok" || echo "export_read.sh: $fails failure(s)"
[ $fails = 0 ]
