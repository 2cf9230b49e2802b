// Prefill attention on tensor cores (FlashAttention-2 style) for ragged batches whose
// sequences contribute chunks of many tokens, reading K/V from the paged cache.
//
// Contract (device pointers, row-major, non-aliasing): FlashAttentionArgs, in .param order.
// Row r (a token of sequence s, rows [query_start[s], query_start[s+1])) attends causally
// to the cached positions [0, positions[r]] of its sequence through its block table, like
// cpu::PagedAttention in ragged mode; the chunk's own K/V are already in the pools.
//
// Work: a CTA of four warps takes one KV head and a tile of TokensPerCta() consecutive rows
// of one sequence, its query rows being (token, query head of the GQA group) pairs, 16 per
// warp (the m of mma.m16n8k16), so every K/V tile it streams through shared memory serves the
// whole group. Tiles are the row windows [w T, (w + 1) T) clipped to each sequence; the CTA
// of (sequence s, window w) is number w + s on grid x, so a launch needs
// ceil(num_rows / T) + num_seqs - 1 CTAs there (those falling between sequences do nothing).
// Grid y is the KV head.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kFlashAttentionEntry[] = "flash_attention";

struct FlashAttentionConfig : KernelConfig<FlashAttentionConfig, kFlashAttentionEntry> {
  int num_heads = 32;  // a multiple of num_kv_heads, at most 64 per KV head
  int num_kv_heads = 8;
  int head_dim = 128;  // a multiple of 32, at most 128 (the output tile lives in registers)
  int block_size = 16;
  ElemType kv_dtype = ElemType::kF16;  // f16 or bf16: the mma operand type
  // The output's type: f32, or the model's f16/bf16 (the o projection's input); softmax and
  // accumulation stay f32 in registers, only the store rounds.
  ElemType out_dtype = ElemType::kF32;
  ptx::Target target;
  int Threads() const { return 128; }  // four warps
  // Query tokens per CTA: the 64 mma rows of the CTA over the query heads of a group.
  int TokensPerCta() const { return 64 / (num_heads / num_kv_heads); }
  // Keys per shared-memory tile: 64 while the two stages of K and V fit in 48 KiB, else 32.
  int KeysPerTile() const;
  absl::Status CheckAcrossFields() const;
  using C = FlashAttentionConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("num_heads", &C::num_heads).Key("h").Range(1, 1024),
      Field("num_kv_heads", &C::num_kv_heads).Key("kvh").Range(1, 256), HeadDimField(&C::head_dim),
      Field("block_size", &C::block_size).Key("bs").Range(1, 1024),
      Field("kv_dtype", &C::kv_dtype).Key(""),
      Field("out_dtype", &C::out_dtype).KeyUnlessF32("out"));
};

struct FlashAttentionArgs {
  // f32 [num_rows][num_heads][head_dim]
  DevicePtr q;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr k_pool;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr v_pool;
  // s32 [num_seqs][max_blocks_per_seq]
  DevicePtr block_tables;
  // s32 [num_seqs + 1]: rows of sequence s are [query_start[s], query_start[s+1])
  DevicePtr query_start;
  // s32 [num_rows]: each row's position in its sequence
  DevicePtr positions;
  // out_dtype [num_rows][num_heads][head_dim]
  DevicePtr out;
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_seqs = 0;
  uint32_t num_rows = 0;
  // usually 1/sqrt(head_dim)
  float scale = 0;
  PTXSERVE_PARAMS(FlashAttentionArgs, q, k_pool, v_pool, block_tables, query_start, positions, out,
                  max_blocks_per_seq, num_seqs, num_rows, scale);
};

absl::StatusOr<std::string> GenerateFlashAttention(const FlashAttentionConfig& cfg);

// Grid (ceil(num_rows / T) + num_seqs - 1, num_kv_heads), 128 threads (T = TokensPerCta()).
LaunchDims FlashAttentionLaunch(const FlashAttentionConfig& cfg, int64_t num_rows,
                                int64_t num_seqs);

}  // namespace ptxserve::kernels
