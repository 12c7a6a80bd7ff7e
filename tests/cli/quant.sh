#!/bin/sh
# quant.sh - ds-quant CLI behaviour: help/version, usage errors (exit 2),
# dry-run plan, conversion + inspect, --json summary, refusing existing
# output, NaN weights, SIGINT and SIGKILL followed by --resume (byte-identical
# to a clean run), --no-journal interruption, the bundled sample under every
# scheme (+ ds-inspect --verify), sharded output.
# Inputs are tiny DeepSeek-shaped checkpoints written by python3 + numpy.
set -u
BIN=${BIN:-./bin}
Q=$BIN/ds-quant
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-test-quantcli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { :; }

if [ ! -x $Q ]; then echo "quant.sh: $Q not built"; exit 1; fi
if ! $PY -c 'import numpy' 2>/dev/null; then echo "quant.sh: skipped (no numpy in $PY)"; exit 0; fi

# gen DIR HIDDEN EXPERTS [nan]
gen() {
    $PY - "$@" <<'EOF'
import json, os, struct, sys
import numpy as np
d, H, E = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nan = len(sys.argv) > 4
os.makedirs(d, exist_ok=True)
I, V, QL, KL, NH, NOPE, ROPE, VH = 2 * H, 256, H // 2, H // 4, 4, 32, 16, 32
rng = np.random.default_rng(7)
T = {}
def lin(name, o, i):
    T[name] = (rng.standard_normal((o, i)).astype(np.float32) / np.sqrt(i))
def vec(name, n, v=1.0):
    T[name] = (v + 0.05 * rng.standard_normal(n)).astype(np.float32)
T["model.embed_tokens.weight"] = 0.02 * rng.standard_normal((V, H)).astype(np.float32)
for L in range(3):                      # layer 2 is the MTP layer
    p = "model.layers.%d." % L
    vec(p + "input_layernorm.weight", H); vec(p + "post_attention_layernorm.weight", H)
    lin(p + "self_attn.q_a_proj.weight", QL, H); vec(p + "self_attn.q_a_layernorm.weight", QL)
    lin(p + "self_attn.q_b_proj.weight", NH * (NOPE + ROPE), QL)
    lin(p + "self_attn.kv_a_proj_with_mqa.weight", KL + ROPE, H); vec(p + "self_attn.kv_a_layernorm.weight", KL)
    lin(p + "self_attn.kv_b_proj.weight", NH * (NOPE + VH), KL)
    lin(p + "self_attn.o_proj.weight", H, NH * VH)
    if L == 0:
        for n in ("gate_proj", "up_proj"): lin(p + "mlp.%s.weight" % n, I, H)
        lin(p + "mlp.down_proj.weight", H, I)
        continue
    lin(p + "mlp.gate.weight", E, H)
    T[p + "mlp.gate.e_score_correction_bias"] = np.zeros(E, np.float32)
    for e in list(range(E)) + ["shared"]:
        q = p + ("mlp.shared_experts." if e == "shared" else "mlp.experts.%d." % e)
        lin(q + "gate_proj.weight", H // 2, H); lin(q + "up_proj.weight", H // 2, H)
        lin(q + "down_proj.weight", H, H // 2)
vec("model.layers.2.enorm.weight", H); vec("model.layers.2.hnorm.weight", H)
lin("model.layers.2.eh_proj.weight", H, 2 * H)
vec("model.norm.weight", H)
T["lm_head.weight"] = 0.02 * rng.standard_normal((V, H)).astype(np.float32)
if nan:
    T["model.layers.1.mlp.experts.1.up_proj.weight"][3, 5] = np.nan
hdr, off, blobs = {}, 0, []
for k in sorted(T):
    a = T[k]
    if k.endswith("e_score_correction_bias"):
        b, dt = a.astype("<f4").tobytes(), "F32"
    else:   # bf16 by truncation
        b, dt = (a.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes(), "BF16"
    hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for b in blobs: f.write(b)
cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": V,
       "hidden_size": H, "intermediate_size": I, "moe_intermediate_size": H // 2, "num_hidden_layers": 2,
       "num_nextn_predict_layers": 1, "num_attention_heads": NH, "num_key_value_heads": NH,
       "q_lora_rank": QL, "kv_lora_rank": KL, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
       "v_head_dim": VH, "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": 2,
       "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "rms_norm_eps": 1e-06}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}, open(os.path.join(d, "tokenizer.json"), "w"))
json.dump({"bos_token_id": 0, "eos_token_id": 1}, open(os.path.join(d, "generation_config.json"), "w"))
EOF
}

gen $T/m 128 4 || { echo "quant.sh: generator failed"; exit 1; }

# ---- help, version, usage errors ----
$Q -h > $T/h.txt 2>&1 && grep -q -- "--scheme" $T/h.txt && grep -q "w4a8" $T/h.txt || fail "-h"
$Q -V | grep -q "ds-quant" || fail "-V"
$Q --scheme nope $T/m $T/x.dsq 2> $T/e.txt; [ $? = 2 ] && grep -q "unknown scheme 'nope'" $T/e.txt || fail "unknown scheme exit 2"
$Q --scheme w8a8 $T/m $T/x.dsq 2> $T/e.txt; [ $? = 2 ] && grep -q "needs calibration statistics (--calib); use w8a8-dynamic" $T/e.txt || fail "w8a8 static refusal"
$Q --scheme w4a8 $T/m 2> /dev/null; [ $? = 2 ] || fail "missing OUT exit 2"
$Q $T/m $T/x.dsq 2> /dev/null; [ $? = 2 ] || fail "no scheme exit 2"
$Q --scheme w4a8 --group-size 100 $T/m $T/x.dsq 2> /dev/null; [ $? = 2 ] || fail "bad group size exit 2"
$Q --scheme w4a8 --keep 'experts.(' $T/m $T/x.dsq 2> $T/e.txt; [ $? = 2 ] && grep -q "bad regex" $T/e.txt || fail "bad regex exit 2"
$Q --scheme w4a8 --bogus $T/m $T/x.dsq 2> /dev/null; [ $? = 2 ] || fail "unknown option exit 2"
[ -e $T/x.dsq ] && fail "usage errors wrote output"

# ---- dry run ----
$Q --dry-run --scheme w4a8 --scheme-for 'layers\.2\.mlp\.experts=w8a8-dynamic' $T/m > $T/plan.txt || fail "dry-run"
grep -q "model.layers.1.mlp.experts.0.up_proj.weight .*w4a8" $T/plan.txt || fail "plan: expert w4a8"
grep -q "model.layers.2.mlp.experts.0.up_proj.weight .*w8a8-dynamic .*--scheme-for" $T/plan.txt || fail "plan: mtp rule"
grep -q "model.layers.1.mlp.gate.weight .*router .*bf16" $T/plan.txt || fail "plan: router kept"
grep -q "estimated peak memory" $T/plan.txt || fail "plan: peak estimate"
$Q --dry-run --json --recipe deepseek-w4a8 $T/m > $T/plan.json || fail "dry-run json"
$PY -c "
import json,sys; p=json.load(open('$T/plan.json'))
m={e['name']:e['scheme'] for e in p['plan']}
assert m['model.layers.1.mlp.experts.0.up_proj.weight']=='w4a8'
assert m['model.layers.2.mlp.experts.0.up_proj.weight']=='w8a8-dynamic'
assert m['model.layers.1.self_attn.kv_b_proj.weight']=='bf16'
assert p['estimated_peak_rss_bytes']>0 and p['num_hidden_layers']==2
" || fail "dry-run json content"

# ---- convert, inspect, exists, json ----
$Q -q --scheme w4a8 $T/m $T/a.dsq || fail "convert"
[ -f $T/a.dsq ] || fail "no output"
if [ -x $BIN/ds-inspect ]; then $BIN/ds-inspect -q --verify -T 1 $T/a.dsq > /dev/null || fail "inspect --verify"; fi
$Q -q --scheme w4a8 $T/m $T/a.dsq 2> $T/e.txt; [ $? = 1 ] && grep -q "output exists (use -f to overwrite)" $T/e.txt || fail "exists refusal"
$Q --json -f -T 1 --scheme awq-w4a16 $T/m $T/a.dsq > $T/s.json || fail "json run"
$PY -c "
import json; s=json.load(open('$T/s.json'))
assert s['status']=='ok' and s['tensors']>50, s
assert s['by_scheme']['awq-w4a16']['tensors']>0 and s['by_scheme']['bf16']['tensors']>0
assert s['bytes_out']>0 and s['gb_per_s']>0 and s['peak_rss_bytes']>0
assert len(s['error']['worst'])>0 and 0<s['error']['max']<1
" || fail "json summary content"

# ---- an architecture dsq does not know is refused, not converted by names ----
mkdir -p $T/mx && cp $T/m/* $T/mx/
$PY -c "
import json; p='$T/mx/config.json'; c=json.load(open(p))
c['architectures']=['MixtralForCausalLM']; c['model_type']='mixtral'; json.dump(c, open(p, 'w'))"
$Q -q --scheme w4a8 $T/mx $T/mx.dsq 2> $T/e.txt; [ $? = 1 ] || fail "unknown architecture exit 1"
grep -q "unsupported architecture 'MixtralForCausalLM'" $T/e.txt || fail "unknown architecture message: $(cat $T/e.txt)"
ls -a $T | grep -q "mx.dsq" && fail "unknown architecture left output"

# ---- NaN weights ----
gen $T/nan 128 4 nan
$Q -q --scheme w8a8-dynamic $T/nan $T/n.dsq 2> $T/e.txt; [ $? = 1 ] || fail "nan exit 1"
grep -q "model.layers.1.mlp.experts.1.up_proj.weight" $T/e.txt && grep -q "row 3, column 5" $T/e.txt || fail "nan message: $(cat $T/e.txt)"
ls -a $T | grep -q "n.dsq" && fail "nan left output"
$Q -q --allow-nonfinite --scheme w8a8-dynamic $T/nan $T/n.dsq || fail "--allow-nonfinite"

# ---- interruption and resume (timing based; skipped if the run is too fast) ----
gen $T/big 1024 24
$Q -q -T 1 --zstd-level 6 --scheme w4a8 $T/big $T/clean.dsq || fail "clean big"
resumed=0
for sig in INT KILL; do
    rm -f $T/r.dsq
    $Q -q -T 1 --zstd-level 6 --checkpoint-interval 0 --scheme w4a8 $T/big $T/r.dsq 2> $T/e.txt &
    pid=$!
    # signal once the output is open (a fixed sleep raced with slow
    # sanitizer start-up), then let it write a little
    i=0
    while [ $i -lt 400 ] && kill -0 $pid 2>/dev/null && ! [ -e $T/.r.dsq.partial ]; do sleep 0.05; i=$((i+1)); done
    sleep 0.2
    kill -$sig $pid 2>/dev/null
    wait $pid 2>/dev/null; rc=$?
    if [ -f $T/r.dsq ]; then echo "quant.sh: note: run finished before SIG$sig"; continue; fi
    [ $sig = INT ] && { [ $rc = 1 ] && grep -q "resume" $T/e.txt || fail "SIGINT message/exit ($rc)"; }
    ls -a $T | grep -q "\.r\.dsq\.partial" || fail "SIG$sig: partial file not kept"
    $Q -q -T 2 --zstd-level 6 --resume --scheme w4a8 $T/big $T/r.dsq || fail "resume after SIG$sig"
    cmp -s $T/clean.dsq $T/r.dsq || fail "resume after SIG$sig differs from clean run"
    resumed=$((resumed+1))
done

# --no-journal: an interrupted run leaves nothing behind (it could not resume)
rm -f $T/nj.dsq
$Q -q -T 1 --zstd-level 6 --no-journal --scheme w4a8 $T/big $T/nj.dsq 2> $T/e.txt &
pid=$!
i=0
while [ $i -lt 400 ] && kill -0 $pid 2>/dev/null && ! [ -e $T/.nj.dsq.partial ]; do sleep 0.05; i=$((i+1)); done
sleep 0.2
kill -INT $pid 2>/dev/null
wait $pid 2>/dev/null; rc=$?
if [ ! -f $T/nj.dsq ]; then
    [ $rc = 1 ] && grep -q "nothing was kept" $T/e.txt || fail "--no-journal SIGINT message/exit ($rc)"
    ls -a $T | grep -q "nj\.dsq" && fail "--no-journal SIGINT left $(ls -a $T | grep nj.dsq)"
fi

# ---- the bundled sample: every scheme converts and verifies ----
S=samples/tiny-dsv3
if [ -f $S/config.json ] && [ -x $BIN/ds-inspect ]; then
    for sc in bf16 w8a8-dynamic w4a8 awq-w4a16; do
        $Q -q -f --scheme $sc $S $T/s.dsq || fail "sample: convert $sc"
        $BIN/ds-inspect -q --verify $T/s.dsq > /dev/null || fail "sample: verify $sc"
    done
    $Q -q -f --scheme w8a8-dynamic samples/tiny-dsv3-fp8 $T/s.dsq || fail "sample: convert fp8"
    $BIN/ds-inspect -q --verify $T/s.dsq > /dev/null || fail "sample: verify fp8"
    $Q -q -f --scheme w8a8 --calib samples/data/calib.txt --calib-samples 8 --calib-seqlen 128 $S $T/s.dsq \
        || fail "sample: convert w8a8 (calibrated)"
    $BIN/ds-inspect -q --verify $T/s.dsq > /dev/null || fail "sample: verify w8a8"
else
    echo "quant.sh: note: samples/tiny-dsv3 absent, sample conversions skipped"
fi

# ---- sharded output ----
$Q -q --scheme w8a8-dynamic --shard-size 200K $T/m $T/sh || fail "sharded"
[ -f $T/sh/model.dsq.index.json ] && ls $T/sh | grep -q "model-00001-of-" || fail "sharded layout"
# -f with another shard count: no shard of the older set survives
n1=$(ls $T/sh | grep -c '^model-.*\.dsq$')
$Q -q -f --scheme w8a8-dynamic --shard-size 400K $T/m $T/sh || fail "sharded -f"
n2=$(ls $T/sh | grep -c '^model-.*\.dsq$')
[ "$n2" -lt "$n1" ] && ! ls $T/sh | grep -q "of-0000$n1" || fail "sharded -f: old shards left ($n1 -> $n2): $(ls $T/sh)"
if [ -x $BIN/ds-inspect ]; then
    $BIN/ds-inspect -q --verify $T/sh > /dev/null || fail "sharded: inspect --verify of the directory"
    $BIN/ds-inspect -q --verify $T/sh/model.dsq.index.json > /dev/null || fail "sharded: inspect --verify of the index"
    # a hostile index: each edit must be refused with exit 1 and a message
    for edit in wrong-shard unlisted traversal duplicate count; do
        rm -rf $T/shx; cp -r $T/sh $T/shx
        $PY - $T/shx/model.dsq.index.json $edit <<'EOF2'
import json, sys
p, edit = sys.argv[1], sys.argv[2]
j = json.load(open(p)); wm = j["weight_map"]; names = sorted(wm); files = sorted(set(wm.values()))
if edit == "wrong-shard":
    n = next(k for k in names if wm[k] == files[0]); wm[n] = files[1]
elif edit == "unlisted":
    del wm[names[0]]
elif edit == "traversal":
    wm[names[0]] = "../" + wm[names[0]]
elif edit == "count":
    j["metadata"]["shards"] = len(files) + 1
text = json.dumps(j)
if edit == "duplicate":
    k = names[0]; text = text.replace('"weight_map": {', '"weight_map": {"%s": "%s", ' % (k, wm[k]), 1)
open(p, "w").write(text)
EOF2
        $BIN/ds-inspect -q $T/shx > /dev/null 2> $T/e.txt; rc=$?
        [ $rc = 1 ] && [ -s $T/e.txt ] || fail "sharded: hostile index ($edit) exit $rc: $(cat $T/e.txt)"
    done
fi

[ $fails = 0 ] || { echo "quant.sh: $fails failure(s)"; exit 1; }
echo "quant.sh: ok ($resumed of 2 interruptions resumed)"
