// Generator-level properties: determinism, golden PTX, config validation, the
// registry. Golden files live in tests/golden/<name>.ptx and are compared byte for
// byte; after an intended change to generated code, regenerate them with
//   PTXSERVE_UPDATE_GOLDEN=1 ./kernels_generate_test
// and review the diff like any other code change.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel_list.h"
#include "kernels/registry.h"
#include "tests/kernels/kernel_matrix.h"

namespace ptxserve::kernels {
namespace {

using ::testing::HasSubstr;

TEST(GenerateTest, SameConfigSameBytes) {
  const std::vector<testing::PtxModule> a = testing::MatrixModules(ptx::Target{});
  const std::vector<testing::PtxModule> b = testing::MatrixModules(ptx::Target{});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FALSE(a[i].ptx.empty()) << a[i].label;
    EXPECT_EQ(a[i].label, b[i].label);
    EXPECT_TRUE(a[i].ptx == b[i].ptx) << a[i].label;
  }
}

TEST(GenerateTest, DistinctConfigsDistinctKeysAndText) {
  const std::vector<testing::PtxModule> mods = testing::MatrixModules(ptx::Target{});
  std::set<std::string> keys, texts;
  for (const auto& m : mods) {
    EXPECT_TRUE(keys.insert(m.label).second) << "duplicate key " << m.label;
    EXPECT_TRUE(texts.insert(m.ptx).second) << "same PTX as another config: " << m.label;
  }
}

struct Golden {
  const char* file;
  const char* kernel;
  KernelSettings settings;
};

const std::vector<Golden>& Goldens() {
  static const std::vector<Golden> g = {
      {"rope_kv_f32_h8_kvh2_d64_bs32_interleaved",
       "rope_kv",
       {{"kv_dtype", "f32"},
        {"num_heads", "8"},
        {"num_kv_heads", "2"},
        {"head_dim", "64"},
        {"block_size", "32"},
        {"layout", "interleaved"}}},
      {"decode_attention_f16_h32_kvh8_d128", "decode_attention", {}},
      {"decode_attention_f32_h8_kvh1_d64_split_sm90",
       "decode_attention",
       {{"kv_dtype", "f32"},
        {"num_heads", "8"},
        {"num_kv_heads", "1"},
        {"head_dim", "64"},
        {"split", "true"},
        {"sm", "90"}}},
      {"flash_attention_f16_h32_kvh8_d128", "flash_attention", {}},
      {"flash_attention_bf16_h32_kvh8_d64",
       "flash_attention",
       {{"kv_dtype", "bf16"}, {"head_dim", "64"}}},
      {"embedding_bf16_dim4096", "embedding", {{"table_dtype", "bf16"}}},
      {"embedding_q4_0_dim4096", "embedding", {{"blocks", "true"}, {"block_format", "q4_0"}}},
      {"rmsnorm_f32_dim4096", "rmsnorm", {}},
      {"rope_kv_f16_h32_kvh8_d128", "rope_kv", {}},
      {"gemm_f16_n4096_k4096_mt4", "gemm", {}},
      {"gemm_f16_n4096_k4096_mt8_norm", "gemm", {{"m_tile", "8"}, {"norm", "true"}}},
      {"gemm_bf16_n4096_k4096_tiled_bias",
       "gemm",
       {{"weight_dtype", "bf16"}, {"tiled", "true"}, {"has_bias", "true"}}},
      {"gemm_f16_n4096_k4096_tensor_cores_16x16_k_over_warps",
       "gemm",
       {{"tiled", "true"},
        {"tensor_cores", "true"},
        {"tile_m", "16"},
        {"tile_n", "16"},
        {"warps_m", "1"},
        {"warps_n", "1"},
        {"warps_k", "4"},
        {"accumulate", "true"}}},
      {"gemm_f16_n8192_k2048_tensor_cores_128x256_swiglu",
       "gemm",
       {{"n", "8192"},
        {"k", "2048"},
        {"tiled", "true"},
        {"tensor_cores", "true"},
        {"tile_m", "128"},
        {"tile_n", "256"},
        {"warps_m", "2"},
        {"warps_n", "4"},
        {"stages", "3"},
        {"swiglu", "true"}}},
      {"gemm_f16_n2048_k8192_tensor_cores_128x128_split_k4_acc",
       "gemm",
       {{"n", "2048"},
        {"k", "8192"},
        {"tiled", "true"},
        {"tensor_cores", "true"},
        {"tile_m", "128"},
        {"tile_n", "128"},
        {"stages", "3"},
        {"accumulate", "true"},
        {"split_k", "4"}}},
      {"gemm_reduce_n2048_s4_bias_acc",
       "gemm_reduce",
       {{"n", "2048"}, {"splits", "4"}, {"has_bias", "true"}, {"accumulate", "true"}}},
      {"qgemm_q8_0_n2048_k8192_mt8_acc",
       "qgemm",
       {{"n", "2048"}, {"k", "8192"}, {"m_tile", "8"}, {"accumulate", "true"}}},
      {"qgemm_q4_0_n4096_k4096_mt1", "qgemm", {{"format", "q4_0"}, {"m_tile", "1"}}},
      {"qgemm_fp8_e4m3_n4096_k4096_mt1", "qgemm", {{"format", "fp8_e4m3"}, {"m_tile", "1"}}},
      {"qgemm_int4_g128_n4096_k4096_mt4_acc",
       "qgemm",
       {{"format", "int4_g128"}, {"m_tile", "4"}, {"accumulate", "true"}}},
      {"qgemm_q4_0_n16384_k2048_mt1_c2_norm",
       "qgemm",
       {{"format", "q4_0"},
        {"n", "16384"},
        {"k", "2048"},
        {"m_tile", "1"},
        {"cols", "2"},
        {"norm", "true"}}},
      {"qgemm_int4_g128_n512_k2048_mt4_s4_norm",
       "qgemm",
       {{"format", "int4_g128"},
        {"n", "512"},
        {"k", "2048"},
        {"m_tile", "4"},
        {"split", "4"},
        {"norm", "true"}}},
      {"qgemm_q4_0_n2048_k8192_tensor_cores_64x128_acc",
       "qgemm",
       {{"format", "q4_0"},
        {"n", "2048"},
        {"k", "8192"},
        {"tensor_cores", "true"},
        {"tile_m", "64"},
        {"tile_n", "128"},
        {"stages", "3"},
        {"accumulate", "true"}}},
      {"qgemm_int4_g128_n8192_k2048_tensor_cores_128x256_bias",
       "qgemm",
       {{"format", "int4_g128"},
        {"n", "8192"},
        {"k", "2048"},
        {"tensor_cores", "true"},
        {"tile_m", "128"},
        {"tile_n", "256"},
        {"warps_m", "2"},
        {"warps_n", "4"},
        {"stages", "3"},
        {"has_bias", "true"}}},
      {"silu_mul", "silu_mul", {}},
      {"argmax_t1024", "argmax", {}},
      {"sampling_t256", "sampling", {}},
      {"logprobs_t256_top20", "logprobs", {}},
      {"penalties_t256", "penalties", {}},
  };
  return g;
}

TEST(GenerateTest, GoldenPtx) {
  const bool update = std::getenv("PTXSERVE_UPDATE_GOLDEN") != nullptr &&
                      std::string(std::getenv("PTXSERVE_UPDATE_GOLDEN")) == "1";
  const std::filesystem::path dir = std::filesystem::path(PTXSERVE_SOURCE_DIR) / "tests/golden";
  for (const Golden& g : Goldens()) {
    absl::StatusOr<std::string> ptx = GeneratePtxByName(g.kernel, g.settings);
    ASSERT_TRUE(ptx.ok()) << g.file << ": " << ptx.status();
    const std::filesystem::path path = dir / (std::string(g.file) + ".ptx");
    if (update) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << *ptx;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << "missing " << path << " (run with PTXSERVE_UPDATE_GOLDEN=1)";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_TRUE(want.str() == *ptx) << g.file << " differs from " << path
                                    << "; if intended, rerun with PTXSERVE_UPDATE_GOLDEN=1";
  }
}

// The kernel list (kernel_list.h) is what the matrix and the goldens cover, and what the
// registry serves.
TEST(GenerateTest, EveryListedKernelIsInTheMatrixTheGoldensAndTheRegistry) {
  const std::vector<testing::PtxModule> mods = testing::MatrixModules(ptx::Target{});
  std::set<std::string> listed;
  ForEachKernel([&](auto kernel) { listed.insert(kernel.kName); });
  const std::vector<std::string> served = KernelNames();
  EXPECT_EQ(listed, std::set<std::string>(served.begin(), served.end()));
  for (const std::string& name : listed) {
    bool in_matrix = false;
    for (const auto& m : mods) in_matrix = in_matrix || m.label.rfind(name + ":", 0) == 0;
    EXPECT_TRUE(in_matrix) << name << " is not in the ptxas matrix (kernel_matrix.cc)";
    bool golden = false;
    for (const Golden& g : Goldens()) golden = golden || g.kernel == name;
    EXPECT_TRUE(golden) << name << " has no golden PTX file";
  }
  for (const auto& m : mods) {
    const std::string kernel = m.label.substr(0, m.label.find(':'));
    EXPECT_TRUE(listed.contains(kernel) || kernel == "residual_add") << m.label;
  }
}

// The kernel cache launches a kernel as a programmatic dependent launch when its Config
// says so (kernels::GridDependent), not by reading its PTX: every kernel of the matrix, on
// a target with griddepcontrol and one without, waits on griddepcontrol.wait exactly when
// its Config says it does.
TEST(GenerateTest, GridDependentFlagMatchesThePtx) {
  for (const int sm : {80, 90}) {
    ptx::Target target;
    target.sm = sm;
    std::set<std::string> dependent_kernels;
    for (const testing::MatrixKernel& k : testing::MatrixKernels(target)) {
      SCOPED_TRACE(k.module.label);
      ASSERT_FALSE(k.module.ptx.empty());
      EXPECT_EQ(k.grid_dependent, k.module.ptx.find("griddepcontrol.wait") != std::string::npos);
      if (k.grid_dependent) {
        dependent_kernels.insert(k.module.label.substr(0, k.module.label.find(':')));
      }
    }
    // The GEMVs (f16 and quantized) are the dependent launches, on sm_90 only.
    const std::set<std::string> gemvs = {kGemmEntry, kQuantGemmEntry};
    EXPECT_EQ(dependent_kernels, sm >= 90 ? gemvs : std::set<std::string>()) << "sm_" << sm;
  }
}

TEST(GenerateTest, UnsupportedConfigsAreErrors) {
  DecodeAttentionConfig a;
  for (int hd : {0, 16, 48, 100, 288, 512}) {
    a.head_dim = hd;
    absl::StatusOr<std::string> r = GenerateDecodeAttention(a);
    ASSERT_FALSE(r.ok()) << hd;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("head_dim"));
  }
  a = DecodeAttentionConfig{};
  a.num_heads = 12;
  a.num_kv_heads = 8;
  absl::StatusOr<std::string> r = GenerateDecodeAttention(a);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("num_kv_heads"));
  a = DecodeAttentionConfig{};
  a.num_warps = 3;
  EXPECT_FALSE(GenerateDecodeAttention(a).ok());
  a = DecodeAttentionConfig{};
  a.target.sm = 75;
  EXPECT_FALSE(GenerateDecodeAttention(a).ok());
  a = DecodeAttentionConfig{};
  a.target = {90, 70};
  EXPECT_FALSE(GenerateDecodeAttention(a).ok());

  RopeKvConfig k;
  k.head_dim = 48;
  EXPECT_FALSE(GenerateRopeKv(k).ok());
  k.head_dim = 288;
  EXPECT_FALSE(GenerateRopeKv(k).ok());
  k = RopeKvConfig{};
  k.block_size = 0;
  EXPECT_FALSE(GenerateRopeKv(k).ok());
}

TEST(GenerateTest, AttentionShapes) {
  DecodeAttentionConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.kv_dtype = ElemType::kF32;
  absl::StatusOr<DecodeAttentionShape> s = ShapeOf(c);
  ASSERT_TRUE(s.ok());
  // head_dim 128 in f32: a whole warp per token, 4 elements (one 128-bit load) per lane.
  EXPECT_EQ(s->lanes_per_token, 32);
  EXPECT_EQ(s->elems_per_lane, 4);
  EXPECT_EQ(s->vec_elems, 4);
  c.kv_dtype = ElemType::kF16;
  s = ShapeOf(c);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lanes_per_token, 16);
  EXPECT_EQ(s->vec_elems, 8);  // 8 halves = 128 bits
  c.num_heads = 256;           // a group of 32 heads is split over CTAs
  s = ShapeOf(c);
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->heads_per_cta, 32);
  EXPECT_EQ(s->heads_per_cta * s->head_chunks, 32);
}

TEST(GenerateTest, SplitPlan) {
  DecodeAttentionConfig c;  // 8 kv heads
  // Plenty of CTAs: no split.
  EXPECT_FALSE(PlanDecodeAttention(c, 64, 4096, 132).split);
  // Contexts shorter than two partitions of 64 tokens: no split.
  EXPECT_FALSE(PlanDecodeAttention(c, 1, 120, 132).split);
  // One sequence of 1024 tokens: 16 splits of 64, 128 CTAs for 132 SMs.
  EXPECT_EQ(PlanDecodeAttention(c, 1, 1024, 132).num_splits, 16);
  // One long sequence on a big GPU: split into whole blocks covering the context.
  const AttentionPlan p = PlanDecodeAttention(c, 1, 8000, 132);
  ASSERT_TRUE(p.split);
  EXPECT_GT(p.num_splits, 1);
  EXPECT_EQ(p.partition_tokens % c.block_size, 0);
  EXPECT_GE(int64_t{p.partition_tokens} * p.num_splits, 8000);
  EXPECT_LT(int64_t{p.partition_tokens} * (p.num_splits - 1), 8000);
  // Partitions are a power of two of blocks, which a replayed CUDA graph keeps as they are:
  // 16 sequences of 1024 tokens (128 CTAs) want 3 splits; 3 of 352 tokens would round up to
  // 512 and leave 2 working splits, so the plan takes 4 of 256.
  const AttentionPlan q = PlanDecodeAttention(c, 16, 1024, 132);
  EXPECT_EQ(q.num_splits, 4);
  EXPECT_EQ(q.partition_tokens, 256);
  for (const int64_t ctx : {int64_t{1000}, int64_t{8000}, int64_t{4097}}) {
    const AttentionPlan r = PlanDecodeAttention(c, 2, ctx, 132);
    ASSERT_TRUE(r.split) << ctx;
    const int blocks = r.partition_tokens / c.block_size;
    EXPECT_EQ(blocks & (blocks - 1), 0) << ctx;
    EXPECT_LT(int64_t{r.partition_tokens} * (r.num_splits - 1), ctx);
  }
}

TEST(GenerateTest, GemmFormChoice) {
  GemmConfig base;  // 4096 x 4096 f16, GEMV tiles of 4 columns
  constexpr int kSms = 132;
  EXPECT_FALSE(GemmConfigFor(base, 1, kSms).tiled);
  EXPECT_EQ(GemmConfigFor(base, 1, kSms).m_tile, 1);
  EXPECT_EQ(GemmConfigFor(base, 8, kSms).m_tile, 8);
  // 1024 x 2 GEMV CTAs fit 16 per SM; 1024 x 3 do not.
  EXPECT_FALSE(GemmConfigFor(base, 16, kSms).tiled);
  EXPECT_EQ(GemmConfigFor(base, 16, kSms).m_tile, 8);
  const GemmConfig narrow = GemmConfigFor(base, 24, kSms);
  ASSERT_TRUE(narrow.tensor_cores);
  EXPECT_EQ(narrow.MmaTile().bm, 16);
  EXPECT_EQ(narrow.MmaTile().wk, 4);                      // 256 x 2 CTAs
  EXPECT_EQ(GemmConfigFor(base, 100, kSms).tile_n, 64);   // 16x16 tiles: 1792 CTAs
  EXPECT_EQ(GemmConfigFor(base, 400, kSms).tile_m, 64);   // 64x64: 448 CTAs, 3.4 per SM
  EXPECT_EQ(GemmConfigFor(base, 500, kSms).tile_n, 128);  // 64x128: 256 CTAs, 1.9 per SM
  // From 512 rows, waves: 128x256 tiles give 128 CTAs, one wave of one per SM, as long as
  // 128x128's 256 in one wave of two (ties go to the larger tile).
  const GemmConfig large = GemmConfigFor(base, 1000, kSms);
  EXPECT_EQ(large.MmaTile().bm, 128);
  EXPECT_EQ(large.MmaTile().bn, 256);
  EXPECT_EQ(large.MmaTile().stages, 3);
  EXPECT_EQ(large.split_k, 1);
  const LaunchDims d = GemmLaunch(large, 1000);
  EXPECT_EQ(d.grid[0], 16u);  // 4096 / 256
  EXPECT_EQ(d.grid[1], 8u);   // ceil(1000 / 128)
  EXPECT_EQ(d.grid[2], 1u);
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.shared_bytes, 81920u);  // 2 x 128 + 3 x 256 rows of 80 bytes
  // Llama-3.2-1B's down projection (2048 x 8192, residual) at 1024 rows: 128x256 tiles give
  // 64 CTAs, half a wave; split two ways they fill it, the reduction's traffic included.
  GemmConfig down = base;
  down.n = 2048;
  down.k = 8192;
  down.accumulate = true;
  const GemmConfig split = GemmConfigFor(down, 1024, kSms);
  EXPECT_EQ(split.tile_n, 256);
  EXPECT_EQ(split.split_k, 2);
  EXPECT_EQ(GemmLaunch(split, 1024).grid[2], 2u);
  // At 2048 rows the same tiles make 128 CTAs, a wave: no split.
  EXPECT_EQ(GemmConfigFor(down, 2048, kSms).split_k, 1);
  GemmConfig gate_up = base;
  gate_up.n = 16384;
  const GemmConfig eight_warps = GemmConfigFor(gate_up, 1024, kSms);  // 128x256: 512 CTAs
  EXPECT_EQ(eight_warps.tile_n, 256);
  EXPECT_EQ(GemmLaunch(eight_warps, 1024).block[0], 256u);
  base.weight_dtype = ElemType::kF32;  // no tensor cores: the FMA tiled form
  const GemmConfig fma = GemmConfigFor(base, 1000, kSms);
  EXPECT_TRUE(fma.tiled);
  EXPECT_FALSE(fma.tensor_cores);
  EXPECT_EQ(GemmLaunch(fma, 1000).block[0], 256u);
}

TEST(RegistryTest, NamesDefaultsAndErrors) {
  const std::vector<std::string> names = KernelNames();
  EXPECT_THAT(names, ::testing::IsSupersetOf({"rope_kv", "decode_attention", "flash_attention"}));
  for (const std::string& n : names) {
    absl::StatusOr<KernelSettings> d = KernelDefaults(n);
    ASSERT_TRUE(d.ok()) << n;
    EXPECT_TRUE(d->contains("sm") && d->contains("ptx")) << n;
    absl::StatusOr<std::string> ptx = GeneratePtxByName(n, {});
    ASSERT_TRUE(ptx.ok()) << n << ": " << ptx.status();
    EXPECT_THAT(*ptx, HasSubstr(".entry " + n + "("));
  }
  EXPECT_EQ(GeneratePtxByName("nope", {}).status().code(), absl::StatusCode::kNotFound);
  auto bad_key = GeneratePtxByName("rope_kv", {{"head_dimm", "64"}});
  ASSERT_FALSE(bad_key.ok());
  EXPECT_THAT(std::string(bad_key.status().message()), HasSubstr("head_dimm"));
  auto bad_value = GeneratePtxByName("rope_kv", {{"head_dim", "64x"}});
  ASSERT_FALSE(bad_value.ok());
  EXPECT_THAT(std::string(bad_value.status().message()), HasSubstr("head_dim='64x'"));
  EXPECT_FALSE(GeneratePtxByName("rope_kv", {{"head_dim", "48"}}).ok());
  EXPECT_FALSE(GeneratePtxByName("rope_kv", {{"kv_dtype", "f8"}}).ok());
  auto sm90 = GeneratePtxByName("rope_kv", {{"sm", "90"}, {"ptx", "8.0"}});
  ASSERT_TRUE(sm90.ok()) << sm90.status();
  EXPECT_THAT(*sm90, HasSubstr(".version 8.0\n.target sm_90\n"));
}

TEST(RegistryTest, WriteAllPtx) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ptxserve_all_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteAllPtx(dir.string(), ptx::Target{}).ok());
  for (const std::string& n : KernelNames()) {
    EXPECT_TRUE(std::filesystem::exists(dir / (n + ".ptx"))) << n;
  }
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(WriteAllPtx((dir / "missing/sub").string(), ptx::Target{}).ok());
}

}  // namespace
}  // namespace ptxserve::kernels
