#!/bin/sh
# decode_ab.sh - decode speed of two builds of bench_engine, interleaved
# (A, B, A, B ... per model and thread count), so both see the same load on
# a shared machine: decode tok/s, % of the read bandwidth each run measured,
# and (where the binary prints it) process CPU ms per token.
#
#   sh bench/decode_ab.sh A_BENCH_ENGINE B_BENCH_ENGINE MODEL...
#
# Environment: THREADS (default "1 2"), ROUNDS (2), ENGINE_ARGS (default
# "-p 16 -n 32 -r 3"), B_ARGS (extra arguments for B only, e.g. -u).
# Prints one line per run: round, threads, build, model, tok/s, %BW,
# read GB/s, CPU ms/token ("-" when the build does not print it), then the
# load average. Speed only; wall figures need a quiet machine.
set -e
[ $# -ge 3 ] || { echo "usage: decode_ab.sh A_BENCH_ENGINE B_BENCH_ENGINE MODEL..." >&2; exit 2; }
A=$1
B=$2
shift 2
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-2}
ENGINE_ARGS=${ENGINE_ARGS:--p 16 -n 32 -r 3}
key() { sed -n "s/^result: .* $1=\([0-9.]*\).*/\1/p"; }
echo "decode_ab: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg); A=$A B=$B $B_ARGS; $ENGINE_ARGS"
printf '%-5s %-2s %-2s %-28s %9s %7s %8s %9s\n' round T ab model tok/s %BW readGB/s cpu_ms/tok
r=1
while [ $r -le "$ROUNDS" ]; do
    for t in $THREADS; do
        for m in "$@"; do
            for ab in A B; do
                if [ $ab = A ]; then bin=$A; extra=; else bin=$B; extra=$B_ARGS; fi
                # shellcheck disable=SC2086
                out=$("$bin" -t "$t" $ENGINE_ARGS $extra "$m" 2>&1 | grep '^result:' || true)
                cpu=$(printf '%s\n' "$out" | key decode_cpu_ms_per_tok)
                printf '%-5s %-2s %-2s %-28s %9s %7s %8s %9s\n' "$r" "$t" "$ab" "$(basename "$m")" \
                    "$(printf '%s\n' "$out" | key decode_tok_s)" "$(printf '%s\n' "$out" | key decode_bw_pct)" \
                    "$(printf '%s\n' "$out" | key read_bw_gbs)" "${cpu:--}"
            done
        done
    done
    r=$((r + 1))
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
