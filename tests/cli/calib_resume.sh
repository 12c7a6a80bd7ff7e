#!/bin/sh
# ds-quant's calibration checkpoint across a killed run, on the bundled
# sample (skipped when samples/tiny-dsv3 is absent):
#   - a calibration killed with SIGKILL leaves OUT's partial checkpoint and
#     its hidden-state spill files; the next run of the same output (one
#     that does not calibrate, then one that does) removes them and touches
#     nothing else in the directory; a file that is not a statistics file
#     under the checkpoint's name is refused, never replaced;
#   - --resume reuses a finished OUT.calib.dsq only when it was made with
#     this run's calibration data and options: other --calib-samples is
#     refused before any conversion, the checkpoint is left in place, and
#     the same options give the bytes of a straight run; a rotated model's
#     statistics are reused only under the same --rotate-seed.
set -eu
M=samples/tiny-dsv3
if [ ! -f "$M/config.json" ] || [ ! -f samples/data/calib.txt ]; then
    echo "calib_resume.sh: skipped ($M or samples/data/calib.txt absent)"
    exit 0
fi
Q=${DSQ_QUANT:-${BIN:-./bin}/ds-quant}
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-calres.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "calib_resume.sh: $*" >&2; exit 1; }
C="--calib samples/data/calib.txt --calib-seqlen 64"
# what the directory holds, names only (hidden ones included)
listing() { (cd "$T/d" && ls -A | LC_ALL=C sort | tr '\n' ' '); }

# ---- a killed calibration's leftovers are removed by the next run ----
mkdir "$T/d"
echo "mine" > "$T/d/notes.txt"
echo "mine too" > "$T/d/.x.dsq.calib.dsq.partial.hidden.h2"   # not a name dsq writes
ln -s notes.txt "$T/d/link.txt"
before=$(listing)
P="$T/d/.x.dsq.calib.dsq.partial"
# long enough to be caught in the forward pass: killed once a layer is
# checkpointed (the journal) and the spill files exist
$Q -q --scheme awq-w4a16 --calib samples/data/calib.txt --calib-samples 96 --calib-seqlen 256 -T 1 \
    "$M" "$T/d/x.dsq" 2> "$T/err1" &
pid=$!
i=0
while [ $i -lt 3000 ]; do
    if [ -e "$P.journal" ] && [ -e "$P.hidden.h0" ]; then break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null || fail "the calibration ended before it could be killed: $(cat "$T/err1")"
wait $pid 2>/dev/null || true
pid=
for f in "$P" "$P.journal" "$P.hidden.h0" "$P.hidden.h1"; do
    [ -f "$f" ] || fail "the killed calibration left no $(basename "$f") (nothing to test): $(listing)"
done
# a run of the same output that does not calibrate removes them
$Q --scheme w8a8-dynamic "$M" "$T/d/x.dsq" > /dev/null 2> "$T/err" || fail "plain run after the kill: $(cat "$T/err")"
grep -q "interrupted run" "$T/err" || fail "the removal was not said: $(cat "$T/err")"
[ "$(listing)" = "${before}x.dsq " ] || fail "after the kill and a plain run the directory holds: $(listing)"
[ "$(cat "$T/d/notes.txt")" = mine ] || fail "notes.txt changed"
[ "$(cat "$T/d/.x.dsq.calib.dsq.partial.hidden.h2")" = "mine too" ] || fail "a file dsq did not write changed"
[ -L "$T/d/link.txt" ] || fail "link.txt is no longer a link"

# and so does a calibrating run (the spill files are not left behind)
rm "$T/d/x.dsq"
for f in "$P" "$P.journal" "$P.hidden.h0" "$P.hidden.h1"; do echo stale > "$f"; done
$Q -q --scheme awq-w4a16 $C --calib-samples 4 "$M" "$T/d/x.dsq" 2> "$T/err" \
    || fail "calibrating run after the kill: $(cat "$T/err")"
[ "$(listing)" = "${before}x.dsq " ] || fail "after a calibrating run the directory holds: $(listing)"

# a file of the user's under the checkpoint's name is neither replaced nor
# read, with or without --resume; nor is a link there (or its target)
echo "my notes" > "$T/u.dsq.calib.dsq"
ln -s notes.txt "$T/d/v.dsq.calib.dsq"
for o in "" --resume; do
    for out in "$T/u.dsq" "$T/d/v.dsq"; do
        rc=0
        $Q -q $o --scheme awq-w4a16 $C --calib-samples 4 "$M" "$out" 2> "$T/err" || rc=$?
        [ $rc -ne 0 ] || fail "calibration over a foreign $(basename "$out").calib.dsq ($o) exited 0"
        grep -q "not a statistics file" "$T/err" || fail "foreign checkpoint ($o) said: $(cat "$T/err")"
        [ ! -e "$out" ] || fail "calibration over a foreign checkpoint ($o) wrote an output"
    done
done
[ "$(cat "$T/u.dsq.calib.dsq")" = "my notes" ] || fail "the foreign OUT.calib.dsq changed"
[ -L "$T/d/v.dsq.calib.dsq" ] && [ "$(cat "$T/d/notes.txt")" = mine ] || fail "the linked OUT.calib.dsq changed"
rm "$T/d/v.dsq.calib.dsq"

# ---- --resume and a finished checkpoint of other options ----
# the finished checkpoint of an 8-sample calibration, as a run killed in its
# conversion pass leaves it
$Q -q --scheme awq-w4a16 $C --calib-samples 8 --save-stats "$T/r.dsq.calib.dsq" "$M" "$T/r8.dsq"
cp "$T/r.dsq.calib.dsq" "$T/keep.calib.dsq"
rc=0
$Q -q --resume --scheme awq-w4a16 $C --calib-samples 4 "$M" "$T/r.dsq" 2> "$T/err" || rc=$?
[ $rc -ne 0 ] || fail "--resume with --calib-samples 4 reused the 8-sample checkpoint (exit 0)"
[ $rc -eq 1 ] || [ $rc -eq 2 ] || fail "--resume over other options: exit $rc: $(cat "$T/err")"
grep -q "other calibration data or options" "$T/err" || fail "--resume over other options said: $(cat "$T/err")"
[ ! -e "$T/r.dsq" ] && [ ! -e "$T/.r.dsq.partial" ] || fail "the refused --resume wrote an output"
cmp -s "$T/r.dsq.calib.dsq" "$T/keep.calib.dsq" || fail "the refused --resume changed the checkpoint"
# the same options: reused, and the output is a straight run's
$Q -q --resume --scheme awq-w4a16 $C --calib-samples 8 "$M" "$T/r.dsq" 2> "$T/err" \
    || fail "--resume with the checkpoint's own options: $(cat "$T/err")"
cmp "$T/r.dsq" "$T/r8.dsq" || fail "--resume over the finished checkpoint differs from a straight run"
[ ! -e "$T/r.dsq.calib.dsq" ] || fail "the reused default checkpoint was kept after success"
# a rotated model's statistics: reused only under the same --rotate-seed,
# as the rotated model OUT.rot is
$Q -q --scheme awq-w4a16 $C --calib-samples 4 --rotate quarot --rotate-seed 1 \
    --save-stats "$T/q.dsq.calib.dsq" "$M" "$T/q1.dsq"
rc=0
$Q -q --resume --scheme awq-w4a16 $C --calib-samples 4 --rotate quarot --rotate-seed 2 "$M" "$T/q.dsq" \
    2> "$T/err" || rc=$?
[ $rc -ne 0 ] || fail "--resume --rotate-seed 2 reused the statistics of seed 1 (exit 0)"
grep -q "other calibration data or options" "$T/err" || fail "--resume over another seed said: $(cat "$T/err")"
[ -f "$T/q.dsq.calib.dsq" ] || fail "the refused --resume removed the checkpoint"
grep -q '"fingerprint"' "$T/keep.calib.dsq" || fail "the statistics file records no fingerprint"
echo "calib_resume.sh: ok"
