#!/bin/sh
# make bench: run every benchmark binary that exists in $BUILD/bench/
# (bench/*.c are built there by the Makefile; each prints its own table).
# Every benchmark runs without arguments: a benchmark that needs a big input
# creates it under bench/out/ (gitignored) on first use (e.g. bench_read
# writes a ~3 GB BF16 safetensors file; set DSQ_BENCH_GB to change the size,
# DSQ_BENCH_FILE to use an existing file), and the ones that take a model
# get the bundled sample: bench_ledger and bench_pool samples/tiny-dsv3,
# bench_zstd its w4a8 .dsq (written to bench/out/ by $BIN/ds-quant on first
# use). Without the sample they are skipped with their usage. Arguments for
# one benchmark: BENCH_ARGS_<name>, e.g. BENCH_ARGS_bench_read="-T 2 --levels 1".
# Speed only; correctness lives in make test. Exit status: number of failed
# benchmarks (0 = all ran).
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
SAMPLE=samples/tiny-dsv3
mkdir -p bench/out
ran=0; failed=0; skipped=0; failed_names=""

# default_args NAME: the arguments a benchmark needs, from the bundled
# sample; returns 1 (usage printed) when they cannot be had
default_args() {
  case $1 in
    bench_ledger|bench_pool)
      [ -f "$SAMPLE/config.json" ] && { args=$SAMPLE; return 0; }
      usage="$1 MODEL ($SAMPLE absent)" ;;
    bench_zstd)
      f=bench/out/tiny-dsv3-w4a8.dsq
      if [ ! -f "$f" ] && [ -f "$SAMPLE/config.json" ] && [ -x "$BIN/ds-quant" ]; then
        "$BIN/ds-quant" -q --scheme w4a8 "$SAMPLE" "$f" || rm -f "$f"
      fi
      [ -f "$f" ] && { args=$f; return 0; }
      usage="$1 FILE.dsq [MAX_GB] ($SAMPLE or $BIN/ds-quant absent)" ;;
    *) args=""; return 0 ;;
  esac
  return 1
}

for b in "$BUILD"/bench/bench_*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name=$(basename "$b")
  case "$name" in *.d|*.o) continue ;; esac
  eval "args=\${BENCH_ARGS_$name:-}"
  eval "given=\${BENCH_ARGS_$name+set}"
  if [ -z "$given" ] && ! default_args "$name"; then
    echo "==== $name: skipped; usage: $usage"; echo
    skipped=$((skipped+1)); continue
  fi
  echo "==== $name $args"
  # shellcheck disable=SC2086
  if nice "$b" $args; then ran=$((ran+1)); else failed=$((failed+1)); failed_names="$failed_names $name"; fi
  echo
done
[ $ran -eq 0 ] && [ $failed -eq 0 ] && echo "run_bench: no benchmarks in $BUILD/bench (run make bench)"
[ -n "$failed_names" ] && echo "run_bench: failed:$failed_names"
echo "run_bench: $ran ran, $failed failed, $skipped skipped"
exit $failed
