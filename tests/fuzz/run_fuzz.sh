#!/bin/sh
# make fuzz: build libdsq once with clang, libFuzzer coverage instrumentation
# and ASan + UBSan (build-fuzz/), link every tests/fuzz/fuzz_*.c (or only the
# names in $FUZZ_TARGETS, e.g. "config index") and run each for $1 seconds on
# a scratch copy of its corpus (new inputs land in build-fuzz/corpus-NAME, the
# committed seeds in tests/fuzz/corpus/NAME are only read). Each run ends
# with libFuzzer's final stats (executions, coverage); logs are in
# build-fuzz/NAME.log. A crash stops the script with the reproducer's path.
set -e
t=${1:-20}
cd "$(dirname "$0")/../.."
jobs=${FUZZ_JOBS:-2}
make -s -j"$jobs" lib BUILD=build-fuzz CC=clang OPT=-O1 \
    XCFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
mods="common formats quant xfmt tokenizer engine calib convert eval serve programs"
incs=$(for m in $mods; do printf -- '-I%s ' $m; done)
names=${FUZZ_TARGETS:-$(for f in tests/fuzz/fuzz_*.c; do n=$(basename $f .c); printf '%s ' ${n#fuzz_}; done)}
for n in $names; do
  f=tests/fuzz/fuzz_$n.c
  [ -f $f ] || { echo "fuzz: no target $f"; exit 2; }
  echo "fuzz: building fuzz_$n"
  clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined $incs -Iinclude \
    $f build-fuzz/libdsq.a -o build-fuzz/fuzz_$n -lzstd -lcrypto -ljson-c -lopenblas -lpcre2-8 -lcurl -lmicrohttpd -lpthread -lm
  work=build-fuzz/corpus-$n
  mkdir -p $work
  echo "fuzz: running fuzz_$n for ${t}s"
  if ! ./build-fuzz/fuzz_$n -max_total_time=$t -max_len=65536 -print_final_stats=1 \
        -artifact_prefix=build-fuzz/crash-$n- $work tests/fuzz/corpus/$n > build-fuzz/fuzz_$n.log 2>&1; then
    tail -40 build-fuzz/fuzz_$n.log
    echo "fuzz: fuzz_$n FAILED (reproducer: build-fuzz/crash-$n-*)"
    exit 1
  fi
  grep -E "DONE|stat::number_of_executed_units|stat::peak_rss_mb" build-fuzz/fuzz_$n.log | sed "s/^/fuzz_$n: /"
done
