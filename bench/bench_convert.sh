#!/bin/sh
# bench_convert.sh - ds-quant throughput and peak RSS on a real-shape
# DeepSeek-V3 checkpoint with one MoE layer (hidden 7168, 128 experts of
# moe_intermediate 2048, MLA ranks 1536/512, 128 heads; vocab 8192 so the
# experts dominate): about 11.9 GB of BF16.
#
#   sh bench/bench_convert.sh [EXPERTS] [SCHEMES...]
#
# For each scheme: GB/s of BF16 input with SHA-256 and zstd (default level 1) on,
# against `cat` of the same input to /dev/null in the same run (page cache
# warm for both), peak RSS from /usr/bin/time -v, and CPU seconds (user+sys),
# which give the throughput the run would reach on otherwise idle cores
# (this box is shared; wall-clock numbers suffer from the neighbours' load),
# and CPU-s per GB of input: run it with a small EXPERTS (2) and a large one
# (16, 128) to see whether a run has a fixed cost that a big model would not
# amortise.
# The output must reach the disk (ds-quant fsyncs before the atomic rename),
# so on a slow disk the written bytes bound the speed: the script also
# measures the disk's sequential write speed (1 GB, fdatasync). Set
# BENCH_DST=/dev/shm to write the outputs to tmpfs and see the CPU-bound speed.
# Everything lands in bench/out/ (gitignored); outputs are deleted after
# each run, the input is kept for the next run (delete it by hand).
set -e
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "bench_convert.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
EXPERTS=${1:-128}
[ $# -gt 0 ] && shift
# An entry is SCHEME or SCHEME:EXTRA-OPTION (e.g. w4a8:--no-journal).
SCHEMES=${*:-w8a8-dynamic w8a8-dynamic:--no-journal w4a8 w4a8:--no-journal awq-w4a16 bf16}
. bench/synth_layer.sh
synth_layer $EXPERTS
NCPU=$(nproc)

now() { date +%s.%N; }
# Warm the page cache, then time cat.
cat $MODEL/*.safetensors > /dev/null
t0=$(now); cat $MODEL/*.safetensors > /dev/null; t1=$(now)
CAT=$(echo "$BYTES $t0 $t1" | awk '{printf "%.2f", $1 / ($3 - $2) / 1e9}')
echo "input: $MODEL, $(echo $BYTES | awk '{printf "%.2f GB", $1/1e9}'), $NCPU cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cat > /dev/null: $CAT GB/s"
DISK=$(dd if=/dev/zero of=$DST/bench-dd.tmp bs=1M count=1000 conv=fdatasync 2>&1 | sed -n 's/.*, \([0-9.]* [MG]B\/s\)$/\1/p')
rm -f $DST/bench-dd.tmp
echo "sequential write to $DST (1 GB, fdatasync): $DISK"
printf '%-27s %8s %9s %9s %10s %10s %10s %9s\n' scheme "GB/s" "cpu-s" "cpu-s/GB" "GB/s@idle" "peak RSS" "out GB" "vs cat"
for entry in $SCHEMES; do
    s=${entry%%:*}
    extra=""
    [ "$s" != "$entry" ] && extra=${entry#*:}
    cat $MODEL/*.safetensors > /dev/null
    /usr/bin/time -v $QUANT --scheme $s $extra -f --no-progress --json $MODEL $DST/bench-$s.dsq \
        > $OUT/bench-$s.json 2> $OUT/bench-$s.time || { cat $OUT/bench-$s.time; exit 1; }
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/bench-$s.time)
    usr=$(sed -n 's/.*User time (seconds): //p' $OUT/bench-$s.time)
    sys=$(sed -n 's/.*System time (seconds): //p' $OUT/bench-$s.time)
    gbs=$(jq -r .gb_per_s $OUT/bench-$s.json)
    secs=$(jq -r .seconds $OUT/bench-$s.json)
    outb=$(jq -r .bytes_out $OUT/bench-$s.json)
    echo "$s$extra $gbs $usr $sys $rss $outb $BYTES $NCPU $CAT" | awk '{
        cpu = $3 + $4; idle = $7 / (cpu / $8) / 1e9;
        printf "%-27s %8.2f %9.1f %9.2f %10.2f %8.0f MB %10.2f %8.0f%%\n", $1, $2, cpu, cpu / ($7 / 1e9), idle, $5/1024, $6/1e9, 100*$2/$9 }'
    rm -f $DST/bench-$s.dsq
done
