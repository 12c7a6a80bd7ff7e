#!/usr/bin/env node
// export_reader.mjs - an independent reader (and fixture writer) for the
// serving exports, written from docs/serving-exports.md and docs/checkpoints.md
// (safetensors) alone (plain Node, no packages; it shares no code with dsq's C side).
//
//   node tests/export_reader.mjs compare DIR CDUMP   dequantize every quantized
//        linear of export DIR and compare with the C reader's dump (CDUMP/index.txt
//        "module rows cols float_offset" + CDUMP/deq.f32, written by
//        build/tests/test_export_read --dump DIR CDUMP). Exit 1 on disagreement.
//   node tests/export_reader.mjs write FORMAT SCHEME SRC OUT [G]   RTN-quantize the
//        BF16 checkpoint SRC into an export directory (fixtures for the C reader):
//        ascend w8a8-dynamic|w8a8|w4a8, awq awq-w4a16, compressed-tensors
//        awq-w4a16|w4a16-sym|w8a8-dynamic|w4a8.
import fs from 'node:fs';
import path from 'node:path';

// ---- safetensors (docs/checkpoints.md) --------------------------------------
const BITS = { BOOL: 8, U8: 8, I8: 8, I16: 16, U16: 16, F16: 16, BF16: 16, I32: 32, U32: 32, F32: 32, I64: 64, U64: 64, F64: 64 };
const ORDER = ['BOOL', 'F4', 'F6_E2M3', 'F6_E3M2', 'U8', 'I8', 'F8_E5M2', 'F8_E4M3', 'F8_E8M0', 'F8_E4M3FNUZ', 'F8_E5M2FNUZ',
  'I16', 'U16', 'F16', 'BF16', 'I32', 'U32', 'F32', 'C64', 'F64', 'I64', 'U64'];

function readSt(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const hdr = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const base = 8 + n, out = {};
  for (const [k, v] of Object.entries(hdr)) {
    if (k === '__metadata__') continue;
    const [b, e] = v.data_offsets;
    out[k] = { dtype: v.dtype, shape: v.shape, data: buf.subarray(base + b, base + e), file };
  }
  return out;
}

function openDir(dir) {
  const files = fs.readdirSync(dir);
  const idx = files.find((f) => f.endsWith('.safetensors.index.json'));
  let shards = idx ? [...new Set(Object.values(JSON.parse(fs.readFileSync(path.join(dir, idx))).weight_map))]
    : files.filter((f) => f.endsWith('.safetensors'));
  const all = {};
  for (const s of shards) Object.assign(all, readSt(path.join(dir, s)));
  return all;
}

const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
const bitsToF32 = (u) => { u32[0] = u >>> 0; return f32[0]; };
const f32Bits = (x) => { f32[0] = x; return u32[0]; };
function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
function f32ToF16(x) { // round to nearest even
  if (Number.isNaN(x)) return 0x7e00;
  const s = x < 0 || Object.is(x, -0) ? 0x8000 : 0; x = Math.abs(x);
  if (x >= 65520) return s | 0x7c00;
  if (x < 2 ** -24 * 0.5) return s;
  let e = Math.floor(Math.log2(x)); if (2 ** e > x) e--; if (2 ** (e + 1) <= x) e++;
  if (e < -14) return s | rint(x / 2 ** -24);
  let m = rint((x / 2 ** e - 1) * 1024);
  if (m === 1024) { m = 0; e++; }
  if (e > 15) return s | 0x7c00;
  return s | ((e + 15) << 10) | m;
}
function rint(x) { const r = Math.round(x); return (Math.abs(x % 1) === 0.5 && r % 2 !== 0) ? r - 1 : r; }

function floats(t) {
  const n = t.data.length / (BITS[t.dtype] / 8), out = new Float64Array(n), d = t.data;
  for (let i = 0; i < n; i++) {
    switch (t.dtype) {
      case 'F32': out[i] = d.readFloatLE(4 * i); break;
      case 'F16': out[i] = f16ToF32(d.readUInt16LE(2 * i)); break;
      case 'BF16': out[i] = bitsToF32(d.readUInt16LE(2 * i) << 16); break;
      default: throw new Error(`${t.file}: tensor has dtype ${t.dtype}, expected a float`);
    }
  }
  return out;
}
const ints = (t) => {
  const d = t.data;
  if (t.dtype === 'I8') return Int8Array.from(d);
  if (t.dtype === 'I32') return Int32Array.from({ length: d.length / 4 }, (_, i) => d.readInt32LE(4 * i));
  if (t.dtype === 'I64') return Array.from({ length: d.length / 8 }, (_, i) => d.readBigInt64LE(8 * i));
  throw new Error(`${t.file}: dtype ${t.dtype} is not an integer type`);
};

// ---- dequantization per format (w as Float64Array [N*K], row-major out x in) ----
const AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7];

function dequantAll(dir) {
  const T = openDir(dir), res = new Map();
  const get = (m, s) => { const t = T[`${m}.${s}`]; if (!t) throw new Error(`${dir}: ${m}.${s} missing`); return t; };
  const descFile = path.join(dir, 'quant_model_description.json');
  if (fs.existsSync(descFile)) {
    const desc = JSON.parse(fs.readFileSync(descFile));
    for (const [name, type] of Object.entries(desc)) {
      if (!name.endsWith('.weight') || typeof type !== 'string' || type === 'FLOAT') continue;
      const m = name.slice(0, -7), w = get(m, 'weight'), q = ints(w);
      if (type === 'W8A8_DYNAMIC') {
        const [N, K] = w.shape, s = floats(get(m, 'weight_scale')), out = new Float64Array(N * K);
        for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) out[n * K + k] = Math.fround(q[n * K + k] * s[n]);
        res.set(m, { N, K, w: out, exact: true });
      } else if (type === 'W8A8') { // effective weight q * deq_scale / input_scale (AscendV1, W8A8 static)
        const [N, K] = w.shape, is = floats(get(m, 'input_scale'))[0], dq = get(m, 'deq_scale');
        const dv = dq.dtype === 'I64' ? ints(dq).map((b) => bitsToF32(Number(BigInt.asUintN(32, b)))) : floats(dq);
        const out = new Float64Array(N * K);
        for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) out[n * K + k] = q[n * K + k] * dv[n] / is;
        res.set(m, { N, K, w: out, exact: false });
      } else if (type === 'W4A8_DYNAMIC') { // int4 pairs along N, low nibble = even row (AscendV1, W4A8_DYNAMIC)
        const N = 2 * w.shape[0], K = w.shape[1], s = floats(get(m, 'weight_scale')), out = new Float64Array(N * K);
        for (let j = 0; j < N / 2; j++) for (let k = 0; k < K; k++) {
          const b = w.data[j * K + k], lo = (b & 15) >= 8 ? (b & 15) - 16 : b & 15, hi = (b >> 4) >= 8 ? (b >> 4) - 16 : b >> 4;
          out[2 * j * K + k] = Math.fround(lo * s[2 * j]); out[(2 * j + 1) * K + k] = Math.fround(hi * s[2 * j + 1]);
        }
        res.set(m, { N, K, w: out, exact: true });
      } else throw new Error(`${descFile}: ${name}: type ${type} not handled`);
    }
    return res;
  }
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'))).quantization_config || {};
  // compressed-tensors group size (tensor contract: the last group may be ragged, so it is not derivable from shapes)
  const ctG = (K) => { const w = Object.values(cfg.config_groups || {})[0]?.weights; return w && w.strategy === 'group' ? w.group_size : K; };
  for (const [name, t] of Object.entries(T)) {
    if (cfg.quant_method === 'awq' && name.endsWith('.qweight')) { // AutoAWQ GEMM: tensor contract, packing order
      const m = name.slice(0, -8), [K, NC] = t.shape, N = 8 * NC, qw = ints(t), qz = ints(get(m, 'qzeros'));
      const sc = floats(get(m, 'scales')), G = cfg.group_size === -1 ? K : (cfg.group_size ?? cfg.q_group_size);
      const out = new Float64Array(N * K);
      for (let k = 0; k < K; k++) for (let c = 0; c < NC; c++) for (let i = 0; i < 8; i++) {
        const n = 8 * c + AWQ_ORDER[i], g = Math.floor(k / G);
        const q = (qw[k * NC + c] >>> (4 * i)) & 15, z = (qz[g * NC + c] >>> (4 * i)) & 15;
        out[n * K + k] = Math.fround((q - z) * sc[g * N + n]);
      }
      res.set(m, { N, K, w: out, exact: true });
    } else if (cfg.quant_method === 'compressed-tensors' && name.endsWith('.weight_packed')) { // compressed-tensors: tensor contract
      const m = name.slice(0, -14), [N, K] = ints(get(m, 'weight_shape')).map(Number), p = ints(t);
      const s = floats(get(m, 'weight_scale')), ng = get(m, 'weight_scale').shape[1], G = ctG(K);
      const zt = T[`${m}.weight_zero_point`], zp = zt ? ints(zt) : null, out = new Float64Array(N * K);
      for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) {
        const g = Math.floor(k / G), q = ((p[n * Math.ceil(K / 8) + (k >> 3)] >>> (4 * (k & 7))) & 15) - 8;
        const z = zp ? ((zp[(n >> 3) * ng + g] >>> (4 * (n & 7))) & 15) - 8 : 0;
        out[n * K + k] = Math.fround((q - z) * s[n * ng + g]);
      }
      res.set(m, { N, K, w: out, exact: true });
    } else if (cfg.quant_method === 'compressed-tensors' && name.endsWith('.weight') && t.dtype === 'I8') {
      const m = name.slice(0, -7), [N, K] = t.shape, q = ints(t), st = get(m, 'weight_scale'), s = floats(st);
      const ng = st.shape[1], G = ctG(K), out = new Float64Array(N * K);
      for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) out[n * K + k] = Math.fround(q[n * K + k] * s[n * ng + Math.floor(k / G)]);
      res.set(m, { N, K, w: out, exact: true });
    }
  }
  return res;
}

function compare(dir, cdump) {
  const mine = dequantAll(dir);
  const idx = fs.readFileSync(path.join(cdump, 'index.txt'), 'utf8').trim().split('\n').filter(Boolean);
  const bin = fs.readFileSync(path.join(cdump, 'deq.f32'));
  let bad = 0, maxRel = 0, maxAbs = 0, nexact = 0, n = 0;
  const seen = new Set();
  for (const line of idx) {
    const [m, rs, cs, off] = line.split(' '), N = +rs, K = +cs, o = +off;
    seen.add(m);
    const r = mine.get(m);
    if (!r) { console.log(`FAIL: ${m}: the C reader dequantized it, this reader found no quantized linear`); bad++; continue; }
    if (r.N !== N || r.K !== K) { console.log(`FAIL: ${m}: shape [${N}, ${K}] (C) vs [${r.N}, ${r.K}]`); bad++; continue; }
    for (let i = 0; i < N * K; i++) {
      const c = bin.readFloatLE(4 * (o + i)), w = r.w[i], d = Math.abs(c - w);
      // exact formulas must agree bit for bit; W8A8 static is q*deq/in vs q*s_w (f32 rounding)
      const tol = r.exact ? 0 : 4 * 2 ** -24 * Math.abs(w) + 1e-37;
      if (d > tol) { if (bad < 10) console.log(`FAIL: ${m}[${Math.floor(i / K)}][${i % K}] C ${c} vs node ${w}`); bad++; }
      if (d > maxAbs) maxAbs = d;
      if (w !== 0 && d / Math.abs(w) > maxRel) maxRel = d / Math.abs(w);
      if (d === 0) nexact++;
      n++;
    }
  }
  for (const m of mine.keys()) if (!seen.has(m)) { console.log(`FAIL: ${m}: quantized in ${dir} but absent from the C dump`); bad++; }
  console.log(`${dir}: ${seen.size} quantized linears, ${n} weights, ${nexact} bit-identical, max |diff| ${maxAbs.toExponential(3)}, max rel ${maxRel.toExponential(3)}`);
  return bad ? 1 : 0;
}

// ---- fixture writer (RTN, from the contracts) ------------------------------------
function writeSt(file, tensors) { // tensors: name -> {dtype, shape, data: Buffer}
  const names = Object.keys(tensors).sort((a, b) => (ORDER.indexOf(tensors[b].dtype) - ORDER.indexOf(tensors[a].dtype)) || (a < b ? -1 : a > b ? 1 : 0));
  const hdr = {}; let off = 0;
  for (const n of names) { const t = tensors[n]; hdr[n] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] }; off += t.data.length; }
  let h = Buffer.from(JSON.stringify(hdr)); h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8); len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(file, Buffer.concat([len, h, ...names.map((n) => tensors[n].data)]));
}
const bufF32 = (a) => { const b = Buffer.alloc(4 * a.length); a.forEach((v, i) => b.writeFloatLE(v, 4 * i)); return b; };
const bufF16 = (a) => { const b = Buffer.alloc(2 * a.length); a.forEach((v, i) => b.writeUInt16LE(f32ToF16(v), 2 * i)); return b; };
const bufI8 = (a) => Buffer.from(Int8Array.from(a).buffer);
const bufI32 = (a) => { const b = Buffer.alloc(4 * a.length); a.forEach((v, i) => b.writeInt32LE(v | 0, 4 * i)); return b; };

function write(format, scheme, src, out, G) {
  const T = openDir(src);
  fs.mkdirSync(out, { recursive: true });
  for (const f of fs.readdirSync(src)) if (!f.endsWith('.safetensors') && !f.endsWith('.index.json')) fs.copyFileSync(path.join(src, f), path.join(out, f));
  const cfg = JSON.parse(fs.readFileSync(path.join(src, 'config.json')));
  const res = {}, desc = {};
  const isLinear = (n, t) => n.startsWith('model.layers.') && n.endsWith('.weight') && t.shape.length === 2 && !n.endsWith('.mlp.gate.weight');
  const isExpert = (n) => n.includes('.mlp.experts.');
  for (const [name, t] of Object.entries(T)) {
    const m = name.slice(0, -7);
    const keepFloat = () => {
      if (format === 'awq') res[name] = { dtype: 'F16', shape: t.shape, data: bufF16(floats(t)) };
      else res[name] = t;
      desc[name] = 'FLOAT';
    };
    if (!isLinear(name, t)) { keepFloat(); continue; }
    const [N, K] = t.shape, w = floats(t);
    if (format === 'ascend') {
      if (name.includes('kv_b_proj')) { keepFloat(); continue; }
      const ty = scheme === 'w4a8' && isExpert(name) ? 'W4A8_DYNAMIC' : scheme === 'w8a8' && !isExpert(name) ? 'W8A8' : 'W8A8_DYNAMIC';
      const qmax = ty === 'W4A8_DYNAMIC' ? 7 : 127, qmin = ty === 'W4A8_DYNAMIC' ? -8 : -127;
      const s = [], q = new Int8Array(N * K);
      for (let n = 0; n < N; n++) {
        let a = 0; for (let k = 0; k < K; k++) a = Math.max(a, Math.abs(w[n * K + k]));
        s.push(Math.fround(Math.max(a / qmax, 1e-10)));
        for (let k = 0; k < K; k++) q[n * K + k] = Math.min(qmax, Math.max(qmin, rint(w[n * K + k] / s[n])));
      }
      for (const k of ['weight', 'weight_scale', 'weight_offset', 'scale_bias', 'input_scale', 'input_offset', 'deq_scale', 'quant_bias']) desc[`${m}.${k}`] = ty;
      if (ty === 'W4A8_DYNAMIC') {
        const p = new Int8Array(N / 2 * K);
        for (let j = 0; j < N / 2; j++) for (let k = 0; k < K; k++) p[j * K + k] = ((q[(2 * j + 1) * K + k] << 4) | (q[2 * j * K + k] & 15)) << 24 >> 24;
        const down = /down_proj$/.test(m), C = down ? 16 : 1, sb = new Float64Array(N * C);
        for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) sb[n * C + Math.floor(k / (K / C))] += 8 * q[n * K + k] * s[n];
        res[`${m}.weight`] = { dtype: 'I8', shape: [N / 2, K], data: bufI8(p) };
        res[`${m}.scale_bias`] = { dtype: 'F32', shape: [N, C], data: bufF32(Array.from(sb)) };
      } else res[`${m}.weight`] = { dtype: 'I8', shape: [N, K], data: bufI8(q) };
      if (ty === 'W8A8') { // synthetic per-tensor activation parameters (no calibration here)
        const is = Math.fround(0.03125 * 1.1), io = 3, dq = s.map((v) => Math.fround(is * v));
        res[`${m}.input_scale`] = { dtype: 'F32', shape: [1], data: bufF32([is]) };
        res[`${m}.input_offset`] = { dtype: 'F32', shape: [1], data: bufF32([io]) };
        res[`${m}.deq_scale`] = { dtype: 'F32', shape: [N], data: bufF32(dq) };
        const qb = []; for (let n = 0; n < N; n++) { let r = 0; for (let k = 0; k < K; k++) r += q[n * K + k]; qb.push(-io * r); }
        res[`${m}.quant_bias`] = { dtype: 'I32', shape: [N], data: bufI32(qb) };
      } else {
        res[`${m}.weight_scale`] = { dtype: 'F32', shape: [N, 1], data: bufF32(s) };
        res[`${m}.weight_offset`] = { dtype: 'F32', shape: [N, 1], data: bufF32(s.map(() => 0)) };
      }
      continue;
    }
    if (format === 'awq') { // AutoAWQ's pseudo_quantize_tensor, then its packing order
      if (K % G || N % 8) { keepFloat(); (cfg.__skip ||= []).push(m); continue; }
      const ng = K / G, qw = new Int32Array(K * N / 8), qz = new Int32Array(ng * N / 8), sc = new Array(ng * N);
      for (let n = 0; n < N; n++) for (let g = 0; g < ng; g++) {
        let lo = Infinity, hi = -Infinity; for (let k = g * G; k < (g + 1) * G; k++) { lo = Math.min(lo, w[n * K + k]); hi = Math.max(hi, w[n * K + k]); }
        const s = f16ToF32(f32ToF16(Math.max(hi - lo, 1e-5) / 15)), z = Math.min(15, Math.max(0, rint(-lo / s)));
        sc[g * N + n] = s;
        const c = n >> 3, i = AWQ_ORDER.indexOf(n & 7);
        qz[g * (N / 8) + c] |= z << (4 * i);
        for (let k = g * G; k < (g + 1) * G; k++) qw[k * (N / 8) + c] |= Math.min(15, Math.max(0, rint(w[n * K + k] / s) + z)) << (4 * i);
      }
      res[`${m}.qweight`] = { dtype: 'I32', shape: [K, N / 8], data: bufI32(qw) };
      res[`${m}.qzeros`] = { dtype: 'I32', shape: [ng, N / 8], data: bufI32(qz) };
      res[`${m}.scales`] = { dtype: 'F16', shape: [ng, N], data: bufF16(sc) };
      continue;
    }
    // compressed-tensors tensor contract; scales in the model dtype (BF16 here)
    const bf = (x) => bitsToF32(((f32Bits(x) + 0x7fff + ((f32Bits(x) >> 16) & 1)) >>> 16) << 16);
    const bufBF16 = (a) => { const b = Buffer.alloc(2 * a.length); a.forEach((v, i) => b.writeUInt16LE(f32Bits(bf(v)) >>> 16, 2 * i)); return b; };
    if (scheme === 'awq-w4a16' || scheme === 'w4a16-sym') {
      const sym = scheme === 'w4a16-sym', ng = Math.ceil(K / G), p = new Int32Array(N * K / 8), zp = new Int32Array(Math.ceil(N / 8) * ng), sc = [];
      for (let n = 0; n < N; n++) for (let g = 0; g < ng; g++) {
        let lo = 0, hi = 0; for (let k = g * G; k < Math.min(K, (g + 1) * G); k++) { lo = Math.min(lo, w[n * K + k]); hi = Math.max(hi, w[n * K + k]); }
        const s = bf(Math.max(sym ? Math.max(-lo, hi) / 7.5 : (hi - lo) / 15, 1e-8)), z = sym ? 0 : Math.min(7, Math.max(-8, rint(-8 - lo / s)));
        sc[n * ng + g] = s;
        zp[(n >> 3) * ng + g] |= (z + 8) << (4 * (n & 7));
        for (let k = g * G; k < Math.min(K, (g + 1) * G); k++) p[n * (K / 8) + (k >> 3)] |= (Math.min(7, Math.max(-8, rint(w[n * K + k] / s) + z)) + 8) << (4 * (k & 7));
      }
      res[`${m}.weight_packed`] = { dtype: 'I32', shape: [N, K / 8], data: bufI32(p) };
      res[`${m}.weight_scale`] = { dtype: 'BF16', shape: [N, ng], data: bufBF16(sc) };
      const ws = Buffer.alloc(16); ws.writeBigInt64LE(BigInt(N), 0); ws.writeBigInt64LE(BigInt(K), 8);
      res[`${m}.weight_shape`] = { dtype: 'I64', shape: [2], data: ws };
      if (!sym) res[`${m}.weight_zero_point`] = { dtype: 'I32', shape: [Math.ceil(N / 8), ng], data: bufI32(zp) };
    } else {
      const qmax = scheme === 'w4a8' ? 7 : 127, qmin = -qmax - 1, q = new Int8Array(N * K), sc = [];
      for (let n = 0; n < N; n++) {
        let a = 0; for (let k = 0; k < K; k++) a = Math.max(a, Math.abs(w[n * K + k]));
        sc.push(bf(Math.max(a / qmax, 1e-8)));
        for (let k = 0; k < K; k++) q[n * K + k] = Math.min(qmax, Math.max(qmin, rint(w[n * K + k] / sc[n])));
      }
      res[`${m}.weight`] = { dtype: 'I8', shape: [N, K], data: bufI8(q) };
      res[`${m}.weight_scale`] = { dtype: 'BF16', shape: [N, 1], data: bufBF16(sc) };
    }
  }
  const skip = cfg.__skip; delete cfg.__skip;
  if (format === 'ascend') {
    delete cfg.quantization_config;
    Object.assign(desc, { version: '1.0.0', model_quant_type: scheme === 'w8a8' ? 'W8A8' : 'W8A8_DYNAMIC', metadata: {}, group_size: 0, optional: {} });
    fs.writeFileSync(path.join(out, 'quant_model_description.json'), JSON.stringify(desc, null, 2));
    // two shards + index, msModelSlim names (AscendV1, files)
    const names = Object.keys(res).sort(), half = names.length >> 1, wm = {};
    const parts = [names.slice(0, half), names.slice(half)];
    parts.forEach((ns, i) => { const f = `quant_model_weights-0000${i + 1}-of-00002.safetensors`; writeSt(path.join(out, f), Object.fromEntries(ns.map((n) => [n, res[n]]))); ns.forEach((n) => { wm[n] = f; }); });
    fs.writeFileSync(path.join(out, 'quant_model_weights.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: wm }));
  } else {
    if (format === 'awq') {
      cfg.quantization_config = { quant_method: 'awq', zero_point: true, group_size: G, bits: 4, version: 'gemm', modules_to_not_convert: skip || null };
      cfg.torch_dtype = 'float16';
    } else {
      const w4 = scheme !== 'w8a8-dynamic';
      const weights = { num_bits: w4 ? 4 : 8, type: 'int', symmetric: scheme !== 'awq-w4a16', strategy: scheme.includes('w4a16') ? 'group' : 'channel', group_size: scheme.includes('w4a16') ? G : null, dynamic: false, actorder: null, observer: 'minmax' };
      const ia = scheme.includes('w4a16') ? null : { num_bits: 8, type: 'int', symmetric: true, strategy: 'token', dynamic: true, observer: null };
      const fmt = scheme.includes('w4a16') ? 'pack-quantized' : 'int-quantized';
      cfg.quantization_config = { quant_method: 'compressed-tensors', format: fmt, quantization_status: 'compressed', config_groups: { group_0: { targets: ['Linear'], weights, input_activations: ia, output_activations: null, format: fmt } }, ignore: ['lm_head', 're:.*mlp.gate$'], kv_cache_scheme: null, sparsity_config: {}, version: '0.0.0' };
    }
    fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify(cfg, null, 2));
    writeSt(path.join(out, 'model.safetensors'), res);
  }
}

const [cmd, ...args] = process.argv.slice(2);
try {
  if (cmd === 'compare' && args.length === 2) process.exit(compare(args[0], args[1]));
  else if (cmd === 'write' && args.length >= 4) { write(args[0], args[1], args[2], args[3], +(args[4] || 64)); process.exit(0); }
  else { console.error('usage: export_reader.mjs compare DIR CDUMP | write FORMAT SCHEME SRC OUT [G]'); process.exit(2); }
} catch (e) { console.error(`FAIL: ${e.message}`); process.exit(1); }
