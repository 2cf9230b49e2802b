// KV-cache scatter: writes each new token's K and V rows into the paged pools.
//
// Contract (device pointers, row-major, non-aliasing): KvScatterArgs, in .param order.
// f16/bf16 pools receive round-to-nearest-even conversions (engine/cpu KvScatter).
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

inline constexpr char kKvScatterEntry[] = "kv_scatter";

struct KvScatterConfig : KernelConfig<KvScatterConfig, kKvScatterEntry> {
  int num_kv_heads = 8;
  int head_dim = 128;  // a multiple of 32, at most 256
  int block_size = 16;
  ElemType kv_dtype = ElemType::kF16;
  ptx::Target target;
  using C = KvScatterConfig;
  int Threads() const;  // per CTA
  static constexpr auto kFields = std::make_tuple(
      Field("num_kv_heads", &C::num_kv_heads).Key("kvh").Range(1, 256), HeadDimField(&C::head_dim),
      Field("block_size", &C::block_size).Key("bs").Range(1, 1024),
      Field("kv_dtype", &C::kv_dtype).Key(""));
};

struct KvScatterArgs {
  // f32 [num_tokens][num_kv_heads][head_dim]
  DevicePtr k;
  // f32 [num_tokens][num_kv_heads][head_dim]
  DevicePtr v;
  // s64 [num_tokens]; slot = block * block_size + offset, a negative slot skips the token (padding)
  DevicePtr slot_mapping;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr k_pool;
  // kv_dtype [num_blocks][num_kv_heads][block_size][head_dim]
  DevicePtr v_pool;
  uint32_t num_tokens = 0;
  PTXSERVE_PARAMS(KvScatterArgs, k, v, slot_mapping, k_pool, v_pool, num_tokens);
};

absl::StatusOr<std::string> GenerateKvScatter(const KvScatterConfig& cfg);
// One CTA per token; threads stride over the token's kv_heads * head_dim elements.
inline constexpr auto KvScatterLaunch = &RowLaunchFor<KvScatterConfig>;

namespace gen {
// The element index (u64) of (block, head 0, offset, 0) in a K or V pool of the layout
// above for a token's non-negative `slot` (u64).
Reg PoolTokenElem(KernelBuilder& kb, Reg slot, int num_kv_heads, int block_size, int head_dim);
}  // namespace gen

}  // namespace ptxserve::kernels
