#!/bin/sh
# ds-serve + ds-eval --endpoint, on loopback only (ports picked by the
# server: --port 0 --port-file), against samples/tiny-dsv3:
#   - gsm8k through --endpoint gives the in-process run's per-item
#     completions and scores; ppl equals the in-process figure (rel 1e-6)
#   - resume: a journal cut short (and a client killed mid-run) is continued
#     to the same final file
#   - retry: the client starts while the server is down, and the server is
#     killed and restarted on the same port mid-run
#   - kld --endpoint (vLLM-style id-keyed prompt_logprobs) against a topk
#     base equals the in-process KLD from that base (rel 1e-6), same top-1
#     too; against a u16 base it is at most the in-process (full) KLD; PPL
#     equals the in-process one
#   - every kind of model ds-eval takes, ds-serve serves: a safetensors
#     directory and index, a .dsq, a serving export directory, a llama2.c
#     .bin (from ../shared, when present) with its tokenizer found beside it
#   - bad requests get 4xx error objects and the server stays up; API key;
#     a full queue answers 503; a client that disconnects frees its slot;
#     a burst of concurrent clients is answered in full
# Every server is killed in the trap; every wait is a bounded loop.
set -u
SERVE=${DSQ_SERVE_BIN:-./bin}/ds-serve   # make tsan: its ThreadSanitizer build
EVAL=${DSQ_SERVE_BIN:-./bin}/ds-eval
M=samples/tiny-dsv3
DATA=samples/data/gsm_test.jsonl
TRAIN=samples/data/gsm_fewshot.jsonl
TEXT=samples/data/heldout.txt
[ -x "$SERVE" ] && [ -x "$EVAL" ] || { echo "serve.sh: FAIL: $SERVE / $EVAL not built"; exit 1; }
for f in $M/config.json $DATA $TRAIN $TEXT; do
  [ -f "$f" ] || { echo "serve.sh: skipped: $f absent"; exit 0; }
done
command -v curl >/dev/null 2>&1 || { echo "serve.sh: skipped: curl (the command) not installed"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-serve-XXXXXX")
. "$(dirname "$0")/../fixtures/ds_serve.sh"
URL_PATH=/v1
fails=0
fail() { echo "serve.sh: FAIL: $*"; fails=$((fails+1)); }

# code METHOD PATH [BODY] -> HTTP status on stdout, body in $T/resp
code() {
  if [ $# -ge 3 ]; then
    curl -s -o "$T/resp" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' --data-binary "$3" "http://127.0.0.1:$P$2"
  else
    curl -s -o "$T/resp" -w '%{http_code}' -X "$1" "http://127.0.0.1:$P$2"
  fi
}
expect_code() { # WANT METHOD PATH [BODY]
  want=$1; shift
  got=$(code "$@")
  [ "$got" = "$want" ] || fail "$1 $2 -> HTTP $got (want $want): $(head -c 200 "$T/resp")"
  if [ "$want" -ge 400 ]; then grep -q '"error"' "$T/resp" || fail "$1 $2: no error object: $(head -c 200 "$T/resp")"; fi
}
# the journal's and the scored file's lines without the "stop" field (a
# server reports EOS as "stop", the local run as "eos")
norm() { sed 's/,"stop":"[a-z]*"//' "$1"; }

# ---- usage ------------------------------------------------------------------
$SERVE --help >"$T/out" 2>&1 || fail "ds-serve --help"
grep -q "usage: ds-serve" "$T/out" || fail "ds-serve --help text"
$SERVE >/dev/null 2>&1; [ $? = 2 ] || fail "ds-serve without --model: want exit 2"
$SERVE -m $M --port 70000 >/dev/null 2>&1; [ $? = 2 ] || fail "ds-serve --port 70000: want exit 2"
$SERVE -m $M --api-key-env DSQ_NO_SUCH_VAR_X >/dev/null 2>&1; [ $? = 2 ] || fail "ds-serve with an unset key variable: want exit 2"
$EVAL kld --endpoint http://127.0.0.1:1/v1 --base x --data y >/dev/null 2>&1; [ $? = 2 ] || fail "kld --endpoint --data without --tokenizer: want exit 2"
$EVAL ppl --endpoint http://127.0.0.1:1/v1 --data x >/dev/null 2>"$T/err"; [ $? = 2 ] || fail "ppl --endpoint without --tokenizer: want exit 2"
$EVAL gsm8k --endpoint http://127.0.0.1:1/v1 --model $M --data x >/dev/null 2>&1; [ $? = 2 ] || fail "--endpoint with --model: want exit 2"
$EVAL gsm8k --endpoint http://127.0.0.1:1/v1 --bos no --data x >/dev/null 2>&1; [ $? = 2 ] || fail "--endpoint with --bos: want exit 2"
$EVAL gsm8k --model $M --served-model x --data x >/dev/null 2>&1; [ $? = 2 ] || fail "--served-model without --endpoint: want exit 2"

# ---- in-process references ------------------------------------------------------
G="--data $DATA --train $TRAIN --limit 20"
$EVAL gsm8k --model $M $G -T 1 --out "$T/local.jsonl" --json >"$T/local.json" 2>"$T/err" || fail "local gsm8k: $(head -c 300 "$T/err")"
$EVAL ppl --model $M --data $TEXT --ctx 128 --limit-tokens 2048 -T 1 --json >"$T/lppl.json" 2>"$T/err" || fail "local ppl: $(head -c 300 "$T/err")"
# the results of a run, without its timing and what it took from a journal
score() { sed 's/"seconds":[^,]*,//; s/"gen_tokens_per_s":[^,]*,//; s/"resumed":[^,]*,//; s/"run_gen_tokens":[^,]*,//' "$1"; }

start_server --slots 4 || exit 1

# ---- gsm8k: identical completions ---------------------------------------------------
$EVAL gsm8k --endpoint "$URL" $G --concurrency 4 --out "$T/ep.jsonl" --json >"$T/ep.json" 2>"$T/err" || fail "gsm8k --endpoint: $(head -c 300 "$T/err")"
[ "$(wc -l <"$T/ep.jsonl")" = 20 ] || fail "gsm8k --endpoint: $(wc -l <"$T/ep.jsonl") items in --out, want 20"
norm "$T/local.jsonl" >"$T/a"; norm "$T/ep.jsonl" >"$T/b"
cmp -s "$T/a" "$T/b" || fail "gsm8k --endpoint items differ from the in-process run: $(diff "$T/a" "$T/b" | head -c 400)"
[ "$(score "$T/local.json")" = "$(score "$T/ep.json")" ] || fail "gsm8k scores differ: $(cat "$T/local.json") vs $(cat "$T/ep.json")"

# ---- ppl: equal to the in-process figure ------------------------------------------------
$EVAL ppl --endpoint "$URL" --tokenizer $M --data $TEXT --ctx 128 --limit-tokens 2048 --json >"$T/eppl.json" 2>"$T/err" \
  || fail "ppl --endpoint: $(head -c 300 "$T/err")"
ppl_of() { sed -n 's/.*"ppl":\([^,]*\),.*/\1/p' "$1"; }
a=$(ppl_of "$T/lppl.json"); b=$(ppl_of "$T/eppl.json")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }' \
  || fail "ppl --endpoint $b != in-process $a (relative 1e-6)"

# ---- resume ---------------------------------------------------------------------------------
# a journal cut inside line 8 (as by a kill mid-write): 7 items kept, 13 asked for
head -n 7 "$T/ep.jsonl" >"$T/res.jsonl"
sed -n 8p "$T/ep.jsonl" | head -c 40 >>"$T/res.jsonl"
$EVAL gsm8k --endpoint "$URL" $G --out "$T/res.jsonl" --json >"$T/res.json" 2>"$T/err" || fail "resume: $(head -c 300 "$T/err")"
grep -q "7 of 20 items already done" "$T/err" || fail "resume did not continue from 7 items: $(head -c 300 "$T/err")"
cmp -s "$T/ep.jsonl" "$T/res.jsonl" || fail "resumed --out differs from the uninterrupted one"
[ "$(score "$T/ep.json")" = "$(score "$T/res.json")" ] || fail "resumed scores differ"
# a client killed for real while it runs, then rerun
$EVAL gsm8k --endpoint "$URL" $G --concurrency 1 --out "$T/kill.jsonl" -q >/dev/null 2>&1 &
CP=$!
i=0; while [ "$(cat "$T/kill.jsonl" 2>/dev/null | wc -l)" -lt 3 ] && kill -0 $CP 2>/dev/null && [ $i -lt 400 ]; do sleep 0.02; i=$((i+1)); done
kill -9 $CP 2>/dev/null; wait $CP 2>/dev/null; CP=""
n=$(cat "$T/kill.jsonl" | wc -l)
[ "$n" -lt 20 ] || echo "serve.sh: note: the client finished before it could be killed; the rerun only rescores"
$EVAL gsm8k --endpoint "$URL" $G --out "$T/kill.jsonl" --json >"$T/kill.json" 2>"$T/err" || fail "rerun after kill: $(head -c 300 "$T/err")"
cmp -s "$T/ep.jsonl" "$T/kill.jsonl" || fail "rerun after a kill: --out differs from the uninterrupted one"
[ "$(score "$T/ep.json")" = "$(score "$T/kill.json")" ] || fail "rerun after a kill: scores differ"
# a journal from another dataset is refused
printf '{"doc_id":0,"question":"something else","completion":"x"}\n' >"$T/other.jsonl"
$EVAL gsm8k --endpoint "$URL" $G --out "$T/other.jsonl" >/dev/null 2>"$T/err"; [ $? = 1 ] || fail "a foreign journal must be refused"
grep -q "question differs" "$T/err" || fail "foreign journal message: $(head -c 300 "$T/err")"

# ---- bad requests: 4xx, and the server stays up -------------------------------------------
expect_code 200 GET /health
expect_code 200 GET /v1/models
grep -q '"id":"tiny-dsv3"' "$T/resp" || fail "/v1/models lacks tiny-dsv3: $(head -c 200 "$T/resp")"
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": '
expect_code 400 POST /v1/completions 'not json'
expect_code 400 POST /v1/completions '[1, 2]'
expect_code 400 POST /v1/completions '{"max_tokens": 4}'
expect_code 400 POST /v1/completions '{"prompt": 5}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": "4"}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": -1}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": 100000000}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "temperature": "hot"}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "stop": [1]}'
expect_code 400 POST /v1/completions '{"prompt": [1, 99999999]}'
expect_code 400 POST /v1/completions '{"prompt": [[1, 2], "x", 3]}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "n": 3}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "logprobs": 50}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "echo": "yes"}'
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": 1.5}'
expect_code 200 POST /v1/completions '{"prompt": "hi", "max_tokens": 1.0, "ignore_eos": true}'
grep -q '"completion_tokens":1,' "$T/resp" || fail "max_tokens 1.0: $(head -c 300 "$T/resp")"
expect_code 400 POST /v1/completions '{"prompt": "hi", "max_tokens": 2047}'
grep -q "maximum context length" "$T/resp" || fail "context overflow message: $(head -c 200 "$T/resp")"
expect_code 404 POST /v1/completions '{"prompt": "hi", "model": "gpt-9"}'
expect_code 404 GET /v2/anything
expect_code 405 GET /v1/completions
deep=$(awk 'BEGIN { for (i = 0; i < 5000; i++) printf "["; }')
expect_code 400 POST /v1/completions "{\"prompt\": $deep"
expect_code 200 GET /health
# good requests: token ids, a list of prompts, echo + logprobs, streaming
expect_code 200 POST /v1/completions '{"prompt": [[0, 5, 6], [0, 7]], "max_tokens": 3, "temperature": 0, "logprobs": 2, "echo": true}'
grep -q '"index":1' "$T/resp" || fail "two prompts, two choices: $(head -c 200 "$T/resp")"
grep -q '"top_logprobs":\[null,{' "$T/resp" || fail "echo + logprobs: $(head -c 300 "$T/resp")"
curl -sN -o "$T/sse" -H 'Content-Type: application/json' --data-binary '{"prompt": "Question:", "max_tokens": 8, "temperature": 0.8, "seed": 7, "stream": true}' "$URL/completions"
tail -n 2 "$T/sse" | grep -q '^data: \[DONE\]' || fail "stream does not end with [DONE]: $(tail -c 200 "$T/sse")"
grep -q '"finish_reason":"length"' "$T/sse" || fail "stream lacks the final finish_reason"
# the same seed, the same sample
code POST /v1/completions '{"prompt": "Question:", "max_tokens": 8, "temperature": 0.8, "seed": 7}' >/dev/null; cp "$T/resp" "$T/s1"
code POST /v1/completions '{"prompt": "Question:", "max_tokens": 8, "temperature": 0.8, "seed": 7}' >/dev/null
[ "$(sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' "$T/s1")" = "$(sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' "$T/resp")" ] || fail "seeded sampling is not reproducible"

# ---- a burst of concurrent clients ---------------------------------------------------------
i=0; pids=""
while [ $i -lt 16 ]; do
  curl -s -m 60 -o "$T/burst.$i" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": \"Question: $i apples\", \"max_tokens\": 24, \"temperature\": 0}" "$URL/completions" >"$T/burst.code.$i" &
  pids="$pids $!"
  i=$((i+1))
done
for p in $pids; do wait $p; done
i=0
while [ $i -lt 16 ]; do
  [ "$(cat "$T/burst.code.$i")" = 200 ] || fail "burst client $i: HTTP $(cat "$T/burst.code.$i")"
  grep -q '"completion_tokens"' "$T/burst.$i" || fail "burst client $i: no usage"
  i=$((i+1))
done
expect_code 200 GET /health

# ---- retry: the server is down when the client starts, and restarted mid-run ----------------
PORT=$P
stop_server
$EVAL gsm8k --endpoint "$URL" $G --concurrency 2 --retries 20 --out "$T/retry.jsonl" --json >"$T/retry.json" 2>"$T/err" &
CP=$!
sleep 0.5
start_server --slots 2 || exit 1
i=0; while [ "$(cat "$T/retry.jsonl" 2>/dev/null | wc -l)" -lt 4 ] && kill -0 $CP 2>/dev/null && [ $i -lt 400 ]; do sleep 0.02; i=$((i+1)); done
kill -9 $SP; wait $SP 2>/dev/null; SP=""
start_server --slots 2 || exit 1
i=0; while kill -0 $CP 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
kill -0 $CP 2>/dev/null && { fail "client still running after 60 s"; kill -9 $CP; }
wait $CP; rc=$?; CP=""
[ $rc = 0 ] || fail "retry run exit $rc: $(head -c 300 "$T/err")"
cmp -s "$T/ep.jsonl" "$T/retry.jsonl" || fail "retry run: --out differs from the uninterrupted one"
[ "$(score "$T/ep.json")" = "$(score "$T/retry.json")" ] || fail "retry run: scores differ"
$EVAL gsm8k --endpoint "http://127.0.0.1:1/v1" $G --retries 0 >/dev/null 2>"$T/err"; [ $? = 1 ] || fail "unreachable server: want exit 1"
grep -q "127.0.0.1:1/v1/models" "$T/err" || fail "unreachable server: message lacks the URL: $(head -c 200 "$T/err")"
stop_server

# ---- API key, body limit, full queue, disconnect ------------------------------------------------
PORT=0
DSQ_TEST_KEY=sekrit-123 start_server --api-key-env DSQ_TEST_KEY --slots 1 --queue 0 --max-body 4096 -v -v || exit 1
expect_code 401 GET /v1/models
expect_code 200 GET /health
got=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Authorization: Bearer sekrit-123' "$URL/models")
[ "$got" = 200 ] || fail "right key: HTTP $got"
got=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Authorization: Bearer sekrit-12' "$URL/models")
[ "$got" = 401 ] || fail "wrong key: HTTP $got"
DSQ_TEST_KEY=wrong $EVAL gsm8k --endpoint "$URL" $G --api-key-env DSQ_TEST_KEY >/dev/null 2>"$T/err"; [ $? = 1 ] || fail "refused key: want exit 1"
grep -q "refused the API key" "$T/err" || fail "refused key message: $(head -c 200 "$T/err")"
grep -q "wrong" "$T/err" && fail "the API key appears in a message"
big=$(awk 'BEGIN { printf "{\"prompt\": \""; for (i = 0; i < 5000; i++) printf "a"; printf "\"}" }')
got=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Authorization: Bearer sekrit-123' --data-binary "$big" "$URL/completions")
[ "$got" = 413 ] || fail "body over --max-body: HTTP $got"
# one slot, no queue: a long request holds the slot, a second one gets 503
LONG='{"prompt": "Question:", "max_tokens": 2000, "temperature": 0, "ignore_eos": true, "stream": true}'
curl -sN -o /dev/null -H 'Authorization: Bearer sekrit-123' --data-binary "$LONG" "$URL/completions" &
LP=$!
sleep 0.2
got=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Authorization: Bearer sekrit-123' --data-binary '{"prompt": "hi", "max_tokens": 2}' "$URL/completions")
[ "$got" = 503 ] || fail "full queue: HTTP $got (want 503)"
kill $LP 2>/dev/null; wait $LP 2>/dev/null
# the client above hung up: its slot is free again well before 2000 tokens
ok=0; i=0
while [ $ok = 0 ] && [ $i -lt 10 ]; do
  got=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Authorization: Bearer sekrit-123' --data-binary '{"prompt": "hi", "max_tokens": 2}' "$URL/completions")
  [ "$got" = 200 ] && ok=1
  i=$((i+1)); sleep 0.02
done
[ $ok = 1 ] || fail "the slot of a client that disconnected was not freed (HTTP $got)"
stop_server
grep -q " [1-9][0-9]* cancelled" "$T/server.log" || fail "the disconnected request was not cancelled: $(tail -c 300 "$T/server.log")"

# ---- kld --endpoint: a lower bound of the in-process KLD, exact PPL ----------------------------
M8=samples/tiny-dsv3-fp8
if [ -f $M8/config.json ]; then
  $EVAL ppl --model $M --data $TEXT --ctx 128 --limit-tokens 2048 -T 1 --save-logits "$T/base.logp" -q || fail "ppl --save-logits"
  $EVAL ppl --model $M --data $TEXT --ctx 128 --limit-tokens 2048 -T 1 --save-logits "$T/topk.logp" \
    --logits-format topk --logits-topk 4 -q || fail "ppl --save-logits --logits-format topk"
  $EVAL kld --model $M8 --base "$T/base.logp" -T 1 --json >"$T/lkld.json" 2>"$T/err" || fail "local kld: $(head -c 300 "$T/err")"
  $EVAL kld --model $M8 --base "$T/topk.logp" -T 1 --json >"$T/ltk.json" 2>"$T/err" || fail "local topk kld: $(head -c 300 "$T/err")"
  M=$M8 start_server || exit 1
  $EVAL kld --endpoint "$URL" --base "$T/base.logp" --json >"$T/ekld.json" 2>"$T/err" || fail "kld --endpoint: $(head -c 300 "$T/err")"
  $EVAL kld --endpoint "$URL" --base "$T/topk.logp" --json >"$T/etk.json" 2>"$T/err" || fail "kld --endpoint topk: $(head -c 300 "$T/err")"
  # with --tokenizer (text-keyed fallback available) the id-keyed answer still wins: the same figure
  $EVAL kld --endpoint "$URL" --base "$T/topk.logp" --tokenizer $M8 --json >"$T/etk2.json" 2>"$T/err" || fail "kld --endpoint --tokenizer: $(head -c 300 "$T/err")"
  # the vLLM response shape: position 0 null, then {"<id>": {logprob, rank, decoded_token}}
  curl -s -m 30 -H 'Content-Type: application/json' -d '{"prompt":[1,2,3],"max_tokens":1,"temperature":0,"prompt_logprobs":2}' \
    "$URL/completions" >"$T/plp.json"
  grep -q '"prompt_logprobs":\[null,{"2":{"logprob":[-0-9.e]*,"rank":[0-9]*,"decoded_token":' "$T/plp.json" ||
    fail "prompt_logprobs not in vLLM's shape: $(head -c 300 "$T/plp.json")"
  expect_code 400 POST /v1/completions '{"prompt":[1,2],"prompt_logprobs":2,"stream":true}'
  expect_code 400 POST /v1/completions '{"prompt":[1,2],"prompt_logprobs":21}'
  stop_server
  grep -q '"kld_lower_bound":true' "$T/ekld.json" || fail "kld --endpoint must say it is a lower bound"
  num() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$2"; }
  lk=$(num kld_mean "$T/lkld.json"); ek=$(num kld_mean "$T/ekld.json")
  lp=$(num ppl "$T/lkld.json"); ep=$(num ppl "$T/ekld.json")
  awk -v l="$lk" -v e="$ek" 'BEGIN { exit !(l > 0 && e > 0 && e <= l * 1.0001) }' || fail "kld --endpoint $ek is not a lower bound of $lk"
  awk -v a="$lp" -v b="$ep" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }' || fail "kld --endpoint PPL $ep != $lp"
  grep -q '"kld_served_form":"topk"' "$T/etk.json" || fail "kld --endpoint did not use prompt_logprobs: $(head -c 400 "$T/etk.json")"
  # every base top-4 token among the served top-20 at every position: the exact local value
  [ "$(num topk_exact_positions "$T/etk.json")" = "$(num tokens_scored "$T/etk.json")" ] ||
    echo "serve.sh: note: $(num topk_exact_positions "$T/etk.json") of $(num tokens_scored "$T/etk.json") positions exact"
  # The formula is the local one to 1e-9 on identical logits (test_serve.c,
  # test_prompt_topk). Here the logits are not bit-identical: ds-eval runs a
  # window as two forward calls (first half, then the scored half), ds-serve
  # as one prefill, which moves PPL by ~1e-7 relative and the KLD mean by
  # ~2e-6 (measured 0.006538951 served vs 0.006538938 local); hence 1e-5 on
  # the KLD, 1e-6 on PPL, and same top-1 exactly.
  for f in kld_mean:1e-5 kld_max:1e-5 ppl:1e-6 same_top1:0; do
    a=$(num ${f%%:*} "$T/ltk.json"); b=$(num ${f%%:*} "$T/etk.json")
    awk -v a="$a" -v b="$b" -v t="${f#*:}" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(a != "" && d <= t * m) }' ||
      fail "kld --endpoint (topk base) ${f%%:*} $b != local $a"
  done
  [ "$(num kld_mean "$T/etk2.json")" = "$(num kld_mean "$T/etk.json")" ] || fail "kld --endpoint --tokenizer changed the id-keyed figure"
  tk=$(num kld_mean "$T/etk.json")
  awk -v l="$lk" -v e="$tk" 'BEGIN { exit !(l > 0 && e > 0 && e <= l * 1.0001) }' || fail "kld --endpoint topk $tk is above the full KLD $lk"
fi

# ---- every model ds-eval takes, ds-serve serves ----------------------------------
QUANT=./bin/ds-quant
kinds="$M $M/model.safetensors.index.json"
if [ -x $QUANT ]; then
  $QUANT -q -T 1 --scheme w8a8-dynamic $M "$T/kind.dsq" 2>"$T/err" && kinds="$kinds $T/kind.dsq" ||
    fail "ds-quant for the .dsq kind: $(head -c 300 "$T/err")"
  $QUANT -q -T 1 --scheme w8a8-dynamic --format ascend $M "$T/kind-ascend" 2>"$T/err" && kinds="$kinds $T/kind-ascend" ||
    fail "ds-quant for the export kind: $(head -c 300 "$T/err")"
fi
for s in ../shared/data/stories260K ../../shared/data/stories260K; do
  [ -f $s/stories260K.bin ] && [ -f $s/tok512.bin ] && { kinds="$kinds $s/stories260K.bin"; break; }
done
case "$kinds" in *stories260K*) ;; *) echo "serve.sh: note: no ../shared/data/stories260K: the llama2.c kind is not checked";; esac
for k in $kinds; do
  $EVAL ppl -m "$k" --data $TEXT --ctx 128 --limit-tokens 512 -T 1 -q >/dev/null 2>"$T/err" ||
    { fail "ds-eval does not take $k: $(head -c 300 "$T/err")"; continue; }
  SM=$k start_server --slots 1 || continue
  expect_code 200 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":4,"temperature":0}'
  grep -q '"choices"' "$T/resp" || fail "ds-serve -m $k: no completion: $(head -c 200 "$T/resp")"
  stop_server
done

[ $fails = 0 ] && echo "serve.sh: ok"
exit $((fails > 0))
