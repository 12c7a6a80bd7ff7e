#!/bin/sh
# Every command README.md and docs/*.md show in a ```sh block is run here, as
# written, against the bundled sample: a documented command that does not
# work is a bug. (Examples that are not meant to run go in ```console or
# ```text blocks, which are not run.) Each block runs as one shell script, in
# a fresh directory, with bin/ on PATH and HOME in the temp dir; the
# placeholder names the documents use stand for sample files there:
#   in.safetensors  a shard of samples/tiny-dsv3     model.dsq  tiny-dsv3 as w8a8-dynamic
#   heldout.txt     samples/data/heldout.txt         IN OUT     samples/tiny-dsv3 and a fresh OUT
#   test.jsonl      first 8 of gsm_test.jsonl        train.jsonl  gsm_fewshot.jsonl
#   calib.txt       first 25 KB of samples/data/calib.txt   calib.jsonl  its paragraphs as {"text": ...}
#   completions.jsonl  a few answers to score
#   stories260K.bin, tinystories_val.txt: from the data directory DSQ_DATA
#                   (stories260K/, text/); lines using them are skipped without it
# Exempt, and said so when the test runs: ds-serve, curl and --endpoint lines
# (a server that runs until stopped, or a remote cluster: tests/cli/serve.sh
# runs ds-serve and ds-eval --endpoint on loopback); lines over /models/... (a real
# DeepSeek checkpoint) and lines reading what those write (v3.dsq, v3/);
# `sh .ci/deps.sh && make -j2 demo|test` (installs system packages as root;
# `make test` is this suite, `make demo` is run by hand).
set -u
R=$(pwd)
[ -f README.md ] && [ -d docs ] && [ -x "${BIN:-bin}/ds-quant" ] || { echo "readme.sh: run from the repository root after make"; exit 1; }
if [ ! -f samples/tiny-dsv3/config.json ]; then echo "readme.sh: skipped (samples/tiny-dsv3 absent)"; exit 0; fi
command -v jq >/dev/null 2>&1 || { echo "readme.sh: FAIL: jq missing (sh .ci/deps.sh)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-readme-XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0; ran=0
F=$T/fix
mkdir -p "$F" "$T/home"
ln -s "$R/samples" "$F/samples"; ln -s "$R/docs" "$F/docs"
ln -s "$R/samples/tiny-dsv3/model-00001-of-00002.safetensors" "$F/in.safetensors"
ln -s "$R/samples/data/heldout.txt" "$F/heldout.txt"
# a quarter of the bundled text (~8,000 tokens, over the 4,096 floor): keeps the test quick
head -c 25000 samples/data/calib.txt > "$F/calib.txt"
ln -s "$R/samples/data/gsm_fewshot.jsonl" "$F/train.jsonl"
head -8 samples/data/gsm_test.jsonl > "$F/test.jsonl"
jq -R -s -c 'split("\n\n")[] | select(test("\\S")) | {text: .}' "$F/calib.txt" > "$F/calib.jsonl"
printf '{"doc_id": 0, "completion": "#### 1"}\n{"doc_id": 1, "completion": "The answer is 2."}\n' > "$F/completions.jsonl"
"${BIN:-bin}"/ds-quant -q --scheme w8a8-dynamic samples/tiny-dsv3 "$F/model.dsq" || { echo "readme.sh: FAIL: fixture model.dsq"; exit 1; }
SH=${DSQ_DATA:-}
case $SH in ""|/*) ;; *) SH=$R/$SH ;; esac
if [ -n "$SH" ]; then
  [ -f "$SH/stories260K/stories260K.bin" ] && ln -s "$SH/stories260K/stories260K.bin" "$F/" && ln -s "$SH/stories260K/tok512.bin" "$F/"
  [ -f "$SH/text/tinystories_val.txt" ] && ln -s "$SH/text/tinystories_val.txt" "$F/"
fi

# the blocks, one file each: lines with a block number and the document
# (a line ending in a backslash continues on the next one: joined first)
awk 'FNR == 1 { inb = 0; acc = "" }
     /^```sh/ { b++; inb = 1; next } /^```/ { inb = 0; next }
     inb { if (sub(/\\$/, "")) { acc = acc $0; next } print b "\t" FILENAME "\t" acc $0; acc = "" }' README.md docs/*.md > "$T/lines"
exempt_out=" "
nb=$(cut -f1 "$T/lines" | sort -un)
for b in $nb; do
  d=$T/b$b; mkdir "$d"
  for f in "$F"/* ; do ln -s "$f" "$d/"; done
  s=$d/run.sh
  doc=$(awk -F '\t' -v b="$b" '$1 == b { print $2; exit }' "$T/lines")
  echo 'readme_fail() { echo "readme.sh: FAIL: '"$doc"' command failed (exit $1): $2"; exit 1; }' > "$s"
  n=0
  while IFS="$(printf '\t')" read -r blk _doc line; do
    [ "$blk" = "$b" ] || continue
    cmd=$(printf '%s\n' "$line" | sed 's/[[:space:]]*#.*$//')
    [ -n "$cmd" ] || continue
    n=$((n+1))
    why=""
    case $cmd in
      *".ci/deps.sh"*) why="installs system packages (CI runs it); make test is this suite, make demo is run by hand" ;;
      ds-serve*|*" ds-serve "*|*--endpoint*|curl*|export*KEY=...*)
                  why="a server (ds-serve runs until stopped) or a remote endpoint: tests/cli/serve.sh runs ds-serve and --endpoint on loopback" ;;
      */models/*) why="needs a real checkpoint under /models"
                  out=${cmd##* }; exempt_out="$exempt_out$out " ;;
      *stories260K.bin*|*tinystories_val.txt*) [ -e "$F/stories260K.bin" ] && [ -e "$F/tinystories_val.txt" ] || why="DSQ_DATA does not hold stories260K/ and text/" ;;
    esac
    [ -n "$why" ] || for w in $cmd; do case "$exempt_out" in *" $w "*) why="reads $w, written by a /models line" ;; esac; done
    if [ -n "$why" ]; then echo "readme.sh: exempt: $cmd  ($why)"; continue; fi
    # placeholders: IN OUT -> the sample and a fresh output; make runs in the repository
    cmd=$(printf '%s\n' "$cmd" | sed "s| IN OUT\$| samples/tiny-dsv3 out$n.dsq|; s|^make |make -s -C $R |")
    q=$(printf '%s' "$cmd" | sed "s/'/'\\\\''/g")
    printf '%s || readme_fail $? '"'"'%s'"'"'\n' "$cmd" "$q" >> "$s"
    ran=$((ran+1))
  done < "$T/lines"
  t0=$(date +%s); if ! (cd "$d" && HOME=$T/home PATH="$R/${BIN:-bin}:$PATH" sh "$s" > "$d/out" 2> "$d/err"); then
    fails=$((fails+1)); cat "$d/out" | grep "FAIL" ; tail -5 "$d/err" | sed 's/^/  | /'
  fi; [ -n "${READMESH_TIMES:-}" ] && echo "block $b: $(( $(date +%s) - t0 )) s"
done
# what the first calibration command must say (the data is short of 128 x 512)
grep -q "using 65 x 512 = 33280 tokens instead of the 128 x 512" "$T"/b*/err || { echo "readme.sh: FAIL: no short-data warning"; fails=$((fails+1)); }
[ $ran -ge 10 ] || { echo "readme.sh: FAIL: only $ran documented commands found"; fails=$((fails+1)); }
# every document with sh blocks took part (a broken fence would drop a whole page)
for f in $(grep -l '^```sh' README.md docs/*.md); do
  cut -f2 "$T/lines" | grep -qx "$f" || { echo "readme.sh: FAIL: no commands read from $f"; fails=$((fails+1)); }
done
if [ $fails -ne 0 ]; then echo "readme.sh: $fails block(s) failed"; exit 1; fi
echo "readme.sh: ok ($ran documented commands run from $(cut -f2 "$T/lines" | sort -u | wc -l | tr -d ' ') documents)"
