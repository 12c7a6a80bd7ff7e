#!/bin/sh
# awq_parity.sh - dsq's AWQ clip (X^T X over all calibration tokens) against
# AutoAWQ's auto_clip (same objective on <= 512 sampled tokens), the older
# dsq proxy clip, scales only and RTN, per linear type, on held-out text of
# the trained sample (bench/awq_parity.c says what each column is); then
# per scaling-group type, the held-out block output error (AutoAWQ's
# objective) of scales searched with the older losses, the block losses (the
# attention input on the MLA block over 4 whole sequences, as calibration
# runs it), and the attention block over every calibration sequence
# (AutoAWQ's approach).
#
#   sh bench/awq_parity.sh [SAMPLES] [SEQLEN]
#
# Defaults 32 x 512 tokens of samples/data/calib.txt and heldout.txt; runs
# g128 and g64. End-to-end KL divergence: sh bench/awq_parity_kld.sh.
set -e
cd "$(dirname "$0")/.."
make -s build/bench/awq_parity
for g in 128 64; do
    build/bench/awq_parity --samples "${1:-32}" --seqlen "${2:-512}" --group-size $g
done
