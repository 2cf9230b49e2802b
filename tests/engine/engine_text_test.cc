// The text the engine streams, over the shared test model (CPU backend) and its real
// Llama-style tokenizer: it is the prompt's continuation, Decode(prompt + generated) minus
// Decode(prompt), alone, batched, preempted and cut by stop strings.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/engine_util.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using testing::Collected;
using testing::Drain;
using testing::ExpectedContinuation;
using testing::kTinyStoriesDir;

class EngineTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTinyStoriesDir + "/model.safetensors")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStoriesDir;
    }
    auto tok = Tokenizer::FromDir(kTinyStoriesDir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
    auto model = LoadModel(kTinyStoriesDir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::make_unique<Model>(*std::move(model));
  }
  void Start(int32_t num_blocks, EngineConfig cfg = {}) {
    auto b = CreateCpuBackend(*model_, KvCacheConfig{num_blocks, /*block_size=*/4});
    ASSERT_TRUE(b.ok()) << b.status();
    engine_ = std::make_unique<Engine>(*std::move(b), *tok_, cfg, nullptr);
    ASSERT_TRUE(engine_->Start().ok());
  }
  EngineRequest Req(const std::string& text, int32_t max_new, int32_t index = 0) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(index);
    r.index = index;
    auto ids = tok_->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (ids.ok()) r.prompt = *ids;
    r.sampling.temperature = 0.0f;
    r.stopping.max_new_tokens = max_new;
    return r;
  }
  std::vector<Collected> Run(std::vector<EngineRequest> reqs) {
    const int n = static_cast<int>(reqs.size());
    auto stream = std::make_shared<ResultStream>();
    auto ids = engine_->Enqueue(std::move(reqs), stream);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? Drain(*stream, n) : std::vector<Collected>(n);
  }
  // The text a request's tokens must have streamed: stop tokens (EOS) are not text.
  std::string Expected(const EngineRequest& r, std::vector<int32_t> generated) {
    if (!generated.empty() && generated.back() == tok_->eos_id()) generated.pop_back();
    return ExpectedContinuation(*tok_, r.prompt, generated);
  }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTextTest, TheFirstTokenKeepsItsLeadingSpace) {
  Start(/*num_blocks=*/256);
  const EngineRequest r = Req("The cat", 8);
  const Collected c = Run({r})[0];
  ASSERT_FALSE(c.tokens.empty());
  // Greedy, the model goes on "The cat and ...": the space is the continuation's, since
  // the decoder strips a leading space from the start of the whole text only.
  EXPECT_TRUE(c.text.starts_with(" and")) << c.text;
  EXPECT_EQ(c.text, Expected(r, c.tokens));
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), c.tokens.begin(), c.tokens.end());
  EXPECT_EQ(tok_->Decode(r.prompt) + c.text, tok_->Decode(all));
}

TEST_F(EngineTextTest, APromptOfOnlyBosStartsTheText) {
  Start(/*num_blocks=*/256);
  EngineRequest r;
  r.prompt = {tok_->bos_id()};
  r.sampling.temperature = 0.0f;
  r.stopping.max_new_tokens = 6;
  const Collected c = Run({r})[0];
  ASSERT_FALSE(c.text.empty());
  EXPECT_NE(c.text.front(), ' ') << c.text;
  EXPECT_EQ(c.text, Expected(r, c.tokens));
}

TEST_F(EngineTextTest, BatchedAndPreemptedStreamsKeepTheirText) {
  // Prompts ending inside a word, after a space-carrying token, with punctuation.
  const std::vector<std::string> prompts = {
      "The cat",     "Once upon a ti",   "Lily and her mo",
      "He said, \"", "The dog was very", "One day, Tim",
  };
  Start(/*num_blocks=*/40);  // 160 token slots for 6 x ~50 tokens: preemption
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back(Req(prompts[i], 40, static_cast<int32_t>(i)));
    if (i % 2 == 1) reqs.back().stopping.stop = {" the"};
  }
  std::vector<Collected> alone;
  for (const EngineRequest& r : reqs) {
    EngineRequest solo = r;
    solo.index = 0;
    alone.push_back(Run({solo})[0]);
  }
  const std::vector<Collected> together = Run(reqs);
  EXPECT_GT(engine_->Stats().preemptions_total, 0);
  int stopped = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << prompts[i];
    EXPECT_EQ(together[i].text, alone[i].text) << prompts[i];
    std::string want = Expected(reqs[i], together[i].tokens);
    if (together[i].final_out.finish == FinishReason::kStop) {
      // Cut at the stop string, which the last token completed.
      const size_t at = want.find(" the");
      ASSERT_NE(at, std::string::npos) << prompts[i] << ": " << want;
      want.resize(at);
      ++stopped;
    }
    EXPECT_EQ(together[i].text, want) << prompts[i];
  }
  EXPECT_GT(stopped, 0) << "no stop string was met: the case went untested";
}

}  // namespace
}  // namespace ptxserve
