#!/bin/sh
# make bench: run every benchmark binary that exists in $BUILD/bench/
# (bench/*.c are built there by the Makefile; each prints its own table).
# Benchmarks take no required arguments; a benchmark that needs a big input
# creates it under bench/out/ (gitignored) on first use (e.g. bench_read
# writes a ~3 GB BF16 safetensors file; set DSQ_BENCH_GB to change the size,
# DSQ_BENCH_FILE to use an existing file). Extra arguments for one benchmark:
# BENCH_ARGS_<name>, e.g. BENCH_ARGS_bench_read="-T 2 --levels 1".
# Speed only; correctness lives in make test. Exit status: number of failed
# benchmarks (0 = all ran).
BUILD=${BUILD:-build}
mkdir -p bench/out
ran=0; failed=0; failed_names=""
for b in "$BUILD"/bench/bench_*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name=$(basename "$b")
  case "$name" in *.d|*.o) continue ;; esac
  eval "args=\${BENCH_ARGS_$name:-}"
  echo "==== $name $args"
  # shellcheck disable=SC2086
  if nice "$b" $args; then ran=$((ran+1)); else failed=$((failed+1)); failed_names="$failed_names $name"; fi
  echo
done
[ $ran -eq 0 ] && [ $failed -eq 0 ] && echo "run_bench: no benchmarks in $BUILD/bench (run make bench)"
[ -n "$failed_names" ] && echo "run_bench: failed:$failed_names"
echo "run_bench: $ran ran, $failed failed"
exit $failed
