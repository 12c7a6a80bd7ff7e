#!/bin/sh
# make fuzz: build each tests/fuzz/fuzz_*.c with libFuzzer + ASan (clang) and
# run it for $1 seconds on a scratch copy of its corpus.
set -e
t=${1:-20}
mkdir -p build-fuzz
mods="common formats quant tokenizer engine calib convert eval serve"
srcs=$(for m in $mods; do ls $m/*.c; done 2>/dev/null | grep -v '_main\.c$' | grep -v '^common/cli\.c$')
for f in tests/fuzz/fuzz_*.c; do
  name=$(basename $f .c)
  echo "fuzz: building $name"
  clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    $(for m in $mods; do printf -- '-I%s ' $m; done) -Iinclude \
    $f $srcs -o build-fuzz/$name -lzstd -lcrypto -ljson-c -lopenblas -lpcre2-8 -lcurl -lmicrohttpd -lpthread -lm
  work=build-fuzz/corpus-${name#fuzz_}
  rm -rf $work; mkdir -p $work
  cp tests/fuzz/corpus/${name#fuzz_}/* $work/ 2>/dev/null || true
  echo "fuzz: running $name for ${t}s"
  ./build-fuzz/$name -max_total_time=$t -max_len=65536 $work
done
