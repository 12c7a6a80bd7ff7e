#!/bin/sh
# ds-serve under hostile clients, on loopback only (servers on --port 0,
# clients from 127.0.0.x source addresses), against samples/tiny-dsv3:
#   - 288 idle or trickling connections from nine addresses (the default
#     limit is 256) do not lock out a new client, with an API key too; one
#     address gets at most --max-connections-per-client; a client that
#     trickles its headers is closed after --read-timeout; answers longer
#     than --idle-timeout and --read-timeout are not cut
#   - unauthenticated uploads are refused on their headers: 40 unfinished
#     8 MiB bodies leave the server's RSS (/proc/PID/status) near where it
#     was; a Content-Length over --max-body is answered 413 before any body
#   - a request that could never be admitted (more prompts than slots plus
#     queue) is a 400, not a 503
#   - --ctx above max_position_embeddings is refused
#   - GET /v1/models/{id} (the openai client's models.retrieve), HEAD
#   - CORS as vLLM's --allowed-origins: preflights answered, the allowed
#     origin echoed, none by default
# Every server and client is killed in the trap; every wait is bounded.
set -u
SERVE=${BIN:-./bin}/ds-serve
M=samples/tiny-dsv3
H=tests/hostile_client.mjs
[ -x "$SERVE" ] || { echo "serve_hostile.sh: FAIL: $SERVE not built"; exit 1; }
[ -f $M/config.json ] || { echo "serve_hostile.sh: skipped: $M absent"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "serve_hostile.sh: skipped: curl (the command) not installed"; exit 0; }
command -v node >/dev/null 2>&1 || { echo "serve_hostile.sh: skipped: node not installed"; exit 0; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-hostile-XXXXXX")
. "$(dirname "$0")/../fixtures/ds_serve.sh"
fails=0
fail() { echo "serve_hostile.sh: FAIL: $*"; fails=$((fails+1)); }

rss_kb() { sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/$SP/status; }
KEY='Authorization: Bearer sekrit-123'
# hcode ARGS... -> HTTP status of curl ARGS (body in $T/resp, headers in $T/hdr)
hcode() { curl -s -m 20 -o "$T/resp" -D "$T/hdr" -w '%{http_code}' "$@"; }

# ---- --ctx above max_position_embeddings --------------------------------------------
mpe=$(sed -n 's/.*"max_position_embeddings": *\([0-9]*\).*/\1/p' $M/config.json)
$SERVE -m $M -T 1 -q --port 0 --ctx $((mpe + 1)) >"$T/out" 2>&1 &
CP=$!
i=0; while kill -0 $CP 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
kill -0 $CP 2>/dev/null && { fail "--ctx $((mpe + 1)) (max_position_embeddings $mpe) was accepted"; kill -9 $CP; }
wait $CP; rc=$?; CP=""
[ $rc = 1 ] || fail "--ctx above max_position_embeddings: exit $rc, want 1"
grep -q "max_position_embeddings" "$T/out" || fail "--ctx above max_position_embeddings: message: $(head -c 300 "$T/out")"

# source addresses other than 127.0.0.1 (all of 127/8 is loopback on Linux)
ADDRS=""
for a in 2 3 4 5 6 7 8 9 10; do ADDRS="$ADDRS 127.0.0.$a"; done
multi=1
curl -s -m 5 -o /dev/null --interface 127.0.0.2 http://127.0.0.1:1/ 2>/dev/null; [ $? = 45 ] && multi=0

# ---- connections: idle and trickling clients, per-client limit, read timeout -------------
DSQ_TEST_KEY=sekrit-123 start_server --api-key-env DSQ_TEST_KEY || :
if [ $multi = 1 ]; then
  # 288 connections (32 from each of nine addresses, the per-client default), half of them trickling
  node $H hold "$P" 288 40 $ADDRS >"$T/hold" 2>&1 &
  CP=$!
  i=0; while ! grep -q ready "$T/hold" 2>/dev/null && kill -0 $CP 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  echo "serve_hostile.sh: note: idle clients $(cat "$T/hold")"; grep -q ready "$T/hold" || fail "the idle clients did not connect: $(head -c 300 "$T/hold")"
  got=$(hcode -H "$KEY" "$URL/v1/models")
  [ "$got" = 200 ] || fail "a new client while 288 connections idle: HTTP $got (want 200), held: $(cat "$T/hold")"
  got=$(hcode -H "$KEY" -H 'Content-Type: application/json' --data-binary '{"prompt": "hi", "max_tokens": 2}' "$URL/v1/completions")
  [ "$got" = 200 ] || fail "a completion while 288 connections idle: HTTP $got (want 200)"
  kill $CP 2>/dev/null; wait $CP 2>/dev/null; CP=""
  # one address: at most 32 connections
  closed=$(node $H perclient "$P" 40 127.0.0.2)
  [ "$closed" -ge 8 ] 2>/dev/null || fail "40 connections from one address: $closed closed by the server, want >= 8 (per-client limit 32)"
else
  echo "serve_hostile.sh: note: cannot bind 127.0.0.2: the many-address checks are skipped"
fi
stop_server
start_server --read-timeout 1 --idle-timeout 1 --max-connections-per-client 4 || :
# answers that take longer than both limits are not cut: the limits are on the client
LONG='{"prompt": "Question:", "max_tokens": 2000, "temperature": 0, "ignore_eos": true'
curl -s -m 120 -o "$T/long1" -w '%{http_code}' --data-binary "$LONG}" "$URL/v1/completions" >"$T/long1.code" &
L1=$!
curl -sN -m 120 -o "$T/long2" -w '%{http_code}' --data-binary "$LONG, \"stream\": true}" "$URL/v1/completions" >"$T/long2.code" &
L2=$!
wait $L1; wait $L2
[ "$(cat "$T/long1.code")" = 200 ] && grep -q '"finish_reason":"length"' "$T/long1" || fail "a long answer with --idle-timeout 1: HTTP $(cat "$T/long1.code")"
[ "$(cat "$T/long2.code")" = 200 ] && tail -n 2 "$T/long2" | grep -q '^data: \[DONE\]' || fail "a long stream with --idle-timeout 1: HTTP $(cat "$T/long2.code")"
got=$(node $H trickle "$P" 15)
[ "$got" = closed ] || fail "a client trickling its headers was not closed after --read-timeout 1: $got"
closed=$(node $H perclient "$P" 10 127.0.0.1)
[ "$closed" -ge 6 ] 2>/dev/null || fail "10 connections with --max-connections-per-client 4: $closed closed, want >= 6"
got=$(hcode "$URL/health")
[ "$got" = 200 ] || fail "/health after the trickling client: HTTP $got"
stop_server

# ---- bodies: the API key and Content-Length are checked on the headers ------------------------
DSQ_TEST_KEY=sekrit-123 start_server --api-key-env DSQ_TEST_KEY || :
r0=$(rss_kb)
node $H upload "$P" 40 8388600 30 >"$T/up" 2>&1 &
CP=$!
i=0; while ! grep -q ready "$T/up" 2>/dev/null && kill -0 $CP 2>/dev/null && [ $i -lt 800 ]; do sleep 0.05; i=$((i+1)); done
r1=$(rss_kb); echo "serve_hostile.sh: note: RSS $r0 kB before 40 unauthenticated uploads, $r1 kB during"
grep -q ready "$T/up" || fail "the uploads did not finish: $(head -c 300 "$T/up")"
# 40 bodies buffered would be 320 MiB; refused on their headers, nothing of them is kept
[ $((r1 - r0)) -lt 65536 ] || fail "40 unauthenticated unfinished uploads took the server's RSS from $r0 kB to $r1 kB"
kill $CP 2>/dev/null; wait $CP 2>/dev/null; CP=""
got=$(hcode -H "$KEY" "$URL/v1/models")
[ "$got" = 200 ] || fail "after the uploads: HTTP $got"
got=$(node $H announce "$P" 100000000)
case "$got" in *" 413 "*|*" 401 "*) ;; *) fail "a 100 MB Content-Length without a key: '$got' (want 401 or 413 at once)";; esac
stop_server
start_server --max-body 4096 || :
got=$(node $H announce "$P" 100000000)
case "$got" in *" 413 "*) ;; *) fail "a Content-Length over --max-body: '$got' (want 413 before the body)";; esac
got=$(hcode -H 'Content-Type: application/json' --data-binary '{"prompt": "hi", "max_tokens": 2}' "$URL/v1/completions")
[ "$got" = 200 ] || fail "a small body under --max-body 4096: HTTP $got"
stop_server

# ---- never admitted: 400 ------------------------------------------------------------------
start_server --slots 1 --queue 0 || :
got=$(hcode -H 'Content-Type: application/json' --data-binary '{"prompt": [[0, 5], [0, 6]], "max_tokens": 2}' "$URL/v1/completions")
[ "$got" = 400 ] || fail "two prompts with --slots 1 --queue 0: HTTP $got (want 400): $(head -c 200 "$T/resp")"
grep -q "at most 1 at a time" "$T/resp" || fail "never admitted: message: $(head -c 300 "$T/resp")"
got=$(hcode -H 'Content-Type: application/json' --data-binary '{"prompt": [[0, 5]], "max_tokens": 2}' "$URL/v1/completions")
[ "$got" = 200 ] || fail "one prompt with --slots 1 --queue 0: HTTP $got"
stop_server

# ---- /v1/models/{id}, HEAD --------------------------------------------------------------
DSQ_TEST_KEY=sekrit-123 start_server --api-key-env DSQ_TEST_KEY --served-model-name deepseek-ai/tiny || :
got=$(hcode -H "$KEY" "$URL/v1/models/deepseek-ai/tiny")
[ "$got" = 200 ] || fail "GET /v1/models/deepseek-ai/tiny: HTTP $got"
grep -q '"id":"deepseek-ai/tiny"' "$T/resp" && grep -q '"object":"model"' "$T/resp" || fail "the model object: $(head -c 300 "$T/resp")"
got=$(hcode -H "$KEY" "$URL/v1/models/deepseek-ai%2Ftiny")
[ "$got" = 200 ] || fail "GET /v1/models/deepseek-ai%2Ftiny: HTTP $got"
got=$(hcode -H "$KEY" "$URL/v1/models/gpt-9")
[ "$got" = 404 ] || fail "GET /v1/models/gpt-9: HTTP $got (want 404)"
got=$(hcode "$URL/v1/models/deepseek-ai/tiny")
[ "$got" = 401 ] || fail "GET /v1/models/{id} without the key: HTTP $got (want 401)"
for path in /health /v1/models /v1/models/deepseek-ai/tiny; do
  got=$(hcode -I -H "$KEY" "$URL$path")
  [ "$got" = 200 ] || fail "HEAD $path: HTTP $got (want 200)"
done
got=$(hcode -I -H "$KEY" "$URL/v1/completions")
[ "$got" = 405 ] || fail "HEAD /v1/completions: HTTP $got (want 405)"
grep -qi '^Allow: POST' "$T/hdr" || fail "405 without an Allow header: $(cat "$T/hdr")"
if [ -f .npm-data/node_modules/openai/package.json ]; then
  got=$(DSQ_TEST_KEY=sekrit-123 node $H retrieve "$URL/v1" deepseek-ai/tiny 2>&1)
  [ "$got" = deepseek-ai/tiny ] || fail "openai client models.retrieve: $got"
else
  echo "serve_hostile.sh: openai client check skipped: .npm-data lacks openai (sh .ci/deps.sh)"
fi
# CORS is off by default: a preflight is refused, no Access-Control header
got=$(hcode -X OPTIONS -H 'Origin: http://app.example' -H 'Access-Control-Request-Method: POST' "$URL/v1/completions")
[ "$got" = 400 ] || fail "a preflight without --allowed-origins: HTTP $got (want 400)"
grep -qi '^Access-Control-Allow-Origin' "$T/hdr" && fail "Access-Control-Allow-Origin without --allowed-origins"
stop_server

# ---- CORS: --allowed-origins ------------------------------------------------------------
DSQ_TEST_KEY=sekrit-123 start_server --api-key-env DSQ_TEST_KEY --allowed-origins '["http://app.example", "http://other.example"]' || :
got=$(hcode -X OPTIONS -H 'Origin: http://app.example' -H 'Access-Control-Request-Method: POST' \
  -H 'Access-Control-Request-Headers: authorization, content-type' "$URL/v1/completions")
[ "$got" = 200 ] || fail "preflight from an allowed origin: HTTP $got (want 200)"
grep -qi '^Access-Control-Allow-Origin: http://app.example' "$T/hdr" || fail "preflight: no Access-Control-Allow-Origin: $(cat "$T/hdr")"
grep -qi '^Access-Control-Allow-Methods:.*POST' "$T/hdr" || fail "preflight: no Access-Control-Allow-Methods: $(cat "$T/hdr")"
grep -qi '^Access-Control-Allow-Headers: authorization, content-type' "$T/hdr" || fail "preflight: requested headers not allowed: $(cat "$T/hdr")"
got=$(hcode -X OPTIONS -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST' "$URL/v1/completions")
[ "$got" = 400 ] || fail "preflight from another origin: HTTP $got (want 400)"
grep -qi '^Access-Control-Allow-Origin' "$T/hdr" && fail "preflight from another origin got Access-Control-Allow-Origin"
got=$(hcode -H "$KEY" -H 'Origin: http://other.example' -H 'Content-Type: application/json' \
  --data-binary '{"prompt": "hi", "max_tokens": 2}' "$URL/v1/completions")
[ "$got" = 200 ] || fail "a completion from an allowed origin: HTTP $got"
grep -qi '^Access-Control-Allow-Origin: http://other.example' "$T/hdr" || fail "the answer lacks Access-Control-Allow-Origin: $(cat "$T/hdr")"
got=$(curl -sN -m 20 -D "$T/hdr" -o "$T/resp" -w '%{http_code}' -H "$KEY" -H 'Origin: http://app.example' \
  --data-binary '{"prompt": "hi", "max_tokens": 2, "stream": true}' "$URL/v1/completions")
[ "$got" = 200 ] && grep -qi '^Access-Control-Allow-Origin: http://app.example' "$T/hdr" || fail "a stream from an allowed origin: HTTP $got, $(cat "$T/hdr")"
got=$(hcode -H "$KEY" -H 'Origin: http://evil.example' "$URL/v1/models")
[ "$got" = 200 ] || fail "GET /v1/models with another origin: HTTP $got"
grep -qi '^Access-Control-Allow-Origin' "$T/hdr" && fail "another origin got Access-Control-Allow-Origin"
# an error answer carries it too (the browser must see the 401)
got=$(hcode -H 'Origin: http://app.example' "$URL/v1/models")
[ "$got" = 401 ] && grep -qi '^Access-Control-Allow-Origin: http://app.example' "$T/hdr" || fail "a 401 to an allowed origin: HTTP $got, $(cat "$T/hdr")"
stop_server
start_server --allowed-origins '*' || :
got=$(hcode -X OPTIONS -H 'Origin: http://any.example' -H 'Access-Control-Request-Method: GET' "$URL/v1/models")
[ "$got" = 200 ] && grep -qi '^Access-Control-Allow-Origin: \*' "$T/hdr" || fail "--allowed-origins '*': HTTP $got, $(cat "$T/hdr")"
got=$(hcode -X OPTIONS "$URL/v1/models")
[ "$got" = 405 ] || fail "OPTIONS that is no preflight: HTTP $got (want 405)"
stop_server
$SERVE -m $M --allowed-origins '[1]' >/dev/null 2>&1; [ $? = 2 ] || fail "--allowed-origins '[1]': want exit 2"

[ $fails = 0 ] && echo "serve_hostile.sh: ok"
exit $((fails > 0))
