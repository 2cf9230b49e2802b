#!/usr/bin/env bash
# 512-token prefill of the same GGUF files, ours (prefill_bench's BM_PrefillStep: one CPU
# backend Step over the whole prompt, 2 timed, at a GEMM instruction set) against
# llama.cpp's llama-bench (-p 512 -n 0 -r 1), alternating within each round so all see the
# same machine load. Prints every figure in tokens/s and each of ours over llama.cpp's;
# asserts nothing about speed.
#
# usage: [OURS="BIN:ISA ..."] bench/prefill_vs_llama_cpp.sh [LLAMA_BENCH] [ROUNDS] [TYPES...]
#   OURS: prefill_bench binaries with BM_PrefillStep's instruction set argument each (0 avx2,
#         1 avx512, 2 avx512_vnni, 3 avx512_bf16; engine/cpu/isa.h), e.g. a copy built before
#         a change beside the current one (default build/bench/prefill_bench at 3 where
#         /proc/cpuinfo lists avx512_bf16, else 2; a binary from before avx512_bf16 knows 0-2)
#   defaults: /work/llama.cpp/build/bin/llama-bench, 3 rounds, f16 bf16 q8_0 q4_0; the
#   models are /tmp/m1b-TYPE.gguf (the llama-3.2-1b preset written by `ptxserve quantize`).
set -euo pipefail
cd "$(dirname "$0")/.."
if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then BEST_ISA=3; else BEST_ISA=2; fi
OURS=${OURS:-build/bench/prefill_bench:$BEST_ISA}
LLAMA_BENCH=${1:-/work/llama.cpp/build/bin/llama-bench}
ROUNDS=${2:-3}
shift $(($# < 2 ? $# : 2))
TYPES=${*:-f16 bf16 q8_0 q4_0}
THREADS=2  # llama.cpp's; ours uses the machine's cores (2 here)

# Column `name` of a CSV (header line first) on stdin, first data row, quotes dropped.
csv_field() {
  awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == name || $i == "\"" name "\"") c = i; next }
                        c && !done { gsub(/"/, "", $c); print $c; done = 1 }'
}

ours() {  # tokens/s of prefill_bench $1 at instruction set $2 on model $3
  "$1" --model="$3" --benchmark_filter="BM_PrefillStep/$2/" --benchmark_format=csv 2>/dev/null |
    sed -n '/^name,/,$p' | csv_field prompt_tokens_per_s
}

echo "round type llama.cpp_tok_s then per OURS entry: tok_s ratio"
for round in $(seq "$ROUNDS"); do
  for t in $TYPES; do
    m=/tmp/m1b-$t.gguf
    line="$round $t"
    figures=()
    for entry in $OURS; do figures+=("$(ours "${entry%:*}" "${entry##*:}" "$m")"); done
    l=$("$LLAMA_BENCH" -m "$m" -t $THREADS -p 512 -n 0 -r 1 -o csv 2>/dev/null | csv_field avg_ts)
    line="$line $l"
    for o in "${figures[@]}"; do
      line="$line $o $(awk -v a="$o" -v b="$l" 'BEGIN { printf "%.2f", a / b }')"
    done
    echo "$line"
  done
done
