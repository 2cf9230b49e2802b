// Hugging Face quantized checkpoints end to end: the shared TinyStories model written by
// WriteHfQuantized (what `ptxserve quantize --type fp8|awq|gptq` runs) loads back into
// fp8_e4m3 / int4_g128 blocks, gives on the CPU backend the logits of the same blocks
// dequantized to f32, and every broken part of such a checkpoint is refused by name.
// Checkpoints calibrated the AWQ and GPTQ ways: hf_quant_calibrated_model_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/hf_quant_export.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "engine/model/safetensors_writer.h"
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

TEST_F(HfQuantModelTest, QuantizedCheckpointGivesTheDequantizedModelsLogits) {
  for (Method method : {Method::kFp8, Method::kAwq, Method::kGptq}) {
    const std::string name(HfQuantMethodName(method));
    SCOPED_TRACE(name);
    TempDir dir;
    auto model = LoadModel(kTinyStories);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(WriteHfQuantized(*model, method, dir.path()).ok());
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/tokenizer.json"));
    auto q = LoadModel(dir.path());
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->config.quantization.method, method);
    const QuantType want = method == Method::kFp8 ? QuantType::kFp8E4M3 : QuantType::kInt4G128;
    for (const LayerTensors& l : q->tensors.layers) {
      for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        EXPECT_EQ(t->quant, want) << t->name;
      }
    }
    EXPECT_EQ(q->tensors.embed.quant, QuantType::kNone);
    EXPECT_EQ(q->tensors.layers[1].w_down.name, "model.layers.1.mlp.down_proj.weight");
    EXPECT_EQ(q->WeightFormat(), QuantName(want));

    // The CPU GEMM widens rows exactly, so the logits are the f32 model's over the same
    // dequantized weights up to float rounding (measured: identical).
    const auto got = GreedyLogits(*q, kPrompt, 6);
    const auto ref = GreedyLogits(ptxserve::testing::DequantizedModel(*q), kPrompt, 6);
    const std::vector<double> diffs = RelativeLogitDiffs(got, ref);
    for (size_t s = 0; s < diffs.size(); ++s) {
      EXPECT_LE(diffs[s], 1e-6) << "step " << s;
      std::printf("[ %s ] step %zu: logits off by %.2e of the largest\n", name.c_str(), s,
                  diffs[s]);
    }
  }
}

// Rewrites dir/model.safetensors after `edit` changed its tensors (found by name).
struct Checkpoint {
  std::vector<TensorToWrite> tensors;
  TensorToWrite& operator[](const std::string& name) {
    auto it = std::find_if(tensors.begin(), tensors.end(),
                           [&](const TensorToWrite& t) { return t.name == name; });
    if (it != tensors.end()) return *it;
    ADD_FAILURE() << "no tensor " << name;
    static TensorToWrite none;
    return none;
  }
  void Remove(const std::string& name) {
    std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == name; });
  }
};

absl::Status LoadEdited(const std::string& dir, const std::function<void(Checkpoint&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  Checkpoint c;
  {
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) return f.status();
    for (const SafetensorsEntry& e : (*f)->entries()) {
      TensorToWrite t;
      t.name = e.name;
      t.raw_dtype = e.dtype;
      t.raw_element_size = SafetensorsDTypeSize(e.dtype);
      t.shape = e.shape;
      const uint8_t* p = (*f)->DataOf(e);
      t.bytes.assign(p, p + (e.end - e.begin));
      c.tensors.push_back(std::move(t));
    }
  }
  edit(c);
  if (absl::Status s = WriteSafetensors(path, c.tensors, {}); !s.ok()) return s;
  return LoadModel(dir).status();
}

void SetFloats(TensorToWrite& t, std::vector<int64_t> shape, const std::vector<float>& v) {
  t.shape = std::move(shape);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
}

const std::string kQ = "model.layers.0.self_attn.q_proj";

TEST_F(HfQuantModelTest, AwqPartsOfTheWrongShapeOrDtypeAreRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(Checkpoint&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"scales shape",
       [](Checkpoint& c) {
         c[kQ + ".scales"].shape = {1, 64};
         c[kQ + ".scales"].bytes.resize(128);
       },
       "tensor 'model.layers.0.self_attn.q_proj.scales' has shape [1, 64], expected [1, 128]"},
      {"scales dtype", [](Checkpoint& c) { c[kQ + ".scales"].raw_dtype = "BF16"; },
       "q_proj.scales' has dtype BF16, expected F16"},
      {"qweight dtype", [](Checkpoint& c) { c[kQ + ".qweight"].raw_dtype = "F32"; },
       "q_proj.qweight' is F32 [128, 16], expected a 2-D I32 tensor"},
      {"qweight not whole groups",
       [](Checkpoint& c) {
         c[kQ + ".qweight"].shape = {64, 32};
       },
       "packs 64 inputs, not a multiple of group_size 128"},
      {"qzeros missing", [](Checkpoint& c) { c.Remove(kQ + ".qzeros"); },
       "tensor 'model.layers.0.self_attn.q_proj.qzeros' not found"},
      {"qweight against the config",
       [](Checkpoint& c) {
         c[kQ + ".qweight"].shape = {128, 8};
         c[kQ + ".qweight"].bytes.resize(128 * 8 * 4);
         c[kQ + ".qzeros"].shape = {1, 8};
         c[kQ + ".qzeros"].bytes.resize(8 * 4);
         c[kQ + ".scales"].shape = {1, 64};
         c[kQ + ".scales"].bytes.resize(64 * 2);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight' has shape [64, 128], expected [128, 128]"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const absl::Status s = LoadEdited(Quantize(Method::kAwq), k.edit);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(k.error));
  }
}

TEST_F(HfQuantModelTest, GptqActOrderIsRefusedAndAnIdentityGIdxAccepted) {
  EXPECT_TRUE(LoadEdited(Quantize(Method::kGptq), [](Checkpoint&) {}).ok());
  const absl::Status s = LoadEdited(Quantize(Method::kGptq), [](Checkpoint& c) {
    std::vector<int32_t> g(128, 0);
    g[5] = 1;
    std::memcpy(c[kQ + ".g_idx"].bytes.data(), g.data(), 128 * 4);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_proj.g_idx' element 5 is 1, expected 0: act-order"));
}

TEST_F(HfQuantModelTest, Fp8PerChannelScalesLoadAndBadScalesAreRefused) {
  // Per output channel ([out, 1], as FBGEMM writes): row 0 scaled twice as much.
  auto per_tensor = LoadModel(Quantize(Method::kFp8));
  ASSERT_TRUE(per_tensor.ok()) << per_tensor.status();
  float scale;
  std::memcpy(&scale, per_tensor->tensors.layers[0].wq.data, 4);
  std::vector<float> rows(128, scale);
  rows[0] = 2 * scale;
  ASSERT_TRUE(LoadEdited(dir_.path(), [&](Checkpoint& c) {
                SetFloats(c[kQ + ".weight_scale"], {128, 1}, rows);
              }).ok());
  auto per_channel = LoadModel(dir_.path());
  ASSERT_TRUE(per_channel.ok());
  std::vector<float> a(128), b(128);
  const Tensor& wq0 = per_tensor->tensors.layers[0].wq;
  const Tensor& wq1 = per_channel->tensors.layers[0].wq;
  const int64_t row_bytes = QuantRowBytes(QuantType::kFp8E4M3, 128);
  for (int r = 0; r < 2; ++r) {
    DequantizeRow(QuantType::kFp8E4M3, static_cast<const uint8_t*>(wq0.data) + r * row_bytes, 128,
                  a.data());
    DequantizeRow(QuantType::kFp8E4M3, static_cast<const uint8_t*>(wq1.data) + r * row_bytes, 128,
                  b.data());
    for (int i = 0; i < 128; ++i) ASSERT_EQ(b[i], (r == 0 ? 2 : 1) * a[i]) << r << " " << i;
  }

  struct Case {
    const char* what;
    std::function<void(Checkpoint&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"tile scales without weight_block_size",
       [](Checkpoint& c) {
         SetFloats(c[kQ + ".weight_scale"], {2, 2}, {1, 1, 1, 1});
       },
       "q_proj.weight_scale' is F32 [2, 2]; an FP8 weight scale must be"},
      {"NaN scale", [](Checkpoint& c) { SetFloats(c[kQ + ".weight_scale"], {}, {NAN}); },
       "q_proj.weight_scale' element 0 is nan, not a finite scale"},
      {"scale missing", [](Checkpoint& c) { c.Remove(kQ + ".weight_scale"); },
       "tensor 'model.layers.0.self_attn.q_proj.weight_scale' not found"},
      {"E5M2 weight", [](Checkpoint& c) { c[kQ + ".weight"].raw_dtype = "F8_E5M2"; },
       "unsupported dtype F8_E5M2 for tensor 'model.layers.0.self_attn.q_proj.weight'"},
      {"rows not whole blocks",
       [](Checkpoint& c) {
         c[kQ + ".weight"].shape = {1024, 16};
       },
       "q_proj.weight' is F8_E4M3 of shape [1024, 16]; FP8 weights must be matrices whose rows"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const absl::Status s = LoadEdited(Quantize(Method::kFp8), k.edit);
    EXPECT_NE(s.code(), absl::StatusCode::kOk);
    EXPECT_THAT(s.message(), HasSubstr(k.error));
  }
}

// transformers' fine-grained FP8 (weight_block_size [128, 64] here): weight_scale_inv holds
// one scale per tile; powers of two so the expected values are exact.
TEST_F(HfQuantModelTest, Fp8TileScalesCoverTheirTiles) {
  auto per_tensor = LoadModel(Quantize(Method::kFp8));
  ASSERT_TRUE(per_tensor.ok()) << per_tensor.status();
  const std::string config_path = dir_.path() + "/config.json";
  std::ifstream in(config_path);
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  config["quantization_config"]["weight_block_size"] = {128, 64};
  std::ofstream(config_path) << config.dump();
  auto edit = [](bool wrong_shape) {
    return [wrong_shape](Checkpoint& c) {
      std::vector<TensorToWrite> inv;
      for (const TensorToWrite& t : c.tensors) {
        if (!t.name.ends_with(".weight_scale")) continue;
        const std::string weight = t.name.substr(0, t.name.size() - 6);
        const auto w = std::find_if(c.tensors.begin(), c.tensors.end(),
                                    [&](const TensorToWrite& x) { return x.name == weight; });
        float scale;
        std::memcpy(&scale, t.bytes.data(), 4);
        const int64_t rows = (w->shape[0] + 127) / 128, cols = (w->shape[1] + 63) / 64;
        const int64_t stored_cols = wrong_shape ? cols + 1 : cols;
        std::vector<float> v(rows * stored_cols);
        for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(scale, static_cast<int>(i));
        TensorToWrite& s = inv.emplace_back();
        s.name = t.name + "_inv";
        s.raw_dtype = "F32";
        s.raw_element_size = 4;
        SetFloats(s, {rows, stored_cols}, v);
      }
      std::erase_if(c.tensors,
                    [](const TensorToWrite& t) { return t.name.ends_with(".weight_scale"); });
      c.tensors.insert(c.tensors.end(), inv.begin(), inv.end());
    };
  };
  ASSERT_TRUE(LoadEdited(dir_.path(), edit(false)).ok());
  auto tiled = LoadModel(dir_.path());
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  // w_down [128, 384]: 1 x 6 tiles of 128 x 64, tile i scaled by 2^i.
  const Tensor& a = per_tensor->tensors.layers[0].w_down;
  const Tensor& b = tiled->tensors.layers[0].w_down;
  const int64_t row_bytes = QuantRowBytes(QuantType::kFp8E4M3, 384);
  std::vector<float> ra(384), rb(384);
  for (int64_t r = 0; r < 128; r += 37) {
    DequantizeRow(QuantType::kFp8E4M3, static_cast<const uint8_t*>(a.data) + r * row_bytes, 384,
                  ra.data());
    DequantizeRow(QuantType::kFp8E4M3, static_cast<const uint8_t*>(b.data) + r * row_bytes, 384,
                  rb.data());
    for (int64_t i = 0; i < 384; ++i) {
      ASSERT_EQ(rb[i], std::ldexp(ra[i], static_cast<int>(i / 64))) << r << " " << i;
    }
  }
  ASSERT_TRUE(LoadEdited(dir_.path(), [](Checkpoint& c) {
                const std::string name = kQ + ".weight_scale_inv";
                c[name].shape = {1, 3};
                c[name].bytes.resize(12);
              }).code() == absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(LoadModel(dir_.path()).status().message(),
              HasSubstr("q_proj.weight_scale_inv' is F32 [1, 3]; an FP8 weight scale must be F32, "
                        "F16 or BF16 of shape [1, 2] (one per weight_block_size tile)"));
}

}  // namespace
}  // namespace ptxserve
