// The KV block pool with prefix caching: block states and accounting, exact matching
// (a hash collision never hits), and the eviction order.
#include "engine/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace ptxserve {
namespace {

constexpr int32_t kBs = 4;

// A chain of full blocks as a sequence would offer them: tokens, hashes, and the blocks.
struct Chain {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> hashes;
  std::vector<int32_t> blocks;
};

Chain MakeChain(const KvBlockManager& kv, std::vector<int32_t> tokens) {
  Chain c;
  c.tokens = std::move(tokens);
  uint64_t h = kv.root_hash();
  for (size_t i = 0; i + kBs <= c.tokens.size(); i += kBs) {
    h = KvBlockManager::BlockHash(h, std::span<const int32_t>(c.tokens).subspan(i, kBs));
    c.hashes.push_back(h);
  }
  return c;
}

std::vector<int32_t> Iota(int32_t n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Allocates and caches every full block of `c` (as a sequence computing it would).
void AllocateAndCache(KvBlockManager& kv, Chain& c) {
  for (size_t i = 0; i < c.hashes.size(); ++i) {
    auto b = kv.Allocate();
    ASSERT_TRUE(b.ok());
    c.blocks.push_back(*b);
    const int32_t parent = i > 0 ? c.blocks[i - 1] : -1;
    EXPECT_EQ(
        kv.Cache(*b, c.hashes[i], parent, std::span<const int32_t>(c.tokens).subspan(i * kBs, kBs)),
        *b);
  }
}

std::vector<int32_t> Match(const KvBlockManager& kv, const Chain& c) {
  std::vector<int32_t> m;
  kv.MatchPrefix(c.hashes, c.tokens, static_cast<int32_t>(c.hashes.size()), &m);
  return m;
}

TEST(KvBlockManagerTest, ReleasedFullBlocksStayCachedAndCountAsFree) {
  KvBlockManager kv(8, kBs, /*prefix_caching=*/true, /*salt=*/42);
  Chain a = MakeChain(kv, Iota(12, 10));
  AllocateAndCache(kv, a);
  EXPECT_EQ(kv.used_blocks(), 3);
  EXPECT_EQ(kv.cached_blocks(), 0) << "referenced blocks are not counted as cached";
  kv.FreeSequence(&a.blocks);
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_EQ(kv.cached_blocks(), 3);
  EXPECT_EQ(kv.free_blocks(), 8);

  Chain again = MakeChain(kv, Iota(12, 10));
  const std::vector<int32_t> m = Match(kv, again);
  ASSERT_EQ(m.size(), 3u);
  for (int32_t b : m) kv.Retain(b);
  EXPECT_EQ(kv.used_blocks(), 3) << "retaining revives cached blocks";
  EXPECT_EQ(kv.cached_blocks(), 0);
  EXPECT_EQ(kv.free_blocks(), 5);
  std::vector<int32_t> table = m;
  kv.FreeSequence(&table);
  EXPECT_EQ(kv.cached_blocks(), 3);
  EXPECT_EQ(kv.evictions(), 0);
}

TEST(KvBlockManagerTest, MatchStopsWhereTheTokensDiverge) {
  KvBlockManager kv(8, kBs, true, 1);
  Chain a = MakeChain(kv, Iota(12, 10));
  AllocateAndCache(kv, a);
  std::vector<int32_t> other = Iota(12, 10);
  other[6] = 99;  // inside the second block
  EXPECT_EQ(Match(kv, MakeChain(kv, other)), (std::vector<int32_t>{a.blocks[0]}));
  other = Iota(12, 10);
  other[0] = 99;  // the first block differs: nothing after it can match either
  EXPECT_TRUE(Match(kv, MakeChain(kv, other)).empty());
  // A different salt (another model or KV dtype) names different blocks.
  KvBlockManager kv2(8, kBs, true, 2);
  EXPECT_NE(MakeChain(kv2, Iota(12, 10)).hashes, a.hashes);
}

TEST(KvBlockManagerTest, AHashCollisionNeverHits) {
  KvBlockManager kv(8, kBs, true, 1);
  Chain a = MakeChain(kv, Iota(8, 10));
  AllocateAndCache(kv, a);
  // Other tokens presented under a's hashes, as a colliding hash would.
  Chain forged = MakeChain(kv, Iota(8, 50));
  forged.hashes = a.hashes;
  EXPECT_TRUE(Match(kv, forged).empty());
  // Offering them under a's hash caches nothing.
  auto b = kv.Allocate();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(kv.Cache(*b, a.hashes[0], -1, std::span<const int32_t>(forged.tokens).first(kBs)), -1);
  EXPECT_FALSE(kv.is_cached(*b));
  // A block only matches after the parent it was computed after.
  std::vector<int32_t> m;
  kv.MatchPrefix(std::span<const uint64_t>(a.hashes).subspan(1),
                 std::span<const int32_t>(a.tokens).subspan(kBs), 1, &m);
  EXPECT_TRUE(m.empty()) << "a's second block is not a first block";
}

TEST(KvBlockManagerTest, AnEqualBlockAlreadyCachedIsReturnedInstead) {
  KvBlockManager kv(8, kBs, true, 1);
  Chain a = MakeChain(kv, Iota(8, 10));
  AllocateAndCache(kv, a);
  Chain dup = MakeChain(kv, Iota(8, 10));
  auto b = kv.Allocate();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(kv.Cache(*b, dup.hashes[0], -1, std::span<const int32_t>(dup.tokens).first(kBs)),
            a.blocks[0]);
  EXPECT_FALSE(kv.is_cached(*b));
  // An uncached parent caches nothing below it.
  auto c = kv.Allocate();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(kv.Cache(*c, dup.hashes[1], *b, std::span<const int32_t>(dup.tokens).subspan(kBs)), -1);
}

TEST(KvBlockManagerTest, EvictsLeastRecentlyReleasedDeeperBlocksFirst) {
  KvBlockManager kv(5, kBs, true, 1);
  // Two chains sharing their first block p: [p, x1] and [p, y1, y2].
  Chain x = MakeChain(kv, {1, 2, 3, 4, 5, 6, 7, 8});
  AllocateAndCache(kv, x);
  Chain y = MakeChain(kv, {1, 2, 3, 4, 9, 9, 9, 9, 8, 8, 8, 8});
  y.blocks.push_back(x.blocks[0]);
  kv.Retain(x.blocks[0]);
  for (size_t i = 1; i < 3; ++i) {
    auto b = kv.Allocate();
    ASSERT_TRUE(b.ok());
    y.blocks.push_back(*b);
    ASSERT_EQ(kv.Cache(*b, y.hashes[i], y.blocks[i - 1],
                       std::span<const int32_t>(y.tokens).subspan(i * kBs, kBs)),
              *b);
  }
  const int32_t p = x.blocks[0], x1 = x.blocks[1], y1 = y.blocks[1], y2 = y.blocks[2];
  kv.FreeSequence(&x.blocks);  // x1 released; p still held by y
  kv.FreeSequence(&y.blocks);  // then y2, y1, p
  ASSERT_EQ(kv.cached_blocks(), 4);
  ASSERT_EQ(kv.free_blocks(), 5);
  std::vector<int32_t> order;
  for (int i = 0; i < 5; ++i) {
    auto b = kv.Allocate();
    ASSERT_TRUE(b.ok());
    order.push_back(*b);
  }
  EXPECT_EQ(order[0], 4) << "the never-used block goes before any cached one";
  EXPECT_EQ(std::vector<int32_t>(order.begin() + 1, order.end()),
            (std::vector<int32_t>{x1, y2, y1, p}));
  EXPECT_EQ(kv.evictions(), 4);
  EXPECT_EQ(kv.cached_blocks(), 0);
  EXPECT_FALSE(kv.Allocate().ok());
  EXPECT_TRUE(Match(kv, MakeChain(kv, {1, 2, 3, 4})).empty()) << "evicted blocks miss";
}

TEST(KvBlockManagerTest, RevivingABlockTakesItOutOfTheEvictionOrder) {
  KvBlockManager kv(3, kBs, true, 1);
  Chain a = MakeChain(kv, {1, 2, 3, 4});
  AllocateAndCache(kv, a);
  Chain b = MakeChain(kv, {5, 6, 7, 8});
  AllocateAndCache(kv, b);
  const int32_t a0 = a.blocks[0], b0 = b.blocks[0];
  kv.FreeSequence(&a.blocks);
  kv.FreeSequence(&b.blocks);
  kv.Retain(a0);  // the oldest, taken back by a new sequence
  auto first = kv.Allocate();
  auto second = kv.Allocate();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*second, b0) << "the empty block first, then b0; a0 is referenced";
  EXPECT_FALSE(kv.Allocate().ok());
  kv.Release(a0);
  EXPECT_EQ(kv.cached_blocks(), 1);
  EXPECT_EQ(Match(kv, MakeChain(kv, {1, 2, 3, 4})), (std::vector<int32_t>{a0}));
}

TEST(KvBlockManagerTest, CachingOffKeepsNothing) {
  KvBlockManager kv(4, kBs);
  Chain a = MakeChain(kv, Iota(8, 10));
  auto b = kv.Allocate();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(kv.Cache(*b, a.hashes[0], -1, std::span<const int32_t>(a.tokens).first(kBs)), -1);
  kv.Release(*b);
  EXPECT_EQ(kv.cached_blocks(), 0);
  EXPECT_TRUE(Match(kv, a).empty());
}

}  // namespace
}  // namespace ptxserve
