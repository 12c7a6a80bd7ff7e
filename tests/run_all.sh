#!/bin/sh
# Runs every unit-test binary, the CLI test scripts and the fuzz-corpus replays,
# then prints one closing line "N passed, N failed".
passed=0; failed=0; failed_names=""
mode=unit
for t in "$@"; do
  if [ "$t" = "--" ]; then mode=fuzz; continue; fi
  name=$(basename "$t")
  if [ $mode = unit ]; then
    if "$t"; then passed=$((passed+1)); else failed=$((failed+1)); failed_names="$failed_names $name"; fi
  else
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    if "$t" "$corpus"; then passed=$((passed+1)); else failed=$((failed+1)); failed_names="$failed_names $name"; fi
  fi
done
for s in tests/cli/*.sh; do
  [ -f "$s" ] || continue
  if BUILD=${BUILD:-build} BIN=${BIN:-./bin} sh "$s"; then passed=$((passed+1)); else failed=$((failed+1)); failed_names="$failed_names $(basename $s)"; fi
done
if sh tests/check_deps.sh >/dev/null; then passed=$((passed+1)); else failed=$((failed+1)); failed_names="$failed_names check-deps"; fi
echo
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
