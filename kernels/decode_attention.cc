// Config checks, work decomposition and the split plan of decode attention; the
// PTX itself is written in decode_attention_gen.cc.
#include "kernels/decode_attention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ptxserve::kernels {
namespace {

constexpr int kMaxSharedBytes = 48 * 1024;  // static shared memory limit per CTA
constexpr int kRegBudget = 64;              // q + acc registers per lane / 2
constexpr int kTileWordBudget = 32;         // a tile's K and V registers per lane

}  // namespace

absl::Status DecodeAttentionConfig::CheckAcrossFields() const {
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads = ", num_heads, " is not a positive multiple of num_kv_heads = ", num_kv_heads));
  }
  if (num_warps != 0 && num_warps != 1 && num_warps != 2 && num_warps != 4 && num_warps != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_warps = ", num_warps, ": want 0 (auto), 1, 2, 4 or 8"));
  }
  if (split && out_dtype != ElemType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("out_dtype = ", ElemTypeName(out_dtype),
                                                   " with split: the merge reads f32 partials"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodeAttentionShape> ShapeOf(const DecodeAttentionConfig& cfg) {
  if (absl::Status s = cfg.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("decode_attention config: ", s.message()));
  }
  DecodeAttentionShape sh;
  const int es = ElemSize(cfg.kv_dtype);
  const int full_vec = 16 / es;  // elements in a 128-bit load
  // Lanes per token: as many as make every lane's share whole 128-bit vectors.
  const int nvec = cfg.head_dim / full_vec;
  int lanes = 1;
  while (lanes < 32 && nvec % (lanes * 2) == 0) lanes *= 2;
  sh.group = cfg.num_heads / cfg.num_kv_heads;
  sh.heads_per_cta = sh.group;
  // q and the accumulators live in registers (2 * heads * elems each lane): trade
  // load width, then heads per CTA, for staying clear of spills.
  while (sh.heads_per_cta * (cfg.head_dim / lanes) > kRegBudget && lanes < 32) lanes *= 2;
  const int elems = cfg.head_dim / lanes;
  while (sh.heads_per_cta * elems > kRegBudget || sh.group % sh.heads_per_cta != 0) {
    --sh.heads_per_cta;
  }
  sh.head_chunks = sh.group / sh.heads_per_cta;
  sh.lanes_per_token = lanes;
  sh.elems_per_lane = elems;
  sh.vec_elems = 1;
  while (sh.vec_elems * 2 <= full_vec && elems % (sh.vec_elems * 2) == 0) sh.vec_elems *= 2;
  sh.tokens_per_warp = 32 / lanes;
  // Four steps of 16-byte loads keep 4 KiB of K/V in flight per warp, enough for a few
  // warps per SM to cover the DRAM latency (Little's law); fewer when the tile's K and V
  // words would crowd the registers.
  const int words_per_step = 2 * elems * ElemSize(cfg.kv_dtype) / 4;
  sh.steps_per_tile = 4;
  while (sh.steps_per_tile > 1 && sh.steps_per_tile * words_per_step > kTileWordBudget) {
    sh.steps_per_tile /= 2;
  }
  auto smem = [&](int warps) { return warps * sh.heads_per_cta * (cfg.head_dim * 4 + 8); };
  sh.num_warps = cfg.num_warps == 0 ? 4 : cfg.num_warps;
  if (cfg.num_warps == 0) {
    while (sh.num_warps > 1 && smem(sh.num_warps) > kMaxSharedBytes) sh.num_warps /= 2;
  }
  sh.shared_bytes = smem(sh.num_warps);
  if (sh.shared_bytes > kMaxSharedBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_attention config: ", sh.num_warps, " warps x ", sh.heads_per_cta,
                     " heads x head_dim ", cfg.head_dim, " need ", sh.shared_bytes,
                     " bytes of shared memory, more than ", kMaxSharedBytes));
  }
  return sh;
}

LaunchDims DecodeAttentionLaunch(const DecodeAttentionShape& shape, int num_kv_heads,
                                 int64_t num_rows, int num_splits) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(num_kv_heads * shape.head_chunks),
            static_cast<uint32_t>(std::max<int64_t>(num_rows, 1)),
            static_cast<uint32_t>(std::max(num_splits, 1))};
  d.block = {static_cast<uint32_t>(shape.num_warps * 32), 1, 1};
  return d;
}

AttentionPlan PlanDecodeAttention(const DecodeAttentionConfig& cfg, int64_t num_rows,
                                  int64_t max_context, int num_sms) {
  AttentionPlan plan;
  absl::StatusOr<DecodeAttentionShape> sh = ShapeOf(cfg);
  if (!sh.ok() || num_rows <= 0 || max_context <= 0) return plan;
  // Splitting pays when the unsplit grid leaves SMs idle and each split still has
  // enough tokens to amortise its partial write and the merge. 64 tokens: at Llama-3.2-1B's
  // shape, batch 1 and context 1024 on h100, the cost model puts 16 splits of 64 and their
  // merge at 182 us a step against 429 us for 4 splits of 256 (estimates).
  constexpr int64_t kMinPartition = 64;
  const int64_t ctas = int64_t{cfg.num_kv_heads} * sh->head_chunks * num_rows;
  const int64_t want_ctas = 2 * int64_t{std::max(num_sms, 1)};
  if (ctas >= want_ctas || max_context < 2 * kMinPartition) return plan;
  const int64_t splits = std::min(CeilDiv(want_ctas, ctas), max_context / kMinPartition);
  if (splits <= 1) return plan;
  // A power of two of blocks, as a replayed CUDA graph rounds the partition to (so that
  // the context's growth does not capture a graph per block): the largest that still gives
  // `splits` partitions, so the rounding neither grows a split's work nor empties splits.
  const int64_t min_blocks = CeilDiv(kMinPartition, cfg.block_size);
  int64_t blocks = 1;
  while (blocks < min_blocks) blocks *= 2;
  while (2 * blocks * cfg.block_size * splits <= max_context) blocks *= 2;
  const int64_t partition = blocks * cfg.block_size;
  if (partition >= max_context) return plan;
  plan.split = true;
  plan.partition_tokens = static_cast<int>(partition);
  plan.num_splits = static_cast<int>(CeilDiv(max_context, partition));
  return plan;
}

}  // namespace ptxserve::kernels
