// K/V pool sizes from the model's shape alone: what the backend factory, the CPU backend
// and the server's --kv_memory share. (A real GPU sizes its pools from its free memory.)
#pragma once

#include <cstdint>

#include "engine/backend.h"
#include "engine/model/config.h"

namespace ptxserve {

// Bytes one K/V block takes over all layers, K and V together (unpadded heads).
int64_t KvBlockBytes(const ModelConfig& config, const KvCacheConfig& kv);

// The K/V pool a host-memory backend gets when nobody sized it: room for `max_seqs` full
// contexts (max_position_embeddings), within 1 GiB, but never less than one full context.
int32_t DefaultHostKvBlocks(const ModelConfig& config, const KvCacheConfig& kv, int32_t max_seqs);

}  // namespace ptxserve
