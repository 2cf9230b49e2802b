// q4_k's row of the perplexity table (README "perplexity"): TinyStories' rows (128 and 384
// wide) are not whole 256-element super-blocks, so the test model is zero-padded to rows of
// 512 and 256 that compute the same function bit for bit (padded_model.h), its perplexity in
// f32, q8_0 and q4_0 checked against the original's, then `ptxserve quantize --type q4_k`
// (llama.cpp's Q4_K_M mix) and `ptxserve perplexity` run on it as cli_test.cc runs the other
// rows: same text, same printout.
#include <cstdio>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "tests/cli/cli_run.h"
#include "tests/cli/padded_model.h"

namespace ptxserve {
namespace {

using cli_test::CliRun;
using cli_test::kTinyStories;
using cli_test::Perplexity;
using cli_test::RunPtxserve;

// TinyStories (hidden 128, 8 query heads and 4 kv heads of 16, intermediate 384) with every
// row whole super-blocks: hidden 512 (4x, so the norm weights scale by exactly 1/2), 16 and
// 8 heads of 16 (o_proj's rows of 256), intermediate 512.
constexpr cli_test::PaddedSizes kPadded = {512, 16, 8, 512};

TEST(CliQ4kTest, PerplexityOfTheZeroPaddedModelInQ4K) {
  if (!std::filesystem::exists(kTinyStories + "/model.safetensors")) {
    GTEST_SKIP() << "shared test model absent";
  }
  const std::string text = std::string(PTXSERVE_SOURCE_DIR) + "/tests/cli/story.txt";
  const auto base = std::filesystem::temp_directory_path() / "ptxserve-cli-q4k";
  std::filesystem::remove_all(base);
  const std::string padded = (base / "tinystories-padded").string();
  const absl::Status s = cli_test::WriteZeroPaddedModel(kTinyStories, padded, kPadded);
  ASSERT_TRUE(s.ok()) << s;
  const double f32 = Perplexity("--model " + kTinyStories + " --text " + text);
  auto print = [&](const std::string& name, double ppl) {
    std::printf("[ perplexity ] %s: %.4f (f32 %.4f, %+.2f%%)\n", name.c_str(), ppl, f32,
                100 * (ppl / f32 - 1));
  };
  // The padded model is the same function, bit for bit: its f32 perplexity is the original's.
  const double padded_f32 = Perplexity("--model " + padded + " --text " + text);
  print("f32 (padded)", padded_f32);
  EXPECT_EQ(padded_f32, f32);
  // q8_0 and q4_0, whose 32-element blocks never straddle the padding, encode the padded
  // model as the original's blocks plus all-zero ones: the same perplexity.
  double padded_q4_0 = 0;
  for (const std::string type : {"q8_0", "q4_0"}) {
    double ppl[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const std::string model = i == 0 ? kTinyStories : padded;
      const std::string gguf = (base / (type + (i == 0 ? ".gguf" : "-padded.gguf"))).string();
      const CliRun q =
          RunPtxserve("quantize --model " + model + " --out " + gguf + " --type " + type);
      ASSERT_EQ(q.exit_code, 0) << q.err;
      ppl[i] = Perplexity("--model " + gguf + " --text " + text);
    }
    char unpadded[64];
    std::snprintf(unpadded, sizeof unpadded, " (padded; unpadded %.4f)", ppl[0]);
    print(type + unpadded, ppl[1]);
    EXPECT_EQ(ppl[1], ppl[0]) << type;
    if (type == "q4_0") padded_q4_0 = ppl[1];
  }
  // q4_k as `quantize` writes it: llama.cpp's Q4_K_M mix (q6_k for the tied embedding and
  // for layer 1's attn_v and ffn_down), within 5% of f32 like the other 4-bit rows
  // (README "perplexity": +3.3%, llama.cpp's own Q4_K_M file +3.1%), beating q4_0.
  const std::string gguf = (base / "q4_k-padded.gguf").string();
  const CliRun q = RunPtxserve("quantize --model " + padded + " --out " + gguf + " --type q4_k");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const double q4_k = Perplexity("--model " + gguf + " --text " + text);
  print("q4_k (padded)", q4_k);
  EXPECT_GT(q4_k, f32);
  EXPECT_LT(q4_k, 1.05 * f32);
  EXPECT_LT(q4_k, padded_q4_0);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace ptxserve
