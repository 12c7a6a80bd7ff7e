#!/bin/sh
# ds-quant calibration flags end to end on the bundled sample (skipped when
# samples/tiny-dsv3 is absent): determinism across thread counts, --save-stats
# / --stats reuse giving the same bytes, w8a8 refused without calibration,
# fallback experts named, bad data refused. Resume after a crash and the KLD
# ordering are asserted by tests/test_calib.c.
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

$Q -q --scheme awq-w4a16 $C -T 1 "$M" "$T/a1.dsq"
$Q -q --scheme awq-w4a16 $C -T 2 "$M" "$T/a2.dsq"
cmp "$T/a1.dsq" "$T/a2.dsq" || fail "thread count changed the output"
[ ! -e "$T/a1.dsq.calib.dsq" ] || fail "default calibration checkpoint left behind"
grep -aq '"calibration": {"method":"awq"' "$T/a1.dsq" || fail "metadata lacks the calibration summary"

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
grep -aq '"method":"smoothquant"' "$T/w.dsq" || fail "w8a8 metadata"
grep -aq '"method":"static-ranges"' "$T/w0.dsq" || fail "w8a8 --no-smooth metadata"

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
set +e
$Q -q --scheme w8a8 --calib samples/data/calib.txt --calib-samples 100000 "$M" "$T/e.dsq" 2> "$T/err"
rc=$?
set -e
[ $rc = 1 ] && grep -q "calib-samples" "$T/err" || fail "too-short data: exit $rc: $(cat "$T/err")"
echo "calib.sh: ok"
