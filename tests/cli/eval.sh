#!/bin/sh
# ds-eval CLI behaviour: usage errors (exit 2), bad inputs (exit 1, message
# naming the line), gsm8k --score on a tiny hand-made set, and, when a model
# is available, ppl / kld / gsm8k end to end; a .dsq made from
# samples/tiny-llama brings its own tokenizer (no --tokenizer needed).
#
# Model: samples/tiny-dsv3 by default; DSQ_EVAL_MODEL / DSQ_EVAL_TOKENIZER
# override (e.g. any small Llama safetensors dir plus its tokenizer). The
# model part is skipped with a message when there is none.
set -u
EVAL=${BIN:-./bin}/ds-eval
[ -x "$EVAL" ] || { echo "eval.sh: $EVAL not built"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-eval-XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/../fixtures/cli_expect.sh"

# ---- usage ---------------------------------------------------------------
expect 0 $EVAL --help;  has out "usage: ds-eval"
expect 0 $EVAL -V;      has out "ds-eval (dsq)"
expect 2 $EVAL
expect 2 $EVAL frobnicate
expect 2 $EVAL ppl --data x
expect 2 $EVAL ppl --model m;                     has err "needs --data"
expect 2 $EVAL kld --model m;                     has err "needs --base"
expect 2 $EVAL gsm8k --data x;                    has err "needs --model"
expect 2 $EVAL ppl --model m --data d --ctx 2
expect 2 $EVAL ppl --model m --data d --ctx abc
expect 2 $EVAL ppl --model m --data d --logits-format f32
expect 2 $EVAL gsm8k --model m --data d --shots -1
expect 2 $EVAL gsm8k --model m --data d --batch 0
expect 2 $EVAL gsm8k --model m --data d --bos maybe
expect 2 $EVAL gsm8k --score c --data d --model m
expect 2 $EVAL ppl --model m --data d --nope;     has err "unknown option"
expect 2 $EVAL ppl --model m --data d stray

# ---- gsm8k --score --------------------------------------------------------
cat >"$T/test.jsonl" <<'EOF'
{"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"}
{"question": "A box holds 1,200 pens. How many?", "answer": "It holds 1,200.\n#### 1,200"}

{"question": "What is 10 - 15?", "answer": "10-15=-5\n#### -5"}
{"question": "Half of 9?", "answer": "9/2=4.5\n#### 4.5"}
EOF
# strict: docs 0 and 2; flexible: docs 0, 1 and 2; doc 3 says 5
cat >"$T/comp.jsonl" <<'EOF'
{"doc_id": 0, "completion": "3 + 4 = 7 apples.\n#### 7\n\nQuestion: next one 99"}
{"doc_id": 1, "resps": [["That makes $1,200."]]}
{"doc_id": 2, "response": "10 - 15 = -5\n#### -5"}
{"doc_id": 3, "completion": "About 5."}
EOF
expect 0 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/test.jsonl" --json --out "$T/items.jsonl"
has out '"n":4'
has out '"strict-match":{"exact_match":0.5,'
has out '"flexible-extract":{"exact_match":0.75,'
[ "$(wc -l <"$T/items.jsonl")" -eq 4 ] || fail "items.jsonl should have 4 lines"
has items.jsonl '"doc_id":1,.*"flexible":"$1,200.","gold":"1200","correct_strict":false,"correct_flexible":true'
has items.jsonl '"completion":"3 + 4 = 7 apples.\\n#### 7\\n\\n"'
expect 0 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/test.jsonl"
has out "flexible-extract  exact_match 0.7500"
has out "strict-match      exact_match 0.5000"
# --limit and a partial completions file
expect 0 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/test.jsonl" --limit 2 --json
has out '"n":2'
head -n 1 "$T/comp.jsonl" >"$T/one.jsonl"
expect 0 $EVAL gsm8k --score "$T/one.jsonl" --data "$T/test.jsonl" --json
# missing completions count as wrong: n stays 4
has out '"n":4'; has out '"missing":3'; has err "3 of 4 items have no completion; they count as wrong"
# an existing output needs -f
expect 1 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/test.jsonl" --out "$T/items.jsonl"
has err "exists"
expect 0 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/test.jsonl" --out "$T/items.jsonl" -f

# ---- bad inputs: exit 1, the message names the line ------------------------
printf '{"question": "q", "answer": "a"}\n{"question": "q2"}\n' >"$T/noans.jsonl"
expect 1 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/noans.jsonl"
has err "line 2: missing \"answer\" field"
printf '{"question": "q", "answer": "a"}\n\n{"question": "q", "answer": \n' >"$T/badjson.jsonl"
expect 1 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/badjson.jsonl"
has err "line 3: invalid JSON"
: >"$T/empty.jsonl"
expect 1 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/empty.jsonl"
has err "empty dataset"
expect 1 $EVAL gsm8k --score "$T/comp.jsonl" --data "$T/missing.jsonl"
printf '{"doc_id": 0, "completion": "1"}\n{"doc_id": 9, "completion": "2"}\n' >"$T/far.jsonl"
expect 1 $EVAL gsm8k --score "$T/far.jsonl" --data "$T/test.jsonl"
has err "line 2: doc 9 is beyond the 4 items"
printf '{"doc_id": 0, "text": "1"}\n' >"$T/nofield.jsonl"
expect 1 $EVAL gsm8k --score "$T/nofield.jsonl" --data "$T/test.jsonl"
has err "line 1: no \"completion\""
printf 'DSQLOGP\0garbage' >"$T/bad.logp"
expect 1 $EVAL kld --base "$T/bad.logp" --model "$T/nomodel"
has err "bad.logp"

# ---- with a model ------------------------------------------------------------
MODEL=${DSQ_EVAL_MODEL:-samples/tiny-dsv3}
TOKOPT=""
[ -n "${DSQ_EVAL_TOKENIZER:-}" ] && TOKOPT="--tokenizer $DSQ_EVAL_TOKENIZER"
TEXT=""
for f in ../shared/data/text/tinystories_val.txt ../../shared/data/text/tinystories_val.txt; do
  [ -f "$f" ] && { TEXT=$f; break; }
done
if [ ! -e "$MODEL" ]; then
  echo "eval.sh: $MODEL absent, model tests skipped"
else
  if [ -z "$TEXT" ]; then
    # no shared text: repeat the questions until there are enough tokens
    for i in $(seq 200); do cat "$T/test.jsonl"; done >"$T/text.txt"
    TEXT=$T/text.txt
  fi
  expect 0 $EVAL ppl --model "$MODEL" $TOKOPT --data "$TEXT" --ctx 64 --limit-tokens 640 \
         --save-logits "$T/base.logp" --json
  has out '"tokens_scored":310'
  has out '"windows":10'
  expect 0 $EVAL kld --model "$MODEL" $TOKOPT --base "$T/base.logp" --data "$TEXT" --json
  has out '"same_top1":1'
  grep -q '"kld_mean":-\{0,1\}[0-9.]*e-' "$T/out" || fail "kld of a model against itself is not ~0: $(cat "$T/out")"
  expect 1 $EVAL kld --model "$MODEL" $TOKOPT --base "$T/base.logp" --data "$T/test.jsonl"
  has err "different tokens"
  expect 1 $EVAL ppl --model "$MODEL" $TOKOPT --data "$TEXT" --ctx 64 --limit-tokens 640 \
         --save-logits "$T/base.logp"
  expect 0 $EVAL gsm8k --model "$MODEL" $TOKOPT --data "$T/test.jsonl" --train "$T/test.jsonl" \
         --shots 2 --limit 3 --batch 2 --max-new-tokens 8 --out "$T/gen.jsonl" --json
  has out '"n":3'
  [ "$(wc -l <"$T/gen.jsonl")" -eq 3 ] || fail "gen.jsonl should have 3 lines"
  has gen.jsonl '"gen_tokens":'
  # batching does not change greedy output
  expect 0 $EVAL gsm8k --model "$MODEL" $TOKOPT --data "$T/test.jsonl" --train "$T/test.jsonl" \
         --shots 2 --limit 3 --batch 1 --max-new-tokens 8 --out "$T/gen1.jsonl" -q
  cmp -s "$T/gen.jsonl" "$T/gen1.jsonl" || fail "batch 2 and batch 1 completions differ"
fi

# ---- a .dsq carries its tokenizer ------------------------------------------------
# ds-quant copies tokenizer.json / tokenizer_config.json into the metadata, so
# `ds-eval --model X.dsq` needs no --tokenizer; without one there it falls back
# to the .dsq's directory, then fails asking for --tokenizer.
LLAMA=samples/tiny-llama
QUANT=${BIN:-./bin}/ds-quant
if [ ! -f "$LLAMA/config.json" ] || [ ! -x "$QUANT" ]; then
  echo "eval.sh: $LLAMA or $QUANT absent, .dsq tokenizer tests skipped"
else
  LTEXT=samples/data/heldout.txt
  if [ ! -f "$LTEXT" ]; then
    for i in $(seq 200); do cat "$T/test.jsonl"; done >"$T/ltext.txt"
    LTEXT=$T/ltext.txt
  fi
  ppl_of() { grep -o '"ppl":[^,]*' "$T/out"; }
  PPLOPT="--data $LTEXT --ctx 64 --limit-tokens 640 --json"
  mkdir -p "$T/q" "$T/q2" "$T/q3" "$T/src"
  expect 0 $QUANT --scheme w8a8-dynamic -q "$LLAMA" "$T/q/m.dsq"
  expect 0 $EVAL ppl --model "$T/q/m.dsq" $PPLOPT
  has out '"tokens_scored":310'
  embedded=$(ppl_of)
  expect 0 $EVAL ppl --model "$T/q/m.dsq" --tokenizer "$LLAMA" $PPLOPT
  [ "$(ppl_of)" = "$embedded" ] || fail "embedded tokenizer gives $embedded, --tokenizer $(ppl_of)"
  expect 0 $EVAL gsm8k --model "$T/q/m.dsq" --data "$T/test.jsonl" --train "$T/test.jsonl" \
         --shots 1 --limit 2 --max-new-tokens 4 --json
  has out '"n":2'
  # a source without tokenizer files: nothing in the metadata
  for f in "$LLAMA"/*; do
    case $f in *tokenizer*) ;; *) ln -s "$PWD/$f" "$T/src/" ;; esac
  done
  expect 0 $QUANT --scheme w8a8-dynamic -q "$T/src" "$T/q2/m.dsq"
  expect 1 $EVAL ppl --model "$T/q2/m.dsq" $PPLOPT
  has err "no tokenizer in the .dsq metadata"
  has err "pass --tokenizer"
  cp "$LLAMA"/tokenizer*.json "$T/q2/"
  expect 0 $EVAL ppl --model "$T/q2/m.dsq" $PPLOPT
  [ "$(ppl_of)" = "$embedded" ] || fail "tokenizer beside the .dsq gives $(ppl_of), embedded $embedded"
  # an embedded tokenizer that cannot load: the error says where it came from
  printf '{"model": {"type": "Unigram"}, "pre_tokenizer": {"type": "ByteLevel"}}' >"$T/src/tokenizer.json"
  expect 0 $QUANT --scheme w8a8-dynamic -q "$T/src" "$T/q3/bad.dsq"
  expect 1 $EVAL ppl --model "$T/q3/bad.dsq" $PPLOPT
  has err "tokenizer in the metadata"
  has err "only BPE"
  expect 0 $EVAL ppl --model "$T/q3/bad.dsq" --tokenizer "$LLAMA" $PPLOPT
  expect 1 $EVAL ppl --model "$T/q3/missing.dsq" $PPLOPT
  has err "no such model"
fi

# ---- the bundled sample keeps its quality (issue: >= 30% GSM-style) -------
# A regression guard on the committed weights and the engine together: the
# first 60 test problems (5-shot, greedy) scored 55% when this was written,
# the whole held-out file ppl 7.113; the bounds leave room for deliberate
# changes, not for a broken model or engine.
S=samples/tiny-dsv3
if [ -f "$S/config.json" ] && [ -f samples/data/gsm_test.jsonl ]; then
  expect 0 $EVAL gsm8k -m "$S" --data samples/data/gsm_test.jsonl --train samples/data/gsm_fewshot.jsonl \
    --limit 60 --json
  acc=$(sed -n 's/.*"strict-match":{"exact_match":\([0-9.]*\).*/\1/p' "$T/out")
  awk -v a="$acc" 'BEGIN { exit !(a != "" && a >= 0.30) }' || fail "sample GSM-style strict accuracy '$acc' < 0.30"
  expect 0 $EVAL ppl -m "$S" --data samples/data/heldout.txt --json
  p=$(sed -n 's/.*"ppl":\([0-9.]*\).*/\1/p' "$T/out")
  awk -v p="$p" 'BEGIN { exit !(p != "" && p > 5 && p < 8) }' || fail "sample held-out ppl '$p' outside (5, 8)"
fi

[ $fails = 0 ] || { echo "eval.sh: $fails failure(s)"; exit 1; }
echo "eval.sh: ok"
