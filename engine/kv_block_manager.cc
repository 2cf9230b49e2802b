#include "engine/kv_block_manager.h"

#include <cassert>

#include "absl/strings/str_format.h"

namespace ptxserve {

KvBlockManager::KvBlockManager(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), ref_counts_(num_blocks, 0) {
  free_list_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

absl::StatusOr<int32_t> KvBlockManager::Allocate() {
  if (free_list_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV cache: all %d blocks are in use", num_blocks()));
  }
  const int32_t b = free_list_.back();
  free_list_.pop_back();
  ref_counts_[b] = 1;
  return b;
}

void KvBlockManager::Retain(int32_t block) {
  assert(block >= 0 && block < num_blocks() && ref_counts_[block] > 0);
  ++ref_counts_[block];
}

void KvBlockManager::Release(int32_t block) {
  assert(block >= 0 && block < num_blocks() && ref_counts_[block] > 0);
  if (--ref_counts_[block] == 0) free_list_.push_back(block);
}

int32_t KvBlockManager::BlocksNeeded(const std::vector<int32_t>& table, int64_t num_tokens) const {
  const int64_t want = (num_tokens + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(table.size());
  return want > have ? static_cast<int32_t>(want - have) : 0;
}

absl::Status KvBlockManager::EnsureCapacity(std::vector<int32_t>* table, int64_t num_tokens) {
  const int32_t need = BlocksNeeded(*table, num_tokens);
  if (need > free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV cache: %d more blocks needed for %d tokens, %d of %d free", need,
                        num_tokens, free_blocks(), num_blocks()));
  }
  for (int32_t i = 0; i < need; ++i) table->push_back(*Allocate());
  return absl::OkStatus();
}

void KvBlockManager::FreeSequence(std::vector<int32_t>* table) {
  for (int32_t b : *table) Release(b);
  table->clear();
}

}  // namespace ptxserve
