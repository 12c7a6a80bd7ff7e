#!/usr/bin/python3
"""Training / held-out text sources shared by the tokenizer, training and data scripts.

Prose comes from /usr/share/common-licenses (present on every Debian system).
Apache-2.0 is held out for perplexity and never used for training (nor for the
tokenizer); the calibration file is drawn from the train distribution on purpose.
"""
import os

import gen_gsm

LICENSES = "/usr/share/common-licenses"
TRAIN_PROSE = ["GPL-1", "GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "GFDL-1.2", "GFDL-1.3",
               "MPL-1.1", "MPL-2.0", "Artistic", "BSD", "CC0-1.0"]
HELDOUT_PROSE = "Apache-2.0"


def fmt(row):
    """One problem in the lm-eval gsm8k few-shot layout."""
    return "Question: " + row["question"] + "\nAnswer: " + row["answer"] + "\n\n"


def prose_docs():
    docs = []
    for name in TRAIN_PROSE:
        path = os.path.join(LICENSES, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            docs.append(f.read())
    return docs


def gsm_train(n, level="full"):
    return gen_gsm.generate("train", n, level=level)
