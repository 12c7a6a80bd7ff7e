#!/usr/bin/python3
"""Fine-tune tiny-dsv3 into a chat model that answers through DeepSeek-V3.1's template.

  train_chat.py [--base tiny-dsv3] [--out tiny-dsv3-chat] [--template FILE] [--steps N] ...
  train_chat.py --readme [--out tiny-dsv3-chat]      (README.md from the ds-eval results)

Conversations: one user turn, the prompt of ds-eval's `aisbench-0shot-cot` suite (AISBench's
zero-shot chain-of-thought chat prompt) around a GSM-style train problem (gen_gsm.py, train
phrasings, `small` operand ranges, seed SEED_CHAT: never the held-out test problems), and the
assistant's reply in one of the template's two modes, alternating by problem:

  * non-thinking: the template's generation prompt with thinking off (`<｜Assistant｜></think>`),
    then the worked answer (one line per step with the calculator annotation, as the base model
    was trained to write it) and a final line `answer: N`, then the end-of-sentence token;
  * thinking: the generation prompt with `thinking` on (`<｜Assistant｜><think>`), the annotated
    steps as reasoning, `</think>`, then the worked answer without annotations and `answer: N`,
    then the end-of-sentence token (DeepSeek-V3.1's thinking format).

Prompts are rendered from the template text with Jinja2 as transformers' apply_chat_template
renders it (sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols; bos_token and
eos_token from tokenizer_config.json); a non-thinking conversation rendered whole (the reply as a
stored assistant turn) is checked to equal prompt + reply + EOS.  Text is tokenized as ds-eval
and ds-serve tokenize a rendered prompt: special tokens parsed, no BOS added beyond the
template's.  The loss covers the reply tokens only.

The template is the official DeepSeek-V3.1 `chat_template` (sha256 V31_SHA256), read from
--template or, by default, from the existing OUT/tokenizer_config.json, and written into
OUT/tokenizer_config.json, so dsq recognises the model's template as `deepseek-v3.1`.

Training: AdamW from the weights of --base (BF16 read as float32), linear warm-up then cosine
decay to 10%, grad clip 1.0, the MoE bias update and balance loss of train.py.  Batches depend
only on (seed, step); checkpoints go to WORK/ckpt.pt every --ckpt-every steps (a rerun resumes).
The result is written as --base is laid out: BF16 tensors (F32 e_score_correction_bias), two
shards + index, config.json, generation_config.json, tokenizer.json copied.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import dsv3_ref  # noqa: E402
import evaluate  # noqa: E402
import export  # noqa: E402
import gen_gsm  # noqa: E402
import train  # noqa: E402

V31_SHA256 = "37cabd20b2b62e3efe7fa55533ef0bc6e1eae63b60cf77265b2a09632aa1358d"
SEED_CHAT = 7007
# ds-eval's aisbench-0shot-cot user prompt (AISBench gsm8k_gen_0_shot_cot_chat_prompt), then the question
AIS_PROMPT = ('Answer the following question.The last line of the response should follow this format: '
              '"answer:$ANSWER" (without quotes), where ANSWER is a number. Let\'s think step by step.\n\n'
              'Question: ')
WORK = os.path.join(HERE, "work", "chat")


def template_text(path):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            t = json.load(f).get("chat_template")
        if not isinstance(t, str):
            sys.exit(f"{path}: no chat_template string (give --template FILE with the DeepSeek-V3.1 text)")
    else:
        with open(path, "rb") as f:
            t = f.read().decode("utf-8")
    h = hashlib.sha256(t.encode("utf-8")).hexdigest()
    if h != V31_SHA256:
        sys.exit(f"{path}: template sha256 {h} is not DeepSeek-V3.1's ({V31_SHA256})")
    return t


def jinja_env():
    """The environment transformers' apply_chat_template renders in."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env


def steps_of(answer):
    """GSM answer -> (annotated step lines, final number)."""
    lines = answer.split("\n")
    assert lines[-1].startswith("#### ")
    return lines[:-1], lines[-1][5:]


def plain(line):
    """'Tom has 3*4=<<3*4=12>>12 pens.' -> 'Tom has 3*4=12 pens.'"""
    out, i = [], 0
    while True:
        j = line.find("<<", i)
        if j < 0:
            return "".join(out) + line[i:]
        k = line.find(">>", j)
        out.append(line[i:j])
        i = k + 2


def reply(row, thinking):
    """(text after the generation prompt, without EOS), the stored content for a whole render."""
    steps, n = steps_of(row["answer"])
    if thinking:
        content = "\n".join([plain(s) for s in steps] + ["answer: " + n])
        return "\n".join(steps) + "</think>" + content, content
    content = "\n".join(steps + ["answer: " + n])
    return content, content


def render_examples(tmpl_text, tok_cfg, tok, rows):
    """token ids and reply-start offsets, one per problem; even index: non-thinking, odd: thinking."""
    env = jinja_env()
    tm = env.from_string(tmpl_text)
    bos, eos = tok_cfg["bos_token"]["content"], tok_cfg["eos_token"]["content"]
    ids, starts = [], []
    for i, r in enumerate(rows):
        thinking = i % 2 == 1
        msgs = [{"role": "user", "content": AIS_PROMPT + r["question"]}]
        prompt = tm.render(messages=msgs, add_generation_prompt=True, thinking=thinking, bos_token=bos,
                           eos_token=eos, tools=None)
        text, content = reply(r, thinking)
        if i < 2:   # the template's own rendering of a stored turn agrees with prompt + reply (non-thinking)
            whole = tm.render(messages=msgs + [{"role": "assistant", "content": content}],
                              add_generation_prompt=False, thinking=False, bos_token=bos, eos_token=eos, tools=None)
            expect = prompt + text + eos if not thinking else prompt.replace("<think>", "</think>") + content + eos
            assert whole == expect, (whole, expect)
        p = tok.encode(prompt)
        full = tok.encode(prompt + text + eos)
        assert full[:len(p)] == p and full[-1] == tok.eos_id, "prompt tokens must be a prefix"
        ids.append(np.array(full, np.int32))
        starts.append(len(p))
    return ids, starts


def make_batch(step, seed, bs, ids, starts, pad):
    r = random.Random(seed * 1000003 + step)
    pick = [r.randrange(len(ids)) for _ in range(bs)]
    L = max(len(ids[i]) for i in pick)
    x = np.full((bs, L), pad, np.int64)
    w = np.zeros((bs, L), np.float32)
    for b, i in enumerate(pick):
        x[b, :len(ids[i])] = ids[i]
        w[b, starts[i]:len(ids[i])] = 1.0     # weight of predicting token t (the reply and its EOS)
    return torch.from_numpy(x), torch.from_numpy(w)


def save_model(model, cfg, base, out, tmpl_text):
    os.makedirs(out, exist_ok=True)
    export.write_dir(out, cfg, export.bf16_tensors(model.state_dict()), None)
    shutil.copyfile(os.path.join(base, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    with open(os.path.join(base, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    tc["chat_template"] = tmpl_text
    tmp = os.path.join(out, "tokenizer_config.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "tokenizer_config.json"))


def train_main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    tmpl = template_text(a.template or os.path.join(a.out, "tokenizer_config.json"))
    with open(os.path.join(a.base, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_cfg = json.load(f)
    tok = bpe.Tokenizer.load(os.path.join(a.base, "tokenizer.json"))
    test_q = {json.loads(l)["question"] for l in open(os.path.join(HERE, "data", "gsm_test.jsonl"), encoding="utf-8")}
    rows = [r for r in gen_gsm.generate("train", a.problems, seed=SEED_CHAT, level="small") if r["question"] not in test_q]
    t0 = time.time()
    ids, starts = render_examples(tmpl, tok_cfg, tok, rows)
    ntok = sum(len(x) for x in ids)
    print(f"{len(ids)} conversations, {ntok} tokens ({ntok / len(ids):.0f} per conversation, "
          f"reply {sum(len(x) - s for x, s in zip(ids, starts)) / len(ids):.0f}), rendered in {time.time() - t0:.0f}s",
          flush=True)

    model, cfg = evaluate.load_dir(a.base)
    opt = train.adamw(model, a.lr, a.wd)
    ck = os.path.join(a.work, "ckpt.pt")
    step, st = train.resume(ck, model, opt)
    args = st["args"] if step else vars(a)     # the arguments the training started with

    def save():
        train.save_ckpt(ck, model, opt, step, cfg, args)

    stop = train.stop_on_signal()
    log = open(os.path.join(a.work, "train.log"), "a")
    t0, ema = time.time(), None
    while step < a.steps and not stop["flag"]:
        x, wt = make_batch(step, a.seed, a.batch, ids, starts, tok.eos_id)
        lr = train.lr_at(step, a.steps, a.lr, a.warmup)
        loss, gn, _ = train.train_step(model, opt, cfg, x, wt, lr, True)
        step += 1
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if step % 10 == 0 or step == 1:
            msg = (f"step {step} loss {loss.item():.4f} ema {ema:.4f} lr {lr:.2e} gnorm {float(gn):.2f} "
                   f"elapsed {time.time() - t0:.0f}s")
            train.log_line(log, msg)
        if step % a.ckpt_every == 0:
            save()
    save()
    if step < a.steps:
        print(f"stopped at step {step} (rerun to resume)", flush=True)
        return 1
    model.eval()
    save_model(model, cfg, a.base, a.out, tmpl)
    print(f"wrote {a.out} (step {step})", flush=True)
    return 0


def pct(j):
    """accuracy of a ds-eval gsm8k --json result: chat ("accuracy") or lm-eval ("strict-match")."""
    if "accuracy" in j:
        return f"{j['accuracy']['accuracy'] * 100:.1f}% ({j['accuracy']['correct']}/{j['n']})"
    s = j["strict-match"]
    return f"{s['exact_match'] * 100:.1f}% ({s['correct']}/{j['n']})"


def readme_main(a):
    """OUT/README.md from the checkpoint's arguments and the ds-eval --json results in WORK
    (eval_base.json, eval_chat.json, eval_think.json: make_samples.sh runs the commands below)."""
    ck = torch.load(os.path.join(a.work, "ckpt.pt"))
    ta = ck["args"]
    ev = {}
    for k in ("base", "chat", "think"):
        with open(os.path.join(a.work, f"eval_{k}.json")) as f:
            ev[k] = json.load(f)
    with open(os.path.join(a.work, "think.jsonl"), encoding="utf-8") as f:
        think = [json.loads(l) for l in f if l.strip()]
    closed = sum(1 for r in think if r.get("content") is not None)
    rel = lambda p: "samples/" + os.path.relpath(p, HERE)
    cmd = (f"samples/train_chat.py --base {rel(ta['base'])} --out {rel(a.out)} --steps {ta['steps']} "
           f"--batch {ta['batch']} --lr {ta['lr']:g} --warmup {ta['warmup']} --problems {ta['problems']} "
           f"--seed {ta['seed']}")
    chat = ("ds-eval gsm8k --chat --prompt aisbench-0shot-cot --temperature 0 --max-tokens 256 "
            "-m samples/tiny-dsv3-chat --data samples/data/gsm_test.jsonl")
    base = ("ds-eval gsm8k -m samples/tiny-dsv3 --data samples/data/gsm_test.jsonl "
            "--train samples/data/gsm_fewshot.jsonl")
    for k in ("chat", "think"):
        assert ev[k].get("chat_template") == "deepseek-v3.1" and ev[k]["prompt"] == "aisbench-0shot-cot", k
    text = f"""# tiny-dsv3-chat

`samples/tiny-dsv3` fine-tuned to answer GSM-style questions as a chat model through
DeepSeek-V3.1's chat template, in both of its modes: thinking (reasoning up to `</think>`,
then the answer) and non-thinking.  Same architecture, `config.json` and `tokenizer.json` as
tiny-dsv3; `tokenizer_config.json` adds the official DeepSeek-V3.1 `chat_template` (sha256
`{V31_SHA256}`), which dsq recognises as `deepseek-v3.1`.

## How it was made

    {cmd}

(run by `samples/make_samples.sh`, which reads the template from this directory's
`tokenizer_config.json`; `--template FILE` names another copy of the official text).
{ck['step']} AdamW steps of {ta['batch']} conversations from tiny-dsv3's BF16 weights (betas
0.9/0.95, weight decay {ta['wd']:g}, clip 1.0; learning rate: linear warm-up over {ta['warmup']}
steps, then cosine from {ta['lr']:g} down to a tenth of it).  Each conversation is one user turn
and the assistant's reply:

* user: ds-eval's `aisbench-0shot-cot` prompt (AISBench's zero-shot chain-of-thought chat
  prompt, which asks for a last line `answer:$ANSWER`) around a GSM-style problem of the
  **train** distribution (`samples/gen_gsm.py`, train templates, `small` operand ranges, seed
  {SEED_CHAT}; {ta['problems']} problems, none of them in `data/gsm_test.jsonl`);
* assistant, non-thinking (every other problem): the template's generation prompt with
  thinking off (`<｜Assistant｜></think>`), the worked steps with calculator annotations as
  tiny-dsv3 writes them, a final line `answer: N`, end of sentence;
* assistant, thinking (the others): the generation prompt with `{{"thinking": true}}`
  (`<｜Assistant｜><think>`), the annotated steps as the reasoning, `</think>`, the steps again
  without annotations and a final line `answer: N`, end of sentence.

Prompts are rendered from the template text with Jinja2 as transformers'
`apply_chat_template` renders them and tokenized as ds-serve tokenizes a rendered prompt
(special tokens parsed, no second BOS); the loss covers the reply tokens only.  Tensors are
stored as tiny-dsv3's: BF16 (F32 `e_score_correction_bias`), two shards and the index.

## Results (dsq's engine, greedy)

The {ev['chat']['n']} held-out GSM-style test problems of `samples/data/gsm_test.jsonl` (test-only
templates and schemas, never trained on), scored as AISBench scores them (the text after the
last `</think>`, its last number, compared numerically):

    {chat}
    {chat} \\
        --chat-template-kwargs '{{"thinking": true}}' --reasoning-parser deepseek_v3

and, beside them, the base model's lm-eval gsm8k 5-shot accuracy (strict match) on the same
problems:

    {base}

| model | protocol | accuracy |
|---|---|---|
| tiny-dsv3-chat | chat, non-thinking | {pct(ev['chat'])} |
| tiny-dsv3-chat | chat, thinking | {pct(ev['think'])} |
| tiny-dsv3 | lm-eval gsm8k, 5-shot (no template) | {pct(ev['base'])} |

In the thinking mode {closed} of the {len(think)} replies close the reasoning with `</think>` and
answer after it; the others write the final `answer: N` line inside the reasoning and end there
(`content` null, as vLLM's `deepseek_v3` parser reports such a reply), which AISBench scores from
the reasoning text.

Regenerate: `make samples` (see `samples/README.md`).
"""
    with open(os.path.join(a.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=os.path.join(HERE, "tiny-dsv3"))
    ap.add_argument("--out", default=os.path.join(HERE, "tiny-dsv3-chat"))
    ap.add_argument("--work", default=WORK, help="checkpoint, log and evaluation results")
    ap.add_argument("--template", help="DeepSeek-V3.1 chat_template: a .jinja file or a tokenizer_config.json "
                                       "(default: OUT/tokenizer_config.json)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--problems", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--readme", action="store_true", help="only write OUT/README.md from WORK/eval_*.json")
    a = ap.parse_args()
    a.base, a.out, a.work = (os.path.abspath(p) for p in (a.base, a.out, a.work))
    return readme_main(a) if a.readme else train_main(a)


if __name__ == "__main__":
    sys.exit(main())
