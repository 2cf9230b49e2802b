// Hugging Face int4 checkpoints calibrated the AWQ and GPTQ ways (hf_quant_calibrate.h) on the
// shared TinyStories model: the calibration forward computes the CPU backend's logits, AWQ's
// probes and folded scales keep the model's function, the calibrated checkpoints (and the
// calibrated q4_0 GGUF) store and serve the blocks calibration chose, and a synthetic bf16
// model of another shape does the same without the shared model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/model/calibration_forward.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/hf_quant_calibrate.h"
#include "engine/model/hf_quant_export.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"
#include "tests/model/cpu_logits.h"
#include "tests/model/hf_quant_test_fixture.h"
#include "tests/model/test_files.h"

namespace ptxserve {
namespace {

using test_files::GreedyLogits;
using test_files::RelativeLogitDiffs;
using test_files::TempDir;
using ::testing::HasSubstr;
using Method = HfQuantization::Method;

// Two windows of a short text (ids of the TinyStories vocabulary), for calibration.
const std::vector<std::vector<int32_t>> kWindows = {
    {1, 80, 147, 201, 282, 57, 15, 147, 1018, 233, 43, 276, 1041, 12, 61, 151, 101, 68, 1240},
    {1, 47, 253, 15, 113, 316, 207, 116, 52, 1280, 12, 98, 316, 152, 61, 62, 151, 153, 1004}};

struct NoObserver final : LinearObserver {
  absl::Status BeforeLinear(int, std::span<const Weight>, float*, int64_t, std::vector<FloatLayer>&,
                            const BlockProbe&) override {
    return absl::OkStatus();
  }
};

// The calibration forward (calibration_forward.h, a plain f32 copy of the ops) computes
// what the CPU backend computes.
TEST_F(HfQuantModelTest, CalibrationForwardGivesTheCpuBackendsLogits) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  auto layers = FloatLayers(*model);
  ASSERT_TRUE(layers.ok()) << layers.status();
  NoObserver none;
  auto logits = RunCalibrationForward(*model, kWindows, *layers, none);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int64_t vocab = model->config.vocab_size;
  ASSERT_EQ(logits->size(), kWindows.size() * vocab);
  for (size_t w = 0; w < kWindows.size(); ++w) {
    const std::vector<float> ref = GreedyLogits(*model, kWindows[w], 0).at(0);
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      diff = std::max(diff, std::abs(static_cast<double>((*logits)[w * vocab + i]) - ref[i]));
      mag = std::max(mag, std::abs(static_cast<double>(ref[i])));
    }
    EXPECT_LE(diff, 1e-4 * mag) << "window " << w;
  }
  auto bad = RunCalibrationForward(*model, {{1, 5000}}, *layers, none);
  EXPECT_EQ(bad.status().message(),
            "calibration token 1 is id 5000, outside the vocabulary of 2048");
}

// The block a q/k/v or gate/up probe runs ends where AutoAWQ's module2inspect does: after
// o_proj and down_proj, so with the layer's own weights it gives o_proj's and down_proj's
// output as the forward computes it next.
class ProbeRecorder final : public LinearObserver {
 public:
  absl::Status BeforeLinear(int layer, std::span<const Weight> roles, float* x, int64_t rows,
                            std::vector<FloatLayer>& layers, const BlockProbe& probe) override {
    FloatLayer& l = layers[layer];
    if (roles[0] == Weight::kQ || roles[0] == Weight::kGate) {
      std::vector<const float*> own;
      for (Weight r : roles) own.push_back(l.matrix(r).data());
      probed_ = probe.Output(own);
      return absl::OkStatus();
    }
    // o_proj or down_proj: x W^T directly, against what the probe gave.
    const std::vector<float>& w = l.matrix(roles[0]);
    const int64_t k = static_cast<int64_t>(w.size()) / hidden_;
    EXPECT_EQ(probed_.size(), static_cast<size_t>(rows * hidden_));
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t n = 0; n < hidden_; ++n) {
        double y = 0;
        for (int64_t i = 0; i < k; ++i) y += double{x[t * k + i]} * w[n * k + i];
        max_diff_ = std::max(max_diff_, std::abs(y - probed_[t * hidden_ + n]));
        max_ = std::max(max_, std::abs(y));
      }
    }
    ++compared_;
    return absl::OkStatus();
  }
  explicit ProbeRecorder(int64_t hidden) : hidden_(hidden) {}
  int64_t hidden_;
  std::vector<float> probed_;
  double max_diff_ = 0, max_ = 0;
  int compared_ = 0;
};

TEST_F(HfQuantModelTest, AttentionAndMlpProbesEndAfterOProjAndDownProj) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  auto layers = FloatLayers(*model);
  ASSERT_TRUE(layers.ok()) << layers.status();
  ProbeRecorder recorder(model->config.hidden_size);
  ASSERT_TRUE(RunCalibrationForward(*model, kWindows, *layers, recorder).ok());
  EXPECT_EQ(recorder.compared_, 2 * static_cast<int>(model->tensors.layers.size()));
  EXPECT_GT(recorder.max_, 0);
  EXPECT_LE(recorder.max_diff_, 1e-5 * recorder.max_);
}

// AWQ's scales are an equivalence before rounding: folded into the RMSNorm weights and the
// rows of v_proj (shared by o_proj's heads of one kv head) and up_proj, the unclipped,
// unrounded model gives the logits it gave before.
TEST_F(HfQuantModelTest, AwqScalesFoldedIntoThePreviousOpsKeepTheLogits) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  auto original = FloatLayers(*model);
  ASSERT_TRUE(original.ok()) << original.status();
  std::vector<FloatLayer> scaled = *original;
  CalibratedInt4 errors;
  ASSERT_TRUE(ApplyAwq(*model, kWindows, /*clip=*/false, &scaled, &errors).ok());
  EXPECT_EQ(errors.tokens, 38);
  EXPECT_LT(errors.error, errors.rtn_error);  // some alpha > 0 was chosen
  EXPECT_NE(scaled[0].attn_norm, (*original)[0].attn_norm);
  EXPECT_NE(scaled[1].wv, (*original)[1].wv);
  EXPECT_NE(scaled[1].w_up, (*original)[1].w_up);
  NoObserver none;
  auto want = RunCalibrationForward(*model, kWindows, *original, none);
  auto got = RunCalibrationForward(*model, kWindows, scaled, none);
  ASSERT_TRUE(want.ok() && got.ok());
  double diff = 0, mag = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>((*got)[i]) - (*want)[i]));
    mag = std::max(mag, std::abs(static_cast<double>((*want)[i])));
  }
  std::printf("[ awq ] folded scales move the logits by %.2e of the largest\n", diff / mag);
  EXPECT_LE(diff, 1e-5 * mag);
}

// Calibrated awq (either rounding) and gptq checkpoints are plain ones: they load, and give
// the logits of the blocks they store dequantized to f32; AWQ's scales are folded into the
// RMSNorm weights.
TEST_F(HfQuantModelTest, CalibratedCheckpointGivesTheDequantizedModelsLogits) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const auto& [method, rounding] :
       std::vector<std::pair<Method, AwqRounding>>{{Method::kAwq, AwqRounding::kNearest},
                                                   {Method::kAwq, AwqRounding::kGptq},
                                                   {Method::kGptq, AwqRounding::kNearest}}) {
    const std::string name(HfQuantMethodName(method));
    SCOPED_TRACE(name + (rounding == AwqRounding::kGptq ? " gptq rounding" : ""));
    auto calibrated = CalibrateInt4(*model, method, kWindows, rounding);
    ASSERT_TRUE(calibrated.ok()) << calibrated.status();
    EXPECT_EQ(calibrated->tokens, 38);
    EXPECT_EQ(calibrated->blocks.size(), 7 * model->tensors.layers.size());
    EXPECT_LT(calibrated->error, calibrated->rtn_error);
    EXPECT_EQ(calibrated->folded.empty(), method == Method::kGptq);
    TempDir dir;
    ASSERT_TRUE(WriteHfQuantized(*model, method, *calibrated, dir.path()).ok());
    auto q = LoadModel(dir.path());
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->config.quantization.method, method);
    // The stored blocks are the calibrated ones, byte for byte.
    const Tensor& wq = q->tensors.layers[1].wq;
    const std::vector<uint8_t>& want = calibrated->blocks.at(wq.name);
    ASSERT_EQ(wq.nbytes, want.size());
    EXPECT_EQ(std::memcmp(wq.data, want.data(), want.size()), 0);
    const Tensor& norm = q->tensors.layers[0].attn_norm;
    const bool norm_changed =
        std::memcmp(norm.data, model->tensors.layers[0].attn_norm.data, norm.nbytes) != 0;
    EXPECT_EQ(norm_changed, method == Method::kAwq);

    const auto got = GreedyLogits(*q, kPrompt, 6);
    const auto ref = GreedyLogits(ptxserve::testing::DequantizedModel(*q), kPrompt, 6);
    const std::vector<double> diffs = RelativeLogitDiffs(got, ref);
    for (size_t s = 0; s < diffs.size(); ++s) EXPECT_LE(diffs[s], 1e-6) << "step " << s;
  }
  auto empty = CalibrateInt4(*model, Method::kGptq, {});
  EXPECT_EQ(empty.status().message(), "no calibration tokens");
  auto fp8 = CalibrateInt4(*model, Method::kFp8, kWindows);
  EXPECT_EQ(fp8.status().message(), "calibration is for awq and gptq, not fp8");
}

// The logits of `m`'s blocks dequantized to f32 on kWindows.
std::vector<float> DequantizedLogits(const Model& m) {
  const Model f32 = ptxserve::testing::DequantizedModel(m);
  auto layers = FloatLayers(f32);
  EXPECT_TRUE(layers.ok()) << layers.status();
  NoObserver none;
  auto logits = RunCalibrationForward(f32, kWindows, *layers, none);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : std::vector<float>{};
}

// awq's gptq rounding changes only the integers: the scale and clipping searches, hence the
// folded norms and every group's scale and zero, are the nearest rounding's; the integers
// carry GPTQ's feedback, which brings the logits on the calibration tokens nearer the
// unquantized model's.
TEST_F(HfQuantModelTest, AwqGptqRoundingKeepsTheGroupsAndFeedsTheErrorForward) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  auto nearest = CalibrateInt4(*model, Method::kAwq, kWindows, AwqRounding::kNearest);
  auto gptq = CalibrateInt4(*model, Method::kAwq, kWindows, AwqRounding::kGptq);
  ASSERT_TRUE(nearest.ok() && gptq.ok());
  EXPECT_EQ(gptq->folded, nearest->folded);
  EXPECT_EQ(gptq->error, nearest->error);     // the scale search's, the same for both
  constexpr size_t kBlock = 68, kHeader = 4;  // int4_g128: f16 scale, zero, pad, 64 nibble bytes
  ASSERT_EQ(gptq->blocks.size(), nearest->blocks.size());
  int64_t blocks = 0, changed = 0;
  for (const auto& [name, want] : nearest->blocks) {
    const std::vector<uint8_t>& got = gptq->blocks.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t b = 0; b < got.size(); b += kBlock, ++blocks) {
      EXPECT_EQ(std::memcmp(got.data() + b, want.data() + b, kHeader), 0) << name << " @" << b;
      changed +=
          std::memcmp(got.data() + b + kHeader, want.data() + b + kHeader, kBlock - kHeader) != 0;
    }
  }
  std::printf("[ awq gptq rounding ] %lld of %lld groups' integers changed\n",
              static_cast<long long>(changed), static_cast<long long>(blocks));
  EXPECT_GT(changed, blocks / 2);

  auto layers = FloatLayers(*model);
  ASSERT_TRUE(layers.ok()) << layers.status();
  NoObserver none;
  auto want = RunCalibrationForward(*model, kWindows, *layers, none);
  ASSERT_TRUE(want.ok()) << want.status();
  double error[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const CalibratedInt4& c = i == 0 ? *nearest : *gptq;
    TempDir dir;
    ASSERT_TRUE(WriteHfQuantized(*model, Method::kAwq, c, dir.path()).ok());
    auto q = LoadModel(dir.path());
    ASSERT_TRUE(q.ok()) << q.status();
    const std::vector<float> got = DequantizedLogits(*q);
    ASSERT_EQ(got.size(), want->size());
    for (size_t j = 0; j < got.size(); ++j) {
      const double d = static_cast<double>(got[j]) - (*want)[j];
      error[i] += d * d;
    }
  }
  std::printf(
      "[ awq gptq rounding ] squared logit error on the calibration tokens %.4g, "
      "nearest %.4g\n",
      error[1], error[0]);
  EXPECT_LT(error[1], error[0]);
}

// `quantize --type q4_0 --calibration`: GPTQ's q4_0 rows for the seven projections of
// each layer and the weighted rows of the tied embedding (the LM head), stored byte for
// byte in the GGUF, q/k rows reordered for RoPE as the values would be.
TEST_F(HfQuantModelTest, CalibratedQ4_0GgufStoresTheCalibratedBlocks) {
  auto model = LoadModel(kTinyStories);
  ASSERT_TRUE(model.ok()) << model.status();
  auto calibrated = CalibrateQ4_0(*model, kWindows);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_EQ(calibrated->tokens, 38);
  EXPECT_EQ(calibrated->blocks.size(), 7 * model->tensors.layers.size() + 1);
  EXPECT_TRUE(calibrated->blocks.contains(model->tensors.embed.name));
  std::printf("[ q4_0 calibrated ] output error %.4g, reference encoder %.4g (%.1f%%)\n",
              calibrated->error, calibrated->rtn_error,
              100 * calibrated->error / calibrated->rtn_error);
  EXPECT_LT(calibrated->error, calibrated->rtn_error);
  GgufWriter w;
  ASSERT_TRUE(
      AddModelToGguf(*model, *ParseGgufWeightType("q4_0"), "t", &w, &calibrated->blocks).ok());
  const std::string path = dir_.path() + "/calibrated.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto q = LoadModel(path);
  ASSERT_TRUE(q.ok()) << q.status();
  auto same = [](const Tensor& t, const std::vector<uint8_t>& want) {
    return t.nbytes == want.size() && std::memcmp(t.data, want.data(), want.size()) == 0;
  };
  const LayerTensors& hf = model->tensors.layers[1];
  EXPECT_TRUE(same(q->tensors.layers[1].wv, calibrated->blocks.at(hf.wv.name)));
  EXPECT_TRUE(same(q->tensors.layers[1].w_down, calibrated->blocks.at(hf.w_down.name)));
  EXPECT_TRUE(same(q->tensors.embed, calibrated->blocks.at(model->tensors.embed.name)));
  // q_proj: GGUF row h * D + 2i + j is Hugging Face row h * D + i + j * D / 2.
  const std::vector<uint8_t>& wq = calibrated->blocks.at(hf.wq.name);
  const Tensor& gq = q->tensors.layers[1].wq;
  const int64_t d = model->config.head_dim, row_bytes = 4 * 18;  // 128 inputs: 4 blocks
  ASSERT_EQ(gq.nbytes, wq.size());
  for (int64_t h = 0; h < model->config.num_heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t j : {0, 1}) {
        EXPECT_EQ(
            std::memcmp(static_cast<const uint8_t*>(gq.data) + (h * d + 2 * i + j) * row_bytes,
                        wq.data() + (h * d + i + j * d / 2) * row_bytes, row_bytes),
            0)
            << "head " << h << " row " << i << "." << j;
      }
    }
  }
  // Calibrated rows of the wrong size are refused by name.
  std::map<std::string, std::vector<uint8_t>> bad = calibrated->blocks;
  bad[hf.wv.name].pop_back();
  GgufWriter w2;
  const absl::Status s = AddModelToGguf(*model, *ParseGgufWeightType("q4_0"), "t", &w2, &bad);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.layers.1.self_attn.v_proj.weight': 4607 "
                                     "calibrated bytes for 64 rows of 72"));
}

// The same on a synthetic bf16 model of another shape (hidden 256, two groups per row,
// head_dim 64, two query heads per kv head), which needs no shared model: the calibration
// forward matches the CPU backend, and both methods' checkpoints (AWQ's folded norms
// rounded to bf16) give the logits of their dequantized blocks.
TEST(HfQuantSyntheticTest, CalibratedCheckpointsOfABf16ModelLoadExactly) {
  auto spec = SyntheticPreset("gqa2");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->config.hidden_size = 256;
  spec->config.intermediate_size = 512;
  spec->config.num_heads = 4;
  spec->config.num_kv_heads = 2;
  spec->config.head_dim = 64;
  spec->config.num_layers = 2;
  TempDir src;
  ASSERT_TRUE(WriteSyntheticModel(src.path(), *spec, 7, DType::kBF16).ok());
  auto model = LoadModel(src.path());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::vector<int32_t>> windows(3);
  for (int w = 0; w < 3; ++w) {
    for (int t = 0; t < 40; ++t) {
      windows[w].push_back(static_cast<int32_t>((w * 131 + t * 37) % spec->config.vocab_size));
    }
  }
  auto layers = FloatLayers(*model);
  ASSERT_TRUE(layers.ok()) << layers.status();
  NoObserver none;
  auto logits = RunCalibrationForward(*model, windows, *layers, none);
  ASSERT_TRUE(logits.ok()) << logits.status();
  // The calibration forward sums in f32: the CPU backend's 40-row bf16 prefill too, below
  // AVX512-BF16 (whose dot products round x to bf16, engine/cpu/gemm_bf16.h).
  ASSERT_TRUE(cpu::SetGemmIsa(std::min(cpu::DetectIsa(), cpu::Isa::kAvx512Vnni)));
  const std::vector<float> ref = GreedyLogits(*model, windows[2], 0).at(0);
  ASSERT_TRUE(cpu::SetGemmIsa(cpu::DetectIsa()));
  const int64_t vocab = spec->config.vocab_size;
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>((*logits)[2 * vocab + i]) - ref[i]));
    mag = std::max(mag, std::abs(static_cast<double>(ref[i])));
  }
  EXPECT_LE(diff, 1e-4 * mag);

  for (Method method : {Method::kAwq, Method::kGptq}) {
    SCOPED_TRACE(std::string(HfQuantMethodName(method)));
    auto calibrated = CalibrateInt4(*model, method, windows);
    ASSERT_TRUE(calibrated.ok()) << calibrated.status();
    EXPECT_LE(calibrated->error, calibrated->rtn_error);
    TempDir dir;
    ASSERT_TRUE(WriteHfQuantized(*model, method, *calibrated, dir.path()).ok());
    auto q = LoadModel(dir.path());
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->tensors.layers[0].mlp_norm.dtype, DType::kBF16);
    const std::vector<int32_t> prompt = {1, 20, 30, 40};
    const auto got = GreedyLogits(*q, prompt, 3);
    const auto want = GreedyLogits(ptxserve::testing::DequantizedModel(*q), prompt, 3);
    const std::vector<double> diffs = RelativeLogitDiffs(got, want);
    for (size_t s = 0; s < diffs.size(); ++s) EXPECT_LE(diffs[s], 1e-6) << "step " << s;
  }
}

}  // namespace
}  // namespace ptxserve
