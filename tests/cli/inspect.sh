#!/bin/sh
# ds-inspect behaviour: exit codes (0 ok, 1 bad input, 2 usage), --json is
# one parseable object (also on failure), --verify catches a flipped payload
# bit, safetensors files and directories are listed.
# Run from the repository root (make test does); BUILD is not needed here.
set -u
BIN=${DS_INSPECT:-${BIN:-./bin}/ds-inspect}
CORPUS=tests/fuzz/corpus/container
PY=${PYTHON:-/usr/bin/python3}
fails=0
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-inspect-XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

[ -x "$BIN" ] || { echo "inspect.sh: $BIN not built"; exit 1; }

# expect CODE DESCRIPTION -- COMMAND...
expect() {
  want=$1; what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"
  got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: $what: exit $got, want $want ($*)"; sed 's/^/  | /' "$T/err" | head -5
    fails=$((fails+1))
  fi
}
# json_ok DESCRIPTION: $T/out must be one JSON object; extra python check in $1
json_ok() {
  if ! "$PY" -c "import json,sys; o=json.load(open(sys.argv[1])); assert isinstance(o, dict); $2" "$T/out"; then
    echo "FAIL: $1: --json output does not parse or check"; head -c 400 "$T/out"; echo
    fails=$((fails+1))
  fi
}

# ---- usage ----
expect 2 "no arguments" -- $BIN
expect 2 "unknown option" -- $BIN --bogus "$CORPUS/three.dsq"
expect 2 "two paths" -- $BIN "$CORPUS/three.dsq" "$CORPUS/five.dsq"
expect 2 "bad -T" -- $BIN -T x "$CORPUS/three.dsq"
expect 2 "-T without value" -- $BIN -T
expect 0 "--help" -- $BIN --help
grep -q "Usage: ds-inspect" "$T/out" || { echo "FAIL: --help not on stdout"; fails=$((fails+1)); }
expect 0 "-V" -- $BIN -V
grep -q "ds-inspect" "$T/out" || { echo "FAIL: -V prints no version"; fails=$((fails+1)); }

# ---- missing / bad input ----
expect 1 "missing file" -- $BIN "$T/does-not-exist.dsq"
expect 1 "missing file --json" -- $BIN --json "$T/does-not-exist.dsq"
json_ok "missing file --json" "assert o['ok'] is False and o['error']['status'] == 'DSQ_ERR_NOT_FOUND'"
expect 1 "truncated dsq" -- $BIN "$CORPUS/truncated.bin"
grep -q "truncated\|footer" "$T/err" || { echo "FAIL: truncation not explained"; fails=$((fails+1)); }
printf 'not a model' > "$T/junk.safetensors"
expect 1 "junk safetensors" -- $BIN "$T/junk.safetensors"

# ---- .dsq ----
expect 0 "list dsq" -- $BIN "$CORPUS/five.dsq"
grep -q "model.embed_tokens.weight" "$T/out" || { echo "FAIL: tensor not listed"; fails=$((fails+1)); }
grep -q "recipe:" "$T/out" || { echo "FAIL: recipe not shown"; fails=$((fails+1)); }
grep -q "^total: 5 tensors" "$T/out" || { echo "FAIL: no totals line"; fails=$((fails+1)); }
expect 0 "verify dsq" -- $BIN --verify -T 2 "$CORPUS/five.dsq"
expect 0 "verify empty dsq" -- $BIN --verify "$CORPUS/empty.dsq"
expect 0 "json dsq" -- $BIN --json --verify "$CORPUS/five.dsq"
json_ok "json dsq" "assert o['ok'] and o['format'] == 'dsq' and len(o['tensors']) == 5 and o['verify']['ok'] and o['recipe']['default'] == 'w8a8-dynamic' and o['total']['count'] == 5"
expect 0 "quiet" -- $BIN -q "$CORPUS/five.dsq"
[ "$(wc -l < "$T/out")" -eq 1 ] || { echo "FAIL: -q should print one line"; fails=$((fails+1)); }
expect 0 "silent" -- $BIN -qq "$CORPUS/five.dsq"
[ -s "$T/out" ] && { echo "FAIL: -qq should print nothing"; fails=$((fails+1)); }
expect 0 "verbose" -- $BIN -v "$CORPUS/five.dsq"
grep -q "sha256" "$T/out" || { echo "FAIL: -v shows no hashes"; fails=$((fails+1)); }

# A flipped payload bit: listing still works, --verify fails naming the tensor.
expect 0 "list corrupt payload" -- $BIN "$CORPUS/payload_flip.bin"
expect 1 "verify corrupt payload" -- $BIN --verify "$CORPUS/payload_flip.bin"
grep -q "tensor 'model.embed_tokens.weight'" "$T/err" || { echo "FAIL: bad tensor not named"; fails=$((fails+1)); }
expect 1 "verify corrupt payload --json" -- $BIN --verify --json "$CORPUS/payload_flip.bin"
json_ok "corrupt --json" "assert o['ok'] is False and o['verify']['bad_index'] == 0 and o['error']['status'] == 'DSQ_ERR_CHECKSUM'"
# A flipped footer byte: rejected at open.
cp "$CORPUS/three.dsq" "$T/footer.dsq"
size=$(wc -c < "$T/footer.dsq")
printf '\377' | dd of="$T/footer.dsq" bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
expect 1 "corrupt footer" -- $BIN "$T/footer.dsq"

# ---- safetensors (written here with plain python: no torch needed) ----
"$PY" - "$T" <<'EOF'
import json, struct, sys, os
d = sys.argv[1]
def write(path, tensors, meta=None):
    hdr, blobs, off = {}, b"", 0
    if meta: hdr["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs += data; off += len(data)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blobs)
bf16 = lambda xs: b"".join(struct.pack("<f", x)[2:] for x in xs)
f32 = lambda xs: b"".join(struct.pack("<f", x) for x in xs)
write(os.path.join(d, "model.safetensors"),
      [("model.embed_tokens.weight", "BF16", [4, 2], bf16([0.5] * 8)),
       ("model.norm.weight", "F32", [2], f32([1.0, 1.0]))], {"format": "pt"})
os.mkdir(os.path.join(d, "dir"))
write(os.path.join(d, "dir", "model.safetensors"), [("x", "F16", [3], b"\0\0" * 3)])
EOF
expect 0 "list safetensors" -- $BIN "$T/model.safetensors"
grep -q "BF16" "$T/out" || { echo "FAIL: dtype not listed"; fails=$((fails+1)); }
expect 0 "verify safetensors" -- $BIN --verify "$T/model.safetensors"
expect 0 "json safetensors" -- $BIN --json "$T/model.safetensors"
json_ok "json safetensors" "assert o['format'] == 'safetensors' and len(o['tensors']) == 2 and o['metadata']['format'] == 'pt'"
expect 0 "model directory" -- $BIN "$T/dir"
grep -q "^x " "$T/out" || { echo "FAIL: directory tensor not listed"; fails=$((fails+1)); }

# ---- a file that is not safetensors says so (not "header length N exceeds the limit") ----
printf 'just some text, long enough to have 8 bytes\n' > "$T/notes.safetensors"
expect 1 "text named .safetensors" -- $BIN "$T/notes.safetensors"
grep -q "not a safetensors file: $T/notes.safetensors" "$T/err" || { echo "FAIL: text file: no 'not a safetensors file' message"; sed 's/^/  | /' "$T/err"; fails=$((fails+1)); }
grep -q "exceeds the limit" "$T/err" && { echo "FAIL: text file still reported as an oversized header"; fails=$((fails+1)); }

if [ $fails -ne 0 ]; then echo "inspect.sh: $fails failure(s)"; exit 1; fi
echo "inspect.sh: ok"
