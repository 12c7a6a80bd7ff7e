#!/usr/bin/python3
"""Write samples/data/: gsm_test.jsonl, gsm_fewshot.jsonl, heldout.txt, calib.txt.

See data/README.md for what each file holds.  Deterministic (fixed seeds).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
import gen_gsm  # noqa: E402

N_TEST = 300
N_FEWSHOT = 50
HELDOUT_GSM_BYTES = 50000
CALIB_GSM_BYTES = 92000
CALIB_PROSE = ("GPL-3", 8192)     # first 8192 bytes of a training license
LEVEL = "small"                   # operand ranges of the final training phase (gen_gsm.generate level)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def gsm_text(split, nbytes, exclude=()):
    out, total = [], 0
    for r in gen_gsm.generate(split, 5000, level=LEVEL):
        if r["question"] in exclude:
            continue
        s = corpus.fmt(r)
        out.append(s)
        total += len(s.encode("utf-8"))
        if total >= nbytes:
            break
    return "".join(out)


def main():
    d = os.path.join(HERE, "data")
    os.makedirs(d, exist_ok=True)
    test = gen_gsm.generate("test", N_TEST, level=LEVEL)
    write_jsonl(os.path.join(d, "gsm_test.jsonl"), test)
    write_jsonl(os.path.join(d, "gsm_fewshot.jsonl"), gen_gsm.generate("fewshot", N_FEWSHOT, level=LEVEL))
    with open(os.path.join(corpus.LICENSES, corpus.HELDOUT_PROSE), "rb") as f:
        apache = f.read()
    with open(os.path.join(d, "heldout.txt"), "wb") as f:
        f.write(gsm_text("heldout", HELDOUT_GSM_BYTES, {r["question"] for r in test}).encode("utf-8"))
        f.write(apache)
    name, n = CALIB_PROSE
    with open(os.path.join(corpus.LICENSES, name), "rb") as f:
        prose = f.read()[:n]
    with open(os.path.join(d, "calib.txt"), "wb") as f:
        f.write(gsm_text("calib", CALIB_GSM_BYTES).encode("utf-8"))
        f.write(prose)


if __name__ == "__main__":
    main()
