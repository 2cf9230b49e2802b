// Flash-decoding merge: combines the per-split partial outputs of a split
// decode_attention launch with their log-sum-exp weights.
//
// Contract (device pointers, row-major, non-aliasing): AttentionMergeArgs, in .param order.
// out = sum_s 2^(lse_s - M) * partial_s / sum_s 2^(lse_s - M), M = max_s lse_s;
// rows whose splits are all empty get zeros.
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

inline constexpr char kAttentionMergeEntry[] = "attention_merge";

struct AttentionMergeConfig : KernelConfig<AttentionMergeConfig, kAttentionMergeEntry> {
  int num_heads = 32;
  int head_dim = 128;  // a multiple of 32, at most 256
  // The output's type: f32, or the model's f16/bf16 (the o projection's input); the weights and
  // sums stay f32 in registers, only the store rounds.
  ElemType out_dtype = ElemType::kF32;
  ptx::Target target;
  int Threads() const;  // per CTA
  static constexpr auto kFields =
      std::make_tuple(Field("num_heads", &AttentionMergeConfig::num_heads).Key("h").Range(1, 1024),
                      HeadDimField(&AttentionMergeConfig::head_dim),
                      Field("out_dtype", &AttentionMergeConfig::out_dtype).KeyUnlessF32("out"));
};

struct AttentionMergeArgs {
  // f32 [num_rows][num_heads][num_splits][head_dim], normalised per split
  DevicePtr partial_out;
  // f32 [num_rows][num_heads][num_splits]: base-2 log-sum-exp of each split (-inf for an empty
  // split), as decode_attention writes them
  DevicePtr partial_lse;
  // out_dtype [num_rows][num_heads][head_dim]
  DevicePtr out;
  uint32_t num_splits = 0;
  uint32_t num_rows = 0;
  PTXSERVE_PARAMS(AttentionMergeArgs, partial_out, partial_lse, out, num_splits, num_rows);
};

absl::StatusOr<std::string> GenerateAttentionMerge(const AttentionMergeConfig& cfg);
// Grid (num_heads, num_rows); one thread per 4 outputs of a head.
LaunchDims AttentionMergeLaunch(const AttentionMergeConfig& cfg, int64_t num_rows);

}  // namespace ptxserve::kernels
