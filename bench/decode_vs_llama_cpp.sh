#!/usr/bin/env bash
# Single-stream greedy decode of the same GGUF files, ours (`ptxserve generate` on the CPU
# backend: a 5-token prompt, then TOKENS tokens; its printed decode rate) against llama.cpp's
# llama-bench (-p 0 -n TOKENS -r 1: decode from an empty context), alternating within each
# round so both see the same machine load. Prints every figure in tokens/s and ours over
# llama.cpp's; asserts nothing about speed. Companion of bench/prefill_vs_llama_cpp.sh.
#
# usage: bench/decode_vs_llama_cpp.sh [LLAMA_BENCH] [ROUNDS] [TYPES...]
#   defaults: /work/llama.cpp/build/bin/llama-bench, 3 rounds, f16 bf16 q8_0 q4_0; the
#   models are /tmp/m1b-TYPE.gguf (the llama-3.2-1b preset written by `ptxserve quantize`).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${1:-/work/llama.cpp/build/bin/llama-bench}
ROUNDS=${2:-3}
shift $(($# < 2 ? $# : 2))
TYPES=${*:-f16 bf16 q8_0 q4_0}
TOKENS=32
THREADS=2  # llama.cpp's; ours uses the machine's cores (2 here)

ours() {  # decode tokens/s of `ptxserve generate` on model $1
  build/server/ptxserve generate --backend cpu --model "$1" --prompt "Once upon a time" \
    --max-tokens $TOKENS --temperature 0 --ignore_eos --kv-blocks 16 2>&1 |
    sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p'
}

llama() {  # llama-bench's average decode tokens/s on model $1
  "$LLAMA_BENCH" -m "$1" -t $THREADS -p 0 -n $TOKENS -r 1 -o csv 2>/dev/null |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "avg_ts" || $i == "\"avg_ts\"") c = i; next }
             c && !done { gsub(/"/, "", $c); print $c; done = 1 }'
}

echo "round type ours_tok_s llama.cpp_tok_s ratio"
for round in $(seq "$ROUNDS"); do
  for t in $TYPES; do
    m=/tmp/m1b-$t.gguf
    o=$(ours "$m")
    l=$(llama "$m")
    echo "$round $t $o $l $(awk -v a="$o" -v b="$l" 'BEGIN { printf "%.2f", a / b }')"
  done
done
