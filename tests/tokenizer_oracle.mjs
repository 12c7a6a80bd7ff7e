// tokenizer_oracle.mjs - reference token ids for tests/cli/tokenizer_parity.sh
// from two independent tokenizers: @lenml/tokenizers (a JS port of
// transformers.js) and, when installed, `tokenizers` (Hugging Face's own Rust
// library through its Node binding).
//
//   node tokenizer_oracle.mjs records CORPUS.txt > records.jsonl
//       split a corpus into JSON-string records: the parts between lines
//       that are exactly "%%" (CRLF inside a part is kept), then the whole
//       file once more as one record
//   node tokenizer_oracle.mjs gsm8k TEST.jsonl > records.jsonl
//       each question and each answer of a GSM8K jsonl file
//   node tokenizer_oracle.mjs fragments N > records.jsonl
//       N pseudo-random (fixed seed) concatenations of tricky fragments
//   node tokenizer_oracle.mjs encode|encode-hf NPM_ROOT MODEL_DIR records.jsonl [special]
//       one JSON array of ids per record; add_special_tokens only when the
//       fifth argument is "special"; encode uses @lenml/tokenizers,
//       encode-hf the Rust `tokenizers`
//   node tokenizer_oracle.mjs variant NAME MODEL_DIR OUT_DIR
//       write OUT_DIR/tokenizer.json (+ tokenizer_config.json): the DeepSeek
//       vocabulary and merges under another model family's pipeline, to test
//       the parts DeepSeek's file does not use (see VARIANTS below)
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";
import { createRequire } from "module";

const LLAMA3_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const byteLevel = (prefix, regex) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const split = (re, behavior = "Isolated") => ({ type: "Split", pattern: { Regex: re }, behavior, invert: false });
const BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>";
const template = {
  type: "TemplateProcessing",
  single: [{ SpecialToken: { id: BOS, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
  pair: [{ SpecialToken: { id: BOS, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
         { SpecialToken: { id: BOS, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
  special_tokens: { [BOS]: { id: BOS, ids: [0], tokens: [BOS] } },
};
// Each variant edits a copy of the DeepSeek tokenizer.json; the config keeps
// no add_bos_token so that the post_processor decides (as for Llama-3/Qwen2).
const VARIANTS = {
  // Llama-3: its regex, ignore_merges, BOS through TemplateProcessing
  llama3: (t) => {
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [split(LLAMA3_RE), byteLevel(false, false)] };
    t.model.ignore_merges = true;
    t.post_processor = { type: "Sequence", processors: [byteLevel(true, true), template] };
  },
  // Qwen2: NFC, single digits, merges as [a, b] pairs
  qwen2: (t) => {
    t.normalizer = { type: "NFC" };
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [split(QWEN2_RE), byteLevel(false, false)] };
    t.model.merges = t.model.merges.map((m) => m.split(" "));
  },
  // GPT-2: ByteLevel alone with its own regex and a prefix space
  gpt2: (t) => {
    t.pre_tokenizer = byteLevel(true, true);
  },
  // the other Split behaviours on a literal and a regex
  splits: (t) => {
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { String: " " }, behavior: "MergedWithNext", invert: false },
      split("\\p{N}+", "MergedWithPrevious"),
      split("[.,;]", "Contiguous"),
      { type: "Split", pattern: { String: "\n" }, behavior: "Removed", invert: false },
      byteLevel(false, true)] };
  },
  // HF's Whitespace pre-tokenizer spelled as an inverted, removing Split
  // (\w as Oniguruma has it: letters, marks, numbers, connector punctuation)
  invert: (t) => {
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: "\\w+|[^\\w\\s]+" }, behavior: "Removed", invert: true },
      byteLevel(false, false)] };
  },
  // added tokens with lstrip / rstrip / single_word / normalized under NFC
  added: (t) => {
    t.normalizer = { type: "NFC" };
    const base = 128815;
    const add = (k, content, special, flags) => t.added_tokens.push({ id: base + k, content, special,
      single_word: false, lstrip: false, rstrip: false, normalized: !special, ...flags });
    add(0, "<m>", false, { lstrip: true, normalized: false });
    add(1, "<r>", true, { rstrip: true, normalized: false });
    add(2, "\u00e9!", false, { normalized: true });
    add(3, "<a><b>", false, { normalized: false });
    add(4, "<a>", false, { normalized: false });
    add(5, "x y", false, { single_word: true, normalized: false });
    add(6, "ab", false, { single_word: true, lstrip: true, rstrip: true, normalized: true });
  },
};

// Deterministic records that pile up added tokens, spaces and marks.
const FRAGMENTS = ["<｜begin▁of▁sentence｜>", "<a>", "<m>", "<r>", "ab", "\u00e9!", "e\u0301!", "<a><b>", "x y", " ",
  "  ", "\t", "\n", "hello", "world", "1234", "a", "b", "x", "y", "中", "\u00a0", "\u3000", "_", "\u00e9", "e\u0301",
  " ab ", "xab", "abx", "\u0301", "<｜User｜>"];
function fragments(n) {
  let seed = 12345;
  const rnd = (k) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % k; };
  const recs = [];
  for (let i = 0; i < n; i++) {
    let s = "";
    for (let j = 1 + rnd(8); j > 0; j--) s += FRAGMENTS[rnd(FRAGMENTS.length)];
    recs.push(JSON.stringify(s));
  }
  return recs;
}

const [mode, ...args] = process.argv.slice(2);
const out = [];
if (mode === "records") {
  const text = fs.readFileSync(args[0], "utf8");
  for (const part of text.split(/\r?\n%%\r?\n/)) if (part.length) out.push(JSON.stringify(part));
  out.push(JSON.stringify(text));
} else if (mode === "gsm8k") {
  for (const line of fs.readFileSync(args[0], "utf8").split("\n")) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    out.push(JSON.stringify(r.question));
    out.push(JSON.stringify(r.answer));
  }
} else if (mode === "fragments") {
  out.push(...fragments(Number(args[0])));
} else if (mode === "encode" || mode === "encode-hf") {
  const [npmRoot, modelDir, records, special] = args;
  const add = special === "special";
  let enc;
  if (mode === "encode") {
    const lib = path.join(npmRoot, "node_modules/@lenml/tokenizers/dist/main.mjs");
    const { TokenizerLoader } = await import(pathToFileURL(lib).href);
    const tok = TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
      tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
    });
    enc = async (s) => tok.encode(s, { add_special_tokens: add });
  } else {
    const require = createRequire(path.resolve(npmRoot, "package.json"));
    const { Tokenizer } = require("tokenizers");
    const tok = Tokenizer.fromFile(path.join(modelDir, "tokenizer.json"));
    enc = async (s) => (await tok.encode(s, null, { addSpecialTokens: add })).getIds();
  }
  for (const line of fs.readFileSync(records, "utf8").split("\n")) {
    if (!line.length) continue;
    out.push(JSON.stringify(Array.from(await enc(JSON.parse(line)), Number)));
  }
} else if (mode === "variant") {
  const [name, modelDir, outDir] = args;
  const t = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
  if (!VARIANTS[name]) { console.error(`unknown variant ${name}`); process.exit(2); }
  VARIANTS[name](t);
  delete cfg.add_bos_token;
  delete cfg.add_eos_token;
  delete cfg.chat_template;
  cfg.tokenizer_class = "PreTrainedTokenizerFast";
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "tokenizer.json"), JSON.stringify(t));
  fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(cfg));
} else {
  console.error("usage: tokenizer_oracle.mjs records|gsm8k|encode|encode-hf|variant ...");
  process.exit(2);
}
if (out.length) process.stdout.write(out.join("\n") + "\n");
