#!/bin/sh
# run_all.sh - runs the unit-test programs (cmocka), the fuzz-corpus replays,
# the CLI test scripts and the layering check, and says what happened:
#
#   - one line per program or script as it ends: ok / FAIL / skip, its cmocka
#     case counts, its wall time;
#   - the full output of every failure (V=1 or VERBOSE=1: of everything);
#   - every skip with its reason (a cmocka case that called skip(), a script
#     that printed "NAME: skipped ..." or skipped part of its checks because a
#     tool or data set such as .npm-data or ../shared is absent);
#   - a closing count of cases, scripts and replays, and as the very last
#     line, alone (CI reads it):  N passed, N failed[, N skipped]
#
# usage: sh tests/run_all.sh [--cli "SCRIPT ..."] [--note TEXT]... UNIT ... [-- FUZZ_REPLAY ...]
#   --cli LIST   CLI scripts to run (default: every tests/cli/*.sh)
#   --note TEXT  a line printed before the count, saying what this run leaves out
# JOBS=N runs N programs or scripts at a time (default 2; 1 with V=1, so the
# outputs do not interleave).
# The counts: every cmocka case, CLI script, fuzz replay and the layering
# check is one unit. A program that fails without a cmocka summary (a crash)
# counts as one failure. A script that skipped part of its checks passes, and
# each skipped part counts as one skip.
BUILD=${BUILD:-build}
BIN=${BIN:-./bin}
export BUILD BIN
verbose=0
case "${V:-}${VERBOSE:-}" in ''|0|00) ;; *) verbose=1 ;; esac
export verbose

now() { date +%s.%N; }
# sum of the numbers cmocka prints in "[  TAG  ] N test(s)" summary lines
count() { sed -n "s/^\[ *$1 *\] \([0-9][0-9]*\) test(s).*/\1/p" "$2" | awk '{ s += $1 } END { print s + 0 }'; }
show() { sed 's/^/    | /' "$1"; }
SKIP_RE='^[A-Za-z0-9_.-]+: skip(ped)?([: (]|$)'

# classify KIND NAME LOG RC: sets state (ok / FAIL / skip), what (the
# counts), p f s (passed, failed, skipped units) and writes the skip reasons
# to LOG.skips
classify() {
  kind=$1; cname=$2; clog=$3; crc=$4
  : > "$clog.skips"
  case $kind in
  unit)
    p=$(count PASSED "$clog"); f=$(count FAILED "$clog"); s=$(count SKIPPED "$clog")
    if [ "$crc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crashed or exited before its summary
    if [ "$s" -gt 0 ]; then
      names=$(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][A-Za-z0-9_]*\)$/\1/p' "$clog" | sort -u | tr '\n' ' ')
      why=$(grep -i '^skip' "$clog" | sort -u | tr '\n' ';' | sed 's/;$//; s/;/; /g')
      echo "$cname: ${names% }${why:+ ($why)}" > "$clog.skips"
    fi
    what="$p cases"; [ "$f" -gt 0 ] && what="$p ok, $f failed"; [ "$s" -gt 0 ] && what="$what, $s skipped"
    state=ok; [ "$crc" -ne 0 ] || [ "$f" -gt 0 ] && state=FAIL
    [ "$crc" -ne 0 ] && what="$what, exit $crc" ;;
  cli)
    p=0; f=0; s=0; what="CLI script"
    if [ "$crc" -ne 0 ]; then
      f=1; state=FAIL; what="CLI script, exit $crc"
    elif grep -q -E "$SKIP_RE" "$clog"; then
      s=1; state=skip
      echo "$cname: $(grep -E "$SKIP_RE" "$clog" | head -1 | sed 's/^[^:]*: //')" > "$clog.skips"
    else
      p=1; state=ok
      grep -i 'skipped' "$clog" | sort -u | sed "s/^$cname: //; s/^/$cname: in part: /" > "$clog.skips"
      s=$(wc -l < "$clog.skips")
      [ "$s" -gt 0 ] && what="CLI script, $s part(s) skipped"
    fi ;;
  *)
    s=0; what=$kind
    if [ "$crc" -eq 0 ]; then p=1; f=0; state=ok; else p=0; f=1; state=FAIL; what="$kind, exit $crc"; fi ;;
  esac
}

# ---- one program or script (run by xargs, JOBS at a time) ---------------
if [ "${1:-}" = "--one" ]; then
  T=$2; kind=$3; t=$4
  name=$(basename "$t"); log="$T/$kind-$name.log"
  t0=$(now)
  case $kind in
    unit) "$t" ;;
    "fuzz replay") "$t" "tests/fuzz/corpus/${name#fuzz_}" ;;
    cli) sh "$t" ;;
    layering) sh tests/check_deps.sh ;;
  esac > "$log" 2>&1
  rc=$?
  took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }')
  echo "$rc $took" > "$log.res"
  classify "$kind" "$name" "$log" "$rc"
  printf '  %-5s %-26s %-30s %7s\n' "$state" "$name" "$what" "$took"
  [ $verbose = 1 ] && show "$log"
  exit 0
fi

cli=""; cli_set=0; notes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; cli_set=1; shift 2 ;;
    --note) notes="$notes
$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $cli_set = 1 ] || cli=$(ls tests/cli/*.sh 2>/dev/null)
jobs=${JOBS:-2}; [ $verbose = 1 ] && jobs=${JOBS:-1}

T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-run-all-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM

# the work list, one "KIND|PATH" per line, in report order
kind=unit
for t in "$@"; do
  if [ "$t" = "--" ]; then kind="fuzz replay"; continue; fi
  echo "$kind|$t"
done > "$T/list"
for s in $cli; do [ -f "$s" ] && echo "cli|$s"; done >> "$T/list"
echo "layering|check-deps" >> "$T/list"

tr '|' '\n' < "$T/list" | tr '\n' '\0' | xargs -0 -n 2 -P "$jobs" sh "$0" --one "$T"

# ---- closing count --------------------------------------------------------
passed=0; failed=0; skipped=0; n_prog=0; n_cases=0; n_scripts=0; n_replays=0
failed_names=""; : > "$T/skips"
while IFS='|' read -r kind t; do
  name=$(basename "$t"); log="$T/$kind-$name.log"
  if [ -f "$log.res" ]; then read -r rc took < "$log.res"; else rc=127; echo "not run" > "$log"; fi
  classify "$kind" "$name" "$log" "$rc"
  passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+s))
  cat "$log.skips" >> "$T/skips"
  case $kind in
    unit) n_prog=$((n_prog+1)); n_cases=$((n_cases+p+f+s)) ;;
    cli) n_scripts=$((n_scripts+1)) ;;
    "fuzz replay") n_replays=$((n_replays+1)) ;;
  esac
  if [ $state = FAIL ]; then
    failed_names="$failed_names $name"
    echo; echo "---- $name ($what): its output"; show "$log"
  fi
done < "$T/list"

echo
echo "$n_cases cmocka cases in $n_prog programs, $n_replays fuzz replays, $n_scripts CLI scripts, the layering check"
if [ -s "$T/skips" ]; then
  echo "skipped:"
  sed 's/^/  /' "$T/skips"
fi
[ -n "$notes" ] && printf '%s\n' "$notes" | sed '/^$/d; s/^/not run here: /'
[ -n "$failed_names" ] && echo "failed:$failed_names"
if [ $skipped -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ $failed = 0 ]
