// `quantize --type q4_k` writes llama.cpp's Q4_K_M mix: the GGUF read back holds q6_k
// exactly where llama.cpp's rules put it (the LM head or the tied embedding; attn_v and
// ffn_down in the layers it gives more bits), q4_k for the other matrices, f32 norms, and
// the CPU backend serves the mix with the logits of the same model dequantized to f32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A random Llama model whose every matrix row is whole 256-element super-blocks.
ptxserve::testing::RandomModelSpec WideSpec(int64_t layers, bool tied) {
  ptxserve::testing::RandomModelSpec spec;
  spec.hidden = 256;
  spec.intermediate = 512;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.layers = layers;
  spec.tied = tied;
  return spec;
}

std::string WriteQ4K(const Model& m, const TempDir& dir) {
  GgufWriter w;
  const absl::Status s = AddModelToGguf(m, *ParseGgufWeightType("q4_k"), "mix", &w);
  EXPECT_TRUE(s.ok()) << s;
  const std::string path = dir.path() + "/mix.gguf";
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

// Each tensor's GGML type name as the file holds it.
std::map<std::string, std::string> TensorTypes(const std::string& path) {
  auto f = GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  std::map<std::string, std::string> types;
  if (!f.ok()) return types;
  EXPECT_EQ(*(*f)->GetInt("general.file_type"), 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  for (const GgufTensorInfo& t : (*f)->tensors()) {
    std::string name = t.ggml_type == kGgmlF32 ? "f32" : "other";
    for (const QuantLayout& l : kQuantLayouts) {
      if (l.type != QuantType::kNone && l.ggml_type == t.ggml_type) name = std::string(l.name);
    }
    types[t.name] = name;
  }
  return types;
}

struct MixCase {
  int64_t layers;
  bool tied;
  // The layers whose attn_v and ffn_down are q6_k, worked out by hand from llama.cpp's
  // use_more_bits(i, n): i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2 (integer division).
  std::set<int64_t> more_bits;
};

void PrintTo(const MixCase& mc, std::ostream* os) {
  *os << mc.layers << (mc.tied ? " layers, tied" : " layers, untied");
}

class Q4KMixTest : public ::testing::TestWithParam<MixCase> {};

TEST_P(Q4KMixTest, TensorTypesFollowLlamaCppsQ4KMRules) {
  const MixCase& mc = GetParam();
  const Model m = ptxserve::testing::MakeRandomModel(WideSpec(mc.layers, mc.tied));
  TempDir dir;
  const std::map<std::string, std::string> types = TensorTypes(WriteQ4K(m, dir));
  int q6_k = 0;
  for (const auto& [name, type] : types) {
    std::string want = "q4_k";
    if (name.ends_with("norm.weight")) {
      want = "f32";
    } else if (name == "output.weight" || (mc.tied && name == "token_embd.weight")) {
      want = "q6_k";
    } else if (name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight")) {
      const int64_t layer = std::stoll(name.substr(4, name.find('.', 4) - 4));
      if (mc.more_bits.contains(layer)) want = "q6_k";
    }
    EXPECT_EQ(type, want) << name;
    q6_k += type == "q6_k";
  }
  EXPECT_EQ(types.contains("output.weight"), !mc.tied);
  EXPECT_EQ(types.size(), static_cast<size_t>(2 + !mc.tied + 9 * mc.layers));
  EXPECT_EQ(q6_k, 1 + 2 * static_cast<int>(mc.more_bits.size()));
  std::printf("[ q4_k mix ] %lld layers, %s: %d of %lld matrices q6_k\n",
              static_cast<long long>(mc.layers), mc.tied ? "tied" : "untied", q6_k,
              static_cast<long long>(1 + !mc.tied + 7 * mc.layers));
}

INSTANTIATE_TEST_SUITE_P(
    Layers, Q4KMixTest,
    ::testing::Values(MixCase{2, true, {1}},  // TinyStories' depth
                      MixCase{8, false, {0, 3, 6, 7}},
                      // Llama-3.2-1B's depth and tied head: 17 q6_k matrices.
                      MixCase{16, true, {0, 1, 4, 7, 10, 13, 14, 15}},
                      MixCase{
                          32, false, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}}),
    [](const ::testing::TestParamInfo<MixCase>& info) {
      return absl::StrCat(info.param.layers, info.param.tied ? "LayersTied" : "LayersUntied");
    });

// The mix loaded and run on the CPU backend against the same model dequantized to f32:
// within the rounding its integer GEMMs add (each activation block rounded to int8, at most
// 1/254 of its largest magnitude; 4 L + 1 GEMMs lie on the way to the logits), the bound
// gguf_model_test.cc holds q8_0 and q4_0 to.
TEST(Q4KMixLogitsTest, TheMixGivesTheDequantizedModelsLogits) {
  for (const auto& [layers, tied] : {std::pair{int64_t{2}, true}, {int64_t{8}, false}}) {
    SCOPED_TRACE(absl::StrCat(layers, tied ? " layers, tied" : " layers, untied"));
    const Model m = ptxserve::testing::MakeRandomModel(WideSpec(layers, tied));
    TempDir dir;
    auto gguf = LoadModel(WriteQ4K(m, dir));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_EQ(gguf->tensors.layers[0].wq.quant, QuantType::kQ4_K);
    EXPECT_EQ(gguf->tensors.layers[layers - 1].wv.quant, QuantType::kQ6_K);
    EXPECT_EQ(gguf->tensors.layers[layers - 1].w_down.quant, QuantType::kQ6_K);
    EXPECT_EQ((tied ? gguf->tensors.embed : gguf->tensors.lm_head).quant, QuantType::kQ6_K);
    const Model reference = ptxserve::testing::DequantizedModel(*gguf);
    const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
    const auto got = GreedyLogits(*gguf, prompt, 5);
    const auto want = GreedyLogits(reference, prompt, 5);
    const double tolerance = (4.0 * layers + 1) / 254;
    const std::vector<double> diffs = RelativeLogitDiffs(got, want);
    for (size_t s = 0; s < diffs.size(); ++s) {
      EXPECT_LE(diffs[s], tolerance) << "step " << s;
      std::printf(
          "[ q4_k mix, %lld layers ] step %zu: logits off by %.2e of the largest "
          "(tolerance %.2e)\n",
          static_cast<long long>(layers), s, diffs[s], tolerance);
    }
  }
}

}  // namespace
}  // namespace ptxserve
