// Log-probs on the device: a row that wants log-probs keeps its step on the device (the
// logprobs kernel after the sampling launch, its records copied back instead of the ids),
// and what comes back is what the host sampler reports. On the emulator and, where
// libcuda.so.1 loads, a real GPU:
//   - StepSampled with a logprobs output against SequenceSampler::Sample on the step's own
//     logits (same params and uniform): same tokens, log-probs within 1e-5 (absolute plus
//     relative), identical top ids, for logprobs 0..20, greedy and stochastic rows;
//   - the engine with log-probs requests (0 / 1 / 5 / 20, greedy and seeded stochastic)
//     against the same engine on a second backend whose rows all take the host path (the
//     same device's logits, SequenceSampler's log-probs), and on the emulator the CPU
//     backend's tokens; every step one device->host copy of R x 168 bytes.
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
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
constexpr int64_t kRecordBytes = 168;  // (1 + 20) entries of {s32 id, f32 logprob}

bool Close(float got, float want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(static_cast<double>(got) - want) <= 1e-5 + 1e-5 * std::abs(want);
}

// Expects `got` (the device's) to be `want` (the host sampler's): the same token and top
// ids, log-probs within the tolerance.
void ExpectSameResult(const SampleResult& got, const SampleResult& want, const std::string& what) {
  EXPECT_EQ(got.token, want.token) << what;
  EXPECT_TRUE(Close(got.logprob, want.logprob))
      << what << ": logprob " << got.logprob << " vs the host's " << want.logprob;
  ASSERT_EQ(got.top.size(), want.top.size()) << what;
  for (size_t i = 0; i < want.top.size(); ++i) {
    EXPECT_EQ(got.top[i].id, want.top[i].id) << what << ", top " << i;
    EXPECT_TRUE(Close(got.top[i].logprob, want.top[i].logprob))
        << what << ", top " << i << ": " << got.top[i].logprob << " vs the host's "
        << want.top[i].logprob;
  }
}

// The GPU backend with device sampling refused for every row: the engine takes Step and
// samples (and computes log-probs) on the host, from the same device's logits.
class HostSampled : public Backend {
 public:
  explicit HostSampled(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  absl::Status Step(const StepBatch& b, std::vector<float>* logits) override {
    return inner_->Step(b, logits);
  }
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheConfig& kv_config() const override { return inner_->kv_config(); }
  std::string name() const override { return inner_->name(); }
  bool usable() const override { return inner_->usable(); }

 private:
  std::unique_ptr<Backend> inner_;
};

class GpuLogprobsDevices : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    if (std::string why = Unavailable(std::get<0>(GetParam())); !why.empty()) GTEST_SKIP() << why;
    const int vocab = std::get<1>(GetParam());
    auto m = testing::SyntheticModel(
        "tiny", DType::kF32, [vocab](ModelConfig& c) { c.vocab_size = vocab; },
        "v" + std::to_string(vocab));
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<Model>(*std::move(m));
    ASSERT_EQ(model_->config.vocab_size, vocab);
  }
  absl::StatusOr<std::unique_ptr<GpuBackend>> Gpu() const {
    GpuBackendOptions options;
    options.log_progress = false;
    options.emulated_device = testing::EmulatedDeviceUnderTest();
    return CreateGpuBackend(*model_, kKv, std::get<0>(GetParam()), options);
  }

  std::unique_ptr<Model> model_;
};

// StepSampled's log-probs on a real step's logits equal SequenceSampler::Sample's with the
// same uniform; the copy back is the records (R x 168 bytes) when a row wants log-probs,
// the ids (R x 4) otherwise, one copy either way.
TEST_P(GpuLogprobsDevices, StepSampledLogprobsEqualTheHostSamplersOnTheStepsLogits) {
  auto gpu = Gpu();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend& b = **gpu;
  const int64_t vocab = model_->config.vocab_size;
  const int rows_n = 6;
  const StepBatch batch = testing::PrefillBatch(rows_n, vocab, 2, 30, kKv.block_size);
  std::vector<float> logits;
  ASSERT_TRUE(b.Step(batch, &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(rows_n * vocab));

  struct Mix {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  const Mix mixes[] = {{0, 0, 1, 0},        {0.8f, 0, 0.9f, 0}, {1.0f, 20, 1, 0},
                       {1.3f, 0, 1, 0.05f}, {0, 1, 1, 0},       {2.0f, 2, 1, 0}};
  const int32_t counts[][rows_n] = {{1, 5, 20, 0, 3, 20},
                                    {20, 0, 1, 2, 19, 5},
                                    {0, 0, 0, 0, 0, 7},
                                    {20, 20, 20, 20, 20, 20},
                                    {0, 0, 0, 0, 0, 0}};
  for (size_t l = 0; l < std::size(counts); ++l) {
    std::vector<RowSampling> rows;
    std::vector<SampleResult> want;
    for (int r = 0; r < rows_n; ++r) {
      const Mix& m = mixes[(r + l) % std::size(mixes)];
      SamplingParams p;
      p.temperature = m.temperature;
      p.top_k = m.top_k;
      p.top_p = m.top_p;
      p.min_p = m.min_p;
      p.logprobs = counts[l][r];
      p.seed = 1000 * l + r;
      EXPECT_TRUE(b.CanSampleOnDevice(p));
      // Twin samplers: the device draws with the uniform the host's Sample consumes.
      SequenceSampler device(p, 0), host(p, 0);
      rows.push_back({p.temperature, p.top_k, p.top_p, device.TakeUniform(), p.min_p, p.logprobs});
      want.push_back(host.Sample(std::span<const float>(logits.data() + r * vocab, vocab)));
    }
    const TransferStats t0 = b.transfer_stats();
    std::vector<int32_t> ids;
    std::vector<SampleResult> got;
    ASSERT_TRUE(b.StepSampled(batch, rows, &ids, &got).ok());
    const TransferStats t1 = b.transfer_stats();
    ASSERT_EQ(ids.size(), static_cast<size_t>(rows_n));
    ASSERT_EQ(got.size(), static_cast<size_t>(rows_n));
    bool any = false;
    for (int r = 0; r < rows_n; ++r) {
      const std::string what = absl::StrCat(std::get<0>(GetParam()), " launch ", l, " row ", r,
                                            " (logprobs ", rows[r].logprobs, ")");
      EXPECT_EQ(ids[r], want[r].token) << what;
      EXPECT_EQ(got[r].token, ids[r]) << what;
      EXPECT_EQ(got[r].top.size(), static_cast<size_t>(rows[r].logprobs)) << what;
      ExpectSameResult(got[r], want[r], what);
      any = any || rows[r].logprobs > 0;
    }
    EXPECT_EQ(t1.d2h_count - t0.d2h_count, 1) << "launch " << l;
    EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, (any ? kRecordBytes : 4) * rows_n) << "launch " << l;
    // The three-argument form never returns records.
    ASSERT_TRUE(b.StepSampled(batch, rows, &ids).ok());
    EXPECT_EQ(b.transfer_stats().d2h_bytes - t1.d2h_bytes, 4 * rows_n) << "launch " << l;
    for (int r = 0; r < rows_n; ++r) EXPECT_EQ(ids[r], want[r].token) << "launch " << l;
  }

  SamplingParams p;
  p.logprobs = 21;
  EXPECT_FALSE(b.CanSampleOnDevice(p)) << "a record holds 20 top entries";
  p.logprobs = 1;
  p.frequency_penalty = 0.5f;
  EXPECT_TRUE(b.CanSampleOnDevice(p)) << "the penalties kernel applies them on the device";
  std::vector<RowSampling> bad(rows_n);
  bad[4].logprobs = 21;
  std::vector<int32_t> ids;
  std::vector<SampleResult> got;
  const absl::Status st = b.StepSampled(batch, bad, &ids, &got);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("rows[4].logprobs"), std::string::npos) << st;
}

// Eight requests (log-probs 0, 1, 5, 20; greedy and seeded stochastic) through the engine:
// every step stays on the device and moves R x 168 bytes back in one copy; tokens and
// log-probs are those of the host path on the same device's logits (and, on the emulator,
// the CPU backend's tokens).
TEST_P(GpuLogprobsDevices, EngineRequestsWithLogprobsStayOnTheDevice) {
  auto t = Tokenizer::FromDir(model_->dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const int64_t vocab = model_->config.vocab_size;
  auto requests = [&] {
    std::vector<EngineRequest> reqs;
    const int32_t counts[] = {0, 1, 5, 20};
    for (int i = 0; i < 8; ++i) {
      EngineRequest& r = reqs.emplace_back();
      r.request_id = "lp" + std::to_string(i);
      r.index = i;
      r.prompt = Prompt(3 + 2 * i, vocab, 60 + i);
      r.sampling.logprobs = counts[i % 4];
      if (i >= 4) {
        r.sampling.temperature = 0.9f;
        r.sampling.top_p = 0.95f;
        r.sampling.seed = 77 + i;
      }
      r.stopping.max_new_tokens = 5;
      r.stopping.ignore_eos = true;
    }
    return reqs;
  };
  EngineConfig cfg;
  cfg.prefill_chunk = 64;

  auto gpu = Gpu();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  GpuBackend* g = gpu->get();
  for (const EngineRequest& r : requests()) EXPECT_TRUE(g->CanSampleOnDevice(r.sampling));
  StepRecorder rec(g);
  RunResult got;
  {
    Engine engine(*std::move(gpu), **t, cfg, &rec);
    ASSERT_TRUE(engine.Start().ok());
    Snapshot prev{{}, g->transfer_stats(), g->cache_stats()};
    got = RunEngine(engine, requests());
    engine.Stop();  // the last step's OnStep runs after its outputs went out
    const std::vector<Snapshot> steps = rec.steps();
    ASSERT_EQ(steps.size(), 5u) << "one prefill step, four decode steps";
    for (size_t i = 0; i < steps.size(); ++i) {
      const Snapshot& s = steps[i];
      EXPECT_EQ(s.step.num_seqs, 8) << "step " << i;
      EXPECT_EQ(s.transfers.d2h_count - prev.transfers.d2h_count, 1) << "step " << i;
      EXPECT_EQ(s.transfers.d2h_bytes - prev.transfers.d2h_bytes, kRecordBytes * s.step.num_seqs)
          << "the records, not the logits (" << 4 * vocab << " bytes a row), step " << i;
      EXPECT_EQ(s.transfers.h2d_count - prev.transfers.h2d_count, 1) << "step " << i;
      EXPECT_EQ(Launches(s.cache, "logprobs") - Launches(prev.cache, "logprobs"), 1)
          << "step " << i;
      EXPECT_EQ(Launches(s.cache, "sampling") - Launches(prev.cache, "sampling"), 1)
          << "step " << i;
      prev = s;
    }
    EXPECT_GT(g->graph_stats().replays, 0) << "decode steps replayed as graphs";
  }

  auto gpu2 = Gpu();
  ASSERT_TRUE(gpu2.ok()) << gpu2.status();
  RunResult want;
  {
    Engine engine(std::make_unique<HostSampled>(*std::move(gpu2)), **t, cfg);
    ASSERT_TRUE(engine.Start().ok());
    want = RunEngine(engine, requests());
  }
  EXPECT_EQ(got.tokens, want.tokens) << "the host path on the same device's logits";
  for (int i = 0; i < 8; ++i) {
    const size_t n = requests()[i].sampling.logprobs > 0 ? 5 : 0;
    ASSERT_EQ(got.tokens[i].size(), 5u) << "request " << i;
    ASSERT_EQ(got.logprobs[i].size(), n) << "request " << i;
    ASSERT_EQ(want.logprobs[i].size(), n) << "request " << i;
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(got.logprobs[i][k].token, got.tokens[i][k]);
      EXPECT_EQ(got.logprobs[i][k].top.size(),
                static_cast<size_t>(requests()[i].sampling.logprobs));
      ExpectSameResult(got.logprobs[i][k], want.logprobs[i][k],
                       absl::StrCat("request ", i, " token ", k));
    }
  }
  if (std::get<0>(GetParam()) == "emulated") {
    auto cpu = CpuBackend::Create(*model_, kKv);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    Engine engine(*std::move(cpu), **t, cfg);
    ASSERT_TRUE(engine.Start().ok());
    const RunResult on_cpu = RunEngine(engine, requests());
    EXPECT_EQ(got.tokens, on_cpu.tokens) << "the CPU backend's tokens";
    for (int i = 0; i < 8; ++i) {
      for (size_t k = 0; k < got.logprobs[i].size(); ++k) {
        ExpectSameResult(got.logprobs[i][k], on_cpu.logprobs[i][k],
                         absl::StrCat("vs the CPU backend: request ", i, " token ", k));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuLogprobsDevices,
                         ::testing::Combine(::testing::Values("emulated", "cuda"),
                                            ::testing::Values(512, 2048)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_vocab" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ptxserve::cuda
