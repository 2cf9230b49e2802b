// Stochastic sampling on the device (emulated): the sampling kernel and the host sampler
// implement the same canonical algorithm (kernels/sampling.h), so seeded temperature /
// top-k / top-p / min-p requests give the CPU backend's tokens while every decode step
// stays on the device and sends back 4 bytes per sequence, penalised rows included (the
// penalties kernel). Also StepSampled row by row against RowDrawer on the step's own
// logits, with and without penalties.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/engine_run_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/sampler/canonical_reference.h"

namespace ptxserve::cuda {
namespace {

using testing::Launches;
using testing::Prompt;
using testing::RunEngine;
using testing::RunResult;
using testing::Snapshot;
using testing::StepRecorder;
using testing::Unavailable;

constexpr KvCacheConfig kKv{64, 16, DType::kF32};

class GpuSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    auto m = testing::SyntheticModelWithTokenizer("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m->model);
    tokenizer_ = std::move(m->tokenizer);
  }

  // Four seeded stochastic sequences, one filter mix each, arriving together.
  std::vector<EngineRequest> Requests(float temperature_scale = 1.0f) const {
    struct Mix {
      float temperature;
      int32_t top_k;
      float top_p, min_p;
    };
    const Mix mixes[] = {{0.8f, 0, 0.9f, 0.0f},
                         {1.0f, 20, 1.0f, 0.0f},
                         {1.3f, 0, 1.0f, 0.05f},
                         {0.7f, 50, 0.95f, 0.02f}};
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 4; ++i) {
      EngineRequest& r = reqs.emplace_back();
      r.request_id = "s" + std::to_string(i);
      r.index = i;
      r.prompt = Prompt(3 + 4 * i, model_->config.vocab_size, 70 + i);
      r.sampling.temperature = mixes[i].temperature * temperature_scale;
      r.sampling.top_k = mixes[i].top_k;
      r.sampling.top_p = mixes[i].top_p;
      r.sampling.min_p = mixes[i].min_p;
      r.sampling.seed = 500 + i;
      r.stopping.max_new_tokens = 6;
      r.stopping.ignore_eos = true;
    }
    return reqs;
  }
  std::vector<std::vector<int32_t>> RunOnCpu(std::vector<EngineRequest> reqs) {
    auto cpu = CpuBackend::Create(*model_, kKv);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    Engine engine(*std::move(cpu), *tokenizer_, Config());
    EXPECT_TRUE(engine.Start().ok());
    return RunEngine(engine, std::move(reqs)).tokens;
  }
  static EngineConfig Config() {
    EngineConfig cfg;
    cfg.prefill_chunk = 64;
    return cfg;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GpuSamplingTest, SeededStochasticRequestsMatchTheCpuWithIdsOnlyComingBack) {
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  for (const EngineRequest& r : Requests()) EXPECT_TRUE(g->CanSampleOnDevice(r.sampling));
  StepRecorder rec(g);
  Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
  ASSERT_TRUE(engine.Start().ok());
  Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};

  const auto got = RunEngine(engine, Requests()).tokens;
  engine.Stop();  // its last OnStep runs after the final outputs went out
  const auto want = RunOnCpu(Requests());
  EXPECT_EQ(got, want) << "the same seed gives the same tokens on either path";
  for (const auto& t : got) EXPECT_EQ(t.size(), 6u);
  // The draws are really stochastic: near-greedy requests (T / 1000) differ somewhere.
  EXPECT_NE(got, RunOnCpu(Requests(1e-3f)));

  const std::vector<Snapshot> steps = rec.steps();
  ASSERT_EQ(steps.size(), 6u) << "one prefill step, five decode steps";
  int decode_steps = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Snapshot& s = steps[i];
    const int64_t b = s.step.num_seqs;
    EXPECT_EQ(b, 4) << "step " << i;
    // The step stayed on the device: one copy back, 4 bytes per sequence.
    EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
    EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 4 * b) << "step " << i;
    EXPECT_EQ(Launches(s.cache, "sampling") - Launches(prev.cache, "sampling"), 1) << "step " << i;
    EXPECT_EQ(Launches(s.cache, "argmax"), Launches(prev.cache, "argmax")) << "step " << i;
    decode_steps += s.step.num_tokens == s.step.num_seqs;
    prev = s;
  }
  EXPECT_EQ(decode_steps, 5);
}

// Penalised rows stay on the device: the penalties kernel rewrites a copy of the logits
// rows from each sequence's history, the draw reads it, and only the ids come back. Each
// penalty kind on a greedy and a seeded stochastic row, beside unpenalised rows: the CPU
// backend's tokens (where SequenceSampler applies them on the host) for every sequence.
TEST_F(GpuSamplingTest, PenalisedRowsStayOnTheDeviceWithTheSameTokens) {
  struct Kind {
    const char* name;
    float repetition, presence, frequency;
  };
  const Kind kinds[] = {{"repetition", 1.8f, 0.0f, 0.0f},
                        {"presence", 1.0f, 2.5f, 0.0f},
                        {"frequency", 1.0f, 0.0f, 1.5f},
                        {"all", 0.6f, -0.5f, 0.75f}};
  const auto alone = RunOnCpu(Requests());
  for (const Kind& k : kinds) {
    SCOPED_TRACE(k.name);
    std::vector<EngineRequest> reqs = Requests();
    for (int i : {0, 2}) {
      reqs[i].sampling.repetition_penalty = k.repetition;
      reqs[i].sampling.presence_penalty = k.presence;
      reqs[i].sampling.frequency_penalty = k.frequency;
    }
    reqs[0].sampling.temperature = 0.0f;  // greedy
    auto gpu = testing::EmulatedBackend(*model_, kKv);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    GpuBackend* g = gpu->get();
    for (const EngineRequest& r : reqs) EXPECT_TRUE(g->CanSampleOnDevice(r.sampling));
    StepRecorder rec(g);
    Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
    ASSERT_TRUE(engine.Start().ok());
    Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
    const auto got = RunEngine(engine, reqs).tokens;
    engine.Stop();  // its last OnStep runs after the final outputs went out
    EXPECT_EQ(got, RunOnCpu(reqs)) << "the same tokens as the host's penalties give";
    for (int i : {1, 3}) EXPECT_EQ(got[i], alone[i]) << "request " << i;
    // The penalties bite: without them the penalised sequences differ.
    std::vector<EngineRequest> plain = reqs;
    for (int i : {0, 2}) plain[i].sampling = Requests()[i].sampling;
    plain[0].sampling.temperature = 0.0f;
    const auto unpenalised = RunOnCpu(plain);
    EXPECT_TRUE(got[0] != unpenalised[0] || got[2] != unpenalised[2]);

    const std::vector<Snapshot> steps = rec.steps();
    ASSERT_EQ(steps.size(), 6u) << "one prefill step, five decode steps";
    for (size_t i = 0; i < steps.size(); ++i) {
      const Snapshot& s = steps[i];
      const int64_t b = s.step.num_seqs;
      EXPECT_EQ(b, 4) << "step " << i;
      EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
      EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 4 * b) << "step " << i;
      EXPECT_EQ(s.transfers.h2d_count - prev.transfers.h2d_count, 1) << "step " << i;
      EXPECT_EQ(Launches(s.cache, "sampling") - Launches(prev.cache, "sampling"), 1)
          << "step " << i;
      // Repetition counts the prompt, so every step has entries; presence and frequency
      // count generated tokens only, so the prefill step has none and skips the kernel.
      const int64_t want_penalties = k.repetition != 1.0f || i > 0 ? 1 : 0;
      EXPECT_EQ(Launches(s.cache, "penalties") - Launches(prev.cache, "penalties"), want_penalties)
          << "step " << i;
      prev = s;
    }
  }
}

// Every row greedy and penalised: one penalties launch and one argmax launch per step.
TEST_F(GpuSamplingTest, GreedyPenalisedRowsTakeArgmaxOnThePenalisedCopy) {
  std::vector<EngineRequest> reqs = Requests();
  for (EngineRequest& r : reqs) {
    r.sampling.temperature = 0.0f;
    r.sampling.repetition_penalty = 1.5f;
    r.sampling.frequency_penalty = 0.3f;
  }
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  StepRecorder rec(g);
  Engine engine(*std::move(gpu), *tokenizer_, Config(), &rec);
  ASSERT_TRUE(engine.Start().ok());
  Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
  const auto got = RunEngine(engine, reqs).tokens;
  engine.Stop();
  EXPECT_EQ(got, RunOnCpu(reqs));
  for (const Snapshot& s : rec.steps()) {
    EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, 4 * s.step.num_seqs);
    EXPECT_EQ(Launches(s.cache, "penalties") - Launches(prev.cache, "penalties"), 1);
    EXPECT_EQ(Launches(s.cache, "argmax") - Launches(prev.cache, "argmax"), 1);
    EXPECT_EQ(Launches(s.cache, "sampling"), Launches(prev.cache, "sampling"));
    prev = s;
  }
}

// StepSampled on a real step's logits, on the emulator and (where there is one) a real
// GPU: every row's id is RowDrawer's for its params and uniform, for hand-picked rows
// (edge uniforms, every filter) and random ones, at the tiny preset's vocab (512) and at
// 32000.
class GpuSamplingDevices : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    if (std::string why = Unavailable(std::get<0>(GetParam())); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(GpuSamplingDevices, StepSampledEqualsRowDrawerOnTheStepsLogits) {
  const auto [kind, vocab_size] = GetParam();
  auto model = testing::SyntheticModel(
      "tiny", DType::kF32, [v = vocab_size](ModelConfig& c) { c.vocab_size = v; },
      "v" + std::to_string(vocab_size));
  ASSERT_TRUE(model.ok()) << model.status();
  GpuBackendOptions options;
  options.log_progress = false;
  options.emulated_device = testing::EmulatedDeviceUnderTest();
  auto gpu = CreateGpuBackend(*model, kKv, kind, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend& b = **gpu;
  const int64_t vocab = model->config.vocab_size;
  ASSERT_EQ(vocab, vocab_size);
  // A prefill batch of 6 sequences, one logits row each.
  const int rows_n = 6;
  const StepBatch batch = testing::PrefillBatch(rows_n, vocab, 2, 90, kKv.block_size);
  std::vector<float> logits;
  ASSERT_TRUE(b.Step(batch, &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(rows_n * vocab));

  const double last = std::nextafter(1.0, 0.0);
  std::vector<std::vector<RowSampling>> launches = {
      {{0.8f, 0, 0.9f, 0.0, 0.0f},
       {1.0f, 20, 1.0f, 0.5, 0.0f},
       {1.3f, 0, 1.0f, last, 0.05f},
       {0.7f, 50, 0.95f, 0.25, 0.02f},
       {2.0f, 2, 1.0f, last, 0.0f},
       {0.0f, 0, 1.0f, 0.9, 0.0f}},
      {{5.0f, 0, 0.5f, 0.99, 0.0f},
       {0.05f, 0, 1.0f, 0.3, 0.0f},
       {1.0f, static_cast<int32_t>(vocab) - 1, 0.3f, 0.6, 0.1f},
       {1.0f, 1, 1.0f, 0.6, 0.0f},
       {1e30f, 0, 1.0f, 0.123, 0.0f},
       {1.0f, 0, 0.99f, 0.0, 1.0f}},
  };
  // Random rows; the real GPU gets many more (the emulator is slow at 32000).
  const int random_launches = kind == "cuda" ? 40 : (vocab > 4096 ? 1 : 6);
  ptxserve::testing::CaseMaker maker(vocab);
  for (int l = 0; l < random_launches; ++l) {
    std::vector<RowSampling>& rows = launches.emplace_back();
    for (int r = 0; r < rows_n; ++r) {
      const SamplingParams p = maker.Params(static_cast<int>(vocab));
      rows.push_back({p.temperature, p.top_k, p.top_p, maker.Uniform(), p.min_p});
    }
  }
  RowDrawer host;
  for (size_t l = 0; l < launches.size(); ++l) {
    std::vector<int32_t> ids;
    ASSERT_TRUE(b.StepSampled(batch, launches[l], &ids).ok());
    ASSERT_EQ(ids.size(), static_cast<size_t>(rows_n));
    for (int r = 0; r < rows_n; ++r) {
      const RowSampling& rs = launches[l][r];
      SamplingParams p;
      p.temperature = rs.temperature;
      p.top_k = rs.top_k;
      p.top_p = rs.top_p;
      p.min_p = rs.min_p;
      const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
      EXPECT_EQ(ids[r], host.Draw(row, p, rs.uniform))
          << kind << " launch " << l << " row " << r << ": T=" << rs.temperature
          << " top_k=" << rs.top_k << " top_p=" << rs.top_p << " min_p=" << rs.min_p
          << " u=" << rs.uniform;
    }
  }
}

// StepSampled with penalty rows on a real step's logits: every row's id is the host's
// (ApplyPenalties on a copy, then RowDrawer) for random penalties and histories, greedy
// and stochastic, beside rows without penalties.
TEST_P(GpuSamplingDevices, StepSampledWithPenaltiesEqualsTheHost) {
  const auto [kind, vocab_size] = GetParam();
  auto model = testing::SyntheticModel(
      "tiny", DType::kF32, [v = vocab_size](ModelConfig& c) { c.vocab_size = v; },
      "v" + std::to_string(vocab_size));
  ASSERT_TRUE(model.ok()) << model.status();
  GpuBackendOptions options;
  options.log_progress = false;
  options.emulated_device = testing::EmulatedDeviceUnderTest();
  auto gpu = CreateGpuBackend(*model, kKv, kind, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend& b = **gpu;
  const int64_t vocab = model->config.vocab_size;
  const int rows_n = 4;
  const StepBatch batch = testing::PrefillBatch(rows_n, vocab, 3, 40, kKv.block_size);
  std::vector<float> logits;
  ASSERT_TRUE(b.Step(batch, &logits).ok());

  std::mt19937 rng(321);
  std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(vocab) - 1);
  // The row's best ids get penalised often, so the penalties change the pick.
  auto best_ids = [&](int r) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) ids[i] = i;
    const float* row = logits.data() + r * vocab;
    std::partial_sort(ids.begin(), ids.begin() + 8, ids.end(),
                      [&](int32_t a, int32_t c) { return row[a] > row[c]; });
    ids.resize(8);
    return ids;
  };
  const int launches = kind == "cuda" ? 30 : (vocab > 4096 ? 1 : 6);
  int changed = 0;
  RowDrawer host;
  for (int l = 0; l < launches; ++l) {
    std::vector<RowSampling> rows(rows_n);
    std::vector<std::unique_ptr<SequenceSampler>> samplers;
    for (int r = 0; r < rows_n; ++r) {
      SamplingParams p;
      p.temperature = (l + r) % 3 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(r);
      p.top_k = r == 1 ? 10 : 0;
      const int mode = (l * rows_n + r) % 5;  // 4: no penalties
      p.repetition_penalty =
          mode == 0 || mode == 3 ? 1.0f + 0.5f * static_cast<float>(r + 1) : 1.0f;
      p.presence_penalty = mode == 1 || mode == 3 ? 1.5f : 0.0f;
      p.frequency_penalty = mode == 2 || mode == 3 ? 0.75f : 0.0f;
      auto& sampler = samplers.emplace_back(std::make_unique<SequenceSampler>(p, 7));
      std::vector<int32_t> prompt = {0, static_cast<int32_t>(vocab) - 1, any_id(rng),
                                     static_cast<int32_t>(vocab) + 5};  // past the vocab
      const std::vector<int32_t> best = best_ids(r);
      prompt.push_back(best[0]);
      sampler->AddPromptTokens(prompt);
      for (int t = 0; t < 12; ++t) sampler->Accept(t % 2 == 0 ? best[t % 8] : any_id(rng));
      RowSampling& rs = rows[r];
      rs.temperature = p.temperature;
      rs.top_k = p.top_k;
      rs.uniform = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      rs.repetition_penalty = p.repetition_penalty;
      rs.presence_penalty = p.presence_penalty;
      rs.frequency_penalty = p.frequency_penalty;
      sampler->PenaltyEntries(static_cast<int32_t>(vocab), &rs.penalties);
      EXPECT_EQ(rs.penalties.empty(), mode == 4);
    }
    std::vector<int32_t> ids;
    ASSERT_TRUE(b.StepSampled(batch, rows, &ids).ok());
    ASSERT_EQ(ids.size(), static_cast<size_t>(rows_n));
    for (int r = 0; r < rows_n; ++r) {
      const std::span<const float> raw(logits.data() + r * vocab, static_cast<size_t>(vocab));
      std::vector<float> row(raw.begin(), raw.end());
      samplers[r]->ApplyPenalties(row);
      const int32_t want = host.Draw(row, samplers[r]->params(), rows[r].uniform);
      EXPECT_EQ(ids[r], want) << kind << " launch " << l << " row " << r;
      changed += want != host.Draw(raw, samplers[r]->params(), rows[r].uniform);
    }
  }
  EXPECT_GT(changed, 0) << "the penalties never changed a pick";
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuSamplingDevices,
                         ::testing::Combine(::testing::Values("emulated", "cuda"),
                                            ::testing::Values(512, 32000)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_vocab" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ptxserve::cuda
