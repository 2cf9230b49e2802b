// GGUF models end to end: the writer's files read back, and the shared TinyStories model
// converted to GGUF (rows permuted for interleaved RoPE) computing the same logits on the
// CPU backend as the safetensors original.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/kv_block_manager.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"
#include "tests/model/cpu_logits.h"
#include "tests/model/test_files.h"

namespace ptxserve {
namespace {

using test_files::GreedyLogits;
using test_files::RelativeLogitDiffs;
using test_files::TempDir;
using ::testing::HasSubstr;

const std::string kTinyStories = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";

TEST(GgufWriterTest, RoundTripsMetadataAndTensors) {
  GgufWriter w;
  w.Set("u32", GgufValue::U32(7));
  w.Set("i32", GgufValue::I32(-7));
  w.Set("u64", GgufValue::U64(uint64_t{1} << 50));
  w.Set("f32", GgufValue::F32(1.5f));
  w.Set("bool", GgufValue::Bool(true));
  w.Set("str", GgufValue::String("llama"));
  w.Set("strs", GgufValue::StringArray({"a", "", "\xE2\x96\x81x"}));
  w.Set("nums", GgufValue::Array(GgufType::kF32, {GgufValue::F32(-1), GgufValue::F32(2.5f)}));
  w.Set("u32", GgufValue::U32(8));  // replaces
  std::vector<uint8_t> f32(6 * 4);
  for (int i = 0; i < 6; ++i) {
    const float v = static_cast<float>(i) - 2.5f;
    std::memcpy(f32.data() + 4 * i, &v, 4);
  }
  w.AddTensor("a", kGgmlF32, {3, 2}, f32);
  w.AddTensor("q", LayoutOf(QuantType::kQ8_0).ggml_type, {64, 1}, std::vector<uint8_t>(68, 1));
  w.AddTensor("h", kGgmlF16, {5}, std::vector<uint8_t>(10, 0));
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto f = GgufFile::FromBytes(*bytes, "w.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), 8u);
  EXPECT_EQ(*g.GetInt("u32"), 8);
  EXPECT_EQ(*g.GetInt("i32"), -7);
  EXPECT_EQ(*g.GetInt("u64"), int64_t{1} << 50);
  EXPECT_EQ(*g.GetFloat("f32"), 1.5);
  EXPECT_TRUE(*g.GetBool("bool"));
  EXPECT_EQ(*g.GetString("str"), "llama");
  EXPECT_EQ(*g.GetStringArray("strs"), (std::vector<std::string>{"a", "", "\xE2\x96\x81x"}));
  EXPECT_EQ(*g.GetNumberArray("nums"), (std::vector<double>{-1, 2.5}));
  ASSERT_EQ(g.tensors().size(), 3u);
  for (const GgufTensorInfo& t : g.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  auto a = g.GetTensor("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a->data, f32.data(), f32.size()), 0);
  auto q = g.GetTensor("q");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->quant, QuantType::kQ8_0);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{1, 64}));
}

TEST(GgufWriterTest, RefusesDataThatDoesNotMatchTheShape) {
  GgufWriter w;
  w.AddTensor("a", kGgmlF32, {3}, std::vector<uint8_t>(8));
  EXPECT_THAT(w.Serialize().status().message(), HasSubstr("tensor 'a': 8 bytes do not hold 3 f32"));
}

TEST(GgufExportTest, PermutesRowsToInterleavedOrderPerHead) {
  // 2 heads of head_dim 4, one element per row: rows 0..7.
  const std::vector<float> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(PermuteRopeRows(rows, 2, 4, 1), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
}

// The GGUF model's logits against the original's, step by step. Not bit-exact: the
// permuted q/k rows give the same scores mathematically, but the CPU attention's SIMD dot
// product (engine/cpu/attention.cc, simd::Dot over head_dim) groups its partial sums by
// element position, so a different element order rounds differently — by about 1 ulp per
// score, which the later layers carry to ~3e-7 of the largest logit (measured). The
// tolerance is 2e-6 of the largest logit, and the greedy tokens must be the same.
void ExpectSameLogits(const std::vector<std::vector<float>>& got,
                      const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    ASSERT_EQ(got[s].size(), want[s].size());
    double diff = 0, mag = 0;
    for (size_t i = 0; i < want[s].size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(got[s][i]) - want[s][i]));
      mag = std::max(mag, std::abs(static_cast<double>(want[s][i])));
    }
    EXPECT_LT(diff / mag, 2e-6) << "step " << s;
    EXPECT_EQ(std::max_element(got[s].begin(), got[s].end()) - got[s].begin(),
              std::max_element(want[s].begin(), want[s].end()) - want[s].begin())
        << "step " << s;
    ::testing::Test::RecordProperty(absl::StrCat("max_rel_diff_step", s), absl::StrCat(diff / mag));
  }
}

const std::vector<int32_t> kPrompt = {1, 80, 147, 201, 282, 57};  // <bos> Once upon a time

std::string ExportTinyStories(const TempDir& dir, const std::string& type_name) {
  auto model = LoadModel(kTinyStories);
  EXPECT_TRUE(model.ok()) << model.status();
  GgufWriter w;
  const auto type = ParseGgufWeightType(type_name);
  EXPECT_TRUE(type.has_value());
  const absl::Status s = AddModelToGguf(*model, *type, "tinystories", &w);
  EXPECT_TRUE(s.ok()) << s;
  const std::string path = dir.path() + "/tiny-" + type_name + ".gguf";
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

class TinyStoriesGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTinyStories + "/model.safetensors")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStories;
    }
  }
};

TEST_F(TinyStoriesGgufTest, F32GgufGivesTheSafetensorsLogits) {
  TempDir dir;
  auto hf = LoadModel(kTinyStories);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto gguf = LoadModel(ExportTinyStories(dir, "f32"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const ModelConfig& c = gguf->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, hf->config.vocab_size);
  EXPECT_EQ(c.num_kv_heads, hf->config.num_kv_heads);
  EXPECT_EQ(c.head_dim, hf->config.head_dim);
  EXPECT_EQ(c.rms_norm_eps, static_cast<float>(hf->config.rms_norm_eps));
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(gguf->tensors.layers[1].wq.name, "blk.1.attn_q.weight");
  ExpectSameLogits(GreedyLogits(*gguf, kPrompt, 6), GreedyLogits(*hf, kPrompt, 6));
}

// The f16 GGUF against the same model with its matrices rounded to f16 in memory (norms
// stay f32 in both, as GGUF keeps them). TinyStories' f32 weights happen to be exact in
// f16, so this also pins the f16 path to the f32 logits.
TEST_F(TinyStoriesGgufTest, F16GgufMatchesAnF16CopyOfTheModel) {
  TempDir dir;
  auto hf = LoadModel(kTinyStories);
  ASSERT_TRUE(hf.ok()) << hf.status();
  const Model half = ptxserve::testing::ConvertTensors(
      *hf, /*vectors_too=*/false, [](Tensor& t, std::vector<uint8_t>& bytes) {
        std::vector<float> f(static_cast<size_t>(t.numel()));
        ConvertToFloat(t.dtype, t.data, f.size(), f.data());
        bytes.resize(f.size() * 2);
        ConvertFromFloat(DType::kF16, f.data(), f.size(), bytes.data());
        t.dtype = DType::kF16;
      });
  auto gguf = LoadModel(ExportTinyStories(dir, "f16"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ(gguf->tensors.embed.dtype, DType::kF16);
  EXPECT_EQ(gguf->tensors.final_norm.dtype, DType::kF32);
  ExpectSameLogits(GreedyLogits(*gguf, kPrompt, 6), GreedyLogits(half, kPrompt, 6));
}

// What TinyStories lacks: q/k/v biases (permuted with their rows), an untied head, GQA
// groups of 2, head_dim 32, linear RoPE scaling, bf16 tensors written as bf16.
TEST(GgufRandomModelTest, BiasesUntiedHeadAndScalingSurviveTheRoundTrip) {
  ptxserve::testing::RandomModelSpec spec;
  spec.attention_bias = true;
  spec.dtype = DType::kBF16;
  spec.rope_scaling.type = RopeScaling::Type::kLinear;
  spec.rope_scaling.factor = 2.0;
  const Model hf = ptxserve::testing::MakeRandomModel(spec);
  GgufWriter w;
  ASSERT_TRUE(AddModelToGguf(hf, *ParseGgufWeightType("bf16"), "random", &w).ok());
  TempDir dir;
  const std::string path = dir.path() + "/random.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto gguf = LoadModel(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_TRUE(gguf->config.attention_bias);
  EXPECT_FALSE(gguf->config.tie_word_embeddings);
  EXPECT_EQ(gguf->config.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(gguf->config.rope_scaling.factor, 2.0);
  EXPECT_EQ(gguf->tensors.lm_head.name, "output.weight");
  EXPECT_EQ(gguf->tensors.layers[1].bk.name, "blk.1.attn_k.bias");
  EXPECT_EQ(gguf->tensors.layers[0].wq.dtype, DType::kBF16);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
  ExpectSameLogits(GreedyLogits(*gguf, prompt, 5), GreedyLogits(hf, prompt, 5));
}

// Llama 3.1's RoPE scaling goes out and comes back as llama.cpp's rope_freqs.weight: one
// divisor per frequency (the unscaled frequency over the scaled one, rounded to f32).
TEST(GgufRandomModelTest, Llama3ScalingTravelsAsPerFrequencyFactors) {
  ptxserve::testing::RandomModelSpec spec;
  spec.rope_scaling.type = RopeScaling::Type::kLlama3;
  spec.rope_scaling.factor = 8;
  spec.rope_scaling.original_max_position_embeddings = 64;
  const Model hf = ptxserve::testing::MakeRandomModel(spec);
  GgufWriter w;
  ASSERT_TRUE(AddModelToGguf(hf, *ParseGgufWeightType("f32"), "llama3", &w).ok());
  TempDir dir;
  const std::string path = dir.path() + "/llama3.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto gguf = LoadModel(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const RopeScaling& rs = gguf->config.rope_scaling;
  ASSERT_EQ(rs.type, RopeScaling::Type::kFactors);
  ASSERT_EQ(rs.factors.size(), static_cast<size_t>(spec.head_dim / 2));
  EXPECT_FLOAT_EQ(rs.factors.front(), 1.0f);  // the highest frequency is kept
  EXPECT_FLOAT_EQ(rs.factors.back(), 8.0f);   // the lowest is slowed by `factor`
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
  ExpectSameLogits(GreedyLogits(*gguf, prompt, 5), GreedyLogits(hf, prompt, 5));
  // Written again from the loaded model, the factors are copied as they are.
  GgufWriter again;
  ASSERT_TRUE(AddModelToGguf(*gguf, *ParseGgufWeightType("f32"), "llama3", &again).ok());
  ASSERT_TRUE(again.Write(dir.path() + "/again.gguf").ok());
  auto reloaded = LoadModel(dir.path() + "/again.gguf");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->config.rope_scaling.factors, rs.factors);
}

// `quantize --type q8_0|q4_0` then load: the CPU backend serves the blocks as stored and
// gives the logits of the same model dequantized to f32, within the rounding its integer
// GEMM adds (engine/cpu/ops.h: each activation block rounded to int8, at most 1/254 of its
// largest magnitude, so a GEMM's output is off by about 1/254 of its norm; 4 L + 1 such
// GEMMs lie on the way to the logits, L = 2 layers here).
TEST_F(TinyStoriesGgufTest, QuantizedGgufGivesTheDequantizedModelsLogits) {
  for (const char* type : {"q8_0", "q4_0"}) {
    SCOPED_TRACE(type);
    TempDir dir;
    auto gguf = LoadModel(ExportTinyStories(dir, type));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_EQ(gguf->tensors.layers[0].wq.quant, ParseGgufWeightType(type)->quant);
    const Model reference = ptxserve::testing::DequantizedModel(*gguf);
    const auto got = GreedyLogits(*gguf, kPrompt, 6);
    const auto want = GreedyLogits(reference, kPrompt, 6);
    const double tolerance = (4.0 * gguf->config.num_layers + 1) / 254;
    const std::vector<double> diffs = RelativeLogitDiffs(got, want);
    for (size_t s = 0; s < diffs.size(); ++s) {
      EXPECT_LE(diffs[s], tolerance) << "step " << s;
      std::printf("[ %s ] step %zu: logits off by %.2e of the largest (tolerance %.2e)\n", type, s,
                  diffs[s], tolerance);
    }
  }
  // q4_k's 256-element blocks do not divide TinyStories' 128-wide rows.
  auto hf = LoadModel(kTinyStories);
  ASSERT_TRUE(hf.ok());
  GgufWriter w;
  const absl::Status k = AddModelToGguf(*hf, *ParseGgufWeightType("q4_k"), "t", &w);
  EXPECT_THAT(k.message(), HasSubstr("rows of 128 elements are not whole q4_k blocks of 256"));
}

// A TinyStories GGUF in f32 with `edit` applied to the writer before writing.
template <typename Edit>
absl::StatusOr<Model> LoadEdited(const TempDir& dir, Edit edit) {
  auto hf = LoadModel(kTinyStories);
  if (!hf.ok()) return hf.status();
  GgufWriter w;
  if (absl::Status s = AddModelToGguf(*hf, *ParseGgufWeightType("f32"), "t", &w); !s.ok()) return s;
  edit(w);
  const std::string path = dir.path() + "/edited.gguf";
  if (absl::Status s = w.Write(path); !s.ok()) return s;
  return LoadModel(path);
}

TEST_F(TinyStoriesGgufTest, QuantizedMatricesWrittenByHandLoadAndServeOnTheCpu) {
  TempDir dir;
  auto m = LoadEdited(dir, [](GgufWriter& w) {
    // blk.0.attn_q.weight: [128, 128] as q8_0, 4 blocks of 34 bytes per row.
    w.AddTensor("blk.0.attn_q.weight", LayoutOf(QuantType::kQ8_0).ggml_type, {128, 128},
                std::vector<uint8_t>(128 * 4 * 34));
  });
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tensors.layers[0].wq.quant, QuantType::kQ8_0);
  auto backend = CpuBackend::Create(*m, {64, 16, DType::kF32});
  EXPECT_TRUE(backend.ok()) << backend.status();
}

TEST_F(TinyStoriesGgufTest, QuantizedNormIsRefused) {
  TempDir dir;
  auto m = LoadEdited(dir, [](GgufWriter& w) {
    w.AddTensor("blk.1.ffn_norm.weight", LayoutOf(QuantType::kQ8_0).ggml_type, {128},
                std::vector<uint8_t>(4 * 34));
  });
  EXPECT_THAT(m.status().message(),
              HasSubstr("tensor 'blk.1.ffn_norm.weight' is q8_0; norms and biases must be f32, "
                        "f16 or bf16"));
}

TEST_F(TinyStoriesGgufTest, ShapeErrorsAreTheSafetensorsOnes) {
  TempDir dir;
  auto m = LoadEdited(dir, [](GgufWriter& w) {
    w.AddTensor("blk.0.ffn_up.weight", kGgmlF32, {128, 100}, std::vector<uint8_t>(128 * 100 * 4));
  });
  EXPECT_THAT(m.status().message(),
              HasSubstr("tensor 'blk.0.ffn_up.weight' has shape [100, 128], expected [384, 128] "
                        "([intermediate_size, hidden_size] from "));
}

TEST_F(TinyStoriesGgufTest, OtherArchitecturesAreRefusedByName) {
  TempDir dir;
  auto m = LoadEdited(
      dir, [](GgufWriter& w) { w.Set("general.architecture", GgufValue::String("qwen2")); });
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(), HasSubstr("general.architecture is 'qwen2'"));
}

TEST_F(TinyStoriesGgufTest, AnyRegularFileIsReadAsGguf) {
  TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  std::filesystem::rename(ExportTinyStories(dir, "f32"), path);
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.rope_style, RopeStyle::kInterleaved);
  const std::string config = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k/config.json";
  EXPECT_THAT(LoadModel(config).status().message(),
              HasSubstr(config + ": byte offset 0: bad magic: not a GGUF file"));
}

TEST_F(TinyStoriesGgufTest, MissingTensorIsNamed) {
  TempDir dir;
  auto m = LoadEdited(dir, [](GgufWriter& w) { w.Set("llama.block_count", GgufValue::U32(3)); });
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("tensor 'blk.2.attn_norm.weight' not found"));
}

}  // namespace
}  // namespace ptxserve
