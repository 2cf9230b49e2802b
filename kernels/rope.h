// Rotary position embedding, in place on q and k.
//
// Contract (device pointers, row-major): RopeArgs, in .param order.
// Pair i of a head is (i, i + head_dim/2) for kRotateHalf (Llama/HF) and (2i, 2i+1) for
// kInterleaved (GPT-J); (a, b) -> (a cos - b sin, b cos + a sin) with angle
// positions[t] * inv_freq[i], reduced modulo 2*pi in extended precision first (the
// product is carried as an exact hi + lo pair), so long positions stay accurate.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kRopeEntry[] = "rope";

enum class RopeLayout : uint8_t { kRotateHalf, kInterleaved };
// The layout as the config key names it: "half" or "interleaved".
inline const char* KeyText(RopeLayout l) {
  return l == RopeLayout::kRotateHalf ? "half" : "interleaved";
}

struct RopeConfig : KernelConfig<RopeConfig, kRopeEntry> {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;  // even
  RopeLayout layout = RopeLayout::kRotateHalf;
  ptx::Target target;
  int Threads() const;  // per CTA
  static constexpr auto kFields =
      std::make_tuple(Field("num_heads", &RopeConfig::num_heads).Key("h").Range(1, 1024),
                      Field("num_kv_heads", &RopeConfig::num_kv_heads).Key("kvh").Range(0, 1024),
                      Field("head_dim", &RopeConfig::head_dim).Key("d").Range(2, 1024, 2),
                      Field("layout", &RopeConfig::layout).Key(""));
};

struct RopeArgs {
  // f32 [num_tokens][num_heads][head_dim], rotated in place
  DevicePtr q;
  // f32 [num_tokens][num_kv_heads][head_dim], rotated in place
  DevicePtr k;
  // s32 [num_tokens]
  DevicePtr positions;
  // f32 [head_dim / 2] (RopeInvFreq, engine/model/rope.h: scaling already applied)
  DevicePtr inv_freq;
  uint32_t num_tokens = 0;
  PTXSERVE_PARAMS(RopeArgs, q, k, positions, inv_freq, num_tokens);
};

absl::StatusOr<std::string> GenerateRope(const RopeConfig& cfg);
// One CTA per token.
inline constexpr auto RopeLaunch = &RowLaunchFor<RopeConfig>;

namespace gen {
// The token's cos and sin of angle positions * inv_freq[i] for i < half, into shared memory
// at cs_base + 8 i as (cos, sin) f32, threads (tid of `threads`) striding over i. `pos` is
// the position as f32; the caller synchronises the CTA before reading them.
void RopeCosSin(KernelBuilder& kb, int half, int threads, Reg tid, Reg pos, Reg inv_freq,
                Reg cs_base);
// The pair (a, b) rotated by the angle of (cos, sin).
std::pair<Reg, Reg> RopeRotate(KernelBuilder& kb, Reg a, Reg b, Reg cos, Reg sin);
}  // namespace gen

}  // namespace ptxserve::kernels
