// The engine on the GPU backend (emulated device) with device-side sampling: greedy
// steps sample on the device and move one metadata copy up and 4 bytes per sequence
// back; every launch after warm-up is a kernel-cache hit; a row with log-probs stays on
// the device (its records come back instead of the ids); so does a penalised row (the
// penalties kernel); tokens equal the CPU backend's either way. Small: the tiny preset, a few
// steps.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/engine_run_util.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::Launches;
using testing::Prompt;
using testing::RunEngine;
using testing::RunResult;
using testing::Snapshot;
using testing::StepRecorder;

constexpr KvCacheConfig kKv{64, 16, DType::kF32};

int64_t Total(const std::map<std::string, int64_t>& m) {
  int64_t n = 0;
  for (const auto& [k, v] : m) n += v;
  return n;
}

// Tokens with log-probs, per request.
std::vector<size_t> LogprobCounts(const RunResult& r) {
  std::vector<size_t> n;
  for (const auto& l : r.logprobs) n.push_back(l.size());
  return n;
}

class GpuEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    auto m = testing::SyntheticModelWithTokenizer("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m->model);
    tokenizer_ = std::move(m->tokenizer);
  }

  // Three sequences of different prompt lengths arriving together: one prefill step,
  // then decode-only steps of batch 3.
  std::vector<EngineRequest> Requests(int32_t logprobs_on = -1, int32_t penalty_on = -1) const {
    std::vector<EngineRequest> reqs(3);
    for (int i = 0; i < 3; ++i) {
      reqs[i].request_id = "g" + std::to_string(i);
      reqs[i].index = i;
      reqs[i].prompt = Prompt(4 + 5 * i, model_->config.vocab_size, 40 + i);
      reqs[i].sampling.temperature = 0;
      reqs[i].sampling.logprobs = i == logprobs_on ? 2 : 0;
      reqs[i].sampling.repetition_penalty = i == penalty_on ? 1.3f : 1.0f;
      reqs[i].stopping.max_new_tokens = 4;
      reqs[i].stopping.ignore_eos = true;
    }
    return reqs;
  }
  RunResult RunOnCpu(std::vector<EngineRequest> reqs) {
    auto cpu = CpuBackend::Create(*model_, kKv);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    Engine engine(*std::move(cpu), *tokenizer_, Config());
    EXPECT_TRUE(engine.Start().ok());
    return RunEngine(engine, std::move(reqs));
  }
  static EngineConfig Config() {
    EngineConfig cfg;
    cfg.prefill_chunk = 64;
    return cfg;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GpuEngineTest, GreedyStepsSampleOnTheDeviceAndHitTheKernelCache) {
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  EXPECT_TRUE(g->CanSampleOnDevice(Requests()[0].sampling));
  StepRecorder rec(g);
  Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
  ASSERT_TRUE(engine.Start().ok());
  // After the warm-up step: the baseline.
  Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
  const int64_t warm_misses = prev.cache.misses;

  const RunResult got = RunEngine(engine, Requests());
  engine.Stop();  // its last OnStep runs after the final outputs went out
  EXPECT_EQ(got.tokens, RunOnCpu(Requests()).tokens) << "greedy: identical to the CPU backend";
  EXPECT_EQ(got.tokens[2].size(), 4u);
  EXPECT_EQ(LogprobCounts(got), std::vector<size_t>(3, 0));

  const std::vector<Snapshot> steps = rec.steps();
  ASSERT_EQ(steps.size(), 4u) << "one prefill step, three decode steps";
  int decode_steps = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Snapshot& s = steps[i];
    const int64_t b = s.step.num_seqs;
    EXPECT_EQ(s.transfers.h2d_count - prev.transfers.h2d_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2d_count, prev.transfers.d2d_count) << "step " << i;
    // Every sequence samples in every step here (whole prompts in one chunk).
    EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 4 * b) << "step " << i;
    if (s.step.num_tokens == s.step.num_seqs) {
      ++decode_steps;
      EXPECT_EQ(b, 3);
    }
    EXPECT_EQ(s.cache.misses, warm_misses) << "no compilation after warm-up, step " << i;
    const int64_t launches = Total(s.cache.launches) - Total(prev.cache.launches);
    EXPECT_GT(launches, 0);
    EXPECT_EQ(s.cache.hits - prev.cache.hits, launches) << "step " << i;
    EXPECT_EQ(s.cache.launches.at("argmax") - prev.cache.launches["argmax"], 1) << "step " << i;
    prev = s;
  }
  EXPECT_EQ(decode_steps, 3);
}

// One row that wants log-probs keeps the step on the device: the logprobs kernel runs
// after argmax and its records (168 bytes a row, the ids inside) come back instead of
// the ids, still one copy per step.
TEST_F(GpuEngineTest, ARowWithLogprobsStaysOnTheDeviceAndItsRecordsComeBack) {
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  EXPECT_TRUE(g->CanSampleOnDevice(p));
  p.logprobs = 20;
  EXPECT_TRUE(g->CanSampleOnDevice(p)) << "a record holds 20 top entries";
  p.logprobs = 21;
  EXPECT_FALSE(g->CanSampleOnDevice(p)) << "more than a record holds";

  StepRecorder rec(g);
  Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
  ASSERT_TRUE(engine.Start().ok());
  Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
  const RunResult got = RunEngine(engine, Requests(/*logprobs_on=*/1));
  engine.Stop();  // its last OnStep runs after the final outputs went out
  const RunResult want = RunOnCpu(Requests(/*logprobs_on=*/1));
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(LogprobCounts(got), (std::vector<size_t>{0, 4, 0}));
  const std::vector<Snapshot> steps = rec.steps();
  ASSERT_EQ(steps.size(), 4u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Snapshot& s = steps[i];
    EXPECT_EQ(s.transfers.h2d_count - prev.transfers.h2d_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 168 * s.step.num_seqs)
        << "step " << i;
    EXPECT_EQ(s.cache.launches.at("argmax") - prev.cache.launches["argmax"], 1) << "step " << i;
    EXPECT_EQ(s.cache.launches.at("logprobs") - prev.cache.launches["logprobs"], 1) << "step " << i;
    prev = s;
  }
}

// A row with penalties stays on the device too: the penalties kernel rewrites a copy of
// the logits from the sequence's history, argmax reads the copy, and the log-probs (of
// the RAW logits, as the host reports them) come back in the records.
TEST_F(GpuEngineTest, APenalisedRowStaysOnTheDevice) {
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.2f;
  EXPECT_TRUE(g->CanSampleOnDevice(p)) << "the penalties kernel applies them";
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  EXPECT_TRUE(g->CanSampleOnDevice(p));
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  EXPECT_TRUE(g->CanSampleOnDevice(p)) << "both sides draw by kernels/sampling.h";
  p.top_k = 1;
  EXPECT_TRUE(g->CanSampleOnDevice(p)) << "top_k 1 is greedy";

  StepRecorder rec(g);
  Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
  ASSERT_TRUE(engine.Start().ok());
  Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
  // Log-probs on the penalised row itself: they stay those of the raw logits.
  const RunResult got = RunEngine(engine, Requests(/*logprobs_on=*/1, /*penalty_on=*/1));
  engine.Stop();  // its last OnStep runs after the final outputs went out
  const RunResult want = RunOnCpu(Requests(/*logprobs_on=*/1, /*penalty_on=*/1));
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(LogprobCounts(got), (std::vector<size_t>{0, 4, 0}));
  for (size_t t = 0; t < want.logprobs[1].size() && t < got.logprobs[1].size(); ++t) {
    const SampleResult& w = want.logprobs[1][t];
    const SampleResult& r = got.logprobs[1][t];
    EXPECT_NEAR(r.logprob, w.logprob, 1e-5 + 1e-5 * std::abs(w.logprob)) << "token " << t;
    ASSERT_EQ(r.top.size(), w.top.size()) << "token " << t;
    for (size_t j = 0; j < w.top.size(); ++j) EXPECT_EQ(r.top[j].id, w.top[j].id) << "token " << t;
  }
  const RunResult alone = RunOnCpu(Requests());
  for (int i : {0, 2}) EXPECT_EQ(got.tokens[i], alone.tokens[i]) << "request " << i;
  const std::vector<Snapshot> steps = rec.steps();
  ASSERT_EQ(steps.size(), 4u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Snapshot& s = steps[i];
    EXPECT_EQ(s.transfers.h2d_count - prev.transfers.h2d_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 168 * s.step.num_seqs)
        << "step " << i;
    EXPECT_EQ(s.cache.launches.at("penalties") - prev.cache.launches["penalties"], 1)
        << "step " << i;
    EXPECT_EQ(s.cache.launches.at("argmax") - prev.cache.launches["argmax"], 1) << "step " << i;
    EXPECT_EQ(s.cache.launches.at("logprobs") - prev.cache.launches["logprobs"], 1) << "step " << i;
    prev = s;
  }
}

// TakeUniform + Accept leave a sampler where Sample would: the same RNG position and the
// same penalty state, so a sequence may switch paths between steps.
TEST(SequenceSamplerDeviceTest, TakeUniformAndAcceptMatchSample) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.frequency_penalty = 0.5f;
  p.seed = 1234;
  SequenceSampler host(p, 0), device(p, 0);
  std::vector<float> l(97);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>((i * 37 + step * 11) % 23) / 7;
    const int32_t t = host.Sample(l).token;
    if (step % 2 == 0) {
      device.TakeUniform();
      device.Accept(t);
    } else {
      EXPECT_EQ(device.Sample(l).token, t) << "step " << step;
    }
  }
  EXPECT_EQ(device.num_generated(), host.num_generated());
}

}  // namespace
}  // namespace ptxserve::cuda
