// Rotary position embedding, in place on q and k.
//
// Contract (device pointers, row-major); parameters in this order:
//   q          f32 [num_tokens][num_heads][head_dim]     rotated in place
//   k          f32 [num_tokens][num_kv_heads][head_dim]  rotated in place
//   positions  s32 [num_tokens]
//   inv_freq   f32 [head_dim / 2]  (RopeInvFreq, engine/model/rope.h: scaling applied)
//   num_tokens u32
// Pair i of a head is (i, i + head_dim/2) for kRotateHalf (Llama/HF) and (2i, 2i+1) for
// kInterleaved (GPT-J); (a, b) -> (a cos - b sin, b cos + a sin) with angle
// positions[t] * inv_freq[i], reduced modulo 2*pi in extended precision first (the
// product is carried as an exact hi + lo pair), so long positions stay accurate.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kRopeEntry[] = "rope";

enum class RopeLayout : uint8_t { kRotateHalf, kInterleaved };

struct RopeConfig {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;  // even
  RopeLayout layout = RopeLayout::kRotateHalf;
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateRope(const RopeConfig& cfg);
// One CTA per token.
LaunchDims RopeLaunch(const RopeConfig& cfg, int64_t num_tokens);

}  // namespace ptxserve::kernels
