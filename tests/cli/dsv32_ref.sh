#!/bin/sh
# dsv32_ref.sh - the DeepSeek-V3.2 reference's own tests (samples/test_dsv32_ref.py):
# the e4m3 / ue8m0 emulation, the Hadamard transform, the indexer's RoPE, the
# sparse == dense rule, float64 accumulation, and samples/dsv32_f64.py's
# divergence finding. Needs python3 with torch and numpy; skipped without.
PY=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/../.." || exit 1
if ! "$PY" -c 'import torch, numpy' > /dev/null 2>&1; then
    echo "dsv32_ref.sh: skipped ($PY with torch and numpy not found)"
    exit 0
fi
exec "$PY" samples/test_dsv32_ref.py
