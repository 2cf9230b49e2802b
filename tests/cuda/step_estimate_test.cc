// The step estimate (engine/cuda/step_estimate.h) on the tiny synthetic model: one layer
// stands for all, the launches fold into the step's kernels in order, the totals add up,
// the rooflines follow from the model's shape, and bad options are refused by name.
#include "engine/cuda/step_estimate.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

StepEstimateOptions SmallOptions() {
  StepEstimateOptions o;
  o.device = "h100";
  o.decode_batches = {1, 4};
  o.context = 40;
  o.prefill_tokens = 24;
  o.sample_ctas = 0;  // every CTA: the tiny model's grids are small
  return o;
}

TEST(StepEstimate, FoldsOneLayerIntoEveryLayerAndAddsUp) {
  auto model = testing::SyntheticModel("tiny", DType::kF16);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = model->config;
  int ptx_seen = 0;
  StepEstimateOptions o = SmallOptions();
  o.registers = [&](const std::string& ptx) {
    if (ptx.find(".entry") != std::string::npos) ++ptx_seen;
    return 40;
  };
  absl::StatusOr<ModelEstimate> m = EstimateModelSteps(*model, "tiny", o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->device->name, "h100");
  EXPECT_EQ(m->dtype, DType::kF16);
  ASSERT_EQ(m->steps.size(), 3u);
  EXPECT_GT(ptx_seen, 0);

  // Weights (every linear and the tied LM head) in f16, and K+V of the context in f16.
  const double weights = 2.0 * (static_cast<double>(c.num_layers) * c.hidden_size *
                                    (2 * c.q_dim() + 2 * c.kv_dim() + 3 * c.intermediate_size) +
                                static_cast<double>(c.hidden_size) * c.vocab_size);
  for (const StepEstimate& s : m->steps) {
    SCOPED_TRACE(s.phase + " batch " + std::to_string(s.batch));
    ASSERT_GE(s.kernels.size(), 4u);
    EXPECT_EQ(s.kernels.front().kernel, "embedding");
    EXPECT_FALSE(s.kernels.front().per_layer);
    EXPECT_EQ(s.kernels.back().kernel, "argmax");  // greedy rows sample on the device
    double seconds = 0;
    uint64_t dram = 0;
    int per_layer = 0;
    for (const KernelEstimate& k : s.kernels) {
      EXPECT_EQ(k.count, k.per_layer ? c.num_layers : 1) << k.kernel;
      EXPECT_EQ(k.registers, 40) << k.kernel;
      EXPECT_GT(k.one.seconds, 0) << k.kernel;
      EXPECT_DOUBLE_EQ(k.seconds, k.one.seconds * k.count);
      EXPECT_LE(k.roofline_s, k.seconds * (1 + 1e-9)) << k.kernel;
      seconds += k.seconds;
      dram += (k.counters.dram_read_bytes + k.counters.dram_write_bytes) * k.count;
      per_layer += k.per_layer ? 1 : 0;
    }
    // qkv, rope_kv, attention, o, gate_up, silu_mul, down (+ the norms where not fused)
    EXPECT_GE(per_layer, 7);
    EXPECT_DOUBLE_EQ(s.seconds, seconds);
    EXPECT_EQ(s.dram_bytes, dram);
    EXPECT_GT(s.RooflinePct(), 0);
    EXPECT_LE(s.RooflinePct(), 100);
    const double kv = 2.0 * c.num_layers * c.kv_dim() * 2 * s.batch * s.context;
    EXPECT_EQ(s.ideal_bytes, static_cast<uint64_t>(weights + kv));
    // The GEMMs read every weight once: the step reads at least the weights.
    EXPECT_GE(static_cast<double>(s.dram_bytes), weights);
  }
  EXPECT_EQ(m->steps[0].phase, "decode");
  EXPECT_EQ(m->steps[1].tokens, 4);
  const StepEstimate& prefill = m->steps[2];
  EXPECT_EQ(prefill.phase, "prefill");
  EXPECT_EQ(prefill.tokens, 24);
  EXPECT_DOUBLE_EQ(prefill.roofline_s, prefill.flops / m->device->tensor_f16_flops);
}

TEST(StepEstimate, MoreLayersCostTheirLaunchesOnceMore) {
  auto model = testing::SyntheticModel("tiny", DType::kF16);
  ASSERT_TRUE(model.ok()) << model.status();
  StepEstimateOptions o = SmallOptions();
  o.decode_batches = {2};
  o.prefill_tokens = 0;
  absl::StatusOr<ModelEstimate> base = EstimateModelSteps(*model, "tiny", o);
  o.num_layers = 3 * model->config.num_layers;
  absl::StatusOr<ModelEstimate> deep = EstimateModelSteps(*model, "tiny", o);
  ASSERT_TRUE(base.ok() && deep.ok());
  const StepEstimate& a = base->steps[0];
  const StepEstimate& b = deep->steps[0];
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  double layer_a = 0, layer_b = 0;
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    if (a.kernels[i].per_layer) {
      layer_a += a.kernels[i].seconds;
      layer_b += b.kernels[i].seconds;
    } else {
      EXPECT_DOUBLE_EQ(a.kernels[i].seconds, b.kernels[i].seconds) << a.kernels[i].kernel;
    }
  }
  EXPECT_NEAR(layer_b, 3 * layer_a, 1e-9 * layer_b);
}

TEST(StepEstimate, RefusesAnUnknownDeviceByName) {
  auto model = testing::SyntheticModel("tiny", DType::kF16);
  ASSERT_TRUE(model.ok()) << model.status();
  StepEstimateOptions o = SmallOptions();
  o.device = "v100";
  absl::StatusOr<ModelEstimate> m = EstimateModelSteps(*model, "tiny", o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'v100'"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("h100"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace ptxserve::cuda
