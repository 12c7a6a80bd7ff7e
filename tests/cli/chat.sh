#!/bin/sh
# ds-serve's /v1/chat/completions, /tokenize and /detokenize, on loopback,
# against samples/tiny-dsv3 with the V3.1 template:
#   - the OpenAI client library (npm openai) drives the chat endpoint,
#     streaming included (tests/chat_client.mjs; skipped without it), and
#     /v1/completions' logprobs, text_offset, echo and stop strings, streamed
#     and not (tests/completions_client.mjs)
#   - /tokenize of messages, decoded by /detokenize, is byte for byte what
#     Jinja2 renders from the official template text (skipped without
#     ../shared/data/chat-templates or python3-jinja2)
#   - tools, tool results and an unknown template are refused with a clear
#     error; a model without a known template serves completions and
#     answers chat requests with the reason
#   - ds-eval gsm8k --chat against the server gives the in-process chat
#     run's per-item answers, on tiny-dsv3 and on the chat sample
#     (samples/tiny-dsv3-chat), whose thinking replies come with and
#     without a closing </think>
set -u
SERVE=./bin/ds-serve
EVAL=./bin/ds-eval
M=samples/tiny-dsv3
DATA=samples/data/gsm_test.jsonl
[ -x "$SERVE" ] && [ -x "$EVAL" ] || { echo "chat.sh: FAIL: $SERVE / $EVAL not built"; exit 1; }
[ -f $M/config.json ] || { echo "chat.sh: skipped: $M absent"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "chat.sh: skipped: curl (the command) not installed"; exit 0; }
command -v jq >/dev/null 2>&1 || { echo "chat.sh: skipped: jq not installed"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-chat-XXXXXX")
. "$(dirname "$0")/../fixtures/ds_serve.sh"
SERVE_QUIET=    # the full log: the checks read the template it names
SERVE_ANY_EXIT=1
fails=0
fail() { echo "chat.sh: FAIL: $*"; fails=$((fails+1)); }
SHARED=${DSQ_SHARED:-../shared}
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

post() { curl -s -o "$T/body" -w '%{http_code}' "$URL$1" -H 'Content-Type: application/json' -d "$2"; }

start_server --chat-template deepseek-v3.1 --reasoning-parser deepseek_v3 || exit 1
SERVER_URL=$URL
grep -q "chat template: deepseek-v3.1" "$T/server.log" || fail "the log does not name the chat template: $(cat "$T/server.log")"

# ---- the OpenAI client library -------------------------------------------------
if ! command -v node >/dev/null 2>&1; then echo "chat.sh: openai client check skipped: node not installed"
elif [ ! -f .npm-data/node_modules/openai/package.json ]; then
  echo "chat.sh: openai client check skipped: .npm-data lacks openai (sh .ci/deps.sh)"
else
  node tests/chat_client.mjs "$URL/v1" tiny-dsv3 || fail "openai client"
  node tests/completions_client.mjs "$URL/v1" tiny-dsv3 || fail "openai client, completions"
fi

# ---- what the template produced, through /tokenize and /detokenize -------------
MSGS='[{"role":"system","content":"S"},{"role":"user","content":"q1 你好 😀"},{"role":"assistant","content":"r</think>a1"},{"role":"user","content":"<｜User｜>q2"}]'
if [ -f "$SHARED/data/chat-templates/deepseek-v3.1.jinja" ] && "$PY" -c 'import jinja2' 2>/dev/null; then
  for kw in '{"thinking":true}' '{}'; do
    for agp in true false; do
      code=$(post /tokenize "{\"messages\":$MSGS,\"add_generation_prompt\":$agp,\"chat_template_kwargs\":$kw}")
      [ "$code" = 200 ] || { fail "/tokenize: HTTP $code $(cat "$T/body")"; continue; }
      code=$(post /detokenize "{\"tokens\":$(jq -c .tokens "$T/body")}")
      [ "$code" = 200 ] || { fail "/detokenize: HTTP $code $(cat "$T/body")"; continue; }
      jq -j .prompt "$T/body" > "$T/dsq.txt"
      printf '{"template":"%s","bos_token":"<｜begin▁of▁sentence｜>","eos_token":"<｜end▁of▁sentence｜>","cases":[{"messages":%s,"add_generation_prompt":%s,"kwargs":%s}]}' \
        "$SHARED/data/chat-templates/deepseek-v3.1.jinja" "$MSGS" "$agp" "$kw" > "$T/case.json"
      "$PY" tests/chat_template_oracle.py "$T/case.json" | jq -j '.[0]' > "$T/jinja.txt"
      cmp -s "$T/dsq.txt" "$T/jinja.txt" || fail "/tokenize messages (kwargs $kw, add_generation_prompt $agp): [$(cat "$T/dsq.txt")] != Jinja2 [$(cat "$T/jinja.txt")]"
    done
  done
  echo "chat.sh: /tokenize + /detokenize of a conversation equal Jinja2's render of the V3.1 template"
else
  echo "chat.sh: Jinja2 comparison skipped: $SHARED/data/chat-templates or python3-jinja2 absent"
fi
code=$(post /tokenize '{"prompt":"Hi","return_token_strs":true}')
[ "$code" = 200 ] && [ "$(jq '.count == (.tokens|length) and (.token_strs|length) == .count and .max_model_len > 0' "$T/body")" = true ] || \
  fail "/tokenize prompt: $code $(cat "$T/body")"

# ---- refusals -------------------------------------------------------------------
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}')
[ "$code" = 400 ] && jq -e '.error.param == "tools"' "$T/body" >/dev/null || fail "tools: $code $(cat "$T/body")"
code=$(post /v1/chat/completions '{"messages":[{"role":"tool","content":"x","tool_call_id":"1"}]}')
[ "$code" = 400 ] && grep -q "tool results are not supported" "$T/body" || fail "tool role: $code $(cat "$T/body")"
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"add_generation_prompt":false}}')
[ "$code" = 400 ] || fail "kwargs replacing a template variable: $code $(cat "$T/body")"
code=$(post /v1/chat/completions '{"messages":[]}')
[ "$code" = 400 ] || fail "empty messages: $code"

# ---- ds-eval gsm8k --chat: served and in process give the same replies ------------
if [ -f "$DATA" ]; then
  for suite in "aisbench-0shot-cot {\"thinking\":true}" "lm-eval-cot-llama {}"; do
    set -- $suite
    COMMON="gsm8k --chat --prompt $1 --chat-template-kwargs $2 --data $DATA --limit 6 --max-tokens 24 --temperature 0"
    $EVAL $COMMON --endpoint "$SERVER_URL/v1" --out "$T/ep-$1.jsonl" -q >"$T/ep.log" 2>&1 || fail "$1 --endpoint: $(cat "$T/ep.log")"
    $EVAL $COMMON -m $M -T 1 --chat-template deepseek-v3.1 --reasoning-parser deepseek_v3 --out "$T/local-$1.jsonl" -q \
      >"$T/local.log" 2>&1 || fail "$1 in process: $(cat "$T/local.log")"
    for f in ep local; do
      jq -c '[.doc_id, .sample, .content, .reasoning_content, .answer, .flexible, .correct, .finish, .gen_tokens]' \
        "$T/$f-$1.jsonl" > "$T/$f-$1.items" 2>/dev/null
    done
    [ "$(wc -l < "$T/ep-$1.items")" = 6 ] || fail "$1: $(wc -l < "$T/ep-$1.items") of 6 items"
    cmp -s "$T/ep-$1.items" "$T/local-$1.items" || fail "$1: served and in-process replies differ: $(diff "$T/ep-$1.items" "$T/local-$1.items" | head -4)"
  done
  # the chat sample (tiny-dsv3-chat, the V3.1 template in its tokenizer_config.json): full
  # replies served and in process, per item the same; thinking on, the deepseek_v3 parser gives
  # replies with and without a closing </think> (reasoning_content with content, or reasoning
  # only), each scored by AISBench's rule; some items right, so the answers are real answers
  CM=samples/tiny-dsv3-chat
  if [ -f $CM/config.json ]; then
    stop_server
    M0=$M; M=$CM
    start_server --reasoning-parser deepseek_v3 || exit 1
    grep -q "chat template: deepseek-v3.1" "$T/server.log" || fail "tiny-dsv3-chat: template not recognised: $(cat "$T/server.log")"
    for kw in '{"thinking":true}' '{}'; do
      CC="gsm8k --chat --prompt aisbench-0shot-cot --chat-template-kwargs $kw --data $DATA --limit 8 --max-tokens 160 --temperature 0"
      $EVAL $CC --endpoint "$URL/v1" --out "$T/cs-ep.jsonl" -f -q >"$T/ep.log" 2>&1 || fail "chat sample --endpoint: $(cat "$T/ep.log")"
      $EVAL $CC -m $CM -T 1 --reasoning-parser deepseek_v3 --out "$T/cs-local.jsonl" -f -q >"$T/local.log" 2>&1 ||
        fail "chat sample in process: $(cat "$T/local.log")"
      for f in ep local; do
        jq -c '[.doc_id, .content, .reasoning_content, .answer, .correct, .finish]' "$T/cs-$f.jsonl" > "$T/cs-$f.items"
      done
      cmp -s "$T/cs-ep.items" "$T/cs-local.items" || fail "chat sample $kw: served and in-process replies differ: $(diff "$T/cs-ep.items" "$T/cs-local.items" | head -4)"
      [ "$(jq -s 'map(select(.correct)) | length' "$T/cs-ep.jsonl")" -gt 0 ] || fail "chat sample $kw: no item right"
      if [ "$kw" = '{"thinking":true}' ]; then
        [ "$(jq -s 'map(select(.reasoning_content != null and .content != null)) | length' "$T/cs-ep.jsonl")" -gt 0 ] ||
          fail "chat sample: no reply with </think> split into reasoning and content"
      else
        [ "$(jq -s 'map(select(.reasoning_content != null)) | length' "$T/cs-ep.jsonl")" = 0 ] ||
          fail "chat sample, thinking off: reasoning_content where none was asked for"
      fi
    done
    stop_server
    M=$M0
    start_server --chat-template deepseek-v3.1 --reasoning-parser deepseek_v3 || exit 1
    SERVER_URL=$URL
  else
    echo "chat.sh: chat-sample checks skipped: $CM absent"
  fi
  # thinking on: the replies carry reasoning_content (deepseek_v3 parser), and AISBench scores reasoning + content
  [ "$(jq -s 'map(.reasoning_chars) | add' "$T/ep-aisbench-0shot-cot.jsonl")" -gt 0 ] || fail "no reasoning recorded"
  # a journal cut short is continued to the same file
  head -n 3 "$T/ep-aisbench-0shot-cot.jsonl" | jq -c 'del(.answer, .correct)' > "$T/resume.jsonl"
  $EVAL gsm8k --chat --prompt aisbench-0shot-cot --chat-template-kwargs '{"thinking":true}' --data $DATA --limit 6 \
    --max-tokens 24 --temperature 0 --endpoint "$SERVER_URL/v1" --out "$T/resume.jsonl" >"$T/resume.log" 2>&1 || fail "resume: $(cat "$T/resume.log")"
  grep -q "3 of 6 replies already done" "$T/resume.log" || fail "resume did not continue: $(cat "$T/resume.log")"
  cmp -s "$T/resume.jsonl" "$T/ep-aisbench-0shot-cot.jsonl" || fail "the resumed file differs from the full run"
  # an --out that is not this run's journal is not replaced without -f
  echo '{"other":1}' > "$T/other.jsonl"
  $EVAL gsm8k --chat --data $DATA --limit 1 --max-tokens 4 --temperature 0 --endpoint "$SERVER_URL/v1" --out "$T/other.jsonl" \
    >"$T/other.log" 2>&1 && fail "another file at --out was replaced"
  grep -q '"other"' "$T/other.jsonl" || fail "another file at --out was changed"
  # sampled: N replies per item, mean accuracy, standard error and pass@N
  $EVAL gsm8k --chat --data $DATA --limit 3 --max-tokens 8 --temperature 1 --seed 7 --samples 3 --endpoint "$SERVER_URL/v1" \
    --json --out "$T/sampled.jsonl" >"$T/sampled.json" 2>"$T/sampled.log" || fail "samples: $(cat "$T/sampled.log")"
  [ "$(wc -l < "$T/sampled.jsonl")" = 9 ] && jq -e '.samples == 3 and (.accuracy | has("pass@3") and has("stderr"))' "$T/sampled.json" >/dev/null || \
    fail "samples: $(cat "$T/sampled.json")"
  # any numeric-answer set by field names
  printf '{"problem":"What is 2+2?","solution":4}\n{"problem":"What is 3+3?","solution":"6"}\n' > "$T/aime.jsonl"
  $EVAL gsm8k --chat --data "$T/aime.jsonl" --question-field problem --answer-field solution --max-tokens 8 --temperature 0 \
    --endpoint "$SERVER_URL/v1" --json >"$T/aime.json" 2>"$T/aime.log" && jq -e '.n == 2' "$T/aime.json" >/dev/null || \
    fail "numeric-answer set: $(cat "$T/aime.log" "$T/aime.json")"
  # sampled in process: reply s of an item draws from seed + s as ds-serve does for a request
  # sent with that seed, so the replies equal the served ones (temperature and nucleus)
  SC="gsm8k --chat --data $DATA --limit 3 --max-tokens 12 --temperature 1 --top-p 0.9 --seed 11 --samples 3"
  $EVAL $SC --endpoint "$SERVER_URL/v1" --out "$T/samp-ep.jsonl" -q >"$T/ep.log" 2>&1 || fail "sampled --endpoint: $(cat "$T/ep.log")"
  $EVAL $SC -m $M -T 1 --chat-template deepseek-v3.1 --reasoning-parser deepseek_v3 --out "$T/samp-local.jsonl" -q \
    >"$T/local.log" 2>&1 || fail "sampled in process: $(cat "$T/local.log")"
  for f in ep local; do
    jq -c '[.doc_id, .sample, .content, .reasoning_content, .finish, .gen_tokens]' "$T/samp-$f.jsonl" | sort > "$T/samp-$f.items"
  done
  [ "$(wc -l < "$T/samp-ep.items")" = 9 ] || fail "sampled: $(wc -l < "$T/samp-ep.items") of 9 replies"
  cmp -s "$T/samp-ep.items" "$T/samp-local.items" ||
    fail "sampled: served and in-process replies differ: $(diff "$T/samp-ep.items" "$T/samp-local.items" | head -4)"
  # and the draws are draws: the three replies of an item are not all the same
  [ "$(jq -s 'group_by(.doc_id) | map(map(.content) | unique | length) | max' "$T/samp-local.jsonl")" -gt 1 ] ||
    fail "sampled in process: every reply of each item is the same"
fi
stop_server

# an unknown template is refused at start, naming its sha256
printf '{{ messages }}' > "$T/other.jinja"
if $SERVE -m $M -T 1 --port 0 --chat-template "$T/other.jinja" >"$T/refused.log" 2>&1; then
  fail "an unknown --chat-template file was accepted"
else
  grep -q "sha256" "$T/refused.log" || fail "unknown template: $(cat "$T/refused.log")"
fi
# a .dsq carries the template in its metadata (tokenizer_config.json): recognised there
if [ -f "$SHARED/data/chat-templates/deepseek-v3.1.jinja" ] && [ -x ./bin/ds-quant ]; then
  mkdir -p "$T/m31"
  cp $M/*.json $M/*.safetensors "$T/m31/"
  jq --rawfile t "$SHARED/data/chat-templates/deepseek-v3.1.jinja" '.chat_template = $t' $M/tokenizer_config.json > "$T/m31/tokenizer_config.json"
  if ./bin/ds-quant --scheme w8a8-dynamic -T 1 -q "$T/m31" "$T/m31.dsq" >"$T/quant.log" 2>&1; then
    SM="$T/m31.dsq"
    start_server || :
    SM=
    grep -q "chat template: deepseek-v3.1" "$T/server.log" || fail "the .dsq's template: $(cat "$T/server.log")"
    stop_server
  else
    fail "ds-quant: $(tail -3 "$T/quant.log")"
  fi
fi
# the sample has no chat template of its own: completions served, chat refused with the reason
start_server || exit 1
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}]}')
[ "$code" = 400 ] && grep -q "no chat template" "$T/body" || fail "no template: $code $(cat "$T/body")"
code=$(post /v1/completions '{"prompt":"x","max_tokens":2}')
[ "$code" = 200 ] || fail "completions without a chat template: $code"
stop_server

[ $fails = 0 ] && echo "chat.sh: ok"
[ $fails = 0 ]
