// Prefix caching through the engine: every scenario gives the same tokens and log-probs
// with caching on as off, on the fake backend (whose logits hash the tokens each row can
// see through its block table, so a wrongly shared or stale block changes them) and on
// the CPU backend with a random model; an interrupted prefill caches only what it
// computed.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>

#include "engine/cpu/cpu_backend.h"
#include "tests/cpu/test_model.h"
#include "tests/engine/fakes.h"
#include "tests/engine/prefix_engine_util.h"

namespace ptxserve::testing {
namespace {

PrefixFixture FakeFixture() {
  static const FakeTokenizer* tok = new FakeTokenizer(64);
  PrefixFixture f;
  f.make_backend = [](int32_t num_blocks) -> std::unique_ptr<Backend> {
    return std::make_unique<FakeBackend>(64, 256,
                                         KvCacheConfig{num_blocks > 0 ? num_blocks : 256, 4});
  };
  f.tokenizer = tok;
  f.vocab = 64;
  return f;
}

PrefixFixture CpuFixture() {
  static const Model* model = new Model(MakeRandomModel(RandomModelSpec{}));
  static const FakeTokenizer* tok =
      new FakeTokenizer(static_cast<int32_t>(model->config.vocab_size));
  PrefixFixture f;
  f.make_backend = [](int32_t num_blocks) -> std::unique_ptr<Backend> {
    auto b = CpuBackend::Create(*model, {num_blocks > 0 ? num_blocks : 256, 4, DType::kF32});
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  };
  f.tokenizer = tok;
  f.vocab = model->config.vocab_size;
  return f;
}

struct Backends {
  const char* name;
  PrefixFixture (*fixture)();
};
void PrintTo(const Backends& b, std::ostream* os) { *os << b.name; }

class PrefixEngineTest : public ::testing::TestWithParam<Backends> {
 protected:
  static PrefixFixture Fixture() {
    PrefixFixture f = GetParam().fixture();
    f.block_size = 4;
    // Chunks that are not a multiple of the block size: a cached prefix starts a sequence
    // off the chunk grid, and blocks fill across chunk boundaries.
    f.config.prefill_chunk = 6;
    f.config.max_batch_tokens = 64;
    return f;
  }
};

TEST_P(PrefixEngineTest, SameTokensWithCachingOnAndOff) {
  const PrefixFixture f = Fixture();
  ExpectCachingChangesNothing(f, PrefixScenarios(f));
}

TEST_P(PrefixEngineTest, InterruptedPrefillCachesOnlyComputedBlocks) {
  ExpectInterruptedPrefillCachesOnlyComputedBlocks(Fixture());
}

TEST_P(PrefixEngineTest, ParallelSamplesComputeThePromptOnce) {
  ExpectParallelSamplesComputeThePromptOnce(Fixture());
}

INSTANTIATE_TEST_SUITE_P(Backends, PrefixEngineTest,
                         ::testing::Values(Backends{"Fake", &FakeFixture},
                                           Backends{"Cpu", &CpuFixture}),
                         [](const ::testing::TestParamInfo<Backends>& p) { return p.param.name; });

}  // namespace
}  // namespace ptxserve::testing
