#!/usr/bin/python3
"""Train the sample byte-level BPE and write it in Hugging Face tokenizer.json form.

The file mirrors DeepSeek-V3's tokenizer.json: same normalizer, pre_tokenizer,
post_processor and decoder objects, model type BPE with byte_fallback false,
ids 0/1/2 = BOS/EOS/PAD special added tokens (also present in model.vocab,
as in DeepSeek's file), then the 256 byte symbols in code-point order, then one
id per merge.  Training corpus: the first N_GSM problems of the train split plus
the training licenses (corpus.py).  Pair ties are broken by the smaller pair so
the result is deterministic.

Usage: train_tokenizer.py --out DIR [--vocab 3072] [--n-gsm 20000]
"""
import argparse
import collections
import json
import os

import bpe
import corpus


def train_merges(word_counts, n_merges):
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += counts[wi]
            where[(a, b)].add(wi)
    merges = []
    while len(merges) < n_merges and pair_count:
        best = min(pair_count.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] < 2:
            break
        (a, b) = best[0]
        merges.append((a, b))
        for wi in list(where[(a, b)]):
            w = words[wi]
            c = counts[wi]
            for p in zip(w, w[1:]):
                pair_count[p] -= c
                if pair_count[p] <= 0:
                    del pair_count[p]
            nw, k = [], 0
            while k < len(w):
                if k < len(w) - 1 and w[k] == a and w[k + 1] == b:
                    nw.append(a + b)
                    k += 2
                else:
                    nw.append(w[k])
                    k += 1
            words[wi] = nw
            for p in zip(nw, nw[1:]):
                pair_count[p] += c
                where[p].add(wi)
        del where[(a, b)]
    return merges


def added_token(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def config_token(content):
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True,
            "rstrip": False, "single_word": False}


def build(vocab_size, n_gsm):
    wc = collections.Counter()
    texts = [corpus.fmt(r) for r in corpus.gsm_train(n_gsm)] + corpus.prose_docs()
    for t in texts:
        for piece in bpe.pre_split(t):
            wc[bpe.byte_map(piece)] += 1
    specials = [bpe.BOS, bpe.EOS, bpe.PAD]
    alphabet = sorted(bpe.B2U.values())
    merges = train_merges(wc, vocab_size - len(specials) - len(alphabet))
    vocab = {}
    for s in specials + alphabet + [a + b for a, b in merges]:
        if s not in vocab:     # a merge result can repeat an existing symbol only in theory
            vocab[s] = len(vocab)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(i, s) for i, s in enumerate(specials)],
        "normalizer": {"type": "Sequence", "normalizers": []},
        "pre_tokenizer": bpe.DS_PRETOKENIZER,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": config_token(bpe.BOS),
        "clean_up_tokenization_spaces": False,
        "eos_token": config_token(bpe.EOS),
        "legacy": True,
        "model_max_length": 2048,
        "pad_token": config_token(bpe.EOS),
        "sp_model_kwargs": {},
        "unk_token": None,
        "tokenizer_class": "LlamaTokenizerFast",
    }
    return tok, cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=3072)
    ap.add_argument("--n-gsm", type=int, default=20000)
    a = ap.parse_args()
    tok, cfg = build(a.vocab, a.n_gsm)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print("vocab", len(tok["model"]["vocab"]), "merges", len(tok["model"]["merges"]))


if __name__ == "__main__":
    main()
