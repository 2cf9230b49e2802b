// The GPU backend's kernels profiled per launch through the emulated driver's counters
// (SetEmulatedKernelCounters): one decode step of the tiny model reads every linear
// weight exactly once, each weight sector requested once, and its decode attention reads
// the batch's KV rows once from DRAM. Counters from a sample of each launch's CTAs,
// scaled to the grid, agree with the whole grid's for every kernel of a step.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::TwoBlockStep;

constexpr KvCacheConfig kKv{64, 16, DType::kF32};

class GpuCountersTest : public ::testing::Test {
 protected:
  void TearDown() override { SetEmulatedKernelCounters(false); }
};

TEST_F(GpuCountersTest, DecodeStepReadsEachWeightOnce) {
  auto model = testing::SyntheticModel("tiny", DType::kF32);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = model->config;
  GpuBackendOptions o;
  o.cuda_graphs = false;  // graph launches are counted too; eager keeps the test simple
  auto backend = testing::EmulatedBackend(*model, kKv, o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int64_t dp = (c.head_dim + 31) / 32 * 32;
  const int n = 2;
  const int32_t len = 21;
  std::vector<float> logits;
  ASSERT_TRUE((*backend)->Step(TwoBlockStep(n, len, c.vocab_size, false), &logits).ok());
  SetEmulatedKernelCounters(true);
  ASSERT_TRUE((*backend)->Step(TwoBlockStep(n, len, c.vocab_size, true), &logits).ok());
  const std::vector<emu::KernelCounters> launches = TakeEmulatedKernelCounters();
  // embedding; per layer qkv, rope_kv, attention, o, gate_up, silu_mul, down (the GEMVs fuse
  // the RMSNorms); gather, LM head.
  ASSERT_EQ(static_cast<int64_t>(launches.size()), 1 + 7 * c.num_layers + 2);

  std::map<std::string, uint64_t> dram_by_kernel;
  uint64_t weight_bytes = 0;
  for (const emu::KernelCounters& k : launches) {
    dram_by_kernel[k.kernel] += k.dram_read_bytes + k.dram_write_bytes;
    if (k.kernel == "gemm") {
      // The weights are what a GEMV reads most; each of their sectors is requested once.
      const emu::BufferTraffic* w = &k.buffers.front();
      for (const emu::BufferTraffic& b : k.buffers) {
        if (b.dram_read_bytes > w->dram_read_bytes) w = &b;
      }
      EXPECT_EQ(w->access.sectors * 32, w->dram_read_bytes) << k.ToString();
      weight_bytes += w->dram_read_bytes;
    }
    if (k.kernel == "decode_attention") {
      // The K and V pools are what it reads most (rows of head_dim padded to 32 elements):
      // the sequences' rows per KV head, once each.
      std::vector<uint64_t> reads;
      for (const emu::BufferTraffic& b : k.buffers) reads.push_back(b.dram_read_bytes);
      ASSERT_GE(reads.size(), 2u);
      std::sort(reads.rbegin(), reads.rend());
      const uint64_t rows = static_cast<uint64_t>(n) * len * c.num_kv_heads;
      EXPECT_EQ(reads[0], rows * dp * 4) << k.ToString();
      EXPECT_EQ(reads[1], rows * dp * 4) << k.ToString();
    }
  }
  // What the backend says a step reads: every linear weight and the LM head.
  EXPECT_EQ(weight_bytes, (*backend)->step_weight_bytes());
  for (const auto& [kernel, bytes] : dram_by_kernel) {
    absl::PrintF("%-18s %10u DRAM bytes\n", kernel, bytes);
  }
}

// The counters of `step` on a fresh backend, every CTA run or at most `sample_ctas`.
std::vector<emu::KernelCounters> StepCounters(const Model& model, const StepBatch& step,
                                              uint64_t sample_ctas) {
  GpuBackendOptions o;
  o.cuda_graphs = false;
  auto backend = testing::EmulatedBackend(model, kKv, o);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  SetEmulatedKernelCounters(true, sample_ctas);
  std::vector<float> logits;
  EXPECT_TRUE((*backend)->Step(step, &logits).ok());
  SetEmulatedKernelCounters(false);
  return TakeEmulatedKernelCounters();
}

// Relative difference of a sampled count from the whole grid's.
double Deviation(uint64_t sampled, uint64_t whole) {
  if (whole == 0) return sampled == 0 ? 0.0 : 1.0;
  return std::abs(static_cast<double>(sampled) - static_cast<double>(whole)) /
         static_cast<double>(whole);
}

TEST_F(GpuCountersTest, SampledCtasScaleToTheWholeGrid) {
  // 8 query heads over 2 KV heads, hidden 512: grids of 8 to 86 CTAs, cut to 12.
  auto model = testing::SyntheticModel("gqa4", DType::kF32);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t vocab = model->config.vocab_size;
  for (const bool decode : {true, false}) {
    const StepBatch step = TwoBlockStep(16, 21, vocab, decode);
    const std::vector<emu::KernelCounters> whole = StepCounters(*model, step, 0);
    const std::vector<emu::KernelCounters> sampled = StepCounters(*model, step, 12);
    ASSERT_EQ(whole.size(), sampled.size());
    ASSERT_FALSE(whole.empty());
    int cut = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      const emu::KernelCounters& w = whole[i];
      const emu::KernelCounters& s = sampled[i];
      ASSERT_EQ(w.kernel, s.kernel);
      EXPECT_EQ(w.ctas, s.ctas) << w.kernel;
      EXPECT_EQ(w.sampled_ctas, w.ctas);
      if (s.sampled_ctas < s.ctas) ++cut;
      const double instr = Deviation(s.warp_instructions, w.warp_instructions);
      const double sectors = Deviation(s.global_load.sectors, w.global_load.sectors);
      const double dram =
          Deviation(s.dram_read_bytes + s.dram_write_bytes, w.dram_read_bytes + w.dram_write_bytes);
      absl::PrintF(
          "%s %-18s grid %4u CTAs, %3u run: instructions %+.3f, sectors %+.3f, "
          "DRAM bytes %+.3f\n",
          decode ? "decode " : "prefill", w.kernel, w.ctas, s.sampled_ctas, instr, sectors, dram);
      // Edge CTAs (a partial last tile) weigh more in a sample than in the grid.
      EXPECT_LT(instr, 0.10) << w.kernel;
      EXPECT_LT(sectors, 0.10) << w.kernel;
      if (!decode && w.kernel == "decode_attention") {
        // The prompt rows of one sequence share its KV rows, a group longer than a run:
        // overcounted, at most up to the KV pools' size (cta_sample.h).
        EXPECT_GE(s.dram_read_bytes, w.dram_read_bytes);
        for (const emu::BufferTraffic& b : s.buffers) EXPECT_LE(b.dram_read_bytes, b.size);
      } else {
        EXPECT_LT(dram, 0.10) << w.kernel;
      }
      EXPECT_EQ(s.tensor_flops == 0, w.tensor_flops == 0);
    }
    EXPECT_GT(cut, 0) << "no launch was large enough to sample";
  }
}

TEST_F(GpuCountersTest, NothingIsKeptWhileOff) {
  auto model = testing::SyntheticModel("tiny", DType::kF32);
  ASSERT_TRUE(model.ok()) << model.status();
  auto backend = testing::EmulatedBackend(*model, kKv);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<float> logits;
  ASSERT_TRUE((*backend)->Step(TwoBlockStep(1, 5, model->config.vocab_size, false), &logits).ok());
  EXPECT_TRUE(TakeEmulatedKernelCounters().empty());
}

}  // namespace
}  // namespace ptxserve::cuda
