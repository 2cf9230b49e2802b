#include "engine/cuda/kv_pools.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {

absl::StatusOr<KvPools> AllocateKvPools(const ModelConfig& c, int64_t padded_head_dim,
                                        double memory_fraction, KvCacheConfig* kv, Device& device,
                                        bool log_progress) {
  const size_t block_bytes =
      static_cast<size_t>(c.num_kv_heads) * kv->block_size * padded_head_dim * DTypeSize(kv->dtype);
  if (kv->num_blocks <= 0) {
    absl::StatusOr<std::pair<size_t, size_t>> mem = device.MemoryInfo();
    if (!mem.ok()) return mem.status();
    const double budget = memory_fraction * static_cast<double>(mem->first);
    const double blocks = budget / static_cast<double>(2 * c.num_layers * block_bytes);
    if (blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: %d bytes free after weights hold no KV block (%d bytes per block and layer)",
          device.info().name, mem->first, 2 * block_bytes));
    }
    kv->num_blocks = static_cast<int32_t>(std::min(blocks, double{1 << 30}));
  }
  const size_t pool = static_cast<size_t>(kv->num_blocks) * block_bytes;
  KvPools pools;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (auto [list, name] : {std::pair{&pools.k, "K"}, std::pair{&pools.v, "V"}}) {
      absl::StatusOr<DeviceBuffer> b = device.Alloc(pool, absl::StrCat(name, " pool of layer ", i));
      if (!b.ok()) return b.status();
      // Zeroed like the CPU backend's pools: padding lanes of a head must read as 0.
      if (absl::Status s = device.Memset(b->ptr(), 0, pool, "KV pool"); !s.ok()) return s;
      list->push_back(*std::move(b));
    }
  }
  pools.bytes = 2 * c.num_layers * pool;
  if (log_progress) {
    PTX_LOG(INFO) << "KV cache on " << device.info().name << ": " << kv->num_blocks << " blocks of "
                  << kv->block_size << " tokens, " << (pools.bytes >> 20) << " MiB";
  }
  return pools;
}

}  // namespace ptxserve::cuda
