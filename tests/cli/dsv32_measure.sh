#!/bin/sh
# dsv32_measure.sh - samples/tiny-dsv32/measure.sh, the script that writes the
# measured tables of samples/tiny-dsv32/README.md, in its QUICK mode into a
# copy of that README:
#   - the part between its markers is replaced, the text outside is kept;
#   - every row of the dsq table is there, every cell filled: ppl and the KLD
#     columns numbers, same top-1 a percentage, GSM "P% (correct/n)";
#   - a missing model directory, and a model that fails to load after the
#     first rows were measured, each make it exit non-zero and leave the
#     README byte for byte as it was (no partial table).
set -u
BIN=${BIN:-./bin}
S=samples/tiny-dsv32/measure.sh
for m in samples/tiny-dsv32 samples/tiny-dsv32-fp8 samples/tiny-dsv3; do
    [ -f $m/config.json ] || { echo "dsv32_measure.sh: skipped ($m absent)"; exit 0; }
done
command -v jq >/dev/null 2>&1 || { echo "dsv32_measure.sh: skipped (jq absent)"; exit 0; }
[ -x "$BIN/ds-eval" ] && [ -x "$BIN/ds-quant" ] || { echo "dsv32_measure.sh: run after make"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-cli-v32m.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# a README with stale text between the markers and text around them
{
    echo "# title"; echo; echo "prose before"
    echo "<!-- measure.sh: begin -->"; echo "| stale | table |"; echo "<!-- measure.sh: end -->"
    echo "prose after"
} > "$T/README.md"
QUICK=1 BIN=$BIN README="$T/README.md" OUT="$T/out" sh $S > "$T/log" 2>&1 || { fail "QUICK run: exit $?"; tail -5 "$T/log"; }
grep -q '^prose before$' "$T/README.md" && grep -q '^prose after$' "$T/README.md" || fail "text outside the markers lost"
grep -q 'stale' "$T/README.md" && fail "the stale table was kept"
grep -q '^- command: `QUICK=.1. .*samples/tiny-dsv32/measure.sh' "$T/README.md" || fail "no command line in the header"
sed -n '/^| model |/,/^$/p' "$T/README.md" | grep '^| ' | tail -n +2 > "$T/rows"
n=$(wc -l < "$T/rows")
[ "$n" = 13 ] || fail "$n table rows, expected 13 (tiny-dsv3, 6 models x 2 --dsa)"
bad=$(awk -F'|' '
    function num(c) { return c ~ /^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$/ }
    { for (i = 1; i <= NF; i++) { c[i] = $i; gsub(/^ +| +$/, "", c[i]) } }
    NF != 11 || c[2] == "" || c[3] == "" || c[5] == "" { print "cells: " $0; next }
    !num(c[4]) || !num(c[6]) || !num(c[7]) || !num(c[8]) { print "numbers: " $0; next }
    c[9] !~ /^[0-9]+(\.[0-9])?%$/ { print "same top-1: " $0; next }
    c[10] !~ /^[0-9]+(\.[0-9])?% \([0-9]+\/4\)$/ { print "gsm: " $0 }' "$T/rows")
[ -z "$bad" ] || fail "malformed rows:
$bad"
awk -F'|' '$3 ~ /fp8/ { f++ } $3 ~ /float/ { g++ } END { exit !(f == 6 && g == 6) }' "$T/rows" ||
    fail "expected 6 rows each of --dsa fp8 and float"

# planted failures: the README must stay as it was
cp "$T/README.md" "$T/before.md"
QUICK=1 BIN=$BIN README="$T/README.md" OUT="$T/out2" V3="$T/nowhere" sh $S > "$T/log2" 2>&1
rc=$?
[ $rc != 0 ] || fail "a missing model directory: exit 0"
cmp -s "$T/README.md" "$T/before.md" || fail "a missing model directory changed the README"

mkdir -p "$T/badfp8"
cp samples/tiny-dsv32-fp8/config.json samples/tiny-dsv32-fp8/tokenizer*.json samples/tiny-dsv32-fp8/*.index.json "$T/badfp8/"
for f in samples/tiny-dsv32-fp8/*.safetensors; do head -c 4096 "$f" > "$T/badfp8/$(basename "$f")"; done
QUICK=1 BIN=$BIN README="$T/README.md" OUT="$T/out3" FP8="$T/badfp8" sh $S > "$T/log3" 2>&1
rc=$?
[ $rc != 0 ] || fail "a truncated model: exit 0"
grep -q 'measure.sh: bf16 fp8' "$T/log3" || fail "the truncated model failed before any row was measured"
cmp -s "$T/README.md" "$T/before.md" || fail "a run that failed part way changed the README"

if [ $fails -ne 0 ]; then echo "dsv32_measure.sh: $fails failed"; exit 1; fi
echo "dsv32_measure.sh: ok"
