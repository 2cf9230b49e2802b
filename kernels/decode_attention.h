// Batched paged attention for a whole ragged batch in one launch per layer, plus the
// flash-decoding plan (split long contexts across CTAs, merged in the same launch).
//
// Contract (device pointers, row-major, non-aliasing): DecodeAttentionArgs, in .param order.
// Decode mode: row r attends to positions [0, seq_lens[r]). Ragged mode (prefill and
// mixed batches): row r attends causally to [0, positions[r]], like cpu::PagedAttention;
// query_start and positions are unused in decode mode (may be 0).
// Grid: x = num_kv_heads * head_chunks, y = num_rows, z = num_splits (1 unless split).
// Split: each CTA writes its split's partial output and log-sum-exp; the last CTA of a
// (row, x) group to finish (an atomic count per group, after a membar.gl) merges the group's
// partials in split order, so the result does not depend on which CTA finishes last.
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

inline constexpr char kDecodeAttentionEntry[] = "decode_attention";

struct DecodeAttentionConfig : KernelConfig<DecodeAttentionConfig, kDecodeAttentionEntry> {
  int num_heads = 32;  // a multiple of num_kv_heads
  int num_kv_heads = 8;
  int head_dim = 128;  // a multiple of 32, at most 256
  int block_size = 16;
  ElemType kv_dtype = ElemType::kF16;
  bool split = false;   // split the context over CTAs (grid z); the last CTA merges
  bool ragged = false;  // rows are arbitrary tokens with causal limits (prefill)
  int num_warps = 0;  // warps per CTA: 1, 2, 4 or 8; 0 picks 4 (fewer when shared memory is short)
  // The output's type: f32, or the model's f16/bf16 (the o projection's input); softmax and
  // accumulation stay f32 in registers, only the store to `out` rounds (split: the partials
  // and log-sum-exps stay f32, the merging CTA's store rounds).
  ElemType out_dtype = ElemType::kF32;
  ptx::Target target;
  using C = DecodeAttentionConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("num_heads", &C::num_heads).Key("h").Range(1, 1024),
      Field("num_kv_heads", &C::num_kv_heads).Key("kvh").Range(1, 256), HeadDimField(&C::head_dim),
      Field("block_size", &C::block_size).Key("bs").Range(1, 1024),
      Field("kv_dtype", &C::kv_dtype).Key(""), Field("split", &C::split).Key("split"),
      Field("ragged", &C::ragged).Key("ragged"), Field("num_warps", &C::num_warps).Key("w"),
      Field("out_dtype", &C::out_dtype).KeyUnlessF32("out"));

  absl::Status CheckAcrossFields() const;
};

// Work decomposition derived from a config (what the generator bakes in).
struct DecodeAttentionShape {
  int group = 0;          // query heads per KV head
  int heads_per_cta = 0;  // query heads of one group handled by one CTA
  int head_chunks = 0;    // group / heads_per_cta
  int lanes_per_token = 0;
  int elems_per_lane = 0;   // head_dim / lanes_per_token
  int vec_elems = 0;        // elements per vector load of K/V
  int tokens_per_warp = 0;  // 32 / lanes_per_token
  // Steps of tokens_per_warp tokens a warp loads together (a tile): its K/V loads in flight.
  int steps_per_tile = 0;
  int num_warps = 0;
  int shared_bytes = 0;  // static shared memory
};
absl::StatusOr<DecodeAttentionShape> ShapeOf(const DecodeAttentionConfig& cfg);

struct DecodeAttentionArgs {
  // f32 [num_rows][num_heads][head_dim]
  DevicePtr q;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr k_pool;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr v_pool;
  // s32 [num_seqs][max_blocks_per_seq]
  DevicePtr block_tables;
  // s32 [num_seqs] (decode mode: row s is sequence s's one query)
  DevicePtr seq_lens;
  // s32 [num_seqs + 1] (ragged mode: rows of sequence s are [query_start[s], query_start[s+1]);
  // unused in decode mode, may be 0)
  DevicePtr query_start;
  // s32 [num_rows] (ragged mode; unused in decode mode, may be 0)
  DevicePtr positions;
  // out_dtype [num_rows][num_heads][head_dim]
  DevicePtr out;
  // f32 [num_rows][num_heads][num_splits][head_dim] (split = true: each split's normalised
  // partial output). Unused otherwise (may be 0).
  DevicePtr partial_out;
  // f32 [num_rows][num_heads][num_splits] (split = true): log2 of the split's softmax denominator
  // plus its running max, in units of scale*log2(e); -inf for an empty split. Unused otherwise (may
  // be 0).
  DevicePtr partial_lse;
  // u32 [num_rows][num_kv_heads * head_chunks] (split = true): CTAs of each group done so far.
  // Zero before the first split launch; a launch that completes leaves every count zero again
  // (the merging CTA resets its group's), so a CUDA graph replays it as it is. Unused otherwise
  // (may be 0).
  DevicePtr split_counters;
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_seqs = 0;
  uint32_t num_rows = 0;
  // usually 1/sqrt(head_dim)
  float scale = 0;
  // tokens per split (split = true; ignored otherwise)
  uint32_t partition = 0;
  PTXSERVE_PARAMS(DecodeAttentionArgs, q, k_pool, v_pool, block_tables, seq_lens, query_start,
                  positions, out, partial_out, partial_lse, split_counters, max_blocks_per_seq,
                  num_seqs, num_rows, scale, partition);
};

absl::StatusOr<std::string> GenerateDecodeAttention(const DecodeAttentionConfig& cfg);

// Launch geometry for `num_rows` query rows split `num_splits` ways.
LaunchDims DecodeAttentionLaunch(const DecodeAttentionShape& shape, int num_kv_heads,
                                 int64_t num_rows, int num_splits);

// Whether and how to split: few CTAs and long contexts split; otherwise one CTA per
// (row, kv head chunk) reads the whole context.
struct AttentionPlan {
  bool split = false;
  int num_splits = 1;
  int partition_tokens = 0;  // a power of two of blocks; 0 when not split
};
// `max_context`: longest context in the batch; `num_sms`: the device's SM count.
AttentionPlan PlanDecodeAttention(const DecodeAttentionConfig& cfg, int64_t num_rows,
                                  int64_t max_context, int num_sms);

// A mixed step (prefill chunks beside decode rows) runs its decode rows in a launch of the
// decode kernel of their own, apart from flash attention's, from kMixedDecodeRows decode rows
// on and more than chunk rows / kMixedChunkRowsPerDecodeRow (MixedDecodeRowsApart); fewer ride
// along in flash attention. In flash attention each decode row is a CTA per KV head that reads
// its whole context for a sixteenth of its mma rows, a cost the chunk's own tiles dilute the
// more the longer it is; the separate launch costs about a launch and a wave of its own. The
// crossover of the cost model's h100 estimates at Llama-3.2-1B's shape (decode rows at context
// 1024 beside a chunk after 512 cached tokens; tests/kernels/flash_attention_estimate_test
// prints them, estimates) moves with the chunk: flash attention for all rows against the
// separate launch is 36.4 against 29.0 us at 4 decode rows beside a 256-row chunk, 29.2
// against 32.5 at 4 and 33.8 against 34.2 at 8 beside 512, 50.9 against 52.5 at 8 and 58.2
// against 55.9 at 12 beside 1024, 101.1 against 97.1 at 16 and 146.0 against 104.6 at 20
// beside 2048. No one count keeps every pick within 10% of the cheaper; 4 and 120 (fitted to
// these estimates, which move by tens of percent with the tiles a sampled flash launch holds)
// keep them all.
inline constexpr int kMixedDecodeRows = 4;
inline constexpr int64_t kMixedChunkRowsPerDecodeRow = 120;
// Whether a mixed step of `decode_rows` decode rows beside `chunk_rows` prefill rows runs its
// decode rows apart; `min_decode_rows` replaces kMixedDecodeRows (tests and benchmarks move it).
inline bool MixedDecodeRowsApart(int64_t decode_rows, int64_t chunk_rows,
                                 int64_t min_decode_rows = kMixedDecodeRows) {
  return decode_rows >= min_decode_rows && decode_rows * kMixedChunkRowsPerDecodeRow > chunk_rows;
}

}  // namespace ptxserve::kernels
