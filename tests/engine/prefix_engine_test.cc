// Prefix caching through the engine: every scenario gives the same tokens and log-probs
// with caching on as off, on the fake backend (whose logits hash the tokens each row can
// see through its block table, so a wrongly shared or stale block changes them) and on
// the CPU backend with a random model; an interrupted prefill caches only what it
// computed.
#include <gtest/gtest.h>

#include <memory>

#include "engine/cpu/cpu_backend.h"
#include "tests/cpu/test_model.h"
#include "tests/engine/prefix_engine_util.h"
#include "tests/server/fakes.h"

namespace ptxserve::testing {
namespace {

PrefixFixture FakeFixture(const Tokenizer& tok) {
  PrefixFixture f;
  f.make_backend = [](int32_t num_blocks) -> std::unique_ptr<Backend> {
    return std::make_unique<FakeBackend>(64, 256,
                                         KvCacheConfig{num_blocks > 0 ? num_blocks : 256, 4});
  };
  f.tokenizer = &tok;
  f.block_size = 4;
  f.vocab = 64;
  // Chunks that are not a multiple of the block size: a cached prefix starts a sequence
  // off the chunk grid, and blocks fill across chunk boundaries.
  f.config.prefill_chunk = 6;
  f.config.max_batch_tokens = 64;
  return f;
}

PrefixFixture CpuFixture(const Tokenizer& tok) {
  static const Model* model = new Model(MakeRandomModel(RandomModelSpec{}));
  PrefixFixture f;
  f.make_backend = [](int32_t num_blocks) -> std::unique_ptr<Backend> {
    auto b = CpuBackend::Create(*model, {num_blocks > 0 ? num_blocks : 256, 4, DType::kF32});
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  };
  f.tokenizer = &tok;
  f.block_size = 4;
  f.vocab = model->config.vocab_size;
  f.config.prefill_chunk = 6;
  f.config.max_batch_tokens = 64;
  return f;
}

TEST(PrefixEngineTest, FakeBackendSameTokensWithCachingOnAndOff) {
  FakeTokenizer tok(64);
  const PrefixFixture f = FakeFixture(tok);
  ExpectCachingChangesNothing(f, PrefixScenarios(f));
}

TEST(PrefixEngineTest, FakeBackendInterruptedPrefillCachesOnlyComputedBlocks) {
  FakeTokenizer tok(64);
  ExpectInterruptedPrefillCachesOnlyComputedBlocks(FakeFixture(tok));
}

TEST(PrefixEngineTest, CpuBackendSameTokensWithCachingOnAndOff) {
  FakeTokenizer tok(97);
  const PrefixFixture f = CpuFixture(tok);
  ExpectCachingChangesNothing(f, PrefixScenarios(f));
}

TEST(PrefixEngineTest, CpuBackendInterruptedPrefillCachesOnlyComputedBlocks) {
  FakeTokenizer tok(97);
  ExpectInterruptedPrefillCachesOnlyComputedBlocks(CpuFixture(tok));
}

}  // namespace
}  // namespace ptxserve::testing
