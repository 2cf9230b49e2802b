// RoPE and the KV-cache write as one kernel: each token's row of the stacked q/k/v projection
// is read once; q is rotated into the attention's q buffer, k rotated and v copied into the
// paged pools, in one launch per layer.
//
// Contract (device pointers, row-major, non-aliasing): RopeKvArgs, in .param order.
// A pair (a, b) -> (a cos - b sin, b cos + a sin) with angle positions[t] * inv_freq[i],
// reduced modulo 2*pi in extended precision first (the product is carried as an exact
// hi + lo pair), so long positions stay accurate; rounded as the CPU reference (cpu::Rope)
// rounds. f16/bf16 pools receive round-to-nearest-even conversions (cpu::KvScatter).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kRopeKvEntry[] = "rope_kv";

// Pair i of a head is (i, i + head_dim/2) for kRotateHalf (Llama/HF) and (2i, 2i+1) for
// kInterleaved (GPT-J).
enum class RopeLayout : uint8_t { kRotateHalf, kInterleaved };
// The layout as the config key names it: "half" or "interleaved".
inline const char* KeyText(RopeLayout l) {
  return l == RopeLayout::kRotateHalf ? "half" : "interleaved";
}

struct RopeKvConfig : KernelConfig<RopeKvConfig, kRopeKvEntry> {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;  // a multiple of 32, at most 256
  RopeLayout layout = RopeLayout::kRotateHalf;
  int block_size = 16;
  ElemType kv_dtype = ElemType::kF16;
  ptx::Target target;
  using C = RopeKvConfig;
  int Threads() const;  // per CTA
  // Work units of a token: 4 rotated pairs of a q or k head, or 4 elements of a v head.
  int64_t RotateUnits() const { return int64_t{num_heads + num_kv_heads} * head_dim / 8; }
  int64_t Units() const { return RotateUnits() + int64_t{num_kv_heads} * head_dim / 4; }
  static constexpr auto kFields =
      std::make_tuple(Field("num_heads", &C::num_heads).Key("h").Range(1, 1024),
                      Field("num_kv_heads", &C::num_kv_heads).Key("kvh").Range(1, 256),
                      HeadDimField(&C::head_dim), Field("layout", &C::layout).Key(""),
                      Field("block_size", &C::block_size).Key("bs").Range(1, 1024),
                      Field("kv_dtype", &C::kv_dtype).Key(""));
};

struct RopeKvArgs {
  // f32 [num_tokens][(num_heads + 2 num_kv_heads) * head_dim]: each token's q heads, then its
  // k heads, then its v heads (the stacked q/k/v projection's output rows); read only
  DevicePtr qkv;
  // f32 [num_tokens][num_heads][head_dim]: q rotated
  DevicePtr q;
  // s32 [num_tokens]
  DevicePtr positions;
  // f32 [head_dim / 2] (RopeInvFreq, engine/model/rope.h: scaling already applied)
  DevicePtr inv_freq;
  // s64 [num_tokens]; slot = block * block_size + offset; a negative slot writes no K/V
  // (padding; q is still rotated)
  DevicePtr slot_mapping;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr k_pool;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr v_pool;
  uint32_t num_tokens = 0;
  PTXSERVE_PARAMS(RopeKvArgs, qkv, q, positions, inv_freq, slot_mapping, k_pool, v_pool,
                  num_tokens);
};

absl::StatusOr<std::string> GenerateRopeKv(const RopeKvConfig& cfg);
// One CTA per token; its threads stride over the token's units (RopeKvConfig::Units).
inline constexpr auto RopeKvLaunch = &RowLaunchFor<RopeKvConfig>;

}  // namespace ptxserve::kernels
