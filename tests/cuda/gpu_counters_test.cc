// The GPU backend's kernels profiled per launch through the emulated driver's counters
// (SetEmulatedKernelCounters): one decode step of the tiny model reads every linear
// weight exactly once, each weight sector requested once, and its decode attention reads
// the batch's KV rows once from DRAM.
#include <algorithm>
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
  // embedding; per layer rmsnorm, q, k, v, rope, kv_scatter, attention, o, rmsnorm,
  // gate_up, silu_mul, down; gather, rmsnorm, LM head.
  ASSERT_EQ(static_cast<int64_t>(launches.size()), 1 + 12 * c.num_layers + 3);

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
