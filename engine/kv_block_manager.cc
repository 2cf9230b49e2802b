#include "engine/kv_block_manager.h"

#include <algorithm>
#include <bit>
#include <cassert>

#include "absl/strings/str_format.h"

namespace ptxserve {
namespace {

uint64_t Mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

KvBlockManager::KvBlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching,
                               uint64_t salt)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      salt_(salt),
      ref_counts_(num_blocks, 0),
      cached_(num_blocks, false),
      lru_prev_(num_blocks + 1, num_blocks),
      lru_next_(num_blocks + 1, num_blocks) {
  empty_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) empty_.push_back(b);
  if (prefix_caching_) {
    hashes_.assign(num_blocks, 0);
    parents_.assign(num_blocks, -1);
    num_children_.assign(num_blocks, 0);
    tokens_.assign(static_cast<size_t>(num_blocks) * block_size, 0);
    by_hash_.reserve(num_blocks);
  }
}

absl::StatusOr<int32_t> KvBlockManager::Allocate() {
  int32_t b;
  if (!empty_.empty()) {
    b = empty_.back();
    empty_.pop_back();
  } else if (num_lru_ > 0) {
    b = lru_next_[num_blocks()];
    LruUnlink(b);
    Uncache(b);
    ++evictions_;
  } else {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV cache: all %d blocks are in use", num_blocks()));
  }
  ref_counts_[b] = 1;
  return b;
}

void KvBlockManager::Retain(int32_t block) {
  assert(block >= 0 && block < num_blocks() && (ref_counts_[block] > 0 || cached_[block]));
  if (ref_counts_[block] == 0) LruUnlink(block);
  ++ref_counts_[block];
}

void KvBlockManager::Release(int32_t block) {
  assert(block >= 0 && block < num_blocks() && ref_counts_[block] > 0);
  if (--ref_counts_[block] > 0) return;
  if (cached_[block]) {
    LruPushBack(block);
  } else {
    empty_.push_back(block);
  }
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
  // Last first: a deeper block enters the eviction order before its parent.
  for (auto it = table->rbegin(); it != table->rend(); ++it) Release(*it);
  table->clear();
}

uint64_t KvBlockManager::BlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  // Two tokens per multiply-rotate round and one full mix at the end: a block is hashed
  // whenever one fills, in the decode loop. Its quality only decides how rarely two
  // prefixes compete for a hash (a hit also compares the tokens).
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = parent_hash;
  size_t i = 0;
  for (; i + 2 <= tokens.size(); i += 2) {
    const uint64_t pair = static_cast<uint32_t>(tokens[i]) |
                          static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32;
    h = std::rotl((h ^ pair) * kMul, 29);
  }
  if (i < tokens.size()) h = std::rotl((h ^ static_cast<uint32_t>(tokens[i])) * kMul, 29);
  return Mix64(h ^ tokens.size());
}

bool KvBlockManager::Holds(int32_t block, int32_t parent, std::span<const int32_t> tokens) const {
  const int32_t* mine = tokens_.data() + static_cast<size_t>(block) * block_size_;
  return parents_[block] == parent && std::equal(tokens.begin(), tokens.end(), mine);
}

void KvBlockManager::MatchPrefix(std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                                 int32_t max_blocks, std::vector<int32_t>* blocks) const {
  if (!prefix_caching_) return;
  int32_t parent = -1;
  for (int32_t i = 0; i < max_blocks; ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) return;
    const int32_t b = it->second;
    if (!Holds(b, parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_))) {
      return;
    }
    blocks->push_back(b);
    parent = b;
  }
}

int32_t KvBlockManager::Cache(int32_t block, uint64_t hash, int32_t parent,
                              std::span<const int32_t> tokens) {
  assert(ref_counts_[block] > 0 && !cached_[block]);
  assert(static_cast<int32_t>(tokens.size()) == block_size_);
  if (!prefix_caching_ || (parent >= 0 && !cached_[parent])) return -1;
  auto [it, inserted] = by_hash_.try_emplace(hash, block);
  if (!inserted) return Holds(it->second, parent, tokens) ? it->second : -1;
  cached_[block] = true;
  hashes_[block] = hash;
  parents_[block] = parent;
  if (parent >= 0) ++num_children_[parent];
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  return block;
}

void KvBlockManager::Uncache(int32_t block) {
  // Children are released before their parents (see the file comment), so none is
  // still cached to point at this block once it holds other tokens.
  assert(num_children_[block] == 0);
  by_hash_.erase(hashes_[block]);
  if (parents_[block] >= 0) --num_children_[parents_[block]];
  cached_[block] = false;
}

void KvBlockManager::LruPushBack(int32_t block) {
  const int32_t sentinel = num_blocks();
  const int32_t last = lru_prev_[sentinel];
  lru_next_[last] = block;
  lru_prev_[block] = last;
  lru_next_[block] = sentinel;
  lru_prev_[sentinel] = block;
  ++num_lru_;
}

void KvBlockManager::LruUnlink(int32_t block) {
  lru_next_[lru_prev_[block]] = lru_next_[block];
  lru_prev_[lru_next_[block]] = lru_prev_[block];
  --num_lru_;
}

}  // namespace ptxserve
