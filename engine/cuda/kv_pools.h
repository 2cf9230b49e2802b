// The paged K/V cache on the device: one K and one V pool per layer, each
// [num_blocks][kv_heads][block_size][padded head_dim] of the KV dtype, zeroed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/device.h"
#include "engine/model/config.h"

namespace ptxserve::cuda {

struct KvPools {
  std::vector<DeviceBuffer> k, v;  // by layer
  size_t bytes = 0;                // all pools
};

// Allocates the pools of `kv`; kv->num_blocks <= 0 is set to what `memory_fraction` of
// the device's free memory holds (ResourceExhausted when that is not one block).
absl::StatusOr<KvPools> AllocateKvPools(const ModelConfig& config, int64_t padded_head_dim,
                                        double memory_fraction, KvCacheConfig* kv, Device& device,
                                        bool log_progress);

}  // namespace ptxserve::cuda
