// Flash-decoding merge: combines the per-split partial outputs of a split
// decode_attention launch with their log-sum-exp weights.
//
// Contract (device pointers, row-major, non-aliasing); parameters in this order:
//   partial_out  f32 [num_rows][num_heads][num_splits][head_dim]  normalised per split
//   partial_lse  f32 [num_rows][num_heads][num_splits]  base-2 log-sum-exp of each split
//                (-inf for an empty split), as decode_attention writes them
//   out          f32 [num_rows][num_heads][head_dim]
//   num_splits, num_rows  u32
// out = sum_s 2^(lse_s - M) * partial_s / sum_s 2^(lse_s - M), M = max_s lse_s;
// rows whose splits are all empty get zeros.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kAttentionMergeEntry[] = "attention_merge";

struct AttentionMergeConfig {
  int num_heads = 32;
  int head_dim = 128;
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateAttentionMerge(const AttentionMergeConfig& cfg);
// Grid (num_heads, num_rows); one thread per 4 outputs of a head.
LaunchDims AttentionMergeLaunch(const AttentionMergeConfig& cfg, int64_t num_rows);

}  // namespace ptxserve::kernels
