#!/usr/bin/env python3
"""export_audit.py - independent check of a ds-quant --format export directory
against docs/serving-exports.md and the safetensors section of docs/checkpoints.md,
written from those documents alone (stdlib only: json, struct, array; no numpy, no dsq code).

usage: export_audit.py FORMAT SOURCE_DIR EXPORT_DIR [--rtn]
  FORMAT  ascend | awq | compressed-tensors
  --rtn   the export is plain round-to-nearest of SOURCE_DIR (no --calib):
          also check every dequantized weight against the source within
          half a quantization step (plus the scale dtype's rounding).
Prints one "FAIL: ..." line per discrepancy, exits 1 if any.
"""
import array
import hashlib
import json
import os
import re
import struct
import sys

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


ALIGN_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
               "C64", "F64", "I64", "U64"]
BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
        "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
        "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
        "U64": 64}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class St:
    """One safetensors file, checked on open against docs/checkpoints.md, "safetensors"."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.raw = f.read()
        name = os.path.basename(path)
        n = struct.unpack("<Q", self.raw[:8])[0]
        hb = self.raw[8:8 + n]
        if not hb.startswith(b"{"):
            fail("%s: header does not begin with '{'" % name)
        if n % 8:
            fail("%s: header length %d is not a multiple of 8 (buffer not 8-aligned)" % (name, n))
        txt = hb.decode("utf-8")
        if txt.rstrip(" ") != txt.rstrip():
            fail("%s: header padded with something other than spaces" % name)
        pairs = json.loads(txt, object_pairs_hook=lambda kv: kv)
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            fail("%s: duplicate header keys" % name)
        h = dict(pairs)
        meta = h.pop("__metadata__", None)
        if meta is not None:
            if not isinstance(meta, list) or not all(isinstance(v, str) for _, v in meta):
                fail("%s: __metadata__ must be a string->string map" % name)
        self.t = {}
        for k, v in h.items():
            v = dict(v)
            self.t[k] = v
        self.base = 8 + n
        ents = sorted(self.t.items(), key=lambda kv: kv[1]["data_offsets"][0])
        end = 0
        for k, v in ents:
            b, e = v["data_offsets"]
            if b != end:
                fail("%s: %s begins at %d, previous tensor ends at %d (hole/overlap)" % (name, k, b, end))
            if v["dtype"] not in BITS:
                fail("%s: %s: unknown dtype %s" % (name, k, v["dtype"]))
                continue
            bits = numel(v["shape"]) * BITS[v["dtype"]]
            if bits % 8 or e - b != bits // 8:
                fail("%s: %s: %d bytes for %s %s" % (name, k, e - b, v["dtype"], v["shape"]))
            end = e
        if len(self.raw) != self.base + end:
            fail("%s: file size %d != 8 + N + last END %d" % (name, len(self.raw), self.base + end))
        # writer order (prepare()): descending dtype alignment, then name
        want = sorted(self.t, key=lambda k: (-ALIGN_ORDER.index(self.t[k]["dtype"])
                                             if self.t[k]["dtype"] in ALIGN_ORDER else 0, k))
        if [k for k, _ in ents] != want:
            fail("%s: tensors not laid out by descending dtype alignment then name" % name)

    def data(self, k):
        v = self.t[k]
        b, e = v["data_offsets"]
        buf = self.raw[self.base + b:self.base + e]
        dt = v["dtype"]
        if dt == "BF16":
            u = array.array("H")
            u.frombytes(buf)
            w = array.array("I", (x << 16 for x in u))
            out = array.array("f")
            out.frombytes(w.tobytes())
            return out
        code = {"F32": "f", "I32": "i", "I8": "b", "U8": "B", "I64": "q", "F64": "d", "I16": "h"}.get(dt)
        if dt == "F16":
            return array.array("f", (x[0] for x in struct.iter_unpack("<e", buf)))
        if code is None:
            raise ValueError("%s: cannot decode %s" % (k, dt))
        out = array.array(code)
        out.frombytes(buf)
        if sys.byteorder != "little":
            out.byteswap()
        return out


class Model:
    """A directory of shards (with or without an index)."""

    def __init__(self, d, single, index, strict=True):
        self.d = d
        self.files = {}
        self.where = {}
        ip = os.path.join(d, index)
        if os.path.exists(os.path.join(d, single)):
            names = [single]
            if os.path.exists(ip):
                fail("%s: both %s and %s" % (d, single, index))
        elif os.path.exists(ip):
            with open(ip) as f:
                idx = json.load(f)
            if set(idx) != {"metadata", "weight_map"}:
                fail("%s: keys %s, want metadata + weight_map" % (index, sorted(idx)))
            names = sorted(set(idx["weight_map"].values()))
            self.idx = idx
        else:
            fail("%s: neither %s nor %s" % (d, single, index))
            names = []
        stem = single[:-len(".safetensors")]
        if strict and names != [single]:
            pat = re.compile(re.escape(stem) + r"-(\d{5})-of-(\d{5})\.safetensors$")
            for i, nm in enumerate(names):
                m = pat.match(nm)
                if not m or int(m.group(1)) != i + 1 or int(m.group(2)) != len(names):
                    fail("shard name %s (want %s-%05d-of-%05d.safetensors)" % (nm, stem, i + 1, len(names)))
        total = 0
        for nm in names:
            st = St(os.path.join(d, nm))
            self.files[nm] = st
            for k, v in st.t.items():
                if k in self.where:
                    fail("%s in two shards" % k)
                self.where[k] = st
                total += numel(v["shape"]) * BITS.get(v["dtype"], 8) // 8
        if strict and hasattr(self, "idx"):
            wm = self.idx["weight_map"]
            if set(wm) != set(self.where):
                fail("index weight_map names != shard tensors (%d vs %d)" % (len(wm), len(self.where)))
            for k, nm in wm.items():
                if k in self.where and self.where[k] is not self.files.get(nm):
                    fail("index maps %s to %s, but it is elsewhere" % (k, nm))
            ts = self.idx["metadata"].get("total_size")
            if ts != total:
                fail("index total_size %r != sum of tensor bytes %d" % (ts, total))

    def has(self, k):
        return k in self.where

    def meta(self, k):
        return self.where[k].t[k]

    def data(self, k):
        return self.where[k].data(k)


def expect(m, k, dtype, shape):
    if not m.has(k):
        fail("missing tensor %s" % k)
        return False
    v = m.meta(k)
    if v["dtype"] != dtype or list(v["shape"]) != list(shape):
        fail("%s: %s %s, want %s %s" % (k, v["dtype"], v["shape"], dtype, list(shape)))
        return False
    return True


def source(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return cfg, Model(d, "model.safetensors", "model.safetensors.index.json", strict=False)


def is_linear_weight(name):
    return bool(re.search(r"(_proj|_proj_with_mqa)\.weight$", name))


def check_config(scfg, cfg, fmt):
    """Everything but the keys the format edits is the source's config."""
    a, b = dict(scfg), dict(cfg)
    for k in ("quantization_config",) + (("torch_dtype",) if fmt == "awq" else ()):
        a.pop(k, None)
        b.pop(k, None)
    for k in sorted(set(a) | set(b)):
        if a.get(k, "absent") != b.get(k, "absent"):
            fail("config.json %s = %r, source %r" % (k, b.get(k, "absent"), a.get(k, "absent")))


def check_sums(d):
    p = os.path.join(d, "SHA256SUMS")
    if not os.path.exists(p):
        fail("no SHA256SUMS")
        return
    with open(p) as f:
        for line in f:
            m = re.match(r"^([0-9a-f]{64})  (\S.*)$", line.rstrip("\n"))
            if not m:
                fail("SHA256SUMS line not in sha256sum format: %r" % line)
                continue
            with open(os.path.join(d, m.group(2)), "rb") as g:
                if hashlib.sha256(g.read()).hexdigest() != m.group(1):
                    fail("SHA256SUMS: %s mismatch" % m.group(2))


class Ref:
    """Source weights (BF16/F32 only; FP8 sources are not compared)."""

    def __init__(self, src):
        self.src = src
        self.ok = not any(v["dtype"].startswith("F8") for st in src.files.values() for v in st.t.values())

    def w(self, name):
        return self.src.data(name) if self.ok and self.src.has(name) else None


def clip_excess(w, sc, lo, hi):
    """How far w lies outside the code grid [lo*sc, hi*sc] (0 inside it).
    Searched w4a8 scales (quant/qsearch.c) may clip a group's extremes; the
    code must then be the grid's end, so the error is half a step plus this."""
    a, b = lo * abs(sc), hi * abs(sc)
    return w - b if w > b else a - w if w < a else 0.0


def close(a, b, tol):
    return abs(a - b) <= tol


# ---------------------------------------------------------------- ascend 4.x
ASC_TYPES = {"FLOAT", "W16A16S", "W8A8", "W8A8_DYNAMIC", "W8A8_MIX", "W8A16", "W4A4_DYNAMIC",
             "W4A8_DYNAMIC", "WFP8AFP8_DYNAMIC", "W8A8_MXFP8", "W4A8_MXFP", "W4A4_MXFP4",
             "W4A4_MXFP4_DUALSCALE", "C8", "FAQuant"}
PRIO = ["FLOAT", "W16A16S", "W8A16", "W8A8_DYNAMIC", "W8A8_MIX", "W8A8", "WFP8AFP8_DYNAMIC",
        "W8A8_MXFP8", "W4A8_MXFP", "W4A4_DYNAMIC", "W4A4_MXFP4", "W4A4_MXFP4_DUALSCALE", "W4A4_MXFP4_SVD"]


def audit_ascend(scfg, src, ref, d, rtn):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if "quantization_config" in cfg:
        fail("ascend config.json keeps quantization_config")
    tdt = scfg.get("torch_dtype")
    if cfg.get("torch_dtype") != tdt:
        fail("ascend torch_dtype %r, source %r" % (cfg.get("torch_dtype"), tdt))
    m = Model(d, "quant_model_weights.safetensors", "quant_model_weights.safetensors.index.json")
    with open(os.path.join(d, "quant_model_description.json")) as f:
        desc = json.load(f)
    glob = {"version": "1.0.0", "metadata": {}, "group_size": 0, "optional": {}}
    for k, v in glob.items():
        if desc.get(k) != v:
            fail("description %s = %r, want %r" % (k, desc.get(k), v))
    for k in desc:
        if k not in m.where and k not in glob and k != "model_quant_type":
            fail("description key %s is neither a tensor nor a global key" % k)
    for k in m.where:
        if k not in desc:
            fail("description lacks %s" % k)
        elif desc[k] not in ASC_TYPES:
            fail("description %s = %r is not a type" % (k, desc[k]))
    used = {desc[k] for k in m.where if k in desc}
    best = max((t for t in used if t in PRIO), key=PRIO.index, default="FLOAT")
    if desc.get("model_quant_type") != best:
        fail("model_quant_type %r, want %r (priority)" % (desc.get("model_quant_type"), best))
    for k in src.where:
        if k.endswith("_scale_inv"):
            continue
        if m.has(k) and not is_linear_weight(k) and desc.get(k) != "FLOAT":
            fail("%s must be FLOAT" % k)
        if not is_linear_weight(k) and not m.has(k):
            fail("float tensor %s dropped" % k)
    for k in m.where:
        if k.endswith("_scale_inv"):
            fail("%s exported" % k)
        if re.search(r"kv_b_proj|embed_tokens|lm_head|\.mlp\.gate\.|norm|model\.layers\.%d\." %
                     scfg.get("num_hidden_layers", -1), k) and desc.get(k) != "FLOAT":
            fail("%s must be FLOAT (DeepSeek-V3 placement rules), is %r" % (k, desc.get(k)))
    dq = {"bfloat16": "F32", "float16": "I64"}.get(tdt)
    fused = {}
    moe = {}
    for k in sorted(src.where):
        if not is_linear_weight(k):
            if m.has(k) and ref.ok and m.meta(k)["dtype"] != src.meta(k)["dtype"]:
                fail("FLOAT %s: %s, source %s (written as-is)" % (k, m.meta(k)["dtype"], src.meta(k)["dtype"]))
            continue
        mod = k[:-len(".weight")]
        N, K = src.meta(k)["shape"]
        t = desc.get(k)
        if t is None:
            fail("no description for %s" % k)
            continue
        names = {x for x in m.where if x.startswith(mod + ".")}
        for x in names:
            if desc.get(x) != (t if not x.endswith(".bias") else "FLOAT"):
                fail("%s typed %r, its weight %r" % (x, desc.get(x), t))
        me = re.search(r"\.mlp\.experts\.(\d+)\.", k)
        if me:
            moe.setdefault(k.split(".mlp.")[0], set()).add(t)
        for a, b in ((".q_a_proj", ".kv_a_proj_with_mqa"), (".gate_proj", ".up_proj")):
            if mod.endswith(a):
                fused.setdefault(mod[:-len(a)] + a + "|" + b, [None, None])[0] = (t, mod)
            if mod.endswith(b):
                fused.setdefault(mod[:-len(b)] + a + "|" + b, [None, None])[1] = (t, mod)
        w = ref.w(k) if rtn else None
        if t == "FLOAT":
            expect(m, k, m.meta(k)["dtype"], [N, K]) if m.has(k) else fail("missing %s" % k)
            if m.has(k) and m.meta(k)["dtype"] not in ("BF16", "F16", "F32"):
                fail("%s FLOAT with dtype %s" % (k, m.meta(k)["dtype"]))
            if names - {k, mod + ".bias"}:
                fail("FLOAT %s has extra tensors %s" % (mod, sorted(names - {k})))
        elif t == "W8A8_DYNAMIC":
            want = {k, mod + ".weight_scale", mod + ".weight_offset"}
            if names - want - {mod + ".bias"}:
                fail("%s: extra tensors %s" % (mod, sorted(names - want)))
            ok = expect(m, k, "I8", [N, K]) & expect(m, mod + ".weight_scale", "F32", [N, 1]) & \
                expect(m, mod + ".weight_offset", "F32", [N, 1])
            if not ok:
                continue
            if any(m.data(mod + ".weight_offset")):
                fail("%s.weight_offset not all 0" % mod)
            q, s = m.data(k), m.data(mod + ".weight_scale")
            if w is not None:
                for n in range(N):
                    for j in range(K):
                        e = abs(w[n * K + j] - q[n * K + j] * s[n])
                        if e > s[n] * 0.5001 + 1e-7:
                            fail("%s[%d,%d]: |w - q*s| = %g > s/2 = %g" % (k, n, j, e, s[n] / 2))
                            break
                    else:
                        continue
                    break
        elif t == "W8A8":
            want = {k, mod + ".input_scale", mod + ".input_offset", mod + ".deq_scale", mod + ".quant_bias"}
            if names != want:
                fail("%s: tensors %s, want %s" % (mod, sorted(names), sorted(want)))
            if dq is None:
                fail("%s: W8A8 with torch_dtype %r" % (mod, tdt))
                continue
            ok = expect(m, k, "I8", [N, K]) & expect(m, mod + ".input_scale", "F32", [1]) & \
                expect(m, mod + ".input_offset", "F32", [1]) & expect(m, mod + ".deq_scale", dq, [N]) & \
                expect(m, mod + ".quant_bias", "I32", [N])
            if not ok:
                continue
            off = m.data(mod + ".input_offset")[0]
            if off != int(off) or not -128 <= off <= 127:
                fail("%s.input_offset %r is not a whole number in [-128,127]" % (mod, off))
            q, qb = m.data(k), m.data(mod + ".quant_bias")
            isc = m.data(mod + ".input_scale")[0]
            dsc = m.data(mod + ".deq_scale")
            if dq == "I64":
                dsc = array.array("f", (struct.unpack("<f", struct.pack("<i", v))[0] for v in dsc))
            bias = m.data(mod + ".bias") if m.has(mod + ".bias") else None
            for n in range(N):
                sq = sum(q[n * K:(n + 1) * K])
                b = bias[n] / dsc[n] if bias is not None else 0.0
                if qb[n] != round(b - off * sq):
                    fail("%s.quant_bias[%d] = %d, want round(bias/deq - off*sum q) = %d" % (mod, n, qb[n], round(b - off * sq)))
                    break
            fused.setdefault(("static", mod), (isc, off))
        elif t == "W4A8_DYNAMIC":
            if not me:
                fail("%s: W4A8_DYNAMIC outside routed experts" % mod)
            down = bool(re.search(r"(down_proj|o_proj|w2)$", mod))
            want = {k, mod + ".weight_scale", mod + ".weight_offset", mod + ".scale_bias"}
            if names - want - {mod + ".bias"}:
                fail("%s: extra tensors %s" % (mod, sorted(names - want)))
            ok = expect(m, k, "I8", [N // 2, K]) & expect(m, mod + ".weight_scale", "F32", [N, 1]) & \
                expect(m, mod + ".weight_offset", "F32", [N, 1]) & \
                expect(m, mod + ".scale_bias", "F32", [N, 16 if down else 1])
            if not ok:
                continue
            if any(m.data(mod + ".weight_offset")):
                fail("%s.weight_offset not all 0" % mod)
            p, s, sb = m.data(k), m.data(mod + ".weight_scale"), m.data(mod + ".scale_bias")
            q = [0] * (N * K)
            for j in range(N // 2):
                for c in range(K):
                    v = p[j * K + c] & 0xFF
                    lo, hi = v & 0xF, v >> 4
                    q[2 * j * K + c] = lo - 16 if lo > 7 else lo
                    q[(2 * j + 1) * K + c] = hi - 16 if hi > 7 else hi
            parts = 16 if down else 1
            for n in range(N):
                for c in range(parts):
                    a, b = c * K // parts, (c + 1) * K // parts
                    want_sb = 8.0 * sum(q[n * K + x] * s[n] for x in range(a, b))
                    if not close(sb[n * parts + c], want_sb, 1e-4 * (abs(want_sb) + s[n] * 8)):
                        fail("%s.scale_bias[%d,%d] = %g, want 8*sum(q*s) = %g" % (mod, n, c, sb[n * parts + c], want_sb))
                        break
                else:
                    continue
                break
            if w is not None:
                for n in range(N):
                    bad = [x for x in range(K) if abs(w[n * K + x] - q[n * K + x] * s[n]) >
                           s[n] * 0.5001 + 1e-7 + clip_excess(w[n * K + x], s[n], -8, 7)]
                    if bad:
                        fail("%s[%d,%d]: |w - q*s| > s/2" % (k, n, bad[0]))
                        break
        else:
            fail("%s: unexpected type %s" % (k, t))
    for key, v in fused.items():
        if isinstance(key, tuple):
            continue
        a, b = v
        if a and b and a[0] != b[0]:
            fail("fused pair %s (%s) and %s (%s) differ" % (a[1], a[0], b[1], b[0]))
        if a and b and a[0] == "W8A8":
            ia, ib = fused.get(("static", a[1])), fused.get(("static", b[1]))
            if ia != ib:
                fail("static fused pair %s / %s: input_scale/offset %s vs %s" % (a[1], b[1], ia, ib))
    for layer, ts in moe.items():
        if len(ts) != 1:
            fail("%s: experts of several types %s" % (layer, sorted(ts)))
    return m


# ---------------------------------------------------------------- awq 3.x
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_unpack(p, rows, cols8):
    out = [0] * (rows * cols8 * 8)
    for r in range(rows):
        for c in range(cols8):
            v = p[r * cols8 + c] & 0xFFFFFFFF
            for i in range(8):
                out[r * cols8 * 8 + 8 * c + AWQ_ORDER[i]] = (v >> (4 * i)) & 0xF
    return out


def audit_awq(scfg, src, ref, d, rtn):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        fail("awq config.json has no quantization_config")
        return
    if set(qc) != {"quant_method", "zero_point", "group_size", "bits", "version", "modules_to_not_convert"}:
        fail("awq quantization_config keys %s" % sorted(qc))
    for k, v in (("quant_method", "awq"), ("zero_point", True), ("bits", 4), ("version", "gemm")):
        if qc.get(k) != v:
            fail("awq %s = %r, want %r" % (k, qc.get(k), v))
    if cfg.get("torch_dtype") != "float16":
        fail("awq torch_dtype %r, want float16" % cfg.get("torch_dtype"))
    G = qc.get("group_size")
    skip = qc.get("modules_to_not_convert")
    if skip is not None and not (isinstance(skip, list) and all(isinstance(x, str) for x in skip)):
        fail("modules_to_not_convert must be null or a list of strings")
        skip = None
    m = Model(d, "model.safetensors", "model.safetensors.index.json")
    nl = scfg.get("num_hidden_layers", -1)
    for k in m.where:
        if k.endswith("_scale_inv"):
            fail("%s exported" % k)
        if k.startswith("model.layers.%d." % nl):
            fail("MTP tensor %s exported (AutoAWQ drops layer %d)" % (k, nl))
        dt = m.meta(k)["dtype"]
        if not re.search(r"\.(qweight|qzeros)$", k) and dt != "F16":
            fail("%s: %s, AWQ float tensors are F16" % (k, dt))
    quant, flt = set(), set()
    for k in sorted(src.where):
        if k.endswith("_scale_inv") or k.startswith("model.layers.%d." % nl):
            continue
        if not is_linear_weight(k):
            if not m.has(k):
                fail("float tensor %s dropped" % k)
            continue
        mod = k[:-len(".weight")]
        N, K = src.meta(k)["shape"]
        skipped = any(x in mod for x in (skip or []))
        if m.has(k):
            flt.add(mod)
            if not skipped:
                fail("%s is float but no modules_to_not_convert entry matches it" % mod)
            expect(m, k, "F16", [N, K])
            continue
        quant.add(mod)
        if skipped:
            fail("%s is quantized but modules_to_not_convert matches it" % mod)
        g = K if G == -1 else G
        if not isinstance(g, int) or g <= 0 or K % g or N % 8:
            fail("%s: K=%d N=%d with group_size %r" % (mod, K, N, G))
            continue
        ok = expect(m, mod + ".qweight", "I32", [K, N // 8]) & expect(m, mod + ".qzeros", "I32", [K // g, N // 8]) & \
            expect(m, mod + ".scales", "F16", [K // g, N])
        if not ok:
            continue
        w = ref.w(k) if rtn else None
        if w is None:
            continue
        q = awq_unpack(m.data(mod + ".qweight"), K, N // 8)
        z = awq_unpack(m.data(mod + ".qzeros"), K // g, N // 8)
        s = m.data(mod + ".scales")
        worst = 0.0
        for kk in range(K):
            for n in range(N):
                gi = kk // g
                sc = s[gi * N + n]
                e = abs((q[kk * N + n] - z[gi * N + n]) * sc - w[n * K + kk])
                # half a step, plus F16 rounding of the scale times |q - z| <= 15
                lim = abs(sc) * 0.5 + 15 * abs(sc) * 2 ** -11 + 1e-6
                worst = max(worst, e / lim)
        if worst > 1.0:
            fail("%s: dequantized weight off the source by %.3f of the bound" % (mod, worst))
    for a, b in ((".q_a_proj", ".kv_a_proj_with_mqa"), (".gate_proj", ".up_proj")):
        for x in quant | flt:
            if x.endswith(a):
                y = x[:-len(a)] + b
                if (x in quant) != (y in quant) and (y in quant | flt):
                    fail("fused pair %s / %s: one quantized, one float" % (x, y))


# ---------------------------------------------------------------- compressed-tensors 5.x
def audit_ct(scfg, src, ref, d, rtn):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        fail("ct config.json has no quantization_config")
        return
    keys = {"version", "quant_method", "sparsity_config", "transform_config", "config_groups", "format",
            "quantization_status", "ignore", "kv_cache_scheme", "global_compression_ratio"}
    if set(qc) != keys:
        fail("ct quantization_config keys %s, want %s" % (sorted(qc), sorted(keys)))
    for k, v in (("quant_method", "compressed-tensors"), ("quantization_status", "compressed"),
                 ("sparsity_config", {}), ("transform_config", {}), ("kv_cache_scheme", None),
                 ("global_compression_ratio", None)):
        if qc.get(k, "absent") != v:
            fail("ct %s = %r, want %r" % (k, qc.get(k, "absent"), v))
    if not isinstance(qc.get("version"), str):
        fail("ct version must be a string")
    ign = qc.get("ignore") or []
    for x in ("lm_head", "re:.*mlp.gate$"):
        if x not in ign:
            fail("ct ignore lacks %r" % x)
    groups = qc.get("config_groups") or {}
    if len(groups) != 1:
        fail("ct: %d config groups (this audit expects one)" % len(groups))
    args_keys = {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic",
                 "actorder", "observer", "observer_kwargs"}
    for gname, g in groups.items():
        if set(g) != {"targets", "weights", "input_activations", "output_activations", "format"}:
            fail("%s keys %s" % (gname, sorted(g)))
        if g.get("targets") != ["Linear"]:
            fail("%s targets %r" % (gname, g.get("targets")))
        for a in ("weights", "input_activations", "output_activations"):
            v = g.get(a)
            if v is not None and set(v) - args_keys:
                fail("%s.%s has keys older releases reject: %s" % (gname, a, sorted(set(v) - args_keys)))
        if g.get("output_activations") is not None:
            fail("%s: output_activations not null" % gname)
        if g.get("format") != qc.get("format"):
            fail("%s format %r, top-level %r" % (gname, g.get("format"), qc.get("format")))
    if not groups:
        return
    g = list(groups.values())[0]
    wa, ia = g.get("weights") or {}, g.get("input_activations")
    bits = wa.get("num_bits")
    tdt = scfg.get("torch_dtype")
    sdt = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(tdt, "F16")
    if cfg.get("torch_dtype") != tdt:
        fail("ct torch_dtype %r, source %r" % (cfg.get("torch_dtype"), tdt))
    if wa.get("type") != "int" or wa.get("dynamic") is not False:
        fail("weights args type/dynamic %r/%r" % (wa.get("type"), wa.get("dynamic")))
    if ia is not None:
        want = {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True, "observer": None}
        for k, v in want.items():
            if ia.get(k, "absent") != v:
                fail("input_activations.%s = %r, want %r" % (k, ia.get(k, "absent"), v))
        if g.get("format") != "int-quantized":
            fail("int weights + int8 activations must be int-quantized, is %r" % g.get("format"))
    else:
        if g.get("format") != "pack-quantized":
            fail("weight-only int4 must be pack-quantized, is %r" % g.get("format"))
    strat = wa.get("strategy")
    G = wa.get("group_size")
    if strat == "group" and not (isinstance(G, int) and G > 0):
        fail("group strategy with group_size %r" % G)
    if strat == "channel" and G is not None:
        fail("channel strategy with group_size %r" % G)
    if strat not in ("group", "channel"):
        fail("weights strategy %r" % strat)
    if bits == 8 and (wa.get("symmetric") is not True or strat != "channel"):
        fail("W8A8 weights must be symmetric channel")
    asym = wa.get("symmetric") is False
    m = Model(d, "model.safetensors", "model.safetensors.index.json")
    nl = scfg.get("num_hidden_layers", -1)

    def ignored(mod):
        for x in ign:
            if x.startswith("re:"):
                if re.match(x[3:], mod):
                    return True
            elif mod == x or mod.endswith("." + x):
                return True
        return False

    for k in m.where:
        if k.endswith("_scale_inv"):
            fail("%s exported" % k)
        if k.startswith("model.layers.%d." % nl):
            fail("MTP tensor %s exported" % k)
    for k in sorted(src.where):
        if k.endswith("_scale_inv") or k.startswith("model.layers.%d." % nl):
            continue
        if not is_linear_weight(k):
            if not m.has(k):
                fail("float tensor %s dropped" % k)
            elif ref.ok and m.meta(k)["dtype"] != src.meta(k)["dtype"]:
                fail("float %s: %s, source %s" % (k, m.meta(k)["dtype"], src.meta(k)["dtype"]))
            continue
        mod = k[:-len(".weight")]
        N, K = src.meta(k)["shape"]
        if m.has(mod + ".weight_scale") == ignored(mod):
            fail("%s: quantized=%s but ignore list says ignored=%s" % (mod, m.has(mod + ".weight_scale"), ignored(mod)))
        if not m.has(mod + ".weight_scale"):
            continue
        g = K if strat == "channel" else G
        ng = (K + g - 1) // g
        w = ref.w(k) if rtn else None
        names = {x for x in m.where if x.startswith(mod + ".")}
        if g.__class__ is not int:
            continue
        if bits == 4 and ia is None:
            want = {mod + ".weight_packed", mod + ".weight_scale", mod + ".weight_shape"}
            if asym:
                want.add(mod + ".weight_zero_point")
            if names - {mod + ".bias"} != want:
                fail("%s tensors %s, want %s" % (mod, sorted(names), sorted(want)))
            ok = expect(m, mod + ".weight_packed", "I32", [N, (K * 4 + 31) // 32]) & \
                expect(m, mod + ".weight_scale", sdt, [N, ng]) & expect(m, mod + ".weight_shape", "I64", [2])
            if asym:
                ok &= expect(m, mod + ".weight_zero_point", "I32", [(N + 7) // 8, ng])
            if not ok:
                continue
            if list(m.data(mod + ".weight_shape")) != [N, K]:
                fail("%s.weight_shape %s != [%d, %d]" % (mod, list(m.data(mod + ".weight_shape")), N, K))
            p = m.data(mod + ".weight_packed")
            kw = (K * 4 + 31) // 32
            q = [0] * (N * K)
            for n in range(N):
                for c in range(K):
                    q[n * K + c] = ((p[n * kw + c // 8] >> (4 * (c % 8))) & 0xF) - 8
            zp = [0] * (N * ng)
            if asym:
                zpk = m.data(mod + ".weight_zero_point")
                for n in range(N):
                    for j in range(ng):
                        zp[n * ng + j] = ((zpk[(n // 8) * ng + j] >> (4 * (n % 8))) & 0xF) - 8
            s = m.data(mod + ".weight_scale")
            rnd = 2 ** -8 if sdt == "BF16" else 2 ** -11
            if w is not None:
                worst = 0.0
                for n in range(N):
                    for c in range(K):
                        sc = s[n * ng + c // g]
                        e = abs((q[n * K + c] - zp[n * ng + c // g]) * sc - w[n * K + c])
                        worst = max(worst, e / (abs(sc) * (0.5 + 15 * rnd) + 1e-6))
                if worst > 1.0:
                    fail("%s: dequantized weight off the source by %.3f of the bound" % (mod, worst))
        else:
            want = {mod + ".weight", mod + ".weight_scale"}
            if names - {mod + ".bias"} != want:
                fail("%s tensors %s, want %s" % (mod, sorted(names), sorted(want)))
            if not (expect(m, k, "I8", [N, K]) & expect(m, mod + ".weight_scale", sdt, [N, ng])):
                continue
            q, s = m.data(k), m.data(mod + ".weight_scale")
            lo, hi = (-8, 7) if bits == 4 else (-128, 127)
            if min(q) < lo or max(q) > hi:
                fail("%s: codes outside [%d, %d]" % (mod, lo, hi))
            rnd = 2 ** -8 if sdt == "BF16" else 2 ** -11
            if w is not None:
                worst = 0.0
                for n in range(N):
                    for c in range(K):
                        sc = s[n * ng + c // g]
                        e = abs(q[n * K + c] * sc - w[n * K + c])
                        if bits == 4:
                            e -= clip_excess(w[n * K + c], sc, lo, hi)
                        worst = max(worst, e / (abs(sc) * (0.5 + abs(q[n * K + c]) * rnd) + 1e-6))
                if worst > 1.0:
                    fail("%s: dequantized weight off the source by %.3f of the bound" % (mod, worst))


def main():
    a = [x for x in sys.argv[1:] if not x.startswith("--")]
    rtn = "--rtn" in sys.argv
    if len(a) != 3 or a[0] not in ("ascend", "awq", "compressed-tensors"):
        print(__doc__)
        return 2
    fmt, sd, d = a
    scfg, src = source(sd)
    ref = Ref(src)
    check_sums(d)
    with open(os.path.join(d, "config.json")) as f:
        check_config(scfg, json.load(f), fmt)
    {"ascend": audit_ascend, "awq": audit_awq, "compressed-tensors": audit_ct}[fmt](scfg, src, ref, d, rtn)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
