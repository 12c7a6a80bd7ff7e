# kld_rows.sh - sourced by gptq_kld.sh and awq_parity_kld.sh, so both score
# rows the same way: kld_setup OUTDIR makes the float model's logits on
# samples/data/heldout.txt once per run; kld_run LABEL ds-quant-args...
# converts $MODEL, scores it against those logits (ds-eval kld --json into
# $OUT/TAG.kld.json, TAG derived from LABEL; the .dsq is deleted) and sets
# KJ to that file; kld_num FILE KEY reads one number from it.
# Needs MODEL; sets OUT, D (samples/data) and CAL (64 x 512 calibration).
kld_setup() {
    OUT=$1
    command -v jq >/dev/null || { echo "kld_rows.sh: needs jq (.ci/deps.sh)" >&2; exit 2; }
    mkdir -p "$OUT"
    [ -x bin/ds-quant ] && [ -x bin/ds-eval ] || make -s all
    D=samples/data
    CAL="--calib $D/calib.txt --calib-samples 64 --calib-seqlen 512"
    bin/ds-eval ppl -q -f -m "$MODEL" --data $D/heldout.txt --save-logits "$OUT/base.logp" --json > "$OUT/base.json"
}
kld_num() { jq -r ".$2" "$1"; }
kld_run() {
    tag=$(echo "$1" | tr -c 'a-zA-Z0-9\n' '_'); shift
    bin/ds-quant -q -f --json "$@" "$MODEL" "$OUT/$tag.dsq" > "$OUT/$tag.quant.json"
    bin/ds-eval kld -q -m "$OUT/$tag.dsq" --base "$OUT/base.logp" --json > "$OUT/$tag.kld.json"
    rm -f "$OUT/$tag.dsq"
    KJ=$OUT/$tag.kld.json
}
