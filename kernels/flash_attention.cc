// Config checks and launch geometry of flash attention; the PTX itself is written in
// flash_attention_gen.cc.
#include "kernels/flash_attention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ptxserve::kernels {
namespace {

constexpr int kMaxSharedBytes = 48 * 1024;  // static shared memory limit per CTA

}  // namespace

int FlashAttentionConfig::KeysPerTile() const {
  // Two stages of a K and a V tile, rows of head_dim halves plus 16 bytes of padding.
  const int row_bytes = head_dim * 2 + 16;
  return 4 * 64 * row_bytes <= kMaxSharedBytes ? 64 : 32;
}

absl::Status FlashAttentionConfig::CheckAcrossFields() const {
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads = ", num_heads, " is not a positive multiple of num_kv_heads = ", num_kv_heads));
  }
  if (num_heads / num_kv_heads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads / num_kv_heads = ", num_heads / num_kv_heads,
                     ": a CTA's 64 query rows hold at most 64 heads"));
  }
  if (head_dim > 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim = ", head_dim, ": at most 128 (each warp's output tile lives in registers)"));
  }
  if (kv_dtype == ElemType::kF32) {
    return absl::InvalidArgumentError(
        "kv_dtype = f32: the tensor-core operands are f16 or bf16 (f32 caches keep "
        "decode_attention)");
  }
  return absl::OkStatus();
}

LaunchDims FlashAttentionLaunch(const FlashAttentionConfig& cfg, int64_t num_rows,
                                int64_t num_seqs) {
  LaunchDims d;
  const int64_t tiles = CeilDiv(std::max<int64_t>(num_rows, 1), cfg.TokensPerCta()) +
                        std::max<int64_t>(num_seqs, 1) - 1;
  d.grid = {static_cast<uint32_t>(tiles), static_cast<uint32_t>(cfg.num_kv_heads), 1};
  d.block = {static_cast<uint32_t>(cfg.Threads()), 1, 1};
  return d;
}

}  // namespace ptxserve::kernels
