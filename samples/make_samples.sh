#!/bin/sh
# Regenerate everything under samples/ from fixed seeds (`make samples`).
#
#   data -> tokenizer -> train tiny-dsv3 -> train tiny-llama -> export (BF16, FP8)
#   -> evaluate (results in samples/work/eval_*.json) -> chat fine-tune of tiny-dsv3
#   (tiny-dsv3-chat, evaluated with bin/ds-eval) -> golden -> checks
#
# Needs /usr/bin/python3 with torch (CPU) and numpy.  Training is the slow part
# (about 2.5 h for tiny-dsv3 and 1.5 h for tiny-llama on a busy 2-core machine);
# both resume from samples/work/<arch>/ckpt.pt when interrupted, and a finished
# checkpoint is reused as is.  Scratch files live in samples/work/ (git-ignored).
# Data, tokenizer and the per-step training batches are bit-reproducible; trained
# weights are reproducible up to float summation order (thread count, CPU).
#
# Environment: PYTHON (default /usr/bin/python3), THREADS (default 1: on a
#              loaded machine one torch thread per process was ~5x faster than two),
#              SKIP_TRAIN=1 to stop after the tokenizer if no checkpoint exists.
set -eu
cd "$(dirname "$0")"
PY=${PYTHON:-/usr/bin/python3}
T=${THREADS:-1}
mkdir -p work

echo "== data"
$PY make_data.py
echo "== tokenizer"
$PY train_tokenizer.py --out work/tok --vocab 3072 --n-gsm 20000

train() {  # arch steps [extra train.py args]; tokens/step = 4 * 768
    arch=$1; steps=$2; shift 2
    if [ "${SKIP_TRAIN:-0}" = 1 ] && [ ! -f "work/$arch/ckpt.pt" ]; then
        echo "SKIP_TRAIN=1 and no work/$arch/ckpt.pt"; exit 0
    fi
    echo "== train $arch -> $steps $*"
    OMP_NUM_THREADS=$T nice -n 5 $PY train.py --arch "$arch" --out "work/$arch" --steps "$steps" --batch 4 \
        --seq 768 --lr 2e-3 --warmup 40 --seed 1234 --threads "$T" "$@"
}
# The recipe grew in phases while the first models were trained (each phase
# resumes the previous checkpoint; a phase whose end step is reached is a no-op):
#  1. plain LM loss on word problems + 5% prose;
#  2. question tokens weighted 0.2 (answers carry the signal: copying numbers);
#  3. plus 35% windows of arithmetic drills (add/sub facts were the bottleneck);
#  4. 50% drills and a longer schedule;
#  5. the "small" operand ranges of gen_gsm (the data/ files use them too): the
#     full ranges need thousands of distinct add/sub facts, which the 5M model
#     had not learned after 1400 steps.
train dsv3 400
train dsv3 1400 --question-weight 0.2 --stop-at 850
train dsv3 1700 --question-weight 0.2 --drill-frac 0.35 --stop-at 1100
train dsv3 2600 --question-weight 0.2 --drill-frac 0.5 --stop-at 1400
train dsv3 2400 --question-weight 0.2 --drill-frac 0.5 --level small --stop-at 1600
train dsv3 2000 --question-weight 0.2 --drill-frac 0.5 --level small   # 6. shorter finish
train llama 300
train llama 700 --question-weight 0.2 --drill-frac 0.35
train llama 1100 --question-weight 0.2 --drill-frac 0.5 --level small

echo "== export"
$PY export.py --ckpt work/dsv3/ckpt.pt --out tiny-dsv3 --fp8-out tiny-dsv3-fp8
$PY export.py --ckpt work/llama/ckpt.pt --out tiny-llama

echo "== evaluate (BF16 / FP8 / llama)"
for m in tiny-dsv3 tiny-dsv3-fp8 tiny-llama; do
    nice -n 5 $PY evaluate.py "$m" --ppl --gsm 300 --threads "$T" --json "work/eval_$m.json"
done

$PY write_readmes.py

echo "== chat sample: tiny-dsv3 fine-tuned on chat conversations (DeepSeek-V3.1 template, both modes)"
# The template is read from the committed tiny-dsv3-chat/tokenizer_config.json (checked by
# sha256); the evaluation needs bin/ds-eval (make) and writes work/chat/eval_*.json.
OMP_NUM_THREADS=$T nice -n 5 $PY train_chat.py --base tiny-dsv3 --out tiny-dsv3-chat --steps 300 --batch 16 \
    --lr 5e-4 --warmup 20 --problems 6000 --seed 1234 --threads "$T"
if [ -x ../bin/ds-eval ]; then
    EV="nice -n 5 ../bin/ds-eval gsm8k -q -f -T $T --json --data data/gsm_test.jsonl"
    $EV -m tiny-dsv3 --train data/gsm_fewshot.jsonl --out work/chat/base.gsm8k.jsonl > work/chat/eval_base.json
    $EV --chat --prompt aisbench-0shot-cot --temperature 0 --max-tokens 256 -m tiny-dsv3-chat \
        --out work/chat/chat.jsonl > work/chat/eval_chat.json
    $EV --chat --prompt aisbench-0shot-cot --temperature 0 --max-tokens 256 -m tiny-dsv3-chat \
        --chat-template-kwargs '{"thinking": true}' --reasoning-parser deepseek_v3 \
        --out work/chat/think.jsonl > work/chat/eval_think.json
    $PY train_chat.py --readme --out tiny-dsv3-chat
else
    echo "bin/ds-eval missing (run make): tiny-dsv3-chat/README.md left as it is"
fi

echo "== golden"
$PY make_golden.py --threads "$T"

echo "== checks"
$PY test_samples.py
