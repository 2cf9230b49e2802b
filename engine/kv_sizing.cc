#include "engine/kv_sizing.h"

#include <algorithm>

namespace ptxserve {

int64_t KvBlockBytes(const ModelConfig& c, const KvCacheConfig& kv) {
  return 2 * c.num_layers * c.num_kv_heads * static_cast<int64_t>(kv.block_size) * c.head_dim *
         static_cast<int64_t>(DTypeSize(kv.dtype));
}

int32_t DefaultHostKvBlocks(const ModelConfig& c, const KvCacheConfig& kv, int32_t max_seqs) {
  KvCacheConfig sized = kv;
  sized.block_size = std::max<int32_t>(kv.block_size, 1);
  const int64_t bs = sized.block_size;
  const int64_t per_seq = std::max<int64_t>((c.max_position_embeddings + bs - 1) / bs, 1);
  const int64_t block_bytes = std::max<int64_t>(KvBlockBytes(c, sized), 1);
  int64_t blocks = std::min<int64_t>(per_seq * std::max(max_seqs, 1),
                                     std::max<int64_t>((int64_t{1} << 30) / block_bytes, 1));
  blocks = std::max(blocks, per_seq);
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

}  // namespace ptxserve
