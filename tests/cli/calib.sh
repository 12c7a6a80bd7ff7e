#!/bin/sh
# ds-quant calibration flags end to end on the bundled sample (skipped when
# samples/tiny-dsv3 is absent): determinism across thread counts, --save-stats
# / --stats reuse giving the same bytes, w8a8 refused without calibration,
# fallback experts named, bad data refused. Resume after a crash and the KLD
# ordering are asserted by tests/test_calib_quality.c.
set -eu
M=samples/tiny-dsv3
if [ ! -f "$M/config.json" ] || [ ! -f samples/data/calib.txt ]; then
    echo "calib.sh: skipped ($M or samples/data/calib.txt absent)"
    exit 0
fi
Q=${DSQ_QUANT:-${BIN:-./bin}/ds-quant}
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-calib.XXXXXX")
trap 'rm -rf "$T"' EXIT
C="--calib samples/data/calib.txt --calib-samples 8 --calib-seqlen 128"
fail() { echo "calib.sh: $*" >&2; exit 1; }
# the calibration summary in a .dsq's recipe, as ds-inspect reads it
method() { ${BIN:-./bin}/ds-inspect --json "$1" | jq -r '.recipe.calibration | if type == "object" then .method else . end'; }

$Q -q --scheme awq-w4a16 $C -T 1 "$M" "$T/a1.dsq"
$Q -q --scheme awq-w4a16 $C -T 2 "$M" "$T/a2.dsq"
cmp "$T/a1.dsq" "$T/a2.dsq" || fail "thread count changed the output"
[ ! -e "$T/a1.dsq.calib.dsq" ] || fail "default calibration checkpoint left behind"
[ "$(method "$T/a1.dsq")" = awq ] || fail "metadata lacks the calibration summary: $(method "$T/a1.dsq")"

# statistics saved and reused: same bytes, no forward pass
$Q -q --scheme awq-w4a16 $C --save-stats "$T/s.dsq" "$M" "$T/a3.dsq"
[ -f "$T/s.dsq" ] || fail "--save-stats wrote nothing"
$Q -q --scheme awq-w4a16 --stats "$T/s.dsq" "$M" "$T/a4.dsq"
cmp "$T/a1.dsq" "$T/a3.dsq" || fail "--save-stats changed the output"
cmp "$T/a1.dsq" "$T/a4.dsq" || fail "--stats output differs"
${BIN:-./bin}/ds-inspect --verify "$T/s.dsq" > /dev/null || fail "statistics file does not verify"

# w8a8 (static) needs calibration; with it, SmoothQuant and without smoothing
if $Q -q --scheme w8a8 "$M" "$T/w.dsq" 2> /dev/null; then fail "w8a8 without --calib must fail"; fi
$Q -q --scheme w8a8 $C "$M" "$T/w.dsq"
$Q -q --scheme w8a8 $C --no-smooth "$M" "$T/w0.dsq"
$Q -q --scheme w8a8 --stats "$T/s.dsq" --alpha 0.8 "$M" "$T/w8.dsq"
[ "$(method "$T/w.dsq")" = smoothquant ] || fail "w8a8 metadata: $(method "$T/w.dsq")"
[ "$(method "$T/w0.dsq")" = static-ranges ] || fail "w8a8 --no-smooth metadata: $(method "$T/w0.dsq")"

# w8a8-dynamic: RTN without --calib; with it, smoothing (alpha searched, or
# fixed by --alpha), still w8a8-dynamic tensors only
$Q -q --scheme w8a8-dynamic "$M" "$T/d0.dsq"
$Q -q --scheme w8a8-dynamic $C "$M" "$T/d.dsq"
$Q -q --scheme w8a8-dynamic $C --alpha 0.5 "$M" "$T/da.dsq"
[ "$(method "$T/d0.dsq")" = "none (RTN)" ] || fail "w8a8-dynamic RTN says calibrated: $(method "$T/d0.dsq")"
[ "$(method "$T/d.dsq")" = smoothquant-search ] || fail "w8a8-dynamic --calib metadata: $(method "$T/d.dsq")"
[ "$(method "$T/da.dsq")" = smoothquant ] || fail "w8a8-dynamic --alpha metadata: $(method "$T/da.dsq")"
cmp -s "$T/d0.dsq" "$T/d.dsq" && fail "w8a8-dynamic --calib changed nothing"
${BIN:-./bin}/ds-inspect "$T/d.dsq" | grep -q ' w8a8 ' && fail "w8a8-dynamic --calib stored static w8a8 tensors"

# --rollback: the most sensitive modules stay bf16, named in --json and the
# metadata; the Ascend export of it loads (FLOAT entries, no mixed fused pair
# or MoE layer); --stats of a run without sensitivities is refused
$Q -q --json --scheme w8a8-dynamic $C --rollback 2 --save-stats "$T/rb.stats" "$M" "$T/rb.dsq" > "$T/rb.json"
n=$(jq '.calibration.rollback | length' "$T/rb.json")
[ "$n" -ge 2 ] || fail "--rollback 2 rolled back $n tensors"
for t in $(jq -r '.calibration.rollback[].tensor' "$T/rb.json"); do
    case $t in *.mlp.experts.*) fail "--rollback chose a routed expert: $t" ;; esac
    ${BIN:-./bin}/ds-inspect --json "$T/rb.dsq" | jq -e --arg t "$t" '.tensors[] | select(.name == $t) | .scheme == "bf16"' > /dev/null ||
        fail "$t is not bf16 in the output"
done
${BIN:-./bin}/ds-inspect --json "$T/rb.dsq" | jq -e '.recipe.calibration.rollback[0].tensor | type == "string"' > /dev/null ||
    fail "metadata lacks the rollback list"
$Q -q --scheme w8a8-dynamic --stats "$T/rb.stats" --rollback 2 "$M" "$T/rb2.dsq"
cmp "$T/rb.dsq" "$T/rb2.dsq" || fail "--stats made another rollback choice"
$Q -q --scheme w8a8-dynamic --stats "$T/rb.stats" --rollback 2 --format ascend "$M" "$T/rb-asc" || fail "ascend export with --rollback"
t=$(jq -r '.calibration.rollback[0].tensor' "$T/rb.json")
[ "$(jq -r --arg t "$t" '.[$t]' "$T/rb-asc/quant_model_description.json")" = FLOAT ] || fail "$t is not FLOAT in the ascend export"
$Q -q --scheme w8a8-dynamic $C --save-stats "$T/plain.stats" "$M" "$T/p.dsq"
set +e
$Q -q --scheme w8a8-dynamic --stats "$T/plain.stats" --rollback 1 "$M" "$T/p2.dsq" 2> "$T/err"
rc=$?
set -e
[ $rc = 1 ] && grep -q "no sensitivities" "$T/err" || fail "--rollback on statistics without sensitivities: exit $rc: $(cat "$T/err")"

# too few tokens per expert: RTN fallback, experts named in warnings
$Q --scheme w4a8 $C --min-expert-tokens 1000000 --no-progress "$M" "$T/f.dsq" > /dev/null 2> "$T/err"
grep -q "mlp.experts.0: " "$T/err" || fail "fallback experts are not named"
$Q -q --scheme w4a8 $C --moe-calib all --min-expert-tokens 1000000 "$M" "$T/g.dsq" 2> "$T/err"
[ ! -s "$T/err" ] || fail "--moe-calib all still warned: $(cat "$T/err")"

# bad data: a clear error, exit 1
: > "$T/empty.txt"
set +e
$Q -q --scheme w8a8 --calib "$T/empty.txt" "$M" "$T/e.dsq" 2> "$T/err"
rc=$?
set -e
[ $rc = 1 ] || fail "empty calibration data: exit $rc"
grep -q "empty" "$T/err" || fail "empty calibration data: $(cat "$T/err")"
# short data: --calib-samples is a cap (as in AutoAWQ): take the whole samples
# the data fills, say so; refuse only below the 4096-token floor (calib_data.h)
head -c 30000 samples/data/calib.txt > "$T/short.txt"
$Q --no-progress --scheme w8a8 --calib "$T/short.txt" --calib-samples 100000 --calib-seqlen 128 "$M" "$T/e.dsq" > /dev/null 2> "$T/err" ||
    fail "short data not taken: $(cat "$T/err")"
grep -q "fills only [0-9]* samples of 128 tokens: using [0-9]* x 128 = [0-9]* tokens instead of the 100000 x 128" "$T/err" ||
    fail "short data: no warning with the numbers used: $(cat "$T/err")"
head -c 3000 samples/data/calib.txt > "$T/tiny.txt"
set +e
$Q -q --scheme w8a8 --calib "$T/tiny.txt" --calib-samples 100000 --calib-seqlen 128 "$M" "$T/e2.dsq" 2> "$T/err"
rc=$?
set -e
[ $rc = 1 ] && grep -q "calib-samples" "$T/err" && grep -q "floor of 4096" "$T/err" || fail "data below the floor: exit $rc: $(cat "$T/err")"
[ ! -e "$T/e2.dsq" ] || fail "data below the floor left an output"
# options the run would not use are refused (exit 2), not ignored
for bad in "--scheme awq-w4a16 $C --alpha 0.5" "--scheme w8a8-dynamic --calib-samples 4" \
           "--scheme w4a8 --no-clip" "--scheme w8a8 $C --no-clip" "--scheme w8a8-dynamic $C --no-clip" "--scheme awq-w4a16 --save-stats $T/x.dsq" \
           "--dry-run --scheme w4a8 --resume" "--scheme awq-w4a16 --awq-attn-block 4" \
           "--scheme w4a8 --calib-expert-rows 256" "--scheme w4a8 $C --calib-rows 0" "--scheme w8a8-dynamic --rollback 1"; do
    set +e
    $Q -q $bad "$M" "$T/u.dsq" 2> "$T/err"
    rc=$?
    set -e
    [ $rc = 2 ] || fail "unused option accepted (exit $rc): $bad"
done
echo "calib.sh: ok"
