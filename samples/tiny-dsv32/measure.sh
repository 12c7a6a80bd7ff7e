#!/bin/sh
# measure.sh - the "Measured by dsq" tables of samples/tiny-dsv32/README.md:
# every model of the table (the BF16 source, the FP8 source tiny-dsv32-fp8,
# ds-quant's w8a8-dynamic, --recipe deepseek-w8a8 and --recipe deepseek-w4a8
# made from the BF16 source, the source with index_topk raised past any
# context so that it attends densely, and tiny-dsv3, the same weights without
# the indexer), each with --dsa fp8 and --dsa float:
#   ppl        ds-eval, --ctx 512 windows of samples/data/heldout.txt
#   KLD        ds-eval kld against the BF16 source's saved log-probs with the
#              same --dsa (the BF16 rows: against the other --dsa)
#   GSM        ds-eval gsm8k, samples/data/gsm_test.jsonl, 5-shot
#              (samples/data/gsm_fewshot.jsonl), greedy, strict match
# and rewrites the part of README (default samples/tiny-dsv32/README.md)
# between the "measure.sh: begin" and "measure.sh: end" markers, with a
# header naming the machine, date, commit and command (bench/doc_page.sh).
# The README is written only when every cell was measured: a failed run
# leaves it as it was and exits non-zero.
#
#   nice sh samples/tiny-dsv32/measure.sh
#   QUICK=1 sh samples/tiny-dsv32/measure.sh     # smoke run: the first 2048
#                                                # tokens, 4 GSM problems,
#                                                # 4 x 128 calibration tokens
# GSM_ROWS=REGEX runs GSM only on the rows whose label matches (grep -E);
# the others show "not run" (the full run leaves none out). LIMIT sets the
# GSM problems (default: all 300). OUT: work files (default
# bench/out/tiny-dsv32, gitignored). SRC, FP8 and V3 name the three sample
# directories (a test points one at a missing directory); BIN the
# directory of ds-eval and ds-quant (default bin).
set -eu
cd "$(dirname "$0")/../.."
. bench/doc_page.sh
doc_init samples/tiny-dsv32/measure.sh QUICK LIMIT GSM_ROWS README OUT SRC FP8 V3 -- "$@"
README=${README:-samples/tiny-dsv32/README.md}
OUT=${OUT:-bench/out/tiny-dsv32}
SRC=${SRC:-samples/tiny-dsv32}
FP8=${FP8:-samples/tiny-dsv32-fp8}
V3=${V3:-samples/tiny-dsv3}
D=samples/data
E=${BIN:-bin}/ds-eval
Q=${BIN:-bin}/ds-quant
command -v jq >/dev/null || { echo "measure.sh: needs jq" >&2; exit 2; }
[ -x "$E" ] && [ -x "$Q" ] || make -s all
for m in "$SRC" "$FP8" "$V3"; do
    [ -f "$m/config.json" ] || { echo "measure.sh: $m: no config.json" >&2; exit 1; }
done
grep -q '^<!-- measure.sh: begin' "$README" && grep -q '^<!-- measure.sh: end' "$README" ||
    { echo "measure.sh: $README has no measure.sh begin/end markers" >&2; exit 1; }
mkdir -p "$OUT"

if [ "${QUICK:-0}" = 1 ]; then
    LIMIT=${LIMIT:-4}
    PPLX="--limit-tokens 2048"
    CALIB="--calib $D/calib.txt --calib-samples 4 --calib-seqlen 128"
    DOC_NOTE="reduced run (QUICK=1): the first 2048 tokens of heldout.txt, $LIMIT GSM problems, calibration on 4 x 128 tokens; the full run scores all of heldout.txt and 300 problems"
else
    PPLX=""
    CALIB="--calib $D/calib.txt --calib-samples 32"
fi
GL=${LIMIT:+--limit $LIMIT}
[ -z "${GSM_ROWS:-}" ] || DOC_NOTE="${DOC_NOTE:+$DOC_NOTE; }GSM only on the rows matching $GSM_ROWS"

# the models: TAG<TAB>PATH<TAB>LABEL; dsa "-" for a model without an indexer
DENSE=$OUT/dense
rm -rf "$DENSE"; mkdir -p "$DENSE"
for f in "$SRC"/*; do
    case $f in */config.json|*/README.md|*/measure.sh|*/measured.json|*/train_log.txt) ;;
               *) ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$DENSE/" ;; esac
done
jq '.index_topk = 100000' "$SRC/config.json" > "$DENSE/config.json"
echo "measure.sh: quantizing" >&2
$Q -q -f --scheme w8a8-dynamic "$SRC" "$OUT/w8a8dyn.dsq"
# shellcheck disable=SC2086
$Q -q -f --recipe deepseek-w8a8 $CALIB "$SRC" "$OUT/dsw8a8.dsq"
$Q -q -f --recipe deepseek-w4a8 "$SRC" "$OUT/dsw4a8.dsq"
CALS=$(echo "$CALIB" | sed "s|$D/||")

ROWS=$OUT/rows.tsv
{
    printf 'v3\t%s\t%s\n' "$V3" "tiny-dsv3 (V3, no indexer: dense)"
    printf 'dense\t%s\t%s\n' "$DENSE" "tiny-dsv32, index_topk raised to 100000 (dense)"
    printf 'bf16\t%s\t%s\n' "$SRC" "tiny-dsv32 BF16"
    printf 'fp8\t%s\t%s\n' "$FP8" "tiny-dsv32-fp8"
    printf 'w8a8dyn\t%s\t%s\n' "$OUT/w8a8dyn.dsq" "\`--scheme w8a8-dynamic\`"
    printf 'dsw8a8\t%s\t%s\n' "$OUT/dsw8a8.dsq" "\`--recipe deepseek-w8a8 $CALS\`"
    printf 'dsw4a8\t%s\t%s\n' "$OUT/dsw4a8.dsq" "\`--recipe deepseek-w4a8\`"
} > "$ROWS"

r3() { jq -r "$1" "$2" | awk '{ printf "%.3f\n", $1 }'; }
sig() { jq -r "$1" "$2" | awk '{ printf "%.2g\n", $1 }'; }

# the bases: the BF16 source's log-probs, one file per --dsa
for d in fp8 float; do
    echo "measure.sh: ppl BF16 --dsa $d" >&2
    # shellcheck disable=SC2086
    $E ppl -q -f --json -m "$SRC" --dsa $d --ctx 512 --data $D/heldout.txt $PPLX \
        --save-logits "$OUT/base_$d.logp" > "$OUT/base_$d.json"
done
windows=$(jq -r .windows "$OUT/base_fp8.json")
scored=$(jq -r .tokens_scored "$OUT/base_fp8.json")

TAB=$OUT/table.md
: > "$TAB"
while IFS="$(printf '\t')" read -r tag path label; do
    for d in fp8 float; do
        dsa="--dsa $d"; dcell=$d
        if [ "$tag" = v3 ]; then
            [ $d = fp8 ] || continue
            dsa=""; dcell="(none)"
        fi
        base=$d; against="BF16, $d"
        if [ "$tag" = bf16 ]; then
            if [ $d = fp8 ]; then base=float; else base=fp8; fi
            against="BF16, $base"
        elif [ "$tag" = v3 ]; then
            against="BF16, fp8"
        fi
        echo "measure.sh: $tag $d: kld" >&2
        # shellcheck disable=SC2086
        $E kld -q --json -m "$path" $dsa --base "$OUT/base_$base.logp" > "$OUT/$tag.$d.kld.json"
        j=$OUT/$tag.$d.kld.json
        gcell="not run"
        if [ -z "${GSM_ROWS:-}" ] || printf '%s %s\n' "$label" "$d" | grep -Eq "$GSM_ROWS"; then
            echo "measure.sh: $tag $d: gsm8k" >&2
            # shellcheck disable=SC2086
            $E gsm8k -q -f --json -m "$path" $dsa --data $D/gsm_test.jsonl --train $D/gsm_fewshot.jsonl $GL \
                --out "$OUT/$tag.$d.gsm.jsonl" > "$OUT/$tag.$d.gsm.json"
            g=$OUT/$tag.$d.gsm.json
            gcell=$(jq -r '"\(.["strict-match"].exact_match * 100) \(.["strict-match"].correct) \(.n)"' "$g" |
                awk '{ printf "%.1f%% (%d/%d)\n", $1, $2, $3 }')
        fi
        printf '| %s | %s | %s | %s | %s | %s | %s | %s%% | %s |\n' "$label" "$dcell" \
            "$(r3 .ppl "$j")" "$against" "$(sig .kld_mean "$j")" "$(sig .kld_median "$j")" \
            "$(sig .kld_p99 "$j")" "$(jq -r '.same_top1 * 100' "$j" | awk '{ printf "%.1f\n", $1 }')" "$gcell" >> "$TAB"
    done
done < "$ROWS"

# every cell: a number (a KLD may print as 1e-05), a percentage or "n/c (a/b)"
bad=$(awk -F'|' 'NF != 11 { print; next }
    { for (i = 2; i <= 10; i++) { c = $i; gsub(/^ +| +$/, "", c); if (c == "") { print; next } } }' "$TAB")
[ -z "$bad" ] || { echo "measure.sh: incomplete rows:" >&2; echo "$bad" >&2; exit 1; }

pse=$(jq -r .ppl_stderr "$OUT/base_fp8.json" | awk '{ printf "%.3f\n", $1 }')
M=$SRC/measured.json
if [ -f "$M" ]; then
    say '%s\n\n' "The reference (\`samples/dsv32_ref.py\`, run by \`samples/train_dsv32.py\` after training) on \`samples/data/heldout.txt\` in $(jq -r .heldout_windows "$M") windows of $(jq -r .seq "$M") tokens, every position scored (\`measured.json\`):"
    say '%s\n' "| DSA | ppl, dense attention | ppl, sparse (top $(jq -r .index_topk "$SRC/config.json")) | indexer recall of the dense top keys |"
    say '%s\n' "|---|---|---|---|"
    say '%s\n' "$(jq -r '.rows[] | "\(.dsa) \(.ppl_dense) \(.ppl_sparse) \(.recall_top_k)"' "$M" |
        awk '{ printf "| %s | %.3f | %.3f | %.3f |\n", $1, $2, $3, $4 }')"
    say '\n%s\n\n' "Recall: over every layer and every row that sees more keys than index_topk, the share of the index_topk keys with the most dense attention mass (summed over heads) that the indexer selects."
fi
say '%s\n\n' "dsq (\`ds-eval\`, \`--ctx 512\`: $windows windows of \`heldout.txt\`, second halves scored, $scored positions; the BF16 source's ppl with \`--dsa fp8\` has a standard error of $pse). KLD: against the BF16 source's log-probs with the same \`--dsa\` (the BF16 rows: against the other \`--dsa\`; tiny-dsv3: against the sparse fp8 source). GSM: \`ds-eval gsm8k\` on ${LIMIT:-all 300} problems of \`samples/data/gsm_test.jsonl\`, 5-shot, greedy, strict match, prompts of several hundred tokens, so most of the answer is generated with sparse attention. The quantized models are made from the BF16 source."
say '%s\n' "| model | \`--dsa\` | ppl | KLD against | mean KLD | median KLD | p99 KLD | same top-1 | GSM 5-shot strict |"
say '%s\n' "|---|---|---|---|---|---|---|---|---|"
say '%s\n' "$(cat "$TAB")"
# what the table says, computed from it
pd=$(jq -r .ppl "$OUT/dense.fp8.kld.json"); ps=$(jq -r .ppl "$OUT/base_fp8.json")
gsm() { [ -f "$OUT/$1.gsm.json" ] && jq -r '.["strict-match"].exact_match * 100' "$OUT/$1.gsm.json"; }
say '\n%s' "- Sparse against dense attention (the BF16 source against its index_topk-raised copy, \`--dsa fp8\`): ppl $(awk -v a="$ps" -v b="$pd" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }') at these 512-token windows"
if [ -f "$OUT/dense.fp8.gsm.json" ] && [ -f "$OUT/bf16.fp8.gsm.json" ] && [ -f "$OUT/dense.float.gsm.json" ] && [ -f "$OUT/bf16.float.gsm.json" ]; then
    say '%s' "; GSM $(awk -v a="$(gsm bf16.fp8)" -v b="$(gsm dense.fp8)" 'BEGIN { printf "%+.1f", a - b }') points with \`--dsa fp8\`, $(awk -v a="$(gsm bf16.float)" -v b="$(gsm dense.float)" 'BEGIN { printf "%+.1f", a - b }') with \`--dsa float\`"
fi
say '%s\n' "."
# the FP8 source and the quantized models against the BF16 source with the same --dsa
dp=""; dg=""
for tag in fp8 w8a8dyn dsw8a8 dsw4a8; do
    for d in fp8 float; do
        dp="$dp $(jq -r .ppl "$OUT/$tag.$d.kld.json") $(jq -r .ppl "$OUT/base_$d.json")"
        [ -f "$OUT/$tag.$d.gsm.json" ] && [ -f "$OUT/bf16.$d.gsm.json" ] && dg="$dg $(gsm $tag.$d) $(gsm bf16.$d)"
    done
done
say '%s' "- The FP8 source and the quantized models against the BF16 source with the same \`--dsa\`: ppl within $(echo "$dp" | awk '{ for (i = 1; i < NF; i += 2) { d = $i - $(i + 1); if (d < 0) d = -d; if (d > m) m = d } printf "%.3f", m }') (one standard error: $pse)"
if [ -n "$dg" ]; then
    se=$(jq -r '.["strict-match"].stderr * 100' "$OUT/bf16.fp8.gsm.json")
    say '%s' ", GSM within $(echo "$dg" | awk '{ for (i = 1; i < NF; i += 2) { d = $i - $(i + 1); if (d < 0) d = -d; if (d > m) m = d } printf "%.1f", m }') points (one standard error of the source's score: $(printf '%.1f' "$se") points)"
fi
say '%s\n' "."
say '%s\n' "- Median KLD: $(sig .kld_median "$OUT/bf16.fp8.kld.json") between \`--dsa fp8\` and \`float\` on the BF16 weights; from $(jq -r .kld_median "$OUT"/fp8.*.kld.json "$OUT"/w8a8dyn.*.kld.json "$OUT"/dsw8a8.*.kld.json "$OUT"/dsw4a8.*.kld.json | sort -g | sed -n '1p;$p' | awk '{ printf "%s%.2g", (NR > 1 ? " to " : ""), $1 }') for the FP8 source and the quantized models."
PAGE=$OUT/section.md
doc_finish "$PAGE" "Measured by dsq" "Each number below comes from the run this header names."
# README: the lines up to the begin marker, the page without its title, the end marker on
awk -v page="$PAGE" '
    /^<!-- measure.sh: begin/ { print; n = 0
        while ((getline l < page) > 0) if (++n > 2) print l
        skip = 1; next }
    /^<!-- measure.sh: end/ { skip = 0 }
    !skip' "$README" > "$README.tmp"
mv "$README.tmp" "$README"
echo "measure.sh: wrote $README"
