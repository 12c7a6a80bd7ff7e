#!/bin/sh
# reliability.sh - output safety at the CLI: outputs that are devices, FIFOs or
# inputs are never replaced; output preconditions are checked before
# calibration; --resume over a finished or differently laid-out run is
# refused. Uses the bundled samples/tiny-llama (tracked in git).
set -u
BIN=${BIN:-./bin}
Q=$BIN/ds-quant
EVAL=$BIN/ds-eval
PY=${PYTHON:-/usr/bin/python3}
S=samples/tiny-llama
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-rel-XXXXXX")
reader=
trap '[ -n "$reader" ] && kill $reader 2>/dev/null; rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

if [ ! -x $Q ] || [ ! -x $EVAL ]; then echo "reliability.sh: $Q / $EVAL not built"; exit 1; fi
if [ ! -f $S/config.json ]; then echo "reliability.sh: skipped ($S absent)"; exit 0; fi
cp -r $S $T/in
shard=$T/in/model-00001-of-00002.safetensors
sum0=$(sha256sum $shard | cut -d' ' -f1)

# ---- the output is an input (compare device + inode, not names) ----
$Q -q -f --scheme w8a8-dynamic $T/in $shard 2> $T/err && fail "quant -f OUT=shard exited 0"
grep -q "output is an input" $T/err || fail "quant -f OUT=shard: message was: $(cat $T/err)"
ln $shard $T/hard.dsq
$Q -q --scheme w8a8-dynamic $T/in $T/hard.dsq 2> $T/err && fail "quant OUT=hard link of a shard exited 0"
grep -q "output is an input" $T/err || fail "quant OUT=hard link: message was: $(cat $T/err)"
ln -s in/config.json $T/sym.dsq
$Q -q -f --scheme w8a8-dynamic $T/in/model.safetensors.index.json $T/sym.dsq 2> $T/err \
    && fail "quant OUT=symlink to config.json exited 0"
grep -q "output is an input" $T/err || fail "quant OUT=symlink: message was: $(cat $T/err)"
[ "$(sha256sum $shard | cut -d' ' -f1)" = "$sum0" ] || fail "a refused run changed the source shard"

# ---- a FIFO as ds-quant OUT is refused, never replaced ----
mkfifo $T/fifo
$Q -q -f --scheme w8a8-dynamic $T/in $T/fifo 2> $T/err && fail "quant -f OUT=fifo exited 0"
[ -p $T/fifo ] || fail "quant -f replaced a FIFO with a regular file"
grep -q "not a regular file" $T/err || fail "quant OUT=fifo: message was: $(cat $T/err)"

# ---- ds-eval --save-logits / --out into a FIFO: written in place ----
$Q -q --scheme w8a8-dynamic $T/in $T/m.dsq || fail "quant sample"
# (the reader gives up after 60 s, so a failing ds-eval cannot hang the test)
timeout 60 cat $T/fifo > $T/fifo.out & reader=$!
if ! $EVAL ppl -q -T 1 -m $T/m.dsq --data samples/data/heldout.txt --ctx 64 --limit-tokens 256 \
    --save-logits $T/fifo -f > /dev/null 2> $T/err; then
    fail "eval --save-logits FIFO: $(cat $T/err)"
    kill $reader 2>/dev/null
fi
wait $reader; reader=
[ -p $T/fifo ] || fail "eval --save-logits -f replaced a FIFO"
[ -s $T/fifo.out ] || fail "eval --save-logits FIFO: nothing arrived through the pipe"

# ---- output preconditions before calibration ----
: > $T/exists.dsq
$Q -q --scheme w8a8 --calib samples/data/calib.txt --calib-samples 4 --calib-seqlen 64 \
    $T/in $T/exists.dsq 2> $T/err && fail "calib into an existing output exited 0"
grep -q "output exists" $T/err || fail "calib into existing output: message was: $(cat $T/err)"
[ -e $T/exists.dsq.calib.dsq ] && fail "calib into an existing output left OUT.calib.dsq"
# --resume after a finished run: nothing to resume, said before calibrating
$Q -q --resume --scheme w8a8 --calib samples/data/calib.txt --calib-samples 4 --calib-seqlen 64 \
    $T/in $T/m.dsq 2> $T/err && fail "--resume over a finished run exited 0"
grep -q "nothing to resume" $T/err || fail "--resume finished: message was: $(cat $T/err)"
[ -e $T/m.dsq.calib.dsq ] && fail "--resume over a finished run left OUT.calib.dsq"

# ---- --resume --shard-size over an interrupted single-file run ----
: > $T/.part.dsq.partial
$Q -q --resume --scheme w8a8-dynamic --shard-size 1M $T/in $T/part.dsq 2> $T/err \
    && fail "--resume --shard-size over a single-file partial exited 0"
grep -q "single file" $T/err || fail "--resume --shard-size: message was: $(cat $T/err)"
[ -e $T/.part.dsq.partial ] || fail "--resume --shard-size removed the single-file partial"

# ---- payloads stored raw are hash-checked when the model loads ----
$Q -q --zstd-level 0 --scheme w8a8-dynamic $T/in $T/raw.dsq || fail "quant --zstd-level 0"
$PY - $T/raw.dsq <<'PYEOF'
import os, sys
p = sys.argv[1]
n = os.path.getsize(p)
with open(p, "r+b") as f:          # the middle of the file is payload bytes
    f.seek(n // 2); b = f.read(1); f.seek(n // 2); f.write(bytes([b[0] ^ 0x20]))
PYEOF
$EVAL ppl -q -T 1 -m $T/raw.dsq --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 > /dev/null 2> $T/err \
    && fail "ds-eval on a flipped raw payload exited 0"
grep -qi "sha-256\|checksum" $T/err || fail "flipped raw payload: message was: $(cat $T/err)"
$EVAL ppl -q -T 1 --no-verify -m $T/raw.dsq --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 \
    > /dev/null 2> $T/err || fail "--no-verify still refused the model: $(cat $T/err)"

# ---- a write error on stdout is an error ----
if [ -w /dev/full ]; then
    $Q --help > /dev/full 2> $T/err && fail "ds-quant --help > /dev/full exited 0"
    grep -q "standard output" $T/err || fail "stdout error: message was: $(cat $T/err)"
    $Q --json -f --scheme w8a8-dynamic $T/in $T/m.dsq > /dev/full 2> $T/err && fail "ds-quant --json > /dev/full exited 0"
    $EVAL ppl --json -T 1 -m $T/m.dsq --data samples/data/heldout.txt --ctx 64 --limit-tokens 128 > /dev/full 2> $T/err \
        && fail "ds-eval --json > /dev/full exited 0"
fi

# ---- --ctx beyond max_position_embeddings (2048 in the sample) is refused ----
$EVAL ppl -q -T 1 -m $T/m.dsq --data samples/data/heldout.txt --ctx 4096 > /dev/null 2> $T/err \
    && fail "ds-eval --ctx 4096 on a 2048-position model exited 0"
grep -q "max_position_embeddings" $T/err || fail "--ctx too long: message was: $(cat $T/err)"

# ---- ENOSPC keeps the partial file and journal for --resume ----
# A 2 MiB tmpfs in a private mount namespace (skipped where mounting is not
# allowed); the zstd-0 output is about 3 MB, so the disk fills mid-run.
mkdir $T/small
cp -rp $T/in $T/in2
# flip.py FILE...: XOR one byte every 4 KiB of each safetensors data section,
# then restore the size (unchanged) and the mtime
cat > $T/flip.py <<'PYEOF'
import os, struct, sys
for p in sys.argv[1:]:
    st = os.stat(p)
    with open(p, "r+b") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        for off in range(8 + hl, st.st_size, 4096):
            f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
PYEOF
if unshare -m sh -c "mount -t tmpfs -o size=2m tmpfs $T/small" 2>/dev/null; then
    unshare -m sh -c "
        mount -t tmpfs -o size=2m tmpfs $T/small || exit 9
        $Q -q --zstd-level 0 --checkpoint-interval 0 --scheme w8a8-dynamic $T/in $T/small/o.dsq 2> $T/err
        echo \$? > $T/rc
        ls -a $T/small > $T/left
        mount -o remount,size=64m $T/small
        $Q -q --resume --zstd-level 0 --checkpoint-interval 0 --scheme w8a8-dynamic $T/in $T/small/o.dsq 2> $T/err2
        echo \$? > $T/rc2
        cp $T/small/o.dsq $T/o-resumed.dsq 2>/dev/null
        # fill the disk again, then change the source bytes keeping
        # size and mtime (touch -r): --resume must refuse the stale tensors
        rm -f $T/small/o.dsq
        mount -o remount,size=2m $T/small
        $Q -q --zstd-level 0 --checkpoint-interval 0 --scheme w8a8-dynamic $T/in2 $T/small/o.dsq 2> /dev/null
        $PY $T/flip.py $T/in2/model-00001-of-00002.safetensors $T/in2/model-00002-of-00002.safetensors
        mount -o remount,size=64m $T/small
        $Q -q --resume --zstd-level 0 --checkpoint-interval 0 --scheme w8a8-dynamic $T/in2 $T/small/o.dsq 2> $T/err3
        echo \$? > $T/rc3
    "
    [ "$(cat $T/rc3)" = 1 ] || fail "--resume over changed source bytes (same size, mtime): exit $(cat $T/rc3)"
    grep -q "changed" $T/err3 || fail "changed source: message was: $(cat $T/err3)"
    [ "$(cat $T/rc)" = 1 ] || fail "ENOSPC: exit $(cat $T/rc), expected 1"
    grep -q "resume" $T/err || fail "ENOSPC message does not say how to continue: $(cat $T/err)"
    grep -q "o.dsq.partial.journal" $T/left || fail "ENOSPC removed the journal (left: $(cat $T/left | tr '\n' ' '))"
    grep -q "o.dsq.partial$" $T/left || fail "ENOSPC removed the partial file"
    [ "$(cat $T/rc2)" = 0 ] || fail "--resume after freeing space failed: $(cat $T/err2)"
    $Q -q --zstd-level 0 --scheme w8a8-dynamic $T/in $T/o-clean.dsq || fail "clean zstd-0 run"
    cmp -s $T/o-clean.dsq $T/o-resumed.dsq || fail "resumed after ENOSPC differs from a clean run"
else
    echo "reliability.sh: note: cannot mount a small tmpfs here, ENOSPC check skipped"
fi

# ---- a full disk while the last tensors' index / metadata, the last
# shard or model.dsq.index.json is written keeps what --resume needs ----
# Disk sizes swept over the end of the run (the tail holds the 113 KB
# tokenizer.json): every failing size must keep its state, say --resume, and
# resume to the bytes of a clean run; some size must fail in the tail.
cat > $T/sweep.sh <<'SHEOF'
# sweep.sh Q IN T MODE(file|shards) FROM_KB TO_KB STEP_KB; in a private mount namespace
Q=$1 IN=$2 T=$3 MODE=$4 kb=$5
mkdir -p $T/sw
if [ $MODE = file ]; then out=$T/sw/o.dsq; ref=$T/sw-ref.dsq; xo=
else out=$T/sw/o; ref=$T/sw-ref; xo="--shard-size 1M"; fi
while [ $kb -le $6 ]; do
    mount -t tmpfs -o size=${kb}k tmpfs $T/sw || { echo "FAIL: cannot mount ${kb}k"; exit 1; }
    $Q -q --zstd-level 0 $xo --scheme w8a8-dynamic $IN $out 2> $T/sw-err
    rc=$?
    echo "size $MODE ${kb}k: exit $rc $(head -c 300 $T/sw-err)"
    if [ $rc != 0 ]; then
        grep -q "tensor '" $T/sw-err || echo "TAIL $MODE $kb"
        grep -q "resume" $T/sw-err || echo "FAIL: $MODE ${kb}k: ENOSPC message does not say --resume: $(cat $T/sw-err)"
        ls -aR $T/sw | grep -q "partial\|dsq-resume" || echo "FAIL: $MODE ${kb}k: nothing kept for --resume: $(cat $T/sw-err)"
        mount -o remount,size=64m $T/sw
        $Q -q --resume --zstd-level 0 $xo --scheme w8a8-dynamic $IN $out 2> $T/sw-err \
            || echo "FAIL: $MODE ${kb}k: --resume after freeing space: $(cat $T/sw-err)"
    fi
    if [ $MODE = file ]; then cmp -s $out $ref || echo "FAIL: $MODE ${kb}k: output differs from a clean run"
    else diff -r -x '.*' $out $ref > /dev/null || echo "FAIL: $MODE ${kb}k: output differs from a clean run"; fi
    ls -aR $T/sw | grep -q "partial\|journal\|dsq-resume\|dsq-sources" && echo "FAIL: $MODE ${kb}k: state left after success: $(ls -aR $T/sw | tr '\n' ' ')"
    umount $T/sw
    kb=$((kb + $7))
done
SHEOF
if unshare -m sh -c "mount -t tmpfs -o size=2m tmpfs $T/small" 2>/dev/null; then
    $Q -q --zstd-level 0 --scheme w8a8-dynamic $T/in $T/sw-ref.dsq || fail "clean zstd-0 run"
    $Q -q --zstd-level 0 --shard-size 1M --scheme w8a8-dynamic $T/in $T/sw-ref || fail "clean sharded zstd-0 run"
    f=$(( $(stat -c %s $T/sw-ref.dsq) / 1024 ))
    unshare -m sh $T/sweep.sh $Q $T/in $T file $((f - 128)) $((f + 16)) 8 > $T/sw-log 2>&1
    f=$(( $(cat $T/sw-ref/* | wc -c) / 1024 ))
    unshare -m sh $T/sweep.sh $Q $T/in $T shards $((f - 48)) $((f + 28)) 4 >> $T/sw-log 2>&1
    grep "FAIL" $T/sw-log | while read -r l; do echo "$l"; done
    grep -q "FAIL" $T/sw-log && fails=$((fails+1))
    grep -q "TAIL" $T/sw-log || fail "the disk-size sweep never filled the disk in the tail: $(cat $T/sw-log)"
fi

# ---- config.json that contradicts the tensors is refused at plan time ----
# badcfg KEY VALUE: tiny-dsv3 with one config key changed; the plan (--dry-run)
# must fail and name the key and a tensor.
badcfg() {
    rm -rf $T/bad; cp -r samples/tiny-dsv3 $T/bad
    $PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,'w'))" \
        $T/bad/config.json "$1" "$2"
    $Q --dry-run --scheme w8a8-dynamic $T/bad > /dev/null 2> $T/err && fail "config $1=$2 contradicting the tensors: exit 0"
    grep -q "$1" $T/err || fail "config $1=$2: message does not name the key: $(cat $T/err)"
    grep -q "tensor '" $T/err || fail "config $1=$2: message does not name a tensor: $(cat $T/err)"
    # with --calib the same refusal comes before calibration: no
    # "calibrating" progress, no OUT.calib.dsq checkpoint left behind
    $Q -v --calib samples/data/calib.txt --calib-samples 2 --calib-seqlen 32 --scheme w8a8 $T/bad $T/bad.dsq \
        > /dev/null 2> $T/err && fail "--calib, config $1=$2 contradicting the tensors: exit 0"
    grep -q "$1" $T/err || fail "--calib, config $1=$2: message does not name the key: $(tail -3 $T/err)"
    grep -qi "calibrat" $T/err && fail "--calib, config $1=$2: calibration ran before the refusal: $(tail -3 $T/err)"
    [ -e $T/bad.dsq.calib.dsq ] && fail "--calib, config $1=$2: $T/bad.dsq.calib.dsq left behind"
    rm -f $T/bad.dsq.calib.dsq
}
if [ -f samples/tiny-dsv3/config.json ]; then
    badcfg n_routed_experts 0
    badcfg n_routed_experts 8
    badcfg kv_lora_rank 65
    badcfg vocab_size 4096
    badcfg hidden_size 128
    badcfg moe_intermediate_size 32
    badcfg num_hidden_layers 5
fi

# ---- no config.json: a model directory or shard index is refused (its
# shapes cannot be checked and ds-eval could not run the output); one
# .safetensors file named on purpose is a tensor-only conversion, said so ----
rm -rf $T/nocfg; cp -r $S $T/nocfg; rm $T/nocfg/config.json
for in in $T/nocfg $T/nocfg/model.safetensors.index.json; do
    $Q --scheme w8a8-dynamic $in $T/nocfg.dsq > /dev/null 2> $T/err && fail "no config.json, input $in: exit 0"
    grep -q "no config.json" $T/err || fail "no config.json, input $in: message was: $(cat $T/err)"
    [ -e $T/nocfg.dsq ] && fail "no config.json, input $in: output written"
    rm -f $T/nocfg.dsq
    $Q --dry-run --scheme w8a8-dynamic $in > /dev/null 2> $T/err && fail "no config.json, --dry-run $in: exit 0"
done
$Q --scheme w8a8-dynamic $T/nocfg/model-00001-of-00002.safetensors $T/nocfg.dsq > /dev/null 2> $T/err \
    || fail "one .safetensors file without config.json refused: $(cat $T/err)"
grep -q "tensor-only" $T/err && grep -q "ds-eval cannot run" $T/err \
    || fail "tensor-only conversion: the warning does not say so: $(cat $T/err)"

# ---- a 0- or 1-byte .dsq is "truncated", not "no tokenizer.json" ----
: > $T/empty.dsq
printf 'D' > $T/one.dsq
for f in empty one; do
    $EVAL ppl -q -T 1 -m $T/$f.dsq --data samples/data/heldout.txt > /dev/null 2> $T/err \
        && fail "ds-eval on a $f .dsq exited 0"
    grep -qi "truncated\|too short\|shorter" $T/err || fail "$f .dsq: message was: $(cat $T/err)"
done

# ---- ppl --limit-tokens reads only the prefix it needs ----
# heldout.txt repeated to ~43 MB: the first 512 tokens, hence the result, are
# the same as for heldout.txt alone, and memory stays far below what
# tokenizing 43 MB takes (about 180 MB; a prefix needs about 21 MB).
$PY -c "import sys; t=open(sys.argv[1]).read(); open(sys.argv[2],'w').write(t*700)" \
    samples/data/heldout.txt $T/big.txt
ppl_of() { $EVAL ppl --json -T 1 -m $T/m.dsq --data "$1" --ctx 64 --limit-tokens 512 2>/dev/null | \
    $PY -c "import json,sys; print(json.load(sys.stdin)['ppl'])"; }
a=$(ppl_of samples/data/heldout.txt); b=$(ppl_of $T/big.txt)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--limit-tokens on a longer file changed ppl ($a vs $b)"
if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%M" -o $T/rss $EVAL ppl -q -T 1 -m $T/m.dsq --data $T/big.txt --ctx 64 --limit-tokens 512 > /dev/null 2>&1
    [ "$(tail -1 $T/rss)" -lt 120000 ] || fail "--limit-tokens 512 on 43 MB of text peaked at $(tail -1 $T/rss) KB"
fi

# ---- a GSM8K line of megabytes is refused before it is copied around ----
$PY -c "import json,sys; open(sys.argv[1],'w').write(json.dumps({'question': 'x ' * 1500000, 'answer': '#### 1'})+'\\n')" $T/gsm.jsonl
$EVAL gsm8k -q -T 1 -m $T/m.dsq --data $T/gsm.jsonl --train samples/data/gsm_fewshot.jsonl --limit 1 > /dev/null 2> $T/err \
    && fail "ds-eval gsm8k with a 3 MB question exited 0"
grep -q "longer than any GSM8K item" $T/err || fail "3 MB GSM8K line: message was: $(head -c 300 $T/err)"

# ---- SIGHUP ends a run like SIGTERM (clean "interrupted", exit 1) ----
# The signal is sent once /proc shows the handler installed (SigCgt bit 0).
$EVAL ppl -T 1 -m $T/m.dsq --data $T/big.txt --ctx 1024 --limit-tokens 200000 > /dev/null 2> $T/err &
pid=$!
i=0
while [ $i -lt 200 ]; do
    cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$pid/status 2>/dev/null)
    [ -n "$cgt" ] && [ $(( 0x$cgt & 1 )) = 1 ] && break
    sleep 0.1; i=$((i+1))
done
kill -HUP $pid 2>/dev/null
wait $pid; rc=$?
[ $rc = 1 ] || fail "SIGHUP: exit $rc, expected 1 (interrupted)"
grep -q "interrupted" $T/err || fail "SIGHUP: message was: $(cat $T/err)"

# ---- a config.json with fewer layers than the weights is refused on load ----
rm -rf $T/fewer && mkdir $T/fewer && cp samples/tiny-dsv3/* $T/fewer/
jq '.num_hidden_layers = 2' samples/tiny-dsv3/config.json > $T/fewer/config.json
$EVAL ppl -q -T 1 -m $T/fewer --data samples/data/heldout.txt --ctx 64 --limit-tokens 256 > /dev/null 2> $T/err \
    && fail "eval with num_hidden_layers below the weights' exited 0"
grep -q "num_hidden_layers = 2" $T/err || fail "fewer layers: message was: $(cat $T/err)"

# ---- a FIFO inside a model (config.json, tokenizer.json, a shard, the
# index, SHA256SUMS) never blocks a tool; the tools that read it refuse it ----
for f in config.json tokenizer.json model-00001-of-00002.safetensors model.safetensors.index.json; do
    rm -rf $T/ff && mkdir $T/ff && cp samples/tiny-dsv3/* $T/ff/ && rm $T/ff/$f && mkfifo $T/ff/$f
    for tool in "$BIN/ds-inspect $T/ff" "$EVAL ppl -q -m $T/ff --data samples/data/heldout.txt --ctx 64 --limit-tokens 256" \
                "$Q -q --scheme w8a8-dynamic $T/ff $T/ff.dsq"; do
        timeout 60 $tool > /dev/null 2> $T/err; rc=$?
        [ $rc = 124 ] && fail "FIFO $f: '$tool' blocked"
        case "$tool:$f" in
            *ds-inspect*|*ds-quant*:tokenizer.json) ;;   # they do not read it
            *) [ $rc = 0 ] && fail "FIFO $f: '$tool' exited 0"
               grep -q "not a regular file" $T/err || fail "FIFO $f: '$tool' said: $(head -c 300 $T/err)" ;;
        esac
    done
    rm -f $T/ff.dsq
done
rm -rf $T/fx && mkdir $T/fx
$Q -q --scheme w8a8-dynamic --format ascend samples/tiny-dsv3 $T/fx/x || fail "ascend export for the FIFO check"
rm $T/fx/x/SHA256SUMS && mkfifo $T/fx/x/SHA256SUMS
timeout 60 $EVAL ppl -q -m $T/fx/x --data samples/data/heldout.txt --limit-tokens 64 > /dev/null 2> $T/err; rc=$?
[ $rc = 124 ] && fail "FIFO SHA256SUMS: ds-eval blocked"

[ $fails = 0 ] || exit 1
