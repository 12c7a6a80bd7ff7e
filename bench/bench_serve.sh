#!/bin/sh
# bench_serve.sh - load benchmark of ds-serve (speed, not correctness; not
# part of make test or make bench): requests/s and generated tokens/s under
# 1, 4 and 16 concurrent clients, next to the speed of one request alone
# (one sequence per decode step) measured in the same run on the same server.
#
#   sh bench/bench_serve.sh [MODEL] [THREADS]
#
# MODEL defaults to samples/tiny-dsv3, THREADS (engine threads) to all
# cores. Every request asks for exactly TOKENS new tokens (ignore_eos), with
# prompts from samples/data/gsm_test.jsonl, so the token counts are fixed.
# Environment: TOKENS (default 64), REQS (requests per client, default 8),
# SLOTS (server slots, default 16).
set -u
M=${1:-samples/tiny-dsv3}
TH=${2:-0}
TOKENS=${TOKENS:-64}
REQS=${REQS:-8}
SLOTS=${SLOTS:-16}
SERVE=./bin/ds-serve
[ -x $SERVE ] || { echo "bench_serve: build first (make)"; exit 1; }
command -v curl >/dev/null || { echo "bench_serve: needs curl"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-bench-serve-XXXXXX")
SP=""
trap '[ -n "$SP" ] && kill -9 $SP 2>/dev/null; rm -rf "$T"' EXIT
$SERVE -m "$M" -T "$TH" --port 0 --port-file "$T/port" --slots "$SLOTS" --queue 256 -v -v >"$T/log" 2>&1 &
SP=$!
i=0; while [ ! -s "$T/port" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$T/port" ] || { echo "bench_serve: server did not start"; cat "$T/log"; exit 1; }
URL=http://127.0.0.1:$(cat "$T/port")/v1/completions
now() { date +%s.%N; }
# request N: a GSM question as the prompt
req() {
  q=$(sed -n "$(( ($1 % 300) + 1 ))p" samples/data/gsm_test.jsonl | sed 's/.*"question": *"\([^"]*\)".*/\1/')
  curl -s -o /dev/null -w '%{http_code}\n' -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": \"Question: $q\\nAnswer:\", \"max_tokens\": $TOKENS, \"temperature\": 0, \"ignore_eos\": true}" "$URL"
}
client() { k=0; while [ $k -lt $REQS ]; do req $(( $1 * 100 + k )) >>"$T/codes"; k=$((k+1)); done; }

req 0 >/dev/null # warm up
# one request alone: decode speed of a single sequence
t0=$(now); req 1 >/dev/null; t1=$(now)
single=$(echo "$t0 $t1" | awk -v n=$TOKENS '{ printf "%.1f", n / ($2 - $1) }')
echo "model $M, $TOKENS new tokens per request, $REQS requests per client, $SLOTS slots, threads ${TH} (0 = all)"
echo "single request alone: $single tokens/s"
printf '%-8s %10s %12s %10s %14s\n' clients requests seconds "req/s" "tokens/s"
for c in 1 4 16; do
  : >"$T/codes"
  t0=$(now)
  pids=""; j=0
  while [ $j -lt $c ]; do client $j & pids="$pids $!"; j=$((j+1)); done
  for p in $pids; do wait $p; done
  t1=$(now)
  n=$(grep -c '^200$' "$T/codes")
  bad=$(grep -vc '^200$' "$T/codes")
  echo "$c $n $t0 $t1 $bad" | awk -v tok=$TOKENS '{ s = $4 - $3; printf "%-8d %10d %12.2f %10.2f %14.1f%s\n", $1, $2, s, $2 / s, $2 * tok / s, $5 ? "  (" $5 " failed)" : "" }'
done
kill -TERM $SP; i=0; while kill -0 $SP 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; SP=""
grep "decode steps" "$T/log" | sed 's/^ds-serve: /server: /'
