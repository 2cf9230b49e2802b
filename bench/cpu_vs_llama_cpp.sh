#!/usr/bin/env bash
# The CPU backend against llama.cpp on the same GGUF files, issue 16's whole matrix in one
# run: for each model and weight type, single-stream decode, batch-8 decode and a 512-token
# prefill, ours and llama.cpp's alternating within each round so both see the same load.
#   ours: decode_bench's BM_Decode (one token per sequence per step, 1 or 8 sequences with
#         128 tokens each in the KV cache) and prefill_bench's BM_PrefillStep (one Step over
#         a 512-token prompt) at the best GEMM instruction set the CPU has;
#   llama.cpp: llama-batched-bench -npp 128 -ntg 32 -npl 1,8 (S_TG, decode tokens/s after
#         a 128-token prompt per sequence) and llama-bench -p 512 -n 0 -r 1.
# Prints tokens/s and ours over llama.cpp's; asserts nothing about speed.
#
# usage: bench/cpu_vs_llama_cpp.sh [LLAMA_BIN_DIR] [ROUNDS] [MODEL_PREFIX...]
#   defaults: /work/llama.cpp/build/bin, 2 rounds, /tmp/m15 /tmp/m1b; each prefix's files are
#   PREFIX-TYPE.gguf for TYPES (environment; default "f16 bf16 q8_0 q4_0 q4_k"), written by
#   `ptxserve make-model --preset 15m|llama-3.2-1b` and `ptxserve quantize --type TYPE`.
#   A missing file is reported and skipped. PARTS (environment; default "decode1 decode8
#   prefill") picks the columns to run; the others print "-". After the rounds, the median
#   of each ratio over the rounds (this VM's memory bandwidth varies 2x between runs of one
#   binary, so one round says little).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=${1:-/work/llama.cpp/build/bin}
ROUNDS=${2:-2}
shift $(($# < 2 ? $# : 2))
PREFIXES=${*:-/tmp/m15 /tmp/m1b}
TYPES=${TYPES:-f16 bf16 q8_0 q4_0 q4_k}
PARTS=${PARTS:-decode1 decode8 prefill}
LOG=$(mktemp "${TMPDIR:-/tmp}/cpu_vs_llama_cpp.XXXXXX")
trap 'rm -f "$LOG"' EXIT
THREADS=2  # llama.cpp's; ours uses the machine's cores (2 here)

# Column `name` of a CSV (header line first) on stdin, first data row, quotes dropped.
csv_field() {
  awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == name || $i == "\"" name "\"") c = i; next }
                        c && !done { gsub(/"/, "", $c); print $c; done = 1 }'
}

fmt() { awk -v a="$1" 'BEGIN { if (a > 0) printf "%.1f", a; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }'; }

# The highest instruction set BM_PrefillStep is registered for on this CPU.
ISA=$(build/bench/prefill_bench --benchmark_list_tests=true 2>/dev/null |
  sed -n 's|^BM_PrefillStep/\([0-9]*\).*|\1|p' | sort -n | tail -1)

ours_decode() {  # tokens/s of BM_Decode at batch $2 on model $1
  build/bench/decode_bench --model="$1" --benchmark_filter="BM_Decode/.*/$2/" \
    --benchmark_format=csv 2>/dev/null | sed -n '/^name,/,$p' | csv_field tokens_per_s
}

ours_prefill() {  # prompt tokens/s of BM_PrefillStep on model $1
  build/bench/prefill_bench --model="$1" --benchmark_filter="BM_PrefillStep/$ISA/" \
    --benchmark_format=csv 2>/dev/null | sed -n '/^name,/,$p' | csv_field prompt_tokens_per_s
}

llama_decode() {  # "S_TG at 1 sequence" "S_TG at 8" of llama-batched-bench on model $1
  "$LLAMA_BIN/llama-batched-bench" -m "$1" -t $THREADS -c 2048 -npp 128 -ntg 32 -npl 1,8 2>/dev/null |
    awk -F'|' '$4 + 0 == 1 || $4 + 0 == 8 { gsub(/ /, "", $9); printf "%s ", $9 }'
}

llama_prefill() {
  "$LLAMA_BIN/llama-bench" -m "$1" -t $THREADS -p 512 -n 0 -r 1 -o csv 2>/dev/null | csv_field avg_ts
}

wants() { [[ " $PARTS " == *" $1 "* ]]; }

echo "# tokens/s, ours vs llama.cpp (ratio); prefill at instruction set $ISA (engine/cpu/isa.h)"
echo "round model type | decode1 ours llama ratio | decode8 ours llama ratio | prefill512 ours llama ratio"
for round in $(seq "$ROUNDS"); do
  for p in $PREFIXES; do
    for t in $TYPES; do
      m=$p-$t.gguf
      if [[ ! -f $m ]]; then
        echo "$round $(basename "$p") $t | skipped: $m is missing"
        continue
      fi
      o1=0 o8=0 op=0 l1=0 l8=0 lp=0
      if wants decode1; then o1=$(ours_decode "$m" 1); fi
      if wants decode8; then o8=$(ours_decode "$m" 8); fi
      if wants prefill; then op=$(ours_prefill "$m"); fi
      if wants decode1 || wants decode8; then read -r l1 l8 <<<"$(llama_decode "$m")"; fi
      if wants prefill; then lp=$(llama_prefill "$m"); fi
      l1=${l1:-0} l8=${l8:-0} lp=${lp:-0}
      echo "$round $(basename "$p") $t | $(fmt "$o1") $(fmt "$l1") $(ratio "$o1" "$l1") |" \
        "$(fmt "$o8") $(fmt "$l8") $(ratio "$o8" "$l8") | $(fmt "$op") $(fmt "$lp") $(ratio "$op" "$lp")"
    done
  done
done | tee "$LOG"

echo "# median ratio over the rounds (rounds with a ratio), per model and type"
echo "model type | decode1 | decode8 | prefill512"
awk -F'|' '$1 ~ /^[0-9]+ / {
    split($1, k, " "); key = k[2] " " k[3]
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    for (c = 2; c <= 4; ++c) { split($c, f, " "); if (f[3] != "-" && f[3] != "") v[key, c, ++cnt[key, c]] = f[3] }
  }
  function median(key, c,   m, i, j, t, a) {
    m = cnt[key, c]; if (m == 0) return "-"
    for (i = 1; i <= m; ++i) a[i] = v[key, c, i]
    for (i = 2; i <= m; ++i) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return m % 2 ? a[(m + 1) / 2] : sprintf("%.2f", (a[m / 2] + a[m / 2 + 1]) / 2)
  }
  END { for (i = 1; i <= n; ++i) printf "%s | %s (%d) | %s (%d) | %s (%d)\n", order[i],
        median(order[i], 2), cnt[order[i], 2], median(order[i], 3), cnt[order[i], 3],
        median(order[i], 4), cnt[order[i], 4] }' "$LOG"
