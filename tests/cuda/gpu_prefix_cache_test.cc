// Prefix caching on the GPU backend (emulated device): the scenarios of
// tests/engine/prefix_engine_util.h give the same tokens and log-probs with caching on
// and off, where cached prefixes change which prefill chunks and kernels compute what.
// Small: the tiny preset.
#include <memory>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/engine/prefix_engine_util.h"

namespace ptxserve::cuda {
namespace {

using ptxserve::testing::PrefixFixture;

class GpuPrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = testing::SyntheticModelWithTokenizer("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m->model);
    tokenizer_ = std::move(m->tokenizer);
  }
  PrefixFixture Fixture() const {
    PrefixFixture f;
    const Model* model = model_.get();
    f.make_backend = [model](int32_t num_blocks) -> std::unique_ptr<Backend> {
      auto b =
          testing::EmulatedBackend(*model, {num_blocks > 0 ? num_blocks : 64, 16, DType::kF32});
      EXPECT_TRUE(b.ok()) << b.status();
      return b.ok() ? std::move(*b) : nullptr;
    };
    f.tokenizer = tokenizer_.get();
    f.block_size = 16;
    f.vocab = model_->config.vocab_size;
    f.max_new_tokens = 10;  // prompts of 3 to 7 tokens past a boundary: decoding fills blocks too
    f.config.prefill_chunk = 24;
    f.config.max_batch_tokens = 256;
    f.logprob_tolerance = 1e-5;
    return f;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GpuPrefixCacheTest, SameTokensWithCachingOnAndOff) {
  const PrefixFixture f = Fixture();
  ptxserve::testing::ExpectCachingChangesNothing(f, ptxserve::testing::PrefixScenarios(f));
}

TEST_F(GpuPrefixCacheTest, InterruptedPrefillCachesOnlyComputedBlocks) {
  ptxserve::testing::ExpectInterruptedPrefillCachesOnlyComputedBlocks(Fixture());
}

TEST_F(GpuPrefixCacheTest, ParallelSamplesComputeThePromptOnce) {
  ptxserve::testing::ExpectParallelSamplesComputeThePromptOnce(Fixture());
}

}  // namespace
}  // namespace ptxserve::cuda
