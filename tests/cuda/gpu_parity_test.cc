// The GPU backend against the CPU backend: greedy tokens must be identical and logits
// within tolerance (for f16/bf16 weights at least TensorCoreLogitsTolerance), for synthetic presets
// (GQA 1/4/8, head_dim 16 (padded), 64 and 128, f32/f16/bf16 weights and KV caches), single prompts
// and staggered batches with chunked prefill, split attention, and the TinyStories test model.
// Every case runs on the emulated device and on a real GPU ("cuda"); the cuda cases skip, printing
// why, where libcuda.so.1 or a device is missing.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm_reduce.h"
#include "tests/cpu/test_model.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::Generate;
using testing::GenRequest;
using testing::GenResult;
using testing::Prompt;
using testing::Unavailable;

struct Case {
  std::string preset;
  DType dtype = DType::kF32;
  DType kv_dtype = DType::kF32;
  std::vector<GenRequest> requests;
  int chunk = 64;
  int32_t attention_partition = 0;
  int32_t mixed_decode_rows = kernels::kMixedDecodeRows;
  double tolerance = 2e-4;
  bool print_tokens = false;
  const char* must_launch = nullptr;  // a kernel entry some step must launch
};

void RunParity(const Model& model, const Case& c, const std::string& kind) {
  KvCacheConfig kv;
  kv.num_blocks = 64;
  kv.block_size = 16;
  kv.dtype = c.kv_dtype;
  auto cpu = CpuBackend::Create(model, kv);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  GpuBackendOptions opts;
  opts.attention_partition = c.attention_partition;
  opts.mixed_decode_rows = c.mixed_decode_rows;
  const auto t0 = std::chrono::steady_clock::now();
  opts.log_progress = false;
  opts.emulated_device = testing::EmulatedDeviceUnderTest();
  auto gpu = CreateGpuBackend(model, kv, kind, opts);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const auto t1 = std::chrono::steady_clock::now();
  absl::StatusOr<GenResult> want = Generate(**cpu, c.requests, c.chunk);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<GenResult> got = Generate(**gpu, c.requests, c.chunk);
  ASSERT_TRUE(got.ok()) << got.status();
  const auto t2 = std::chrono::steady_clock::now();
  const KernelCacheStats cs = (*gpu)->cache_stats();
  int64_t launches = 0;
  for (const auto& [name, n] : cs.launches) launches += n;
  std::printf(
      "[ timing ] %s: create %.2f s (%lld kernels, %.2f s compiling), %zu steps %.2f s "
      "(%lld launches)\n",
      c.preset.c_str(), std::chrono::duration<double>(t1 - t0).count(),
      static_cast<long long>(cs.modules), cs.compile_seconds, got->logits.size(),
      std::chrono::duration<double>(t2 - t1).count(), static_cast<long long>(launches));
  // Every case has multi-token chunks: on f16/bf16 caches their steps run flash attention,
  // f32 caches keep the ragged decode kernel.
  const auto flash = cs.launches.find(kernels::kFlashAttentionEntry);
  const int64_t flash_launches = flash == cs.launches.end() ? 0 : flash->second;
  if (c.kv_dtype == DType::kF32) {
    EXPECT_EQ(flash_launches, 0);
  } else {
    EXPECT_GT(flash_launches, 0) << "no step ran flash attention";
  }
  // One attention launch per layer and step, and a second in mixed steps whose decode rows
  // run apart (none of these cases has kMixedDecodeRows decode rows beside a chunk).
  const auto decode = cs.launches.find(kernels::kDecodeAttentionEntry);
  const int64_t attention_launches =
      flash_launches + (decode == cs.launches.end() ? 0 : decode->second);
  const int64_t one_per_step = static_cast<int64_t>(got->logits.size()) * model.config.num_layers;
  if (c.mixed_decode_rows < kernels::kMixedDecodeRows && c.kv_dtype != DType::kF32) {
    EXPECT_GT(attention_launches, one_per_step) << "no mixed step ran its decode rows apart";
  } else {
    EXPECT_EQ(attention_launches, one_per_step);
  }
  if (c.must_launch != nullptr) {
    EXPECT_GT(cs.launches.count(c.must_launch), 0u) << "no step launched " << c.must_launch;
  }
  EXPECT_EQ(got->tokens, want->tokens);
  ASSERT_EQ(got->logits.size(), want->logits.size());
  if (c.print_tokens) {
    std::printf("[ tokens ] %s\n", ::testing::PrintToString(got->tokens[0]).c_str());
  }
  // f16/bf16 weights may run tensor-core GEMMs, which round their inputs.
  const double tolerance = std::max(c.tolerance, testing::TensorCoreLogitsTolerance(model));
  for (size_t s = 0; s < want->logits.size(); ++s) {
    ASSERT_EQ(got->logits[s].size(), want->logits[s].size()) << "step " << s;
    const int64_t vocab = model.config.vocab_size;
    for (size_t r = 0; r * vocab < want->logits[s].size(); ++r) {
      EXPECT_LT(testing::RelErr(got->logits[s].data() + r * vocab,
                                want->logits[s].data() + r * vocab, vocab),
                tolerance)
          << "step " << s << " row " << r;
    }
  }
}

// Three sequences of different prompt lengths joining at different steps, prompts in
// chunks: steps mix prefill chunks with decode rows (the ragged attention path) and end
// decode-only (the decode path).
std::vector<GenRequest> Staggered(int64_t vocab, int new_tokens) {
  return {{Prompt(9, vocab, 2), 0, new_tokens},
          {Prompt(3, vocab, 3), 1, new_tokens + 1},
          {Prompt(13, vocab, 4), 2, new_tokens}};
}

class GpuParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::string why = Unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(GpuParity, TinyPaddedHeadSinglePrompt) {
  auto m = testing::SyntheticModel("tiny", DType::kF32);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tiny";
  c.requests = {{Prompt(7, m->config.vocab_size, 1), 0, 4}};
  RunParity(*m, c, GetParam());
}

TEST_P(GpuParity, TinyPaddedHeadStaggeredBatch) {
  auto m = testing::SyntheticModel("tiny", DType::kF32);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tiny";
  c.requests = Staggered(m->config.vocab_size, 4);
  c.chunk = 5;
  RunParity(*m, c, GetParam());
}

// Contexts past 16 tokens split across CTAs and merge (flash-decoding), in decode and
// ragged steps; f16 weights and an f16 KV cache.
TEST_P(GpuParity, TinySplitAttentionF16) {
  auto m = testing::SyntheticModel("tiny", DType::kF16);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tiny f16 split";
  c.dtype = DType::kF16;
  c.kv_dtype = DType::kF16;
  c.requests = {{Prompt(30, m->config.vocab_size, 5), 0, 5},
                {Prompt(12, m->config.vocab_size, 6), 1, 6}};
  c.chunk = 8;
  c.attention_partition = 16;
  RunParity(*m, c, GetParam());
}

// Mixed steps (a prompt's chunks beside decode rows) with every decode row apart from
// flash attention, in the decode kernel, split and merged past 16 tokens of context.
TEST_P(GpuParity, TinyMixedDecodeRowsApartF16) {
  auto m = testing::SyntheticModel("tiny", DType::kF16);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tiny f16 decode rows apart";
  c.dtype = DType::kF16;
  c.kv_dtype = DType::kF16;
  c.requests = Staggered(m->config.vocab_size, 6);
  c.requests.push_back({Prompt(21, m->config.vocab_size, 7), 3, 4});
  c.chunk = 4;
  c.attention_partition = 16;
  c.mixed_decode_rows = 1;
  RunParity(*m, c, GetParam());
}

TEST_P(GpuParity, TinyBf16KvCache) {
  auto m = testing::SyntheticModel("tiny", DType::kBF16);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tiny bf16";
  c.dtype = DType::kBF16;
  c.kv_dtype = DType::kBF16;
  c.requests = Staggered(m->config.vocab_size, 2);
  c.chunk = 6;
  c.print_tokens = true;
  RunParity(*m, c, GetParam());
}

// In-memory random models for what the synthetic presets lack: q/k/v biases, interleaved
// (GPT-J) RoPE and llama3 frequency scaling, each with a padded head_dim (16, 48) and an
// unpadded one, untied and tied embeddings, and an intermediate size that is not a multiple
// of 4 (separate gate and up GEMMs instead of the fused pair).
TEST_P(GpuParity, BiasesRopeStylesAndScaling) {
  struct Variant {
    int64_t head_dim;
    bool bias;
    RopeStyle style;
    bool tied;
    DType dtype;
    int64_t intermediate = 96;
  };
  const Variant variants[] = {
      {16, true, RopeStyle::kInterleaved, false, DType::kF32},
      {48, true, RopeStyle::kRotateHalf, true, DType::kF16},
      {32, true, RopeStyle::kInterleaved, true, DType::kF32},
      {16, false, RopeStyle::kRotateHalf, false, DType::kBF16},
      {32, false, RopeStyle::kRotateHalf, false, DType::kF32, 90},
  };
  for (const Variant& v : variants) {
    ::ptxserve::testing::RandomModelSpec spec;
    spec.head_dim = v.head_dim;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.attention_bias = v.bias;
    spec.rope_style = v.style;
    spec.tied = v.tied;
    spec.dtype = v.dtype;
    spec.intermediate = v.intermediate;
    spec.rope_scaling.type = RopeScaling::Type::kLlama3;
    spec.rope_scaling.factor = 8;
    spec.rope_scaling.original_max_position_embeddings = 16;
    const Model m = ::ptxserve::testing::MakeRandomModel(spec);
    Case c;
    c.preset = spec.Name();
    c.requests = Staggered(m.config.vocab_size, 3);
    c.chunk = 6;
    SCOPED_TRACE(c.preset);
    RunParity(m, c, GetParam());
  }
}

// A 520-token prompt in one chunk: the 1024-row GEMM forms, whose down projection (64
// columns from k 512) is a grid short of a wave and splits K (GemmConfigFor), its partial
// sums reduced by gemm_reduce with the residual epilogue.
TEST_P(GpuParity, LongPrefillSplitsK) {
  ::ptxserve::testing::RandomModelSpec spec;
  spec.intermediate = 512;
  spec.dtype = DType::kF16;
  const Model m = ::ptxserve::testing::MakeRandomModel(spec);
  Case c;
  c.preset = spec.Name();
  c.dtype = c.kv_dtype = DType::kF16;
  c.requests = {{Prompt(520, m.config.vocab_size, 11), 0, 2}};
  c.chunk = 600;
  c.must_launch = kernels::kGemmReduceEntry;
  RunParity(m, c, GetParam());
}

// The larger presets (hidden 512, 2 layers): a short batch each, f32 and f16 weights.
class GpuPresetParity
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, DType>> {
 protected:
  void SetUp() override {
    if (std::string why = Unavailable(std::get<0>(GetParam())); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
};

TEST_P(GpuPresetParity, StaggeredBatch) {
  const auto& [kind, preset, dtype] = GetParam();
  auto m = testing::SyntheticModel(preset, dtype);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = preset;
  c.dtype = dtype;
  c.kv_dtype = dtype;
  c.requests = {{Prompt(5, m->config.vocab_size, 7), 0, 2},
                {Prompt(2, m->config.vocab_size, 8), 1, 2}};
  c.chunk = 4;
  RunParity(*m, c, kind);
}

INSTANTIATE_TEST_SUITE_P(Presets, GpuPresetParity,
                         ::testing::Combine(::testing::Values("emulated", "cuda"),
                                            ::testing::Values("gqa1", "gqa4", "gqa8", "hd128"),
                                            ::testing::Values(DType::kF32, DType::kF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
                                  std::string(DTypeName(std::get<2>(info.param)));
                         });

// The trained TinyStories model (head_dim 16, tied embeddings): a story prompt and a
// batch, greedy tokens identical to the CPU backend's.
TEST_P(GpuParity, TinyStories) {
  const std::string dir = testing::SharedModelsDir() + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "test model absent: " << dir;
  }
  auto m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  Case c;
  c.preset = "tinystories-656k";
  auto tok = Tokenizer::FromDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto story = (*tok)->Encode("Once upon a time, there was a little girl", true);
  ASSERT_TRUE(story.ok()) << story.status();
  ASSERT_EQ(story->front(), 1);  // <|start_story|>
  // The story (greedy continues it as a children's story) and two other prompts.
  c.requests = {{*story, 0, 12},
                {Prompt(11, m->config.vocab_size, 9), 1, 6},
                {Prompt(4, m->config.vocab_size, 10), 3, 6}};
  c.chunk = 6;
  c.print_tokens = true;
  RunParity(*m, c, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuParity, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ptxserve::cuda
