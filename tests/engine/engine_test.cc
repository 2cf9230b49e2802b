// The engine thread with a fake backend: streaming, batching invariance, preemption,
// cancellation, backpressure, failures and shutdown.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/engine/engine_util.h"
#include "tests/engine/fakes.h"

namespace ptxserve {
namespace {

using testing::Collected;
using testing::Drain;
using testing::FakeBackend;
using testing::FakeTokenizer;

class EngineTest : public ::testing::Test {
 protected:
  void Make(EngineConfig cfg, int32_t num_blocks = 256, int32_t block_size = 4,
            int32_t context = 256) {
    auto b = std::make_unique<FakeBackend>(64, context, KvCacheConfig{num_blocks, block_size});
    backend_ = b.get();
    engine_ = std::make_unique<Engine>(std::move(b), tokenizer_, cfg, nullptr);
  }
  void TearDown() override {
    if (backend_) backend_->Unblock();  // a failed assertion must not leave Stop() waiting
    engine_.reset();
  }
  static EngineRequest Req(int32_t prompt_len, int32_t max_new, uint64_t seed, int32_t index = 0) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(seed);
    r.index = index;
    for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(2 + (i * 7 + seed) % 60);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.stopping.max_new_tokens = max_new;
    return r;
  }
  Collected RunOne(EngineRequest r) {
    auto stream = std::make_shared<ResultStream>();
    auto ids = engine_->Enqueue({std::move(r)}, stream);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return Drain(*stream, 1)[0];
  }

  FakeTokenizer tokenizer_;
  FakeBackend* backend_ = nullptr;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, RefusesRequestsBeforeStart) {
  Make({});
  auto st = engine_->Enqueue({Req(4, 4, 1)}, std::make_shared<ResultStream>());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, StreamsTokensAndFinishesWithUsage) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  Collected c = RunOne(Req(5, 12, 3));
  EXPECT_EQ(c.tokens.size(), 12u);
  EXPECT_EQ(c.text.size(), 12u);  // one letter per token (no specials are sampled here)
  EXPECT_EQ(c.final_out.finish, FinishReason::kLength);
  EXPECT_EQ(c.final_out.prompt_tokens, 5);
  EXPECT_EQ(c.final_out.generated_tokens, 12);
  EXPECT_EQ(c.final_out.request_id, "r3");
  EXPECT_GT(c.final_out.total_seconds, 0.0);
  EXPECT_GE(c.final_out.total_seconds, c.final_out.ttft_seconds);
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.generated_tokens_total, 12);
  EXPECT_EQ(s.prompt_tokens_total, 5);
  EXPECT_EQ(s.finished[OutcomeIndex(FinishReason::kLength)], 1);
  EXPECT_TRUE(s.started);
  EXPECT_EQ(engine_->num_live(), 0);
}

TEST_F(EngineTest, SameSeedSameTokensAloneOrAmong63Others) {
  EngineConfig cfg;
  cfg.max_batch_size = 64;
  cfg.prefill_chunk = 8;
  cfg.max_batch_tokens = 128;
  Make(cfg);
  ASSERT_TRUE(engine_->Start().ok());
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 64; ++i)
    alone.push_back(RunOne(Req(3 + i % 20, 10 + i % 7, 1000 + i)).tokens);

  std::vector<EngineRequest> all;
  for (int i = 0; i < 64; ++i) all.push_back(Req(3 + i % 20, 10 + i % 7, 1000 + i, i));
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue(std::move(all), stream).ok());
  std::vector<Collected> together = Drain(*stream, 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
  EXPECT_GT(backend_->max_seqs_seen(), 32) << "the requests really were batched";
  EXPECT_EQ(engine_->Stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, PreemptionRecomputesWithoutChangingResults) {
  EngineConfig cfg;
  cfg.max_batch_size = 16;
  Make(cfg, /*num_blocks=*/12, /*block_size=*/4);  // 48 tokens for 8 sequences of 24
  ASSERT_TRUE(engine_->Start().ok());
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(RunOne(Req(4, 20, 50 + i)).tokens);
  std::vector<EngineRequest> all;
  for (int i = 0; i < 8; ++i) all.push_back(Req(4, 20, 50 + i, i));
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue(std::move(all), stream).ok());
  std::vector<Collected> together = Drain(*stream, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
    EXPECT_EQ(together[i].final_out.finish, FinishReason::kLength);
  }
  const EngineStats s = engine_->Stats();
  EXPECT_GT(s.preemptions_total, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineTest, CancelRemovesTheSequenceAndFreesItsBlocks) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  // Freeze the engine inside step 5 (step 1 is the warm-up; step k samples token k - 1),
  // cancel there: the cancel lands right after that step, within one step.
  backend_->BlockFromStep(5);
  auto stream = std::make_shared<ResultStream>();
  auto ids = engine_->Enqueue({Req(8, 200, 9)}, stream);
  ASSERT_TRUE(ids.ok());
  backend_->AwaitStepsStarted(5);
  engine_->Cancel((*ids)[0]);
  backend_->Unblock();
  Collected c = Drain(*stream, 1)[0];
  EXPECT_EQ(c.final_out.finish, FinishReason::kCancelled);
  EXPECT_EQ(c.final_out.generated_tokens, 4);
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.requests_running, 0);
  EXPECT_EQ(s.finished[OutcomeIndex(FinishReason::kCancelled)], 1);
  engine_->Cancel((*ids)[0]);  // again: harmless
}

TEST_F(EngineTest, ACallLargerThanTheQueueIsInvalidEvenWhenItIsEmpty) {
  EngineConfig cfg;
  cfg.max_queued = 2;
  Make(cfg);
  ASSERT_TRUE(engine_->Start().ok());
  auto stream = std::make_shared<ResultStream>();
  auto st = engine_->Enqueue({Req(4, 5, 1, 0), Req(4, 5, 2, 1), Req(4, 5, 3, 2)}, stream);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("--max-queued=2"), absl::string_view::npos);
  ASSERT_TRUE(engine_->Enqueue({Req(4, 5, 1, 0), Req(4, 5, 2, 1)}, stream).ok());
  EXPECT_EQ(Drain(*stream, 2).size(), 2u);
}

TEST_F(EngineTest, RefusesBeyondMaxQueuedAtOnce) {
  EngineConfig cfg;
  cfg.max_queued = 2;
  cfg.max_batch_size = 1;
  Make(cfg);
  ASSERT_TRUE(engine_->Start().ok());
  backend_->Block();
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue({Req(4, 50, 1, 0)}, stream).ok());
  backend_->AwaitStepsStarted(2);  // the first request is running (the warm-up was step 1)
  ASSERT_TRUE(engine_->Enqueue({Req(4, 5, 2, 1), Req(4, 5, 3, 2)}, stream).ok());
  auto st = engine_->Enqueue({Req(4, 5, 4, 3)}, stream);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.status().message().find("max-queued"), absl::string_view::npos);
  backend_->Unblock();
  std::vector<Collected> c = Drain(*stream, 3);
  for (const auto& x : c) EXPECT_EQ(x.final_out.finish, FinishReason::kLength);
}

TEST_F(EngineTest, ValidationNamesTheField) {
  Make({}, 8, 4, /*context=*/64);
  ASSERT_TRUE(engine_->Start().ok());
  auto stream = std::make_shared<ResultStream>();
  auto code_and_msg = [&](EngineRequest r) {
    return engine_->Enqueue({std::move(r)}, stream).status();
  };
  EngineRequest r = Req(4, 4, 1);
  r.prompt.clear();
  EXPECT_NE(code_and_msg(r).message().find("prompt is empty"), absl::string_view::npos);
  r = Req(4, 4, 1);
  r.prompt[2] = 64;
  EXPECT_NE(code_and_msg(r).message().find("ids[2] = 64"), absl::string_view::npos);
  r = Req(64, 0, 1);
  EXPECT_NE(code_and_msg(r).message().find("context"), absl::string_view::npos);
  r = Req(10, 60, 1);
  EXPECT_NE(code_and_msg(r).message().find("max_new_tokens"), absl::string_view::npos);
  r = Req(10, 30, 1);  // fits the context (64) but not the 32-token cache
  EXPECT_NE(code_and_msg(r).message().find("KV cache"), absl::string_view::npos);
  r = Req(4, 4, 1);
  r.sampling.top_p = 1.5f;
  EXPECT_NE(code_and_msg(r).message().find("top_p"), absl::string_view::npos);
  r = Req(4, 4, 1);
  r.stopping.max_new_tokens = -1;
  EXPECT_EQ(code_and_msg(r).code(), absl::StatusCode::kInvalidArgument);
  auto batch = engine_->Enqueue({Req(4, 4, 1, 0), Req(0, 4, 1, 1)}, stream);
  EXPECT_NE(batch.status().message().find("requests[1].prompt is empty"), absl::string_view::npos);
  EXPECT_EQ(engine_->num_live(), 0);
}

TEST_F(EngineTest, ZeroMaxNewTokensFinishesWithoutAStep) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  Collected c = RunOne(Req(4, 0, 1));
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(c.final_out.finish, FinishReason::kLength);
  EXPECT_EQ(engine_->Stats().steps_total, 0);
}

TEST_F(EngineTest, EosAndStopStrings) {
  Make({});
  backend_->eos_logit_ = 100.0f;  // EOS always wins
  ASSERT_TRUE(engine_->Start().ok());
  Collected eos = RunOne(Req(4, 10, 1));
  EXPECT_EQ(eos.final_out.finish, FinishReason::kEos);
  EXPECT_EQ(eos.tokens, (std::vector<int32_t>{1}));
  EXPECT_EQ(eos.text, "");
  EngineRequest r = Req(4, 10, 1);
  r.stopping.ignore_eos = true;
  r.stopping.stop_token_ids = {1};
  Collected stop = RunOne(r);
  EXPECT_EQ(stop.final_out.finish, FinishReason::kStop);
}

TEST_F(EngineTest, LogprobsOnlyWhenAsked) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  auto stream = std::make_shared<ResultStream>();
  EngineRequest with = Req(4, 5, 1, 0);
  with.sampling.logprobs = 3;
  ASSERT_TRUE(engine_->Enqueue({with, Req(4, 5, 1, 1)}, stream).ok());
  std::vector<EngineOutput> got;
  size_t with_lp = 0, without_lp = 0;
  int finals = 0;
  while (finals < 2 && stream->WaitPopAll(&got)) {
    for (auto& o : got) {
      if (o.index == 0) {
        ASSERT_EQ(o.logprobs.size(), o.token_ids.size());
        for (size_t i = 0; i < o.logprobs.size(); ++i) {
          EXPECT_EQ(o.logprobs[i].token, o.token_ids[i]);
          EXPECT_EQ(o.logprobs[i].top.size(), 3u);
        }
        with_lp += o.logprobs.size();
      } else {
        without_lp += o.logprobs.size();
      }
      finals += o.final();
    }
  }
  EXPECT_EQ(with_lp, 5u);
  EXPECT_EQ(without_lp, 0u);
}

TEST_F(EngineTest, StepFailuresErrorTheBatchThenFailTheEngine) {
  EngineConfig cfg;
  cfg.max_step_failures = 2;
  Make(cfg);
  ASSERT_TRUE(engine_->Start().ok());
  backend_->FailNext(1);
  Collected one = RunOne(Req(4, 5, 1));
  EXPECT_EQ(one.final_out.finish, FinishReason::kError);
  EXPECT_NE(one.final_out.error.message().find("injected"), absl::string_view::npos);
  EXPECT_FALSE(engine_->Stats().failed) << "one failure is not fatal";
  EXPECT_EQ(RunOne(Req(4, 5, 1)).final_out.finish, FinishReason::kLength);

  backend_->FailNext(2);
  EXPECT_EQ(RunOne(Req(4, 5, 1)).final_out.finish, FinishReason::kError);
  EXPECT_EQ(RunOne(Req(4, 5, 1)).final_out.finish, FinishReason::kError);
  const EngineStats s = engine_->Stats();
  EXPECT_TRUE(s.failed);
  EXPECT_EQ(s.kv_blocks_used, 0);
  auto st = engine_->Enqueue({Req(4, 5, 1)}, std::make_shared<ResultStream>());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, WarmUpFailureFailsStart) {
  Make({});
  backend_->FailNext(1);
  absl::Status st = engine_->Start();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(engine_->Stats().failed);
}

TEST_F(EngineTest, ReportsAStalledBackendWithWorkQueued) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  EXPECT_EQ(engine_->Stats().stalled_seconds, 0.0);
  backend_->Block();
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue({Req(4, 5, 1)}, stream).ok());
  backend_->AwaitStepsStarted(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(engine_->Stats().stalled_seconds, 0.0);
  backend_->Unblock();
  Drain(*stream, 1);
  // The engine goes idle just after the last output: poll (bounded) for it.
  for (int i = 0; i < 500 && engine_->Stats().stalled_seconds != 0.0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine_->Stats().stalled_seconds, 0.0) << "idle again";
}

TEST_F(EngineTest, StopFinishesEverythingAsCancelled) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  backend_->Block();
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue({Req(4, 50, 1, 0), Req(4, 50, 2, 1)}, stream).ok());
  backend_->AwaitStepsStarted(2);
  engine_->RequestStop();
  backend_->Unblock();
  engine_->Stop();
  std::vector<Collected> c = Drain(*stream, 2);
  EXPECT_EQ(c[0].final_out.finish, FinishReason::kCancelled);
  EXPECT_EQ(c[1].final_out.finish, FinishReason::kCancelled);
  EXPECT_EQ(engine_->Stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, CancelAllAndStopAccepting) {
  Make({});
  ASSERT_TRUE(engine_->Start().ok());
  backend_->Block();
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine_->Enqueue({Req(4, 50, 1)}, stream).ok());
  backend_->AwaitStepsStarted(2);
  engine_->StopAccepting();
  EXPECT_EQ(engine_->Enqueue({Req(4, 5, 2)}, stream).status().code(),
            absl::StatusCode::kUnavailable);
  engine_->CancelAll(absl::UnavailableError("drain timeout"));
  backend_->Unblock();
  Collected c = Drain(*stream, 1)[0];
  EXPECT_EQ(c.final_out.finish, FinishReason::kCancelled);
  EXPECT_EQ(c.final_out.error.message(), "drain timeout");
}

TEST(ResultStreamTest, MergesPendingOutputsAndNotifiesOnce) {
  int notified = 0;
  ResultStream stream([&] { ++notified; });
  EngineOutput a;
  a.token_ids = {5};
  a.text = "x";
  stream.Push(a);
  EXPECT_EQ(notified, 1);
  a.token_ids = {6};
  a.text = "y";
  stream.Push(a);
  EXPECT_EQ(notified, 1) << "no second notification until the consumer found nothing";
  EngineOutput fin;
  fin.finish = FinishReason::kLength;
  fin.generated_tokens = 2;
  stream.Push(fin);
  std::vector<EngineOutput> got;
  ASSERT_TRUE(stream.PopAll(&got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(got[0].text, "xy");
  EXPECT_EQ(got[0].finish, FinishReason::kLength);
  EXPECT_EQ(got[0].generated_tokens, 2);
  EXPECT_FALSE(stream.PopAll(&got));
  EngineOutput other;
  other.index = 3;
  stream.Push(other);
  EXPECT_EQ(notified, 2);
  stream.Close();
  stream.Push(other);
  EXPECT_EQ(notified, 2) << "closed streams drop outputs silently";
}

TEST(SeedTest, StableAndDistinct) {
  EXPECT_EQ(SeedFromRequestId("abc"), SeedFromRequestId("abc"));
  EXPECT_NE(SeedFromRequestId("abc"), SeedFromRequestId("abd"));
  EXPECT_EQ(SeedFromRequestId(""), 0xcbf29ce484222325ULL);
}

}  // namespace
}  // namespace ptxserve
