#!/bin/sh
# Consistency checks of the bundled samples/ (data arithmetic, train/test
# disjointness, safetensors shards + index, DeepSeek-V3 config keys, tokenizer,
# golden files).  Pure Python 3, no torch; skipped when python3 is missing.
PY=${PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then
    echo "samples.sh: skipped ($PY not found)"
    exit 0
fi
cd "$(dirname "$0")/../.." || exit 1
exec "$PY" samples/test_samples.py
