// The paged KV cache's allocator: a fixed pool of blocks with reference counts, so
// blocks can later be shared between sequences (prefix caching, beam forks).
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ptxserve {

class KvBlockManager {
 public:
  KvBlockManager(int32_t num_blocks, int32_t block_size);

  // Takes one free block (reference count 1). ResourceExhausted when none is free.
  absl::StatusOr<int32_t> Allocate();
  // Adds a reference to a block in use (sharing).
  void Retain(int32_t block);
  // Drops a reference; the block returns to the pool when the count reaches zero.
  void Release(int32_t block);

  // Grows `table` so it holds at least `num_tokens` tokens. All or nothing: on
  // ResourceExhausted the table and the pool are unchanged.
  absl::Status EnsureCapacity(std::vector<int32_t>* table, int64_t num_tokens);
  // Blocks a table needs to hold num_tokens tokens beyond what it has.
  int32_t BlocksNeeded(const std::vector<int32_t>& table, int64_t num_tokens) const;
  // Releases every block of `table` and clears it.
  void FreeSequence(std::vector<int32_t>* table);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t used_blocks() const { return num_blocks() - free_blocks(); }
  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }

 private:
  int32_t block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_list_;  // a stack; lowest ids handed out first
};

}  // namespace ptxserve
