#!/bin/sh
# bench_export.sh - ds-quant --format ascend|awq|compressed-tensors next to
# the .dsq conversion of the same scheme, in the same run, on the real-shape
# one-layer DeepSeek-V3 checkpoint of bench_convert.sh (hidden 7168, MLA
# ranks 1536/512, 128 heads, EXPERTS experts of moe_intermediate 2048, vocab
# 8192; build/bench/gen_synth).
#
#   sh bench/bench_export.sh [EXPERTS] [ENTRIES...]
#
# An entry is FORMAT:RECIPE-OPTION, e.g. ascend:--scheme=w8a8-dynamic
# (FORMAT dsq is the container). For each: wall seconds, GB/s of BF16 input,
# CPU seconds (user+sys), peak RSS (/usr/bin/time -v) and bytes written.
# An export writes more bytes than the zstd-compressed .dsq (it is not
# compressed, and writes SHA256SUMS, which reads every file back once), so
# compare "GB/s" against the bytes each run writes. Outputs go to
# bench/out/ (BENCH_DST=/dev/shm for tmpfs) and are deleted after each run;
# the input is kept for the next run.
set -e
cd "$(dirname "$0")/.."
EXPERTS=${1:-16}
[ $# -gt 0 ] && shift
ENTRIES=${*:-dsq:--scheme=w8a8-dynamic ascend:--scheme=w8a8-dynamic compressed-tensors:--scheme=w8a8-dynamic \
dsq:--recipe=deepseek-w4a8 ascend:--recipe=deepseek-w4a8 \
dsq:--scheme=awq-w4a16 awq:--scheme=awq-w4a16 compressed-tensors:--scheme=awq-w4a16}
. bench/synth_layer.sh
synth_layer $EXPERTS
echo "input: $MODEL, $(echo $BYTES | awk '{printf "%.2f GB", $1/1e9}'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-20s %-24s %8s %7s %8s %10s %10s\n' format recipe seconds "GB/s" cpu-s "peak RSS" "out GB"
for entry in $ENTRIES; do
    fmt=${entry%%:*}
    rec=$(echo "${entry#*:}" | tr '=' ' ')
    o=$DST/bench-x-$fmt
    rm -rf $o $o.dsq
    [ $fmt = dsq ] && dst=$o.dsq || dst=$o
    cat $MODEL/*.safetensors > /dev/null
    /usr/bin/time -v $QUANT $rec --format $fmt -f --no-progress --json $MODEL $dst \
        > $OUT/bench-x.json 2> $OUT/bench-x.time || { cat $OUT/bench-x.time; exit 1; }
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/bench-x.time)
    usr=$(sed -n 's/.*User time (seconds): //p' $OUT/bench-x.time)
    sys=$(sed -n 's/.*System time (seconds): //p' $OUT/bench-x.time)
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' $OUT/bench-x.time | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
    outb=$(du -sb $dst | cut -f1)
    echo "$fmt ${entry#*:} $wall $BYTES $usr $sys $rss $outb" | awk '{
        printf "%-20s %-24s %8.1f %7.2f %8.1f %7.0f MB %10.3f\n", $1, $2, $3, $4 / $3 / 1e9, $5 + $6, $7 / 1024, $8 / 1e9 }'
    rm -rf $o $o.dsq
done
