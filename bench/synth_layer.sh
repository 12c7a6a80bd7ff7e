# synth_layer.sh - sourced by bench_convert.sh and bench_export.sh so both
# measure the same input: builds gen_synth and ds-quant when missing and
# makes, once, the real-shape one-layer DeepSeek-V3 checkpoint with $1 routed
# experts in bench/out/ (kept for later runs; delete it by hand).
# Sets OUT, DST (BENCH_DST or OUT), GEN, QUANT, MODEL and BYTES (input size).
synth_layer() {
    OUT=bench/out
    DST=${BENCH_DST:-$OUT}
    GEN=${BUILD:-build}/bench/gen_synth
    QUANT=bin/ds-quant
    mkdir -p $OUT
    [ -x $GEN ] || make -s $GEN
    [ -x $QUANT ] || make -s $QUANT
    # LAYERS (default 1) MoE layers: with 2 or more, the layers before the
    # last run their FFN on every prefill row in both engines (each prunes
    # the last layer's FFN to the rows whose logits are read)
    LAYERS=${LAYERS:-1}
    MODEL=$OUT/ds-v3-${LAYERS}moe-e$1
    # the names of what is made from it: e16-..., or l2-e16-... for 2 layers
    TAG=e$1
    [ "$LAYERS" = 1 ] || TAG=l$LAYERS-e$1
    if [ ! -f $MODEL/model.safetensors.index.json ]; then
        echo "generating $MODEL ..."
        nice $GEN --layers $LAYERS --dense 0 --experts $1 --vocab 8192 --shard-size 4G -f $MODEL
    fi
    BYTES=$(cat $MODEL/*.safetensors | wc -c)
}

# drop_cached FILE...: drop the files from the page cache (dd's nocache flag:
# posix_fadvise DONTNEED), so the next read comes back through dsq's 2 MiB
# huge-page mapping as 2 MiB folios, as a checkpoint that is not yet cached
# would be; a copy left cached in small folios is mapped 4 KiB at a time,
# which this VM streams at about half the speed (common/dsq_file.c).
drop_cached() {
    for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done
}
