// The paged KV cache's allocator: a fixed pool of blocks with reference counts, so
// blocks can be shared between sequences, and (prefix caching on) a cache of full blocks
// whose K/V stay in the pool after their last sequence let go of them.
//
// A block is in one of three states:
//   referenced  ref count > 0: in some sequence's block table;
//   cached      ref count 0, holds the K/V of a known run of tokens: reusable until its
//               memory is needed;
//   empty       ref count 0, nothing reusable.
// Cached and empty blocks are both free: Allocate takes an empty block first, else it
// evicts the cached block released longest ago.
//
// Prefix cache. A full block is named by a hash chained over its parent's hash and its
// token ids, starting from a salt that names whatever else shapes its K/V (model, KV
// dtype). A cached block also records its parent block and its token ids, and a lookup
// hits only when both are equal, so a hash collision can cost a hit but never change an
// answer. A sequence's table is a chain (each cached block's parent is the block before
// it) and is released from its end, so a block is released no later than its parent and
// eviction in release order takes deeper blocks before their parents: a cached block's
// parent is always cached, and "the same parent block" means "the same prefix".
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ptxserve {

class KvBlockManager {
 public:
  // `salt` is the root of every block hash (PrefixCacheSalt); unused when caching is off.
  KvBlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching = false,
                 uint64_t salt = 0);

  // Takes a free block (reference count 1), evicting the least recently released cached
  // block when no empty one is left. ResourceExhausted when none is free.
  absl::StatusOr<int32_t> Allocate();
  // Adds a reference to a referenced or cached block (sharing; a cached block stops being
  // free).
  void Retain(int32_t block);
  // Drops a reference; at zero the block becomes cached (if it is) or empty.
  void Release(int32_t block);

  // Grows `table` so it holds at least `num_tokens` tokens. All or nothing: on
  // ResourceExhausted the table and the pool are unchanged.
  absl::Status EnsureCapacity(std::vector<int32_t>* table, int64_t num_tokens);
  // Blocks a table needs to hold num_tokens tokens beyond what it has.
  int32_t BlocksNeeded(const std::vector<int32_t>& table, int64_t num_tokens) const;
  // Releases every block of `table`, last first, and clears it.
  void FreeSequence(std::vector<int32_t>* table);

  // The hash of a full block holding `tokens` after the block hashed `parent_hash`
  // (root_hash() for a sequence's first block).
  static uint64_t BlockHash(uint64_t parent_hash, std::span<const int32_t> tokens);
  uint64_t root_hash() const { return salt_; }
  // Appends to `blocks` the cached blocks holding the longest run of leading full blocks
  // of `tokens`, at most max_blocks, given the chain hashes of those blocks (`hashes`,
  // at least as many as the blocks tried). Takes no references.
  void MatchPrefix(std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                   int32_t max_blocks, std::vector<int32_t>* blocks) const;
  // Offers the referenced, full block `block` (K/V computed) to the cache as the child
  // of `parent` (-1: a first block), holding `tokens` and hashed `hash`. Returns the
  // cached block for that prefix: `block` itself, or an equal block already cached (the
  // caller may then drop `block` for it). -1 when it cannot be cached: caching is off,
  // `parent` is not cached, or the hash names other tokens.
  int32_t Cache(int32_t block, uint64_t hash, int32_t parent, std::span<const int32_t> tokens);

  bool prefix_caching() const { return prefix_caching_; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  // Empty plus cached: what Allocate can hand out.
  int32_t free_blocks() const { return static_cast<int32_t>(empty_.size()) + num_lru_; }
  int32_t used_blocks() const { return num_blocks() - free_blocks(); }  // referenced
  int32_t cached_blocks() const { return num_lru_; }                    // free but reusable
  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }
  bool is_cached(int32_t block) const { return cached_[block]; }
  int64_t evictions() const { return evictions_; }

 private:
  bool Holds(int32_t block, int32_t parent, std::span<const int32_t> tokens) const;
  void LruPushBack(int32_t block);
  void LruUnlink(int32_t block);
  // Drops a cached block's identity (its K/V is about to be overwritten).
  void Uncache(int32_t block);

  int32_t block_size_;
  bool prefix_caching_;
  uint64_t salt_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> empty_;  // a stack; lowest ids handed out first
  // Cached blocks.
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
  std::vector<bool> cached_;
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> parents_;
  std::vector<int32_t> num_children_;  // cached blocks whose parent it is
  std::vector<int32_t> tokens_;        // [num_blocks * block_size], when caching
  // Unreferenced cached blocks in release order (oldest first): a doubly linked list over
  // block ids with the sentinel num_blocks.
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t num_lru_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace ptxserve
