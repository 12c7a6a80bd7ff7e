#!/bin/sh
# export.sh - ds-quant --format / ds-export end to end on the bundled samples
# (skipped when samples/tiny-dsv3 is absent): for every (format, scheme)
# pair, ds-quant --format F and ds-quant + ds-export give the same
# directories (every file compared; the tensor data of the weight files may
# differ where ds-quant --format, which has the source, writes it better than
# a .dsq can: codes rounded against 16-bit stored scales (AutoAWQ,
# compressed-tensors), and the source weight of a linear the target holds in
# float (AscendV1's kv_b_proj); their headers must be equal), SHA256SUMS
# verifies with sha256sum -c, no partial directory is left; FP8 sources lose their quantization_config
# and weight_scale_inv; refusals exit 2 and write nothing; a corrupted .dsq
# is refused by ds-export; --json summary. The tensor-level contract is
# checked by tests/test_export.c and, with python3, by tests/export_audit.py.
set -u
Q=${DSQ_QUANT:-./bin/ds-quant}
X=${DSQ_EXPORT:-./bin/ds-export}
M=samples/tiny-dsv3
F8=samples/tiny-dsv3-fp8
if [ ! -f "$M/config.json" ]; then echo "export.sh: skipped ($M absent)"; exit 0; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-export.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# same MODEL FORMAT ARGS...: direct export == .dsq + ds-export
same() {
    model=$1; fmt=$2; shift 2
    xs=""
    prev=""
    for a in "$@"; do [ "$prev" = "--shard-size" ] && xs="--shard-size $a"; prev=$a; done
    rm -rf "$T/d" "$T/e" "$T/m.dsq"
    $Q -q "$@" --format "$fmt" "$model" "$T/d" || { fail "ds-quant --format $fmt $* ($model)"; return; }
    $Q -q "$@" "$model" "$T/m.dsq" || { fail "ds-quant $* ($model)"; return; }
    $X -q $xs --format "$fmt" "$T/m.dsq" "$T/e" || { fail "ds-export --format $fmt ($*, $model)"; return; }
    for f in "$T"/d/*; do
        b=$(basename "$f")
        case "$b" in
        *.safetensors)   # the header (names, dtypes, shapes, offsets) alike
            n=$(( $(od -An -tu8 -N8 "$f" | tr -d ' ') + 8 ))
            cmp -s -n $n "$f" "$T/e/$b" || fail "$fmt $* ($model): $b headers differ between ds-quant --format and ds-export"
            continue ;;
        SHA256SUMS) continue ;;
        esac
        cmp -s "$f" "$T/e/$b" || fail "$fmt $* ($model): $b differs between ds-quant --format and ds-export"
    done
    [ "$(ls "$T/d" | wc -l)" = "$(ls "$T/e" | wc -l)" ] || fail "$fmt $*: file lists differ"
    (cd "$T/d" && sha256sum -c --quiet SHA256SUMS) || fail "$fmt $* ($model): sha256sum -c failed"
    ls -a "$T" | grep -q partial && fail "$fmt $*: partial directory left behind"
    grep -q '"weight_scale_inv\|_scale_inv"' "$T"/d/*.safetensors && fail "$fmt $*: weight_scale_inv exported"
    # independent python reading of docs/serving-exports.md (tests/export_audit.py);
    # --rtn: no calibration, so every weight is checked against the source
    if [ -n "$PY" ]; then
        rtn=--rtn
        case " $* " in *" --calib "*) rtn="";; esac
        $PY tests/export_audit.py "$fmt" "$model" "$T/d" $rtn || fail "$fmt $* ($model): tests/export_audit.py"
    fi
    return 0
}
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "export.sh: python3 absent, tests/export_audit.py checks skipped"

same $M ascend --scheme w8a8-dynamic
same $M ascend --recipe deepseek-w4a8 --shard-size 1M
[ -f "$T/d/quant_model_weights.safetensors.index.json" ] || fail "ascend --shard-size 1M wrote no index"
ls "$T/d" | grep -q '^quant_model_weights-00001-of-' || fail "ascend shard names"
same $M awq --scheme awq-w4a16 --group-size 64 --keep q_b_proj
grep -q '"modules_to_not_convert": \[' "$T/d/config.json" || fail "awq: modules_to_not_convert missing"
grep -q '"q_b_proj"' "$T/d/config.json" || fail "awq: q_b_proj not in modules_to_not_convert"
same $M compressed-tensors --scheme awq-w4a16 --group-size 0
same $M compressed-tensors --scheme w8a8-dynamic
same $M compressed-tensors --scheme w4a8
if [ -f samples/data/calib.txt ]; then
    same $M ascend --scheme w8a8 --calib samples/data/calib.txt --calib-samples 4 --calib-seqlen 64
    grep -q '"model_quant_type": "W8A8"' "$T/d/quant_model_description.json" || fail "static: model_quant_type"
    # smoothed w8a8-dynamic stays a plain W8A8_DYNAMIC export (the scales
    # are folded into the weights and norms; nothing static is added)
    same $M ascend --scheme w8a8-dynamic --calib samples/data/calib.txt --calib-samples 4 --calib-seqlen 64
    grep -q '"model_quant_type": "W8A8_DYNAMIC"' "$T/d/quant_model_description.json" ||
        fail "smoothed w8a8-dynamic: model_quant_type"
    grep -q '"W8A8"' "$T/d/quant_model_description.json" && fail "smoothed w8a8-dynamic: static W8A8 entries"
fi
if [ -f "$F8/config.json" ]; then
    grep -q quantization_config "$F8/config.json" || fail "fp8 sample lacks quantization_config (test premise)"
    same $F8 ascend --scheme w8a8-dynamic
    grep -q quantization_config "$T/d/config.json" && fail "ascend export of FP8 kept quantization_config"
    same $F8 awq --scheme awq-w4a16 --group-size 64 --keep q_b_proj
    grep -q '"quant_method": "awq"' "$T/d/config.json" || fail "awq export of FP8: quant_method"
    grep -q '"fp8"' "$T/d/config.json" && fail "awq export of FP8 kept the fp8 config"
    same $F8 compressed-tensors --scheme w8a8-dynamic
else
    echo "export.sh: $F8 absent, FP8 cases skipped"
fi

# refusals: exit 2, nothing written
rm -rf "$T/r"
out=$($Q -q --scheme w4a8 --format ascend $M "$T/r" 2>&1); rc=$?
[ $rc = 2 ] || fail "ascend + w4a8 everywhere: exit $rc, want 2"
echo "$out" | grep -q -- '--recipe deepseek-w4a8' || fail "ascend + w4a8: message does not point at --recipe deepseek-w4a8"
[ -e "$T/r" ] && fail "refused export wrote $T/r"
ls -a "$T" | grep -q '\.r\.partial' && fail "refused export left a partial directory"
if [ -f samples/data/calib.txt ]; then
    $Q -q --scheme awq-w4a16 --calib samples/data/calib.txt --format ascend $M "$T/r" 2>/dev/null; rc=$?
    [ $rc = 2 ] || fail "ascend + awq-w4a16 --calib: exit $rc, want 2"
    [ -e "$T/r" ] || [ -e "$T/r.calib.dsq" ] && fail "refused calibrated export wrote something"
fi
$Q -q --scheme w8a8-dynamic $M "$T/w8.dsq" || fail "w8a8-dynamic .dsq"
$X -q --format awq "$T/w8.dsq" "$T/r" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "ds-export awq from w8a8-dynamic: exit $rc, want 2"
[ -e "$T/r" ] && fail "refused ds-export wrote $T/r"
$Q -q --scheme awq-w4a16 --group-size 64 --format compressed-tensors $M "$T/r" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "ct with K %% G != 0: exit $rc, want 2"
# vLLM loads a layer's routed experts as one FusedMoE with one quant method
# (awq_marlin.py / compressed_tensors_moe.py), so one kept expert among
# quantized ones cannot load
for f in awq compressed-tensors; do
    out=$($Q -q --scheme awq-w4a16 --group-size 64 --keep 'q_b_proj|layers\.1\.mlp\.experts\.1\.' --format $f $M "$T/r" 2>&1); rc=$?
    [ $rc = 2 ] || fail "$f with one kept routed expert: exit $rc, want 2"
    echo "$out" | grep -q 'experts' || fail "$f with one kept routed expert: message does not name the experts"
    [ -e "$T/r" ] && { fail "$f: refused export wrote $T/r"; rm -rf "$T/r"; }
done
# all routed experts kept: vLLM's awq_marlin skips a FusedMoE only when an
# entry is a substring of its prefix "model.layers.L.mlp.experts"
$Q -q --scheme awq-w4a16 --group-size 64 --keep 'q_b_proj|mlp\.experts\.' --format awq $M "$T/r" || fail "awq with kept experts"
grep -q '"model.layers.1.mlp.experts"' "$T/r/config.json" || fail "awq with kept experts: no modules_to_not_convert entry for the fused MoE"
rm -rf "$T/r"
$Q -q --scheme w8a8-dynamic --format nope $M "$T/r" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "unknown --format: exit $rc, want 2"
$X -q "$T/w8.dsq" "$T/r" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "ds-export without --format: exit $rc, want 2"

# existing output: refused without -f, replaced with -f
$X -q --format ascend "$T/w8.dsq" "$T/a" || fail "ds-export ascend"
$X -q --format ascend "$T/w8.dsq" "$T/a" 2>/dev/null && fail "ds-export overwrote without -f"
$X -q -f --format ascend "$T/w8.dsq" "$T/a" || fail "ds-export -f"
(cd "$T/a" && sha256sum -c --quiet SHA256SUMS) || fail "after -f: sha256sum -c"

# ds-inspect lists an export directory and verifies its manifest
I=${DSQ_INSPECT:-./bin/ds-inspect}
$I --verify "$T/a" > "$T/insp.txt" || fail "ds-inspect --verify on an export"
grep -q 'ascend export' "$T/insp.txt" || fail "ds-inspect does not name the export format"
grep -q 'W8A8_DYNAMIC' "$T/insp.txt" || fail "ds-inspect lists no per-tensor type"
grep -q 'files match SHA256SUMS' "$T/insp.txt" || fail "ds-inspect --verify did not check SHA256SUMS"
echo '{}' > "$T/a/extra.json"
$I --verify "$T/a" >/dev/null 2>&1 && fail "ds-inspect --verify accepted an unlisted file"
rm -f "$T/a/extra.json"
printf ' ' >> "$T/a/config.json"
$I --verify "$T/a" >/dev/null 2>&1 && fail "ds-inspect --verify accepted a modified file"

# an export is verified against its SHA256SUMS when it is loaded, as a .dsq
# is: one flipped bit in a weight is refused, --no-verify loads it anyway
E=${DSQ_EVAL:-./bin/ds-eval}
$Q -q --scheme w8a8-dynamic --format ascend $M "$T/v" || fail "ascend export for the load check"
$E ppl -q -T 1 -m "$T/v" --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 >/dev/null 2>"$T/err" ||
    fail "ds-eval on an intact export: $(cat "$T/err")"
w="$T/v/quant_model_weights.safetensors"
at=$(( $(stat -c %s "$w") - 4096 ))
b=$(od -An -tu1 -j $at -N1 "$w" | tr -d ' ')
printf "\\$(printf '%03o' $(( b ^ 1 )))" | dd of="$w" bs=1 seek=$at conv=notrunc 2>/dev/null
$E ppl -q -T 1 -m "$T/v" --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 >/dev/null 2>"$T/err" &&
    fail "ds-eval on an export with a flipped weight bit exited 0"
grep -q 'SHA256SUMS' "$T/err" && grep -q 'quant_model_weights.safetensors' "$T/err" ||
    fail "flipped export weight: message was: $(cat "$T/err")"
$E ppl -q -T 1 --no-verify -m "$T/v" --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 >/dev/null 2>"$T/err" ||
    fail "--no-verify still refused the export: $(cat "$T/err")"
(cd "$T/v" && sha256sum -c --quiet SHA256SUMS >/dev/null 2>&1) && fail "the bit flip did not change the file (test premise)"
rm -rf "$T/v"

# --json summary
js=$($Q --json --scheme w8a8-dynamic --format compressed-tensors $M "$T/j")
echo "$js" | jq -e '.export.format == "compressed-tensors"' >/dev/null || fail "ds-quant --json lacks the export summary"
js=$($X --json --format ascend "$T/w8.dsq" "$T/j2")
echo "$js" | jq -e '.status == "ok" and .tensors > 0' >/dev/null || fail "ds-export --json"

# a corrupted .dsq: ds-export checks every tensor's SHA-256
cp "$T/w8.dsq" "$T/bad.dsq"
printf '\377' | dd of="$T/bad.dsq" bs=1 seek=200 conv=notrunc 2>/dev/null
$X -q --format ascend "$T/bad.dsq" "$T/b" 2>/dev/null; rc=$?
[ $rc = 1 ] || fail "corrupted .dsq: exit $rc, want 1"
[ -e "$T/b" ] && fail "corrupted .dsq: output written"

# -f replaces an earlier export directory; never the input, nor a directory
# that holds the input (it would be removed whole)
mkdir -p "$T/src" && cp $M/* "$T/src/"
$Q -q --scheme w8a8-dynamic --format ascend "$T/src" "$T/src/x" || fail "export into a subdirectory of the input"
$Q -q -f --scheme w8a8-dynamic --format ascend "$T/src" "$T/src/x" || fail "-f over an earlier export directory"
$Q -q -f --scheme w8a8-dynamic --format ascend "$T/src" "$T/src" 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q 'output is an input' "$T/err" || fail "export onto its input directory: exit $rc, $(cat "$T/err")"
[ -f "$T/src/config.json" ] || fail "export onto its input directory removed the source"
mkdir -p "$T/par/in" && cp $M/* "$T/par/in/"
$Q -q -f --scheme w8a8-dynamic --format ascend "$T/par/in" "$T/par" 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q 'output is an input' "$T/err" || fail "export onto a parent of its input: exit $rc"
[ -f "$T/par/in/config.json" ] || fail "export onto a parent of its input removed the source"
cp "$T/w8.dsq" "$T/par/w8.dsq"
$X -q -f --format ascend "$T/par/w8.dsq" "$T/par" 2>"$T/err"; rc=$?
[ $rc = 1 ] && [ -f "$T/par/w8.dsq" ] || fail "ds-export onto the directory holding its .dsq: exit $rc"

[ $fails = 0 ] && echo "export.sh: all passed"
exit $fails
