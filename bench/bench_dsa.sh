#!/bin/sh
# bench_dsa.sh - DeepSeek-V3.2's sparse attention against dense V3 MLA at
# long contexts (build/bench/bench_dsa: one real-shape attention layer, one
# thread): decode and prefill tokens/s at each context, the cache bytes per
# token and layer, and where the time of a decode step and of a prefill
# chunk goes (the indexer's scores and top-k, the attention over the keys
# read, the rest of the layer). Writes docs/benchmarks-dsa.md (PAGE; PAGE= for none)
# with a header naming the machine, date, commit and command: that page is
# never edited by hand.
#
#   nice sh bench/bench_dsa.sh [CTX ...]      # default 1024 4096 16384
#   STEPS=4 PREFILL=64 THREADS=1              # bench_dsa's -n, -p, -t
set -e
cd "$(dirname "$0")/.."
. bench/doc_page.sh
doc_init bench/bench_dsa.sh STEPS PREFILL THREADS -- "$@"
[ -x build/bench/bench_dsa ] || make -s build/bench/bench_dsa
build/bench/bench_dsa -t "${THREADS:-1}" -n "${STEPS:-4}" -p "${PREFILL:-64}" "$@" > "$DOC_BODY.out"
grep -v '^result:' "$DOC_BODY.out" | tee -a "$DOC_BODY"
rm -f "$DOC_BODY.out"
say '\n%s\n' "Read with [deepseek-v32.md](deepseek-v32.md#cost), which says what each column measures and what limits each path."
doc_finish "${PAGE-docs/benchmarks-dsa.md}" "DeepSeek-V3.2 sparse attention against dense MLA" \
"One attention layer with DeepSeek-V3's real dimensions (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64), a small FFN, BF16; V3.2 with 64 x 128 indexer heads and index_topk 2048; the caches filled up to each context. Decode: tokens per second one at a time; prefill: one chunk continuing at the context; with one thread, process CPU time (best of 2). The second table repeats those steps once with the engine's per-op timers on and splits their time: the indexer's scores over every cached key and its top-k (timed together in prefill), the attention over the keys each row reads (gathering the selected rows, scores, softmax and context; in the naive path also kv_b_proj's expansion of the cached latents), and the rest of the layer (its linears, the absorbed q and output products, norms, FFN and logits)."
