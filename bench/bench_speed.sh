#!/bin/sh
# bench_speed.sh - in one run, the machine's limits next to dsq's speeds, at
# 1 and 2 threads (THREADS), on the real-shape one-layer DeepSeek-V3
# checkpoint of bench/synth_layer.sh (16 experts: 2.1 GB BF16). It writes
# docs/benchmarks.md (PAGE; PAGE= for none) with a header naming the machine,
# date, commit and command: that page is never edited by hand.
#
#   nice sh bench/bench_speed.sh [EXPERTS]
#   QUICK=1 nice sh bench/bench_speed.sh    # a smaller layer and fewer rows
#
# Machine: page-cache read (cat), memory read bandwidth (bench_engine's
# 512 MB read loop), disk sequential write (1 GB, fdatasync), OpenBLAS
# sgemm and dsq's int8 / int4 GOPS (bench_quant, W 2048x7168, T=64), and the
# BF16 / int8 dot-product peaks (bench_peak, register-only).
# dsq: conversion GB/s of BF16 input and CPU-s per GB per scheme (SHA-256 +
# zstd at the default level 1 on, resume journal on, output fsynced; against
# a goal of 2 GB/s, or 90% of the disk's write speed where the output is
# bigger than the disk writes in that time), and prefill / decode tok/s per
# scheme with decode as % of the read bandwidth (bench_engine -p ENGINE_P
# -n ENGINE_N -r ENGINE_R).
#
# Environment: THREADS (default "1 2"), SCHEMES (default "w8a8-dynamic w4a8
# awq-w4a16"; w8a8 static needs --calib statistics and is not in the
# default), BENCH_DST (where outputs go; default bench/out), ENGINE_P (128),
# ENGINE_N (16), ENGINE_R (2), SKIP_ENGINE=1, VARIANTS (below), PAGE.
# QUICK=1 makes the defaults a 2-expert layer (0.9 GB; every tensor still of
# DeepSeek-V3's shape), no variants and one engine repetition, for a machine
# that cannot spare the full run; the page's command says so. Wall-clock
# figures need a quiet machine: the load average is printed so that a shared
# run can be told apart, and CPU seconds are printed too. Outputs are deleted
# at the end.
set -e
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "bench_speed.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
. bench/doc_page.sh
doc_init bench/bench_speed.sh QUICK THREADS SCHEMES VARIANTS BENCH_DST ENGINE_P ENGINE_N ENGINE_R SKIP_ENGINE -- "$@"
if [ "${QUICK:-0}" = 1 ]; then
    EXPERTS=${1:-2}
    VARIANTS=${VARIANTS-}
    ENGINE_R=${ENGINE_R:-1}
    DOC_NOTE="reduced run (QUICK=1): a layer with $EXPERTS routed experts instead of 16 (every tensor still of DeepSeek-V3's shape), no --zstd-level 0 / --no-search variant rows, one engine repetition"
else
    EXPERTS=${1:-16}
fi
THREADS=${THREADS:-1 2}
SCHEMES=${SCHEMES:-w8a8-dynamic w4a8 awq-w4a16}
ENGINE_P=${ENGINE_P:-128}
ENGINE_N=${ENGINE_N:-16}
ENGINE_R=${ENGINE_R:-2}
. bench/synth_layer.sh
synth_layer $EXPERTS
B=${BUILD:-build}/bench
make -s $B/bench_engine $B/bench_quant $B/bench_peak >/dev/null

# bench_engine's output is parsed here and only here, from its stable
# "result: key=value ..." line: model -> "prefill_tok_s decode_tok_s
# decode_bw_pct", readbw -> "read_bw_gbs".
engine_parse() {
    case "$1" in
    model) sed -n 's/^result: .* prefill_tok_s=\([0-9.]*\) .* decode_tok_s=\([0-9.]*\) .* decode_bw_pct=\([0-9.]*\) .*/\1 \2 \3/p' ;;
    readbw) sed -n 's/^result: .* read_bw_gbs=\([0-9.]*\) .*/\1/p' ;;
    esac
}

gb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e9 }'; }

say '%s\n' "- CPU flags: $(grep -o -w 'avx512_vnni\|avx512_bf16\|avx2\|asimddp\|sha_ni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
say '%s\n' "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
say '%s\n\n' "- input: \`$MODEL\`, $(gb $BYTES) GB BF16 (one real-shape DeepSeek-V3 MoE layer, $EXPERTS experts)"

# ---------------- machine limits ----------------
cat $MODEL/*.safetensors > /dev/null
t0=$(date +%s.%N); cat $MODEL/*.safetensors > /dev/null; t1=$(date +%s.%N)
CAT=$(awk -v b=$BYTES -v a=$t0 -v z=$t1 'BEGIN { printf "%.2f", b / (z - a) / 1e9 }')
dd if=/dev/zero of=$DST/bench-dd.tmp bs=1M count=1000 conv=fdatasync 2> $OUT/dd.txt
rm -f $DST/bench-dd.tmp
# dd prints "... bytes ... copied, S s, R MB/s": recompute GB/s from bytes and seconds.
DISK=$(sed -n 's/^\([0-9]*\) bytes.* copied, \([0-9.]*\) s.*/\1 \2/p' $OUT/dd.txt | awk '{ printf "%.2f", $1 / $2 / 1e9 }')
say '## Machine limits\n\n'
say '%s\n' "- page cache read (\`cat > /dev/null\`): $CAT GB/s"
say '%s\n\n' "- disk sequential write to \`$DST\` (1 GB, fdatasync): $DISK GB/s"
say '| -T | sgemm GFLOP/s | w8a8-dynamic GOPS | w4a8 GOPS | bf16 dot peak | int8 dot peak |\n'
say '|---|---|---|---|---|---|\n'
for t in $THREADS; do
    q=$(nice $B/bench_quant 2048 7168 $t 3 64)
    sg=$(echo "$q" | awk '$1 == "openblas" { print $(NF-1) }')
    i8=$(echo "$q" | awk '$1 == "w8a8-dynamic" { print $(NF-1) }')
    i4=$(echo "$q" | awk '$1 == "w4a8" { print $(NF-1) }')
    pk=$($B/bench_peak -T $t -s 0.3)
    pb=$(echo "$pk" | sed -n 's/^bf16 dot peak: \(.*\)/\1/p')
    pi=$(echo "$pk" | sed -n 's/^int8 dot peak: \(.*\)/\1/p')
    say '| %s | %s | %s | %s | %s | %s |\n' "$t" "$sg" "$i8" "$i4" "$pb" "$pi"
done
say '\nsgemm and the integer GOPS: `bench_quant 2048 7168 T 3 64` (64 tokens); peaks: `bench_peak -T T` (register-only dot products).\n\n'

# ---------------- conversion ----------------
say '## Conversion\n\n'
say '`ds-quant -T N`, SHA-256 + zstd level 1 (the default; `/z0`: `--zstd-level 0`), resume journal on, output fsynced, page cache warm; `/ns`: `--no-search`. GB/s of BF16 input; out/disk: the output rate over the disk write speed above; goal: 2 GB/s, or 90%% of the disk where the output outruns it.\n\n'
say '| scheme | -T | GB/s | wall s | CPU s | CPU-s per GB | peak RSS MB | output GB | out/disk | goal |\n'
say '|---|---|---|---|---|---|---|---|---|---|\n'
# VARIANTS ("" for none): more rows per thread count, SCHEME/z0 with
# --zstd-level 0 (where the disk rather than the CPU may be the limit) and
# SCHEME/ns with --no-search (w4a8 with round-to-nearest scales: what its
# default scale search costs). Their outputs are not kept for the engine runs.
VARIANTS=${VARIANTS-w8a8-dynamic/z0 w4a8/ns}
for s in $SCHEMES $VARIANTS; do
    x=
    case $s in */z0) x="--zstd-level 0" ;; */ns) x="--no-search" ;; esac
    for t in $THREADS; do
        cat $MODEL/*.safetensors > /dev/null
        f=$(echo $s | tr / -)
        rm -f $DST/speed-$f.dsq   # replacing a file would time its deletion too
        /usr/bin/time -v $QUANT --scheme ${s%/*} $x -T $t -f --no-progress --json $MODEL $DST/speed-$f.dsq \
            > $OUT/speed-$f-$t.json 2> $OUT/speed-$f-$t.time || { cat $OUT/speed-$f-$t.time; exit 1; }
        rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/speed-$f-$t.time)
        usr=$(sed -n 's/.*User time (seconds): //p' $OUT/speed-$f-$t.time)
        sys=$(sed -n 's/.*System time (seconds): //p' $OUT/speed-$f-$t.time)
        secs=$(jq -r .seconds $OUT/speed-$f-$t.json)
        outb=$(jq -r .bytes_out $OUT/speed-$f-$t.json)
        echo "$s $t $BYTES $secs $usr $sys $rss $outb $DISK" | awk '{
            gbs = $3 / $4 / 1e9; od = $8 / $4 / 1e9 / $9;
            goal = gbs >= 2 ? "met (>= 2 GB/s)" : (od >= 0.9 ? "met (disk-bound)" : "not met");
            printf "| %s | %d | %.2f | %.2f | %.1f | %.2f | %.0f | %.2f | %.0f%% | %s |\n",
                   $1, $2, gbs, $4, $5 + $6, ($5 + $6) / ($3 / 1e9), $7 / 1024, $8 / 1e9, 100 * od, goal }' | tee -a "$DOC_BODY"
    done
    # the last one stays for the engine runs, but not a variant's
    case $s in */*) rm -f $DST/speed-$f.dsq ;; esac
done
say '\n'

# ---------------- engine ----------------
if [ "${SKIP_ENGINE:-0}" != 1 ]; then
    say '## Engine\n\n'
    say '%s\n\n' "\`bench_engine -t N -p $ENGINE_P -n $ENGINE_N -r $ENGINE_R\`: prefill and decode tokens per second, and decode's weight reads as a share of the read bandwidth the same run measured."
    say '| weights | -T | prefill tok/s | decode tok/s | decode %% of read bandwidth | read GB/s |\n'
    say '|---|---|---|---|---|---|\n'
    # The BF16 rows read the checkpoint through its mapping: the copy the
    # conversions above left cached is dropped first (synth_layer.sh says why)
    drop_cached $MODEL/*.safetensors
    for w in bf16 $SCHEMES; do
        m=$MODEL
        [ $w != bf16 ] && m=$DST/speed-$w.dsq
        for t in $THREADS; do
            e=$(nice $B/bench_engine -t $t -p $ENGINE_P -n $ENGINE_N -r $ENGINE_R $m) || { echo "$e"; exit 1; }
            bw=$(echo "$e" | engine_parse readbw)
            set -- $(echo "$e" | engine_parse model)
            say '| %s | %d | %s | %s | %s%% | %s |\n' $w $t "$1" "$2" "$3" "$bw"
        done
    done
    say '\n'
fi
for s in $SCHEMES; do rm -f $DST/speed-$s.dsq; done
say '%s\n' "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
doc_finish "${PAGE-docs/benchmarks.md}" "Benchmarks: conversion and engine speed" \
"What dsq's conversion and engine reach on one machine, next to that machine's limits, from one run of \`bench/bench_speed.sh\`. Single runs on a shared machine move by tens of percent; compare rows of the same run, not runs of different machines."
