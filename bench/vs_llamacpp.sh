#!/bin/sh
# vs_llamacpp.sh - dsq's engine next to llama.cpp on the same weights, same
# machine, same run: the real-shape one-layer DeepSeek-V3 checkpoint of
# bench/synth_layer.sh (hidden 7168, MLA, EXPERTS routed experts of 2048,
# top-8, one shared; 16 experts: 2.1 GB of BF16), converted once to dsq's
# schemes and to GGUF, then measured in interleaved rounds so that a load
# change on a shared machine hits both engines alike.
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp sh bench/vs_llamacpp.sh [ROUNDS]
#   LLAMA_CPP_DIR=/path/to/llama.cpp sh bench/vs_llamacpp.sh kld
#   KLD_MODEL=samples/work/mid-dsv3 KLD_TEXT=FILE ... sh bench/vs_llamacpp.sh kld
#
# LLAMA_CPP_DIR is a llama.cpp checkout the user built (CPU, -DGGML_NATIVE=ON,
# targets llama-bench and llama-quantize); binaries are looked for in
# $LLAMA_BIN, else $LLAMA_CPP_DIR/build/bin. Its gguf-py package writes the
# GGUF (bench/synth_to_gguf.py: our converter, since llama.cpp's own needs
# transformers). Nothing of llama.cpp is part of dsq. Without LLAMA_CPP_DIR
# the script says so and exits 0.
#
# Pairs: dsq bf16 / GGUF BF16, w8a8-dynamic / Q8_0, w4a8 / Q4_0 and
# awq-w4a16 / Q4_0 (llama.cpp has no int4 weight-only format with float
# activations: Q4_0 is its int4 row). GGUF files are quantized by
# llama-quantize with its defaults, as a user would (it keeps some tensors,
# such as output.weight, at a higher type: file sizes are printed).
#
# Figures: prefill of P=128 tokens (llama-bench pp128) and decode of N=16
# tokens (tg16; dsq decodes after the prefill), at THREADS (default "2 1").
# Each engine's figure per round is its best of REPS repetitions (dsq:
# bench_engine's best-of; llama.cpp: the fastest of llama-bench's samples);
# the summary gives the best over ROUNDS and the range of the per-round
# dsq / llama.cpp ratios. One thread is timed in process CPU time for both
# (bench_engine does so itself; llama-bench, which reports wall time only, is
# run with 1 and 1+CPU_REPS repetitions under /usr/bin/time and the
# difference taken: the mean of CPU_REPS runs), so the 1-thread rows hold on a shared
# machine; 2 threads are wall time (best sample) for both.
#
# Environment: EXPERTS (16), LAYERS (1: MoE layers of the checkpoint), ROUNDS (3, or the first argument), THREADS
# ("2 1"), REPS (4), CPU_REPS (10), P (128), N (16), PAIRS (all four),
# PYTHON (a python3 with numpy).
# Everything lands in bench/out/ (gitignored) and is kept for the next run.
set -e
cd "$(dirname "$0")/.."
if [ -z "$LLAMA_CPP_DIR" ]; then
    echo "vs_llamacpp: skipped: LLAMA_CPP_DIR is not set (point it at a llama.cpp checkout built" \
         "with llama-bench and llama-quantize)"
    exit 0
fi
LBIN=${LLAMA_BIN:-$LLAMA_CPP_DIR/build/bin}
for b in llama-bench llama-quantize; do
    [ -x "$LBIN/$b" ] || { echo "vs_llamacpp: $LBIN/$b not found (build it, or set LLAMA_BIN)" >&2; exit 1; }
done
[ -d "$LLAMA_CPP_DIR/gguf-py/gguf" ] || { echo "vs_llamacpp: no gguf-py in $LLAMA_CPP_DIR" >&2; exit 1; }
command -v jq >/dev/null || { echo "vs_llamacpp: needs jq (parses llama-bench's JSON lines)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "vs_llamacpp: needs /usr/bin/time (Debian package time)" >&2; exit 1; }
if [ -z "$PYTHON" ]; then
    for p in python3 /usr/bin/python3; do
        if "$p" -c 'import numpy' 2>/dev/null; then PYTHON=$p; break; fi
    done
fi
[ -n "$PYTHON" ] || { echo "vs_llamacpp: needs a python3 with numpy (set PYTHON)" >&2; exit 1; }

# --- kld: llama.cpp's rows of the sample's quality table -----------------
# samples/tiny-dsv3 (its own BPE vocab) to GGUF BF16, llama-quantize to each
# type, llama-perplexity --kl-divergence against the BF16 logits on
# samples/data/heldout.txt (-c 512: 39 chunks, the second half of each scored,
# 9,984 positions). Each figure is against llama.cpp's own float base, as
# dsq's are against its own (`ds-eval kld`). KLD_MODEL (default samples/tiny-dsv3)
# and KLD_TEXT (default samples/data/heldout.txt) pick another model and text:
# mid-dsv3 (samples/train_gpu.py) with the text files calib_quality.sh writes.
if [ "$1" = kld ]; then
    [ -x "$LBIN/llama-perplexity" ] || { echo "vs_llamacpp: $LBIN/llama-perplexity not found" >&2; exit 1; }
    KM=${KLD_MODEL:-samples/tiny-dsv3}
    KX=${KLD_TEXT:-samples/data/heldout.txt}
    K=bench/out/gguf-tiny
    [ "$KM" = samples/tiny-dsv3 ] || K=bench/out/gguf-$(basename "$KM")
    KT=${THREADS:-2}
    KT=${KT%% *}
    mkdir -p $K
    PYTHONPATH="$LLAMA_CPP_DIR/gguf-py" $PYTHON bench/synth_to_gguf.py "$KM" $K/bf16.gguf
    "$LBIN/llama-perplexity" -m $K/bf16.gguf -f "$KX" -c 512 -t $KT \
        --kl-divergence-base $K/base.kld > $K/base.log 2>&1 || { tail -5 $K/base.log; exit 1; }
    echo "llama.cpp $(git -C "$LLAMA_CPP_DIR" log -1 --format='%h %cd' --date=short 2>/dev/null)," \
         "$KM on $KX, -c 512; vs llama.cpp's BF16 logits"
    sed -n 's/^Final estimate: PPL = /BF16 base PPL /p' $K/base.log
    printf '%-8s %8s %11s %11s %11s %9s %8s  %s\n' type "file MB" "mean KLD" "median" "p99" "same top" "PPL" \
        "bpw of the projections (types used: llama-quantize falls back to Q5_0 for K-quants on rows not a multiple of 256)"
    for q in ${KLD_TYPES:-Q8_0 Q4_K_M Q4_K_S Q4_0}; do
        "$LBIN/llama-quantize" $K/bf16.gguf $K/$q.gguf $q > $K/$q-quant.log 2>&1 ||
            { tail -5 $K/$q-quant.log; exit 1; }
        "$LBIN/llama-perplexity" -m $K/$q.gguf -f "$KX" -c 512 -t $KT \
            --kl-divergence-base $K/base.kld --kl-divergence > $K/$q.log 2>&1 || { tail -5 $K/$q.log; exit 1; }
        bpw=$(PYTHONPATH="$LLAMA_CPP_DIR/gguf-py" $PYTHON bench/synth_to_gguf.py --bpw $K/$q.gguf) || exit 1
        awk -v q=$q -v mb="$(wc -c < $K/$q.gguf)" -v bpw="$bpw" '
            /^Mean PPL\(Q\)  / { ppl = $4 } /^Mean +KLD:/ { mean = $3 } /^Median +KLD:/ { med = $3 }
            /^99\.0% +KLD:/ { p99 = $3 } /^Same top p:/ { top = $4 }
            END { printf "%-8s %8.2f %11s %11s %11s %8s%% %8s  %s\n", q, mb / 1e6, mean, med, p99, top, ppl, bpw }' $K/$q.log
    done
    exit 0
fi

EXPERTS=${EXPERTS:-16}
ROUNDS=${1:-${ROUNDS:-3}}
case $ROUNDS in *[!0-9]*|'') echo "vs_llamacpp: ROUNDS must be a number, or the argument 'kld'" >&2; exit 2 ;; esac
THREADS=${THREADS:-2 1}
REPS=${REPS:-4}
CPU_REPS=${CPU_REPS:-10}
P=${P:-128}
N=${N:-16}
ENGINE=${BUILD:-build}/bench/bench_engine
[ -x $ENGINE ] || make -s $ENGINE
. bench/synth_layer.sh
synth_layer $EXPERTS
G=$OUT/gguf-$TAG
mkdir -p $G

# --- inputs, made once (newer than the checkpoint, else remade) -----------
stale() { [ ! -f "$1" ] || [ "$MODEL/config.json" -nt "$1" ]; }
for s in w8a8-dynamic w4a8 awq-w4a16; do
    f=$OUT/$TAG-$s.dsq
    if stale $f; then
        echo "converting $MODEL to $s ..."
        $QUANT --scheme $s -f --no-progress $MODEL $f > /dev/null
    fi
done
if stale $G/bf16.gguf; then
    echo "writing $G/bf16.gguf ..."
    PYTHONPATH="$LLAMA_CPP_DIR/gguf-py" $PYTHON bench/synth_to_gguf.py $MODEL $G/bf16.gguf
fi
for q in Q8_0 Q4_0; do
    if stale $G/$q.gguf || [ $G/bf16.gguf -nt $G/$q.gguf ]; then
        echo "llama-quantize $q ..."
        "$LBIN/llama-quantize" $G/bf16.gguf $G/$q.gguf.tmp $q > $G/$q.log 2>&1 ||
            { tail -5 $G/$q.log; exit 1; }
        mv $G/$q.gguf.tmp $G/$q.gguf
    fi
done

# dsq model / GGUF file per pair name.
dsq_of() { [ $1 = bf16 ] && echo $MODEL || echo $OUT/$TAG-$1.dsq; }
gguf_of() {
    case $1 in bf16) echo $G/bf16.gguf ;; w8a8-dynamic) echo $G/Q8_0.gguf ;; *) echo $G/Q4_0.gguf ;; esac
}
PAIRS=${PAIRS:-bf16 w8a8-dynamic w4a8 awq-w4a16}

echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "llama.cpp: $(git -C "$LLAMA_CPP_DIR" log -1 --format='%h %cd' --date=short 2>/dev/null || echo '?')"
echo "checkpoint: $MODEL ($(echo $BYTES | awk '{printf "%.2f GB", $1/1e9}')); rounds $ROUNDS, reps $REPS, p=$P, n=$N"
for s in $PAIRS; do
    printf '  %-13s %-44s %6.0f MB   %-24s %6.0f MB\n' $s "$(dsq_of $s)" \
        "$(cat $(dsq_of $s) $(dsq_of $s)/*.safetensors 2>/dev/null | wc -c | awk '{print $1/1e6}')" \
        "$(gguf_of $s)" "$(wc -c < $(gguf_of $s) | awk '{print $1/1e6}')"
done

# llama-bench once; its CPU seconds (user + sys) go to $OUT/vs-llama.cpu.
llama_run() {
    /usr/bin/time -f '%U %S' -o $OUT/vs-llama.time "$LBIN/llama-bench" -m $1 -t $2 -p $3 -n $4 -r $5 \
        -o jsonl > $OUT/vs-llama.jsonl 2> $OUT/vs-llama.err || { tail -5 $OUT/vs-llama.err >&2; exit 1; }
    tail -1 $OUT/vs-llama.time | awk '{ print $1 + $2 }' > $OUT/vs-llama.cpu
}
# One thread in CPU time, as bench_engine times one thread: llama-bench
# reports wall time only, so run it with 1 and with 1+CPU_REPS repetitions;
# the difference in process CPU time is CPU_REPS runs of the test alone
# (model load, Q4_0 repacking, context set-up and the warm-up run cancel).
# Those set-up costs vary by a second under load, so CPU_REPS (default 10)
# must make the runs themselves dominate: with 4, the same Q4_0 file gave
# 316 and 692 tok/s. Prints tokens / CPU second.
llama_cpu_rate() {
    llama_run $1 1 $2 $3 1
    a=$(cat $OUT/vs-llama.cpu)
    llama_run $1 1 $2 $3 $((CPU_REPS + 1))
    b=$(cat $OUT/vs-llama.cpu)
    echo "$a $b $CPU_REPS $4" | awk '{ d = $2 - $1; print (d > 0 ? $3 * $4 / d : 0) }'
}

# --- interleaved rounds ------------------------------------------------------
RES=$OUT/vs_llamacpp.tsv
: > $RES
r=1
while [ $r -le $ROUNDS ]; do
    for t in $THREADS; do
        for s in $PAIRS; do
            # BF16 is read through each tool's mapping: both files leave the
            # page cache first, so each is read as an uncached checkpoint
            # would be (synth_layer.sh's drop_cached says why)
            if [ $s = bf16 ]; then drop_cached $MODEL/*.safetensors $G/bf16.gguf; fi
            $ENGINE -t $t -p $P -n $N -r $REPS $(dsq_of $s) > $OUT/vs-dsq.txt 2>&1 ||
                { cat $OUT/vs-dsq.txt; exit 1; }
            awk -v r=$r -v t=$t -v s=$s '/ prefill +[0-9.]+ tok\/s .* decode / {
                for (i = 1; i < NF; i++) { if ($i == "prefill") pre = $(i+1); if ($i == "decode") dec = $(i+1) }
                printf "%s\t%s\t%s\tdsq\t%s\t%s\n", r, t, s, pre, dec }' $OUT/vs-dsq.txt >> $RES
            [ "$(tail -1 $RES | cut -f3,4)" = "$s	dsq" ] || { echo "vs_llamacpp: no figures in:" >&2; cat $OUT/vs-dsq.txt >&2; exit 1; }
            if [ $t = 1 ]; then
                pre=$(llama_cpu_rate $(gguf_of $s) $P 0 $P)
                dec=$(llama_cpu_rate $(gguf_of $s) 0 $N $N)
            else
                llama_run $(gguf_of $s) $t $P $N $REPS
                pre=$(jq -r "select(.n_prompt == $P and .n_gen == 0) | .samples_ts | max" $OUT/vs-llama.jsonl)
                dec=$(jq -r "select(.n_prompt == 0 and .n_gen == $N) | .samples_ts | max" $OUT/vs-llama.jsonl)
            fi
            printf '%s\t%s\t%s\tllama\t%s\t%s\n' $r $t $s "$pre" "$dec" >> $RES
            tail -2 $RES | awk -F'\t' '{ printf "round %s  %dT  %-13s %-6s prefill %8.1f tok/s  decode %7.1f tok/s\n",
                                         $1, $2, $3, $4, $5, $6 }'
        done
    done
    r=$((r + 1))
done

# --- summary: best over rounds; ratio range over rounds -----------------------
echo
echo "best of $ROUNDS rounds (tok/s); ratio = dsq / llama.cpp (best, and min-max over rounds):"
printf '%-3s %-13s %-5s %9s %9s %6s %-11s   %9s %9s %6s %-11s\n' T dsq gguf "dsq pp" "llama pp" ratio range \
    "dsq tg" "llama tg" ratio range
awk -F'\t' -v pairs="$PAIRS" -v threads="$THREADS" '
function max(a, b) { return a > b ? a : b }
{ k = $2 SUBSEP $3; pre[k, $4] = max(pre[k, $4], $5); dec[k, $4] = max(dec[k, $4], $6)
  rp[k, $1, $4] = $5; rd[k, $1, $4] = $6; if ($1 > R) R = $1 }
END {
  n = split(pairs, S, " "); m = split(threads, T, " ")
  for (j = 1; j <= m; j++) for (i = 1; i <= n; i++) {
    k = T[j] SUBSEP S[i]
    lo1 = lo2 = 1e9; hi1 = hi2 = 0
    for (r = 1; r <= R; r++) {
      if (rp[k, r, "llama"] > 0) { x = rp[k, r, "dsq"] / rp[k, r, "llama"]; lo1 = x < lo1 ? x : lo1; hi1 = max(hi1, x) }
      if (rd[k, r, "llama"] > 0) { x = rd[k, r, "dsq"] / rd[k, r, "llama"]; lo2 = x < lo2 ? x : lo2; hi2 = max(hi2, x) }
    }
    g = S[i] == "bf16" ? "BF16" : S[i] == "w8a8-dynamic" ? "Q8_0" : "Q4_0"
    printf "%-3s %-13s %-5s %9.1f %9.1f %6.2f %4.2f-%-6.2f   %9.1f %9.1f %6.2f %4.2f-%-6.2f\n", T[j], S[i], g,
      pre[k, "dsq"], pre[k, "llama"], (pre[k, "llama"] > 0 ? pre[k, "dsq"] / pre[k, "llama"] : 0), lo1, hi1,
      dec[k, "dsq"], dec[k, "llama"], (dec[k, "llama"] > 0 ? dec[k, "dsq"] / dec[k, "llama"] : 0), lo2, hi2
  }
}' $RES
echo "per-round figures: $RES"
