#!/bin/sh
# ds-eval --endpoint against a canned OpenAI-style server (fake_openai.py,
# python3 as a test fixture only): the gsm8k journal (--out) keeps every
# item a run paid for, refuses a second writer, and replaces a refused item
# only by its error; answers are bounded; a server that cannot echo prompt
# log-probs, a base URL without /v1 and a missing API key each get a
# message saying what to do; the tokens/s of a resumed run are its own.
set -u
EVAL=${BIN:-./bin}/ds-eval
[ -x "$EVAL" ] || { echo "endpoint.sh: $EVAL not built"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "endpoint.sh: skipped (no python3 for the fake server)"; exit 0; }
command -v jq >/dev/null 2>&1 || { echo "endpoint.sh: skipped (no jq)"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-endpoint-XXXXXX")
SRV=
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$T"' EXIT
. "$(dirname "$0")/../fixtures/cli_expect.sh"
posts() { grep -c "^POST $1" "$T/log" 2>/dev/null || true; }

python3 "$(dirname "$0")/fake_openai.py" "$T/port" "$T/log" 300 &
SRV=$!
i=0
while [ ! -s "$T/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$T/port" ] || { echo "endpoint.sh: FAIL: the fake server did not start"; exit 1; }
URL="http://127.0.0.1:$(cat "$T/port")"

cat >"$T/test.jsonl" <<'Q'
{"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "#### 7"}
{"question": "What is 14 / 2?", "answer": "#### 7"}
{"question": "What is 10 - 3?", "answer": "#### 7"}
{"question": "What is 1 + 6?", "answer": "#### 7"}
{"question": "LONGQ What is 2 + 5?", "answer": "#### 7"}
Q
G="gsm8k --data $T/test.jsonl --shots 0 --retries 2"

# ---- the journal keeps what a smaller --limit does not score --------------
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 4 --out "$T/j.jsonl" --json
[ "$(wc -l <"$T/j.jsonl")" -eq 4 ] || fail "4 items journaled: $(cat "$T/j.jsonl")"
: >"$T/log"
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 2 --out "$T/j.jsonl" --json
[ "$(posts /v1/completions)" = 0 ] || fail "--limit 2 after 4 sent requests"
[ "$(wc -l <"$T/j.jsonl")" -eq 4 ] || fail "--limit 2 dropped journaled items: $(cat "$T/j.jsonl")"
[ "$(jq -s 'map(.doc_id) | sort == [0,1,2,3]' "$T/j.jsonl")" = true ] || fail "doc ids after --limit 2: $(cat "$T/j.jsonl")"
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 4 --out "$T/j.jsonl" --json
has err "4 of 4 items already done"
[ "$(posts /v1/completions)" = 0 ] || fail "a rerun asked again for journaled items"
jq -e '.resumed == 4 and ."strict-match".correct == 4' "$T/out" >/dev/null || fail "resumed run: $(cat "$T/out")"

# ---- the same for the chat journal ------------------------------------------
C="gsm8k --chat --data $T/test.jsonl --retries 2 --endpoint $URL/v1"
expect 0 $EVAL $C --limit 4 --out "$T/chat.jsonl"
[ "$(wc -l <"$T/chat.jsonl")" -eq 4 ] || fail "4 chat replies journaled: $(cat "$T/chat.jsonl")"
: >"$T/log"
expect 0 $EVAL $C --limit 2 --out "$T/chat.jsonl"
[ "$(posts /v1/chat/completions)" = 0 ] || fail "chat --limit 2 after 4 sent requests"
[ "$(jq -s 'map(.doc_id) | sort == [0,1,2,3]' "$T/chat.jsonl")" = true ] || fail "chat --limit 2 dropped replies: $(cat "$T/chat.jsonl")"
expect 0 $EVAL $C --limit 4 --out "$T/chat.jsonl"
[ "$(posts /v1/chat/completions)" = 0 ] || fail "a chat rerun asked again for journaled replies"

# ---- the rate of a resumed run counts only the tokens it asked for --------
rm -f "$T/r.jsonl"
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 2 --out "$T/r.jsonl" --json
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 4 --out "$T/r.jsonl" --json
jq -e '.gen_tokens == 20 and .run_gen_tokens == 10 and .resumed == 2' "$T/out" >/dev/null || fail "token counts: $(cat "$T/out")"
jq -e '(.gen_tokens_per_s * .seconds - 10) | fabs < 0.001' "$T/out" >/dev/null || fail "rate of all tokens: $(cat "$T/out")"
expect 0 $EVAL $G --endpoint "$URL/v1" --limit 4 --out "$T/r2.jsonl"
has out "4 items, 20 tokens"

# ---- a second run on the same --out is refused, the file untouched -------
cp "$T/j.jsonl" "$T/j.before"
rm -f "$T/locked"
cp "$T/chat.jsonl" "$T/chat.before"
python3 -c "
import fcntl, sys, time
fs = [open(p, 'a') for p in sys.argv[1:3]]
for f in fs: fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[3], 'w').close()
time.sleep(20)" "$T/j.jsonl" "$T/chat.jsonl" "$T/locked" &
LK=$!
i=0
while [ ! -e "$T/locked" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
expect 1 $EVAL $G --endpoint "$URL/v1" --out "$T/j.jsonl"
has err "another ds-eval run is writing this journal"
expect 1 $EVAL $C --out "$T/chat.jsonl" -f
has err "another ds-eval run is writing this journal"
kill $LK 2>/dev/null; wait $LK 2>/dev/null
cmp -s "$T/j.jsonl" "$T/j.before" || fail "the refused run changed the journal"
cmp -s "$T/chat.jsonl" "$T/chat.before" || fail "the refused chat run changed its journal"

# ---- an item over the server's context is that item's error --------------
rm -f "$T/c.jsonl"
: >"$T/log"
expect 0 $EVAL $G --endpoint "$URL/v1" --out "$T/c.jsonl" --json
jq -e '.n == 5 and .refused == 1 and ."strict-match".correct == 4' "$T/out" >/dev/null || fail "refused item: $(cat "$T/out")"
has err "the server refused 1 item (doc 4: .*maximum context length"
[ "$(jq -s 'map(select(.doc_id == 4 and (.error | test("context")))) | length' "$T/c.jsonl")" = 1 ] || \
  fail "doc 4's error is not in the file: $(cat "$T/c.jsonl")"
: >"$T/log"
expect 0 $EVAL $G --endpoint "$URL/v1" --out "$T/c.jsonl" --json
[ "$(posts /v1/completions)" = 1 ] || fail "a rerun should ask again for the refused item only: $(cat "$T/log")"

rm -f "$T/cc.jsonl"
expect 0 $EVAL $C --out "$T/cc.jsonl" --json
jq -e '.n == 5 and .missing == 1' "$T/out" >/dev/null || fail "refused chat request: $(cat "$T/out")"
has err "the server refused 1 request (doc 4: HTTP 400: the request exceeds the available context size"
: >"$T/log"
expect 0 $EVAL $C --out "$T/cc.jsonl" --json
[ "$(posts /v1/chat/completions)" = 1 ] || fail "a chat rerun should ask again for the refused request only: $(cat "$T/log")"

# every item refused: the server's reason, not "no completion"
sed -n 5p "$T/test.jsonl" >"$T/long.jsonl"
expect 1 $EVAL gsm8k --data "$T/long.jsonl" --shots 0 --retries 2 --endpoint "$URL/v1"
has err "the server refused every item (doc 0: HTTP 400: This model's maximum context length"

# ---- a response body is bounded -------------------------------------------
expect 1 $EVAL $G --endpoint "$URL/big/v1" --limit 1
has err "larger than 16 MiB"
expect 1 $EVAL $G --endpoint "$URL/bigc/v1" --limit 1
has err "larger than 16 MiB"

# ---- a base URL without /v1 ---------------------------------------------
expect 1 $EVAL $G --endpoint "$URL/root" --limit 1
has err "$URL/root/completions"
has err "ends in /v1"
expect 1 $EVAL gsm8k --chat --data "$T/test.jsonl" --retries 2 --endpoint "$URL/root" --limit 1
has err "$URL/root/chat/completions"
has err "ends in /v1"

# ---- API keys ---------------------------------------------------------------
expect 1 $EVAL $G --endpoint "$URL/auth/v1" --limit 1
has err "none was sent"
DSQ_TEST_KEY=wrong expect 1 $EVAL $G --endpoint "$URL/auth/v1" --limit 1 --api-key-env DSQ_TEST_KEY
has err "refused the API key"
DSQ_TEST_KEY=sekrit expect 0 $EVAL $G --endpoint "$URL/auth/v1" --limit 1 --api-key-env DSQ_TEST_KEY

# ---- ppl on a server without prompt log-probs: said at once -------------
TOK=samples/tiny-dsv3/tokenizer.json
if [ -f "$TOK" ]; then
  awk 'BEGIN { for (i = 0; i < 200; i++) print "the quick brown fox jumps over the lazy dog " i }' >"$T/text.txt"
  : >"$T/log"
  expect 1 $EVAL ppl --endpoint "$URL/llama/v1" --tokenizer "$TOK" --data "$T/text.txt" --ctx 64 --retries 3 --concurrency 1
  has err "Unsupported param: echo"
  has err "llama-server does not"
  [ "$(posts /llama/v1/completions)" = 1 ] || fail "the deterministic refusal was retried: $(cat "$T/log")"
  # a server that ignores echo gets the same advice
  expect 1 $EVAL ppl --endpoint "$URL/v1" --tokenizer "$TOK" --data "$T/text.txt" --ctx 64 --retries 0
  has err "the server ignored echo + logprobs"
  has err "vLLM and ds-serve return them"
else
  echo "endpoint.sh: ppl part skipped ($TOK absent)"
fi

[ $fails -eq 0 ] && echo "endpoint.sh: all passed" || { echo "endpoint.sh: $fails failure(s)"; exit 1; }
