#!/bin/sh
# export_safety.sh - an export never deletes what dsq did not write, and
# survives a full disk or a crash at any step of its finish:
#  - -f (ds-export, ds-quant --format) replaces only an export dsq wrote
#    (its SHA256SUMS lists every file); a directory of user files, one with
#    a user file added, a symbolic link and a foreign ".OUT.old" are refused
#    with exit 2 before any work, every file left as it was;
#  - a ".OUT.partial" that dsq did not make (a symbolic link to a home
#    directory, a directory of user files, a file) is refused untouched;
#  - a full disk (a small tmpfs, skipped where mounting is not allowed)
#    keeps the committed shards and says to --resume, which then gives the
#    bytes of an uninterrupted run;
#  - killed (SIGKILL, through the DSQ_TEST_KILL_AT test hook of
#    convert/export_dir.c) at every step of finish while replacing an older
#    export, --resume gives the bytes of an uninterrupted run and leaves no
#    hidden file, partial or old directory; so does a plain -f rerun.
# Uses the bundled samples/tiny-dsv3.
set -u
BIN=${BIN:-./bin}
Q=${DSQ_QUANT:-$BIN/ds-quant}
X=${DSQ_EXPORT:-$BIN/ds-export}
M=samples/tiny-dsv3
if [ ! -x "$Q" ] || [ ! -x "$X" ]; then echo "export_safety.sh: $Q / $X not built"; exit 1; fi
if [ ! -f "$M/config.json" ]; then echo "export_safety.sh: skipped ($M absent)"; exit 0; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-xsafe.XXXXXX")
SMALL=$T/small
mounted=0
trap '[ $mounted = 1 ] && umount "$SMALL"; rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# tree DIR: every file (hidden ones too) with its SHA-256, to compare states
tree() { (cd "$1" && find . -type f -o -type l | sort | while read -r f; do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f $(sha256sum < "$f" | cut -c1-16)"; fi
done); }
# same A B: identical trees, hidden files included
same() { diff -r "$1" "$2" > /dev/null 2>&1 && [ "$(ls -A "$1")" = "$(ls -A "$2")" ]; }
# none OUT: no partial and no old directory beside OUT
none() { [ ! -e "$(dirname "$1")/.$(basename "$1").partial" ] && [ ! -L "$(dirname "$1")/.$(basename "$1").partial" ] &&
         [ ! -e "$(dirname "$1")/.$(basename "$1").old" ]; }

$Q -q --scheme w8a8-dynamic $M "$T/w8.dsq" || { echo "FAIL: w8a8-dynamic .dsq"; exit 1; }
$Q -q --scheme w8a8-dynamic --shard-size 1M $M "$T/w8s.dsq" || { echo "FAIL: sharded .dsq"; exit 1; }
XA="--format ascend --shard-size 1M"
$X -q $XA "$T/w8.dsq" "$T/ref" || { echo "FAIL: reference export"; exit 1; }
ls "$T/ref" | grep -q 'index.json' || fail "reference export is not sharded (test premise)"

# ---- -f on a directory of user files: refused before any work ----
mkdir -p "$T/u/sub"
echo "chapter one" > "$T/u/thesis.txt"
echo "notes" > "$T/u/sub/notes.md"
tree "$T/u" > "$T/u.before"
$X -q -f $XA "$T/w8.dsq" "$T/u" 2> "$T/err"; rc=$?
[ $rc = 2 ] || fail "ds-export -f on a user directory: exit $rc, want 2"
grep -q "thesis.txt" "$T/err" || fail "ds-export -f on a user directory: message does not name the file: $(cat "$T/err")"
tree "$T/u" | cmp -s - "$T/u.before" || fail "ds-export -f changed a user directory"
none "$T/u" || fail "refused ds-export -f left a partial or old directory"
$Q -q -f --scheme w8a8-dynamic --format ascend $M "$T/u" 2> "$T/err"; rc=$?
[ $rc = 2 ] || fail "ds-quant --format -f on a user directory: exit $rc, want 2"
tree "$T/u" | cmp -s - "$T/u.before" || fail "ds-quant --format -f changed a user directory"
none "$T/u" || fail "refused ds-quant --format -f left a partial or old directory"
# the same with a rotation first: refused before the rotated copy is written
$Q -q -f --rotate quarot --scheme w8a8-dynamic --format ascend $M "$T/u" 2>/dev/null; rc=$?
[ $rc = 2 ] && [ ! -e "$T/u.rot" ] || fail "ds-quant --rotate --format -f on a user directory: exit $rc, or rotated first"
# the same with calibration first: refused before it
if [ -f samples/data/calib.txt ]; then
    $Q -q -f --scheme w8a8 --calib samples/data/calib.txt --calib-samples 2 --calib-seqlen 32 --format ascend $M "$T/u" \
        2> "$T/err"; rc=$?
    [ $rc = 2 ] || fail "ds-quant --calib --format -f on a user directory: exit $rc, want 2"
    [ -e "$T/u.calib.dsq" ] && fail "refused calibrated export calibrated first"
    tree "$T/u" | cmp -s - "$T/u.before" || fail "ds-quant --calib --format -f changed a user directory"
fi

# ---- through a symbolic link: refused, the target untouched ----
ln -s u "$T/link"
$X -q -f $XA "$T/w8.dsq" "$T/link" 2> "$T/err"; rc=$?
[ $rc = 2 ] || fail "ds-export -f through a link: exit $rc, want 2"
grep -q "symbolic link" "$T/err" || fail "OUT a link: message was: $(cat "$T/err")"
tree "$T/u" | cmp -s - "$T/u.before" || fail "ds-export -f through a link changed its target"
[ -L "$T/link" ] || fail "ds-export -f replaced the link"
$X -q -f $XA "$T/w8.dsq" "$T/link/" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "ds-export -f through a link named with a trailing slash: exit $rc, want 2"
tree "$T/u" | cmp -s - "$T/u.before" || fail "ds-export -f through link/ changed its target"
cp -rp "$T/ref" "$T/e"
ln -s e "$T/elink"
$X -q -f $XA "$T/w8.dsq" "$T/elink" 2>/dev/null; rc=$?
[ $rc = 2 ] && [ -L "$T/elink" ] && same "$T/ref" "$T/e" || fail "ds-export -f through a link to an export: exit $rc"

# ---- an export with a user file added: refused; the export alone: replaced ----
echo "mine" > "$T/e/notes.md"
$X -q -f $XA "$T/w8.dsq" "$T/e" 2> "$T/err"; rc=$?
[ $rc = 2 ] && grep -q "notes.md" "$T/err" || fail "-f over an export holding a user file: exit $rc, $(cat "$T/err")"
[ -f "$T/e/notes.md" ] && [ -f "$T/e/SHA256SUMS" ] || fail "-f over an export holding a user file removed something"
rm "$T/e/notes.md"
mkdir "$T/e/sub"
$X -q -f $XA "$T/w8.dsq" "$T/e" 2>/dev/null; rc=$?
[ $rc = 2 ] && [ -d "$T/e/sub" ] || fail "-f over an export holding a subdirectory: exit $rc"
rmdir "$T/e/sub"
ln -s ../u/thesis.txt "$T/e/config.json.bak"
$X -q -f $XA "$T/w8.dsq" "$T/e" 2>/dev/null; rc=$?
[ $rc = 2 ] && [ -f "$T/u/thesis.txt" ] || fail "-f over an export holding a link: exit $rc"
rm "$T/e/config.json.bak"
$X -q -f --format ascend "$T/w8.dsq" "$T/e" || fail "-f over an export dsq wrote"
none "$T/e" || fail "-f over an export left a partial or old directory"
$X -q --format ascend "$T/w8.dsq" "$T/e1" || fail "unsharded export"
same "$T/e" "$T/e1" || fail "-f over an export differs from a fresh one"
mkdir "$T/empty"
$X -q -f $XA "$T/w8.dsq" "$T/empty" && same "$T/ref" "$T/empty" || fail "-f over an empty directory"

# ---- a foreign ".OUT.old" is reported before any work, never removed ----
mkdir -p "$T/.e.old/sub"
echo "kept" > "$T/.e.old/sub/x"
$X -q -f $XA "$T/w8.dsq" "$T/e" 2> "$T/err"; rc=$?
[ $rc = 2 ] && grep -q "\.e\.old" "$T/err" || fail "foreign .OUT.old: exit $rc, $(cat "$T/err")"
[ -f "$T/.e.old/sub/x" ] || fail "foreign .OUT.old was removed"
[ -e "$T/.e.partial" ] && fail "foreign .OUT.old: refused after work began"
rm -rf "$T/.e.old"

# ---- a ".OUT.partial" dsq did not make is refused untouched ----
mkdir "$T/home"
echo "secret" > "$T/home/id_ed25519"
ln -s home "$T/.p.partial"
$X -q $XA "$T/w8.dsq" "$T/p" 2> "$T/err"; rc=$?
[ $rc != 0 ] || fail "a .OUT.partial link: exit 0"
[ -f "$T/home/id_ed25519" ] || fail "a .OUT.partial link: the files of its target were removed"
[ -L "$T/.p.partial" ] || fail "a .OUT.partial link was removed"
grep -q "\.p\.partial" "$T/err" || fail "a .OUT.partial link: message was: $(cat "$T/err")"
$X -q -f $XA "$T/w8.dsq" "$T/p" 2>/dev/null
[ -f "$T/home/id_ed25519" ] && [ -L "$T/.p.partial" ] || fail "a .OUT.partial link with -f: touched"
$Q -q --scheme w8a8-dynamic --format ascend $M "$T/p" 2>/dev/null
[ -f "$T/home/id_ed25519" ] && [ -L "$T/.p.partial" ] || fail "a .OUT.partial link, ds-quant --format: touched"
rm "$T/.p.partial"
cp -rp "$T/home" "$T/.p.partial"
$X -q $XA "$T/w8.dsq" "$T/p" 2>/dev/null && fail "a .OUT.partial of user files: exit 0"
[ -f "$T/.p.partial/id_ed25519" ] || fail "a .OUT.partial of user files was emptied"
$X -q --resume $XA "$T/w8.dsq" "$T/p" 2>/dev/null && fail "--resume over a .OUT.partial of user files: exit 0"
[ -f "$T/.p.partial/id_ed25519" ] || fail "--resume emptied a .OUT.partial of user files"
rm -rf "$T/.p.partial"
echo "file" > "$T/.p.partial"
$X -q $XA "$T/w8.dsq" "$T/p" 2>/dev/null && fail "a .OUT.partial file: exit 0"
[ "$(cat "$T/.p.partial")" = file ] || fail "a .OUT.partial file was changed"
rm -f "$T/.p.partial"
[ -e "$T/p" ] && fail "a refused run wrote OUT"

# ---- a full disk keeps the committed shards for --resume ----
mkdir "$SMALL"
if mount -t tmpfs -o size=3m tmpfs "$SMALL" 2>/dev/null; then
    mounted=1
    for tool in quant export; do
        rm -rf "$SMALL/o" "$SMALL/.o.partial"
        if [ $tool = quant ]; then run() { $Q -q --scheme w8a8-dynamic $XA "$@" $M "$SMALL/o"; }
        else run() { $X -q $XA "$@" "$T/w8.dsq" "$SMALL/o"; }; fi
        run 2> "$T/err"; rc=$?
        [ $rc = 1 ] || fail "$tool: full disk: exit $rc, want 1 ($(cat "$T/err"))"
        grep -q "free some space and run again with --resume" "$T/err" || fail "$tool: full disk: message was: $(cat "$T/err")"
        ls "$SMALL/.o.partial" 2>/dev/null | grep -q 'quant_model_weights-00001-of-' ||
            fail "$tool: full disk removed the committed shards (left: $(ls -A "$SMALL" "$SMALL/.o.partial" 2>&1 | tr '\n' ' '))"
        mount -o remount,size=64m "$SMALL"
        run --resume 2> "$T/err" || fail "$tool: --resume after freeing space: $(cat "$T/err")"
        [ $tool = export ] && { same "$T/ref" "$SMALL/o" || fail "export: resumed after a full disk differs"; }
        [ $tool = quant ] && { $Q -q --scheme w8a8-dynamic $XA $M "$T/qref" && same "$T/qref" "$SMALL/o" ||
                               fail "quant: resumed after a full disk differs"; }
        none "$SMALL/o" || fail "$tool: resumed after a full disk left a partial directory"
        rm -rf "$SMALL/o"
        mount -o remount,size=3m "$SMALL"
    done
else
    echo "export_safety.sh: note: cannot mount a small tmpfs here, full-disk checks skipped"
fi

# ---- killed at every step of finish while replacing an older export ----
$X -q --format ascend "$T/w8s.dsq" "$T/older" || fail "older export"
for step in shards index side describe sums summed moved renamed removed; do
    rm -rf "$T/k" "$T/.k.partial" "$T/.k.old"
    cp -rp "$T/older" "$T/k"
    DSQ_TEST_KILL_AT=$step $X -q -f $XA "$T/w8.dsq" "$T/k" 2>/dev/null; rc=$?
    [ $rc = 137 ] || { fail "kill at $step: exit $rc, want 137 (SIGKILL)"; continue; }
    $X -q --resume $XA "$T/w8.dsq" "$T/k" 2> "$T/err" || { fail "--resume after a kill at $step: $(cat "$T/err")"; continue; }
    same "$T/ref" "$T/k" || fail "--resume after a kill at $step differs from an uninterrupted run"
    none "$T/k" || fail "--resume after a kill at $step left: $(ls -A "$T" | grep '^\.k' | tr '\n' ' ')"
    # a plain -f rerun recovers too
    rm -rf "$T/k" "$T/.k.partial" "$T/.k.old"
    cp -rp "$T/older" "$T/k"
    DSQ_TEST_KILL_AT=$step $X -q -f $XA "$T/w8.dsq" "$T/k" 2>/dev/null
    $X -q -f $XA "$T/w8.dsq" "$T/k" 2> "$T/err" || { fail "-f after a kill at $step: $(cat "$T/err")"; continue; }
    same "$T/ref" "$T/k" && none "$T/k" || fail "-f after a kill at $step: output differs or leftovers"
done
# ds-quant --format killed while SHA256SUMS is computed: --resume continues it
rm -rf "$T/k"
DSQ_TEST_KILL_AT=sums $Q -q --scheme w8a8-dynamic $XA $M "$T/k" 2>/dev/null; rc=$?
[ $rc = 137 ] || fail "ds-quant --format kill at sums: exit $rc"
$Q -q --resume --scheme w8a8-dynamic $XA $M "$T/k" 2> "$T/err" || fail "ds-quant --resume after a kill at sums: $(cat "$T/err")"
[ -d "$T/qref" ] || $Q -q --scheme w8a8-dynamic $XA $M "$T/qref"
same "$T/qref" "$T/k" && none "$T/k" || fail "ds-quant --resume after a kill at sums differs"
# --resume of a finished export is refused: nothing to resume
$X -q --resume $XA "$T/w8.dsq" "$T/k" 2>/dev/null && fail "--resume over a finished export exited 0"
same "$T/qref" "$T/k" || fail "refused --resume changed the export"

[ $fails = 0 ] && echo "export_safety.sh: all passed"
exit $fails
