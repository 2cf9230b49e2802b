// The tensor-core GEMM (kernels/gemm_mma.cc) on the emulator against the CPU GEMM, with a
// tolerance derived from its one extra rounding, and through ptxas for sm_80 and sm_90.
//
// Tolerance: the kernel rounds each activation to the weights' type (unit roundoff u =
// 2^-11 for f16, 2^-8 for bf16), then multiplies exactly and accumulates in f32 like the
// reference. So |got - want| <= u * sum_k |x_k w_k| + the two f32 accumulations' error,
// bounded by 2 * K * 2^-24 * sum_k |x_k w_k| (Higham's gamma_K, twice). With the SwiGLU
// epilogue, errors e_g and e_u in gate and up give at most |silu'(g)| |u| e_g + |silu(g)| e_u
// (|silu'| < 1.1 everywhere), plus a few f32 roundings of the epilogue (1e-5 relative).
// With inputs in the weights' type (x_dtype, the model's activations) the reference takes
// the same rounded inputs and the kernel rounds nothing on the way in; an f16/bf16 output
// (y_dtype) adds its store's rounding, u |y|.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cost/cost_model.h"
#include "kernels/gemm.h"
#include "kernels/gemm_reduce.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

struct MmaCase {
  int m, n, k;
  ElemType dtype;
  bool bias, accumulate;
  GemmMmaTile tile = kMmaWideTile;
  bool swiglu = false;  // n output columns from 2n weight rows
  int split_k = 1;      // > 1: partial sums in a workspace, then gemm_reduce
  // x in the weights' type, and y too unless accumulating (the model's activations)
  bool half_io = false;
};

std::string CaseName(const MmaCase& c) {
  return absl::StrCat(
      "m", c.m, "_n", c.n, "_k", c.k, "_", ElemTypeName(c.dtype), c.bias ? "_bias" : "",
      c.accumulate ? "_acc" : "", "_tile", c.tile.bm, "x", c.tile.bn, "_w", c.tile.wm, c.tile.wn,
      c.tile.wk, "_s", c.tile.stages, c.swiglu ? "_swiglu" : "",
      c.split_k > 1 ? absl::StrCat("_sk", c.split_k) : "", c.half_io ? "_halfio" : "");
}
void PrintTo(const MmaCase& c, std::ostream* os) { *os << CaseName(c); }

GemmConfig ConfigOf(const MmaCase& c, ptx::Target target = {}) {
  GemmConfig cfg;
  cfg.n = c.n;
  cfg.k = c.k;
  cfg.weight_dtype = c.dtype;
  cfg.has_bias = c.bias;
  cfg.accumulate = c.accumulate;
  cfg.tiled = true;
  cfg.tensor_cores = true;
  cfg.SetMmaTile(c.tile);
  cfg.swiglu = c.swiglu;
  cfg.split_k = c.split_k;
  if (c.half_io) {
    cfg.x_dtype = c.dtype;
    if (!c.accumulate) cfg.y_dtype = c.dtype;
  }
  cfg.target = target;
  return cfg;
}

double Silu(double g) { return g / (1 + std::exp(-g)); }

class GemmMma : public ::testing::TestWithParam<MmaCase> {};

TEST_P(GemmMma, MatchesTheCpuGemmWithinItsRounding) {
  const MmaCase c = GetParam();
  const GemmConfig cfg = ConfigOf(c);
  absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
  ASSERT_TRUE(ptx.ok()) << ptx.status();

  std::mt19937 rng(c.m * 131 + c.n * 7 + c.k);
  const int w_rows = c.swiglu ? 2 * c.n : c.n;
  std::vector<float> x = RandomFloats(rng, static_cast<size_t>(c.m) * c.k, -2, 2);
  std::vector<float> w = RandomFloats(rng, static_cast<size_t>(w_rows) * c.k, -1, 1);
  const std::vector<float> bias = RandomFloats(rng, c.n);
  const std::vector<float> y0 = RandomFloats(rng, static_cast<size_t>(c.m) * c.n);
  const DType dt = c.dtype == ElemType::kF16 ? DType::kF16 : DType::kBF16;
  std::vector<uint8_t> w_bytes(w.size() * 2);
  ConvertFromFloat(dt, w.data(), w.size(), w_bytes.data());
  ConvertToFloat(dt, w_bytes.data(), w.size(), w.data());  // the weights as stored
  std::vector<uint8_t> x_bytes(x.size() * 2);
  if (c.half_io) {
    ConvertFromFloat(dt, x.data(), x.size(), x_bytes.data());
    ConvertToFloat(dt, x_bytes.data(), x.size(), x.data());  // the inputs as stored
  }
  const bool half_y = cfg.y_dtype != ElemType::kF32;

  EmuHarness h;
  const uint64_t dx = c.half_io ? h.Upload(x_bytes) : h.Upload(x);
  const uint64_t dw = h.Upload(w_bytes), db = h.Upload(bias);
  const uint64_t dy = c.accumulate ? h.Upload(y0) : h.Alloc(y0.size() * (half_y ? 2 : 4));
  if (c.split_k > 1) {
    // The slices' partial sums into a workspace, then the reduction and the epilogues.
    const GemmReduceConfig rc = GemmReduceFor(cfg);
    absl::StatusOr<std::string> reduce = GenerateGemmReduce(rc);
    ASSERT_TRUE(reduce.ok()) << reduce.status();
    const uint64_t ws = h.Alloc(static_cast<size_t>(c.m * GemmWorkspaceFloatsPerRow(cfg)) * 4);
    ASSERT_TRUE(
        h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, c.m), {Ptr(dx), Ptr(dw), Ptr(0), Ptr(ws), U32(c.m)})
            .ok());
    ASSERT_TRUE(h.Run(*reduce, kGemmReduceEntry, GemmReduceLaunch(rc, c.m),
                      {Ptr(ws), Ptr(c.bias ? db : 0), Ptr(dy), U32(c.m)})
                    .ok());
  } else {
    ASSERT_TRUE(h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, c.m),
                      {Ptr(dx), Ptr(dw), Ptr(c.bias ? db : 0), Ptr(dy), U32(c.m)})
                    .ok());
  }
  std::vector<float> got(y0.size());
  if (half_y) {
    const std::vector<uint8_t> y_bytes = h.Download<uint8_t>(dy, y0.size() * 2);
    ConvertToFloat(dt, y_bytes.data(), got.size(), got.data());
  } else {
    got = h.Download<float>(dy, y0.size());
  }

  const double u_type = c.dtype == ElemType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double u = c.half_io ? 0.0 : u_type;  // the inputs' rounding in the kernel
  const double gamma = 2.0 * c.k * std::ldexp(1.0, -24);
  // Row i of x times weight row r: the exact product and its error bound.
  auto dot = [&](int i, int r) {
    double sum = 0, magnitude = 0;
    for (int k = 0; k < c.k; ++k) {
      const double p = double{x[i * c.k + k]} * w[static_cast<size_t>(r) * c.k + k];
      sum += p;
      magnitude += std::fabs(p);
    }
    return std::pair{sum, (u + gamma) * magnitude};
  };
  int misses = 0;
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      auto [want, tol] = dot(i, j);
      if (c.swiglu) {
        const auto [up, up_tol] = dot(i, c.n + j);
        tol = 1.1 * std::fabs(up) * tol + std::fabs(Silu(want)) * up_tol;
        want = Silu(want) * up;
      }
      if (c.bias) want += bias[j];
      if (c.accumulate) want += y0[i * c.n + j];
      tol += (half_y ? u_type : 0.0) * std::fabs(want) + 1e-5 * std::fabs(want) + 1e-30;
      const double err = std::fabs(got[i * c.n + j] - want);
      if (!(err <= tol) && ++misses <= 5) {
        ADD_FAILURE() << "y[" << i << "][" << j << "] = " << got[i * c.n + j] << ", want " << want
                      << " (error " << err << " > " << tol << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmMma,
    ::testing::Values(
        MmaCase{16, 64, 64, ElemType::kF16, false, false},   // one tile
        MmaCase{20, 80, 136, ElemType::kF16, true, true},    // partial tiles, k tail
        MmaCase{70, 72, 40, ElemType::kBF16, false, true},   // two row tiles
        MmaCase{9, 130, 256, ElemType::kBF16, true, false},  // three column tiles
        MmaCase{128, 64, 32, ElemType::kF16, true, false},
        MmaCase{3, 40, 136, ElemType::kF16, true, true, kMmaNarrowTile},     // k tail in a slice
        MmaCase{17, 48, 512, ElemType::kBF16, false, true, kMmaNarrowTile},  // two row tiles
        MmaCase{16, 16, 8, ElemType::kF16, false, false, kMmaNarrowTile},    // one k chunk
        MmaCase{33, 64, 96, ElemType::kF16, true, false, GemmMmaTile{64, 32, 4, 1, 1}},
        MmaCase{5, 64, 264, ElemType::kBF16, false, true, GemmMmaTile{16, 32, 1, 2, 2}},
        // Large warp tiles, 3 and 4 weight stages, 8 warps; partial tiles, k tails, K
        // shorter than the stages in flight.
        MmaCase{130, 200, 200, ElemType::kF16, true, true, kMmaLargeTile},
        MmaCase{100, 136, 72, ElemType::kBF16, false, false, kMmaLargeTile},
        MmaCase{33, 100, 40, ElemType::kF16, false, true, GemmMmaTile{64, 128, 2, 2, 1, 4}},
        MmaCase{140, 260, 104, ElemType::kBF16, true, false, GemmMmaTile{128, 256, 2, 4, 1, 3}},
        MmaCase{17, 72, 168, ElemType::kF16, false, false, GemmMmaTile{32, 64, 2, 2, 1, 3}},
        MmaCase{20, 75, 72, ElemType::kF16, true, true, kMmaLargeTile},  // odd n: no pairs
        // SwiGLU epilogue: n output columns from gate and up rows, f16 and bf16, the
        // tensor-core tiles the backend picks (k split over warps too).
        MmaCase{130, 100, 200, ElemType::kF16, false, false, kMmaLargeTile, true},
        MmaCase{70, 37, 136, ElemType::kBF16, false, false, kMmaLargeTile, true},
        MmaCase{9, 20, 264, ElemType::kBF16, false, false, kMmaNarrowTile, true},
        MmaCase{70, 45, 88, ElemType::kF16, false, false, kMmaWideTile, true},
        MmaCase{17, 44, 72, ElemType::kF16, false, false, GemmMmaTile{16, 64, 1, 4, 1}, true},
        MmaCase{40, 60, 96, ElemType::kBF16, false, false, GemmMmaTile{32, 64, 2, 2, 1, 3}, true},
        MmaCase{20, 72, 40, ElemType::kF16, false, false, GemmMmaTile{128, 256, 2, 4, 1, 3}, true},
        // Split-K: slices of equal steps and a shorter last one holding the k tail, partial
        // tiles, odd n (single-column stores), bias and residual and SwiGLU applied once in
        // the reduction; more slices than weight stages in flight, and one step a slice.
        MmaCase{70, 72, 200, ElemType::kF16, true, true, kMmaLargeTile, false, 3},
        MmaCase{33, 75, 264, ElemType::kBF16, true, false, GemmMmaTile{64, 128, 2, 2, 1, 3}, false,
                2},
        MmaCase{130, 100, 136, ElemType::kF16, false, true, kMmaWideTile, false, 5},
        MmaCase{40, 37, 168, ElemType::kBF16, false, false, kMmaLargeTile, true, 2},
        MmaCase{20, 60, 520, ElemType::kF16, false, false, GemmMmaTile{128, 256, 2, 4, 1, 3}, true,
                4},
        MmaCase{17, 48, 512, ElemType::kF16, true, true, GemmMmaTile{64, 128, 2, 2, 1, 4}, false,
                16},
        // Inputs (and outputs, unless accumulating) in the weights' type: the wide, narrow
        // (k over warps), large and eight-warp tiles, k tails, odd n, SwiGLU.
        MmaCase{20, 80, 136, ElemType::kF16, true, false, kMmaWideTile, false, 1, true},
        MmaCase{70, 72, 40, ElemType::kBF16, false, true, kMmaWideTile, false, 1, true},
        MmaCase{3, 40, 136, ElemType::kF16, true, false, kMmaNarrowTile, false, 1, true},
        MmaCase{130, 200, 200, ElemType::kBF16, true, true, kMmaLargeTile, false, 1, true},
        MmaCase{20, 75, 72, ElemType::kF16, true, true, kMmaLargeTile, false, 1, true},  // odd n
        MmaCase{140, 260, 104, ElemType::kF16, false, false, GemmMmaTile{128, 256, 2, 4, 1, 3},
                false, 1, true},
        MmaCase{130, 100, 200, ElemType::kBF16, false, false, kMmaLargeTile, true, 1, true},
        MmaCase{9, 20, 264, ElemType::kF16, false, false, kMmaNarrowTile, true, 1, true},
        // Split-K with inputs in the weights' type: gemm_reduce rounds the summed (and SwiGLU)
        // outputs to y_dtype as it stores them, n not a multiple of 4 one column at a time;
        // accumulating, y stays f32.
        MmaCase{70, 72, 200, ElemType::kBF16, true, false, kMmaLargeTile, false, 3, true},
        MmaCase{33, 74, 264, ElemType::kF16, false, false, GemmMmaTile{64, 128, 2, 2, 1, 3}, false,
                2, true},
        MmaCase{40, 38, 168, ElemType::kF16, false, false, kMmaLargeTile, true, 2, true},
        MmaCase{130, 100, 136, ElemType::kBF16, false, true, kMmaWideTile, false, 5, true}),
    [](const ::testing::TestParamInfo<MmaCase>& i) { return CaseName(i.param); });

TEST(GemmMma, RefusesF32WeightsKNotAMultipleOf8AndBadTiles) {
  auto generates = [](int k, ElemType dt, GemmMmaTile tile) {
    return GenerateGemm(ConfigOf({16, 64, k, dt, false, false, tile})).ok();
  };
  EXPECT_TRUE(generates(64, ElemType::kF16, kMmaWideTile));
  EXPECT_FALSE(generates(64, ElemType::kF32, kMmaWideTile));
  EXPECT_FALSE(generates(60, ElemType::kF16, kMmaWideTile));
  EXPECT_TRUE(generates(64, ElemType::kF16, GemmMmaTile{64, 64, 2, 2, 2}));   // eight warps
  EXPECT_FALSE(generates(64, ElemType::kF16, GemmMmaTile{64, 64, 4, 4, 1}));  // sixteen warps
  EXPECT_FALSE(generates(64, ElemType::kF16, GemmMmaTile{64, 64, 1, 2, 1}));  // two warps
  // 256 KiB of partial sums.
  EXPECT_FALSE(generates(64, ElemType::kF16, GemmMmaTile{128, 128, 1, 2, 4}));
  EXPECT_FALSE(generates(64, ElemType::kF16, GemmMmaTile{32, 64, 4, 1, 1}));  // 8-row warp tiles
  EXPECT_FALSE(generates(64, ElemType::kF16, GemmMmaTile{64, 48, 2, 2, 1}));  // 24-column tiles
  GemmConfig untiled = ConfigOf({16, 64, 64, ElemType::kF16, false, false});
  untiled.tiled = false;
  EXPECT_FALSE(GenerateGemm(untiled).ok());
  // SwiGLU is a tensor-core epilogue that replaces the bias and residual epilogues.
  for (const auto& [bias, acc] : {std::pair{true, false}, std::pair{false, true}}) {
    const absl::StatusOr<std::string> ptx =
        GenerateGemm(ConfigOf({16, 64, 64, ElemType::kF16, bias, acc, kMmaWideTile, true}));
    ASSERT_FALSE(ptx.ok());
    EXPECT_NE(ptx.status().message().find("swiglu"), std::string::npos) << ptx.status();
  }
  // Split-K: one k slice a warp, every slice at least one k step (64 / 32 = 2 steps).
  EXPECT_TRUE(
      GenerateGemm(ConfigOf({16, 64, 64, ElemType::kF16, true, true, kMmaWideTile, false, 2}))
          .ok());
  EXPECT_FALSE(
      GenerateGemm(ConfigOf({16, 64, 64, ElemType::kF16, true, true, kMmaWideTile, false, 3}))
          .ok());
  EXPECT_FALSE(
      GenerateGemm(ConfigOf({16, 64, 64, ElemType::kF16, false, false, kMmaNarrowTile, false, 2}))
          .ok());
  // 5 steps: slices of 2 steps leave a fourth empty.
  EXPECT_FALSE(
      GenerateGemm(ConfigOf({16, 64, 160, ElemType::kF16, false, false, kMmaWideTile, false, 4}))
          .ok());
  GemmConfig fma_swiglu = ConfigOf({16, 64, 64, ElemType::kF16, false, false, kMmaWideTile, true});
  fma_swiglu.tensor_cores = false;
  EXPECT_FALSE(GenerateGemm(fma_swiglu).ok());
  // Activations other than the weights' type cannot feed the mma as they are; a half output
  // is not read back for the residual add.
  GemmConfig mixed = ConfigOf({16, 64, 64, ElemType::kF16, false, false});
  mixed.x_dtype = ElemType::kBF16;
  absl::StatusOr<std::string> refused = GenerateGemm(mixed);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("x_dtype bf16"), std::string::npos) << refused.status();
  GemmConfig half_acc = ConfigOf({16, 64, 64, ElemType::kF16, false, true});
  half_acc.y_dtype = ElemType::kF16;
  refused = GenerateGemm(half_acc);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("y_dtype f16"), std::string::npos) << refused.status();
  GemmConfig odd_n = ConfigOf({16, 75, 64, ElemType::kF16, false, false});
  odd_n.y_dtype = ElemType::kF16;
  EXPECT_FALSE(GenerateGemm(odd_n).ok());
  // The fused RMSNorm reads the f32 residual.
  GemmConfig normed;
  normed.norm = true;
  normed.x_dtype = ElemType::kF16;
  EXPECT_FALSE(GenerateGemm(normed).ok());
}

TEST(GemmMma, AssemblesWithPtxasWithoutSpills) {
  const std::string ptxas = FindPtxas();
  if (ptxas.empty()) {
    if (InCi()) FAIL() << "ptxas not found and CI=true";
    GTEST_SKIP() << "ptxas not found on PATH or in /usr/local/cuda/bin: the tensor-core GEMM is "
                    "not checked against the real assembler";
  }
  for (const auto& [sm, arch] : {std::pair{80, "sm_80"}, std::pair{90, "sm_90"}}) {
    for (ElemType dt : {ElemType::kF16, ElemType::kBF16}) {
      for (const auto& [tile, swiglu] :
           {std::pair{kMmaWideTile, false}, std::pair{kMmaNarrowTile, false},
            std::pair{kMmaLargeTile, false}, std::pair{GemmMmaTile{128, 256, 2, 4, 1, 3}, false},
            std::pair{kMmaLargeTile, true}, std::pair{GemmMmaTile{128, 256, 2, 4, 1, 3}, true},
            std::pair{kMmaNarrowTile, true}}) {
        // f32 inputs, and inputs (with SwiGLU outputs) in the weights' type.
        for (bool half_io : {false, true}) {
          const GemmConfig cfg =
              ConfigOf({64, 2048, 2048, dt, !swiglu, !swiglu, tile, swiglu, 1, half_io},
                       ptx::Target{sm, 78});
          absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
          ASSERT_TRUE(ptx.ok()) << ptx.status();
          const std::string what =
              absl::StrCat(cfg.Key(), " tile ", tile.bm, "x", tile.bn, " ", arch);
          const PtxasResult r = AssembleAll(ptxas, {{cfg.Key(), *ptx}}, arch);
          ASSERT_TRUE(r.ok) << what << ":\n" << r.log;
          ASSERT_EQ(r.entries.size(), 1u);
          EXPECT_EQ(r.entries[0].spill_stores, 0) << what;
          EXPECT_EQ(r.entries[0].spill_loads, 0) << what;
          std::printf("%s: %d registers\n", what.c_str(), r.entries[0].registers);
        }
      }
      // Split-K: the prefill tiles with step bounds in registers, and the reduction; f32
      // inputs, and inputs (with SwiGLU outputs) in the weights' type.
      for (const auto& [tile, swiglu] :
           {std::pair{kMmaLargeTile, false}, std::pair{GemmMmaTile{64, 128, 2, 2, 1, 3}, false},
            std::pair{GemmMmaTile{128, 256, 2, 4, 1, 3}, true}}) {
        for (bool half_io : {false, true}) {
          const GemmConfig cfg =
              ConfigOf({1024, 2048, 2048, dt, !swiglu, !swiglu, tile, swiglu, 4, half_io},
                       ptx::Target{sm, 78});
          absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
          ASSERT_TRUE(ptx.ok()) << ptx.status();
          absl::StatusOr<std::string> reduce = GenerateGemmReduce(GemmReduceFor(cfg));
          ASSERT_TRUE(reduce.ok()) << reduce.status();
          const PtxasResult r =
              AssembleAll(ptxas, {{cfg.Key(), *ptx}, {GemmReduceFor(cfg).Key(), *reduce}}, arch);
          ASSERT_TRUE(r.ok) << cfg.Key() << ":\n" << r.log;
          ASSERT_EQ(r.entries.size(), 2u);
          const std::string keys[] = {cfg.Key(), GemmReduceFor(cfg).Key()};
          for (int e = 0; e < 2; ++e) {
            EXPECT_EQ(r.entries[e].spill_stores, 0) << keys[e] << " " << arch;
            EXPECT_EQ(r.entries[e].spill_loads, 0) << keys[e] << " " << arch;
            std::printf("%s %s: %d registers\n", keys[e].c_str(), arch, r.entries[e].registers);
          }
        }
      }
    }
  }
}

// Registers of `cfg`'s PTX from ptxas at sm_90 (occupancy), or 0 (unknown: the cost model
// then assumes 32) without ptxas.
int RegistersOf(const GemmConfig& cfg, const std::string& ptx) {
  const std::string ptxas = FindPtxas();
  if (ptxas.empty()) return 0;
  const PtxasResult a = AssembleAll(ptxas, {{cfg.Key(), ptx}}, "sm_90");
  return a.ok && a.entries.size() == 1 ? a.entries[0].registers : 0;
}

struct GemmEstimate {
  emu::KernelCounters counters;
  cost::Estimate estimate;  // split-K: the GEMM's launch and the reduction's, summed
};
// `cfg` over m rows on the emulator (a sample of its CTAs, zero data), and the cost model's
// h100 estimate of the launch in a graph.
GemmEstimate EstimateGemm(const GemmConfig& cfg, int m) {
  absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return {};
  emu::EmulatorOptions options;
  options.collect_counters = true;
  options.sample_ctas = 6;
  options.poison_allocations = false;
  EmuHarness h(options);
  const uint64_t dx = h.Alloc(static_cast<size_t>(m) * cfg.k * 4);
  const uint64_t dw = h.Alloc(static_cast<size_t>(cfg.n) * cfg.k * 2);
  const uint64_t dy = h.Alloc(static_cast<size_t>(m) * cfg.n * 4);
  const uint64_t ws =
      cfg.split_k > 1 ? h.Alloc(static_cast<size_t>(m * GemmWorkspaceFloatsPerRow(cfg)) * 4) : dy;
  EXPECT_TRUE(
      h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, m), {Ptr(dx), Ptr(dw), Ptr(0), Ptr(ws), U32(m)})
          .ok());
  absl::StatusOr<std::string> reduce;
  if (cfg.split_k > 1) {
    reduce = GenerateGemmReduce(GemmReduceFor(cfg));
    EXPECT_TRUE(reduce.ok()) << reduce.status();
    if (!reduce.ok()) return {};
    EXPECT_TRUE(h.Run(*reduce, kGemmReduceEntry, GemmReduceLaunch(GemmReduceFor(cfg), m),
                      {Ptr(ws), Ptr(0), Ptr(dy), U32(m)})
                    .ok());
  }
  std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
  EXPECT_EQ(counters.size(), cfg.split_k > 1 ? 2u : 1u);
  if (counters.empty()) return {};
  GemmEstimate r{counters[0], {}};
  const cost::DeviceSpec& h100 = *cost::FindDevice("h100");
  r.estimate =
      cost::EstimateLaunch(h100, r.counters, {.registers_per_thread = RegistersOf(cfg, *ptx)},
                           /*in_graph=*/true);
  if (counters.size() == 2) {
    const cost::Estimate second = cost::EstimateLaunch(h100, counters[1], {}, /*in_graph=*/true);
    r.estimate.seconds += second.seconds;
    r.estimate.binding += absl::StrFormat(", + %.1f us reduction", second.seconds * 1e6);
  }
  return r;
}

std::string Describe(const cost::Estimate& e) {
  return absl::StrFormat(
      "%.1f us, bound by %s (dram %.1f, tensor %.1f, fp32 %.1f, issue %.1f, shared %.1f, "
      "latency %.1f us), %d CTAs/SM (%s)",
      e.seconds * 1e6, e.binding, e.dram_s * 1e6, e.tensor_s * 1e6, e.fp32_s * 1e6, e.issue_s * 1e6,
      e.shared_s * 1e6, e.latency_s * 1e6, e.occupancy.ctas_per_sm, e.occupancy.limit);
}

// The counters of the prefill tiles over a whole grid (no sampling) at a shape with partial
// tiles: ldmatrix reads and the activation stores without bank conflicts, each CTA reading
// its weight rows and activation rows once (sectors requested = CTAs along the other axis x
// the matrix, the ideal of 16-byte chunks), and the tensor FLOPs of the padded tiles.
TEST(GemmMma, PrefillTilesReadEachTileOnceWithoutBankConflicts) {
  constexpr int kM = 200, kK = 272;  // rows of whole sectors, a k tail
  for (const bool swiglu : {false, true}) {
    for (const GemmMmaTile& t : {kMmaLargeTile, GemmMmaTile{128, 256, 2, 4, 1, 3}}) {
      const int n = swiglu ? 96 : 192;  // output columns; 192 weight rows either way
      const GemmConfig cfg = ConfigOf({kM, n, kK, ElemType::kBF16, false, false, t, swiglu});
      SCOPED_TRACE(cfg.Key());
      absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      emu::EmulatorOptions options;
      options.collect_counters = true;
      EmuHarness h(options);
      const uint64_t dx = h.Upload(std::vector<float>(size_t{kM} * kK, 0.5f));
      const uint64_t dw = h.Upload(std::vector<uint16_t>(size_t{192} * kK, 0x3f80));  // 1.0
      const uint64_t dy = h.Alloc(size_t{kM} * n * 4);
      ASSERT_TRUE(
          h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, kM), {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy), U32(kM)})
              .ok());
      const std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
      ASSERT_EQ(counters.size(), 1u);
      const emu::KernelCounters& c = counters[0];
      EXPECT_EQ(c.shared_load.BankConflicts(), 0u);
      EXPECT_EQ(c.shared_store.BankConflicts(), 0u);
      const int64_t row_tiles = CeilDiv(kM, t.bm), col_tiles = CeilDiv(192, t.bn);
      EXPECT_EQ(c.tensor_flops, 2ull * row_tiles * t.bm * col_tiles * t.bn * CeilDiv(kK, 32) * 32);
      for (const emu::BufferTraffic& b : c.buffers) {
        if (b.base == dw) {  // every weight row of a column tile once per row tile
          EXPECT_EQ(b.access.sectors, static_cast<uint64_t>(row_tiles * 192 * kK * 2 / 32));
          EXPECT_EQ(b.access.sectors, b.access.ideal_sectors);
        } else if (b.base == dx) {  // every activation row once per column tile
          EXPECT_EQ(b.access.sectors, static_cast<uint64_t>(col_tiles * kM * kK * 4 / 32));
        }
      }
      const std::vector<float> y = h.Download<float>(dy, size_t{kM} * n);
      const double dot = 0.5 * kK;
      const double want = swiglu ? dot / (1 + std::exp(-dot)) * dot : dot;
      EXPECT_NEAR(y[0], want, 1e-3 * want);
      EXPECT_NEAR(y.back(), want, 1e-3 * want);
    }
  }
}

// The tensor-core form against the FMA-tiled form at the Llama-3.2-1B attention
// projection (2048 x 2048, f16 weights) for batches of 16, 64 and 256 rows: their sampled
// counters, the cost model's h100 estimates (printed, labelled as estimates), and the
// counter checks: ldmatrix reads without bank conflicts, and the tensor FLOPs of the padded
// tiles.
TEST(GemmMma, EstimateAgainstTheTiledFormAtALlamaProjection) {
  constexpr int kN = 2048, kK = 2048;
  for (int m : {16, 64, 256}) {
    SCOPED_TRACE(m);
    GemmConfig fma = ConfigOf({m, kN, kK, ElemType::kF16, false, true});
    fma.tensor_cores = false;
    const GemmConfig wide = ConfigOf({m, kN, kK, ElemType::kF16, false, true, kMmaWideTile});
    const GemmConfig narrow = ConfigOf({m, kN, kK, ElemType::kF16, false, true, kMmaNarrowTile});
    const std::pair<const char*, GemmConfig> forms[] = {
        {"tiled f32 FMA", fma},
        {"tensor cores, 64x64 tiles", wide},
        {"tensor cores, 16x16 tiles, k over warps", narrow}};
    double seconds[3] = {};
    for (int f = 0; f < 3; ++f) {
      const auto& [name, cfg] = forms[f];
      const GemmEstimate g = EstimateGemm(cfg, m);
      if (cfg.tensor_cores) {
        // ldmatrix never conflicts; the narrow form's reduction reads one word a lane.
        EXPECT_EQ(g.counters.shared_load.BankConflicts(), 0u);
        EXPECT_EQ(g.counters.tensor_flops, 2ull * CeilDiv(m, cfg.tile_m) * cfg.tile_m * kN * kK);
      }
      seconds[f] = g.estimate.seconds;
      absl::PrintF("estimate (not measured): gemm %dx%dx%d f16, %s on h100: %s\n", m, kN, kK, name,
                   Describe(g.estimate));
    }
    const double weights_s = 2.0 * kN * kK / cost::FindDevice("h100")->dram_bytes_per_s;
    absl::PrintF(
        "estimate (not measured): %d rows: against the tiled form, 64x64 tensor-core tiles "
        "%.2fx, 16x16 %.2fx; weight-read roofline %.1f us = %.0f%% and %.0f%% of them\n",
        m, seconds[0] / seconds[1], seconds[0] / seconds[2], weights_s * 1e6,
        100 * weights_s / seconds[1], 100 * weights_s / seconds[2]);
  }
}

// GemmConfigFor's pick against the other forms, by the cost model's h100 estimates, at the
// Llama-3.2-1B projections (q/o, k/v, fused gate/up, down) and batches of 16 to 2048 rows:
// the pick must be within 1.35x of the cheapest form. Split-K forms count their reduction
// launch. The table is printed (estimates, not measurements).
// One test per shape, so ctest spreads the emulator's minutes over its jobs.
struct GemmShape {
  int m, n, k;
};

class GemmMmaPick : public ::testing::TestWithParam<GemmShape> {};

TEST_P(GemmMmaPick, TheChosenFormIsNearTheCostModelsCheapest) {
  constexpr int kSms = 132;  // h100
  const GemmShape& sh = GetParam();
  GemmConfig base = ConfigOf({sh.m, sh.n, sh.k, ElemType::kF16, false, true});
  base.tiled = base.tensor_cores = false;
  std::vector<std::pair<std::string, GemmConfig>> forms;
  // The CUDA-core forms up to 256 rows: at 1024 they were estimated 8-17x the tensor-core
  // forms, and take the emulator minutes.
  if (sh.m <= 256) {
    GemmConfig gemv = base;
    gemv.m_tile = 8;
    forms.emplace_back("GEMV, 8-row tiles", gemv);
    GemmConfig fma = base;
    fma.tiled = true;
    forms.emplace_back("FMA tiled", fma);
  }
  for (const GemmMmaTile& t :
       {kMmaNarrowTile, GemmMmaTile{16, 32, 1, 2, 2}, GemmMmaTile{16, 64, 1, 4, 1},
        GemmMmaTile{32, 64, 2, 2, 1}, kMmaWideTile, GemmMmaTile{64, 128, 2, 2, 1, 3},
        GemmMmaTile{128, 64, 2, 2, 1, 3}, kMmaLargeTile, GemmMmaTile{128, 256, 2, 4, 1, 3}}) {
    forms.emplace_back(absl::StrCat("tensor cores ", t.bm, "x", t.bn, " warps ", t.wm, "x", t.wn,
                                    "x", t.wk, ", ", t.stages, " stages"),
                       ConfigOf({sh.m, sh.n, sh.k, ElemType::kF16, false, true, t}));
  }
  // From 512 rows the prefill tiles split two ways too (the grid short of a wave), and
  // the pick itself, whatever its split.
  if (sh.m >= 512) {
    for (const GemmMmaTile& t :
         {GemmMmaTile{64, 128, 2, 2, 1, 3}, kMmaLargeTile, GemmMmaTile{128, 256, 2, 4, 1, 3}}) {
      forms.emplace_back(absl::StrCat("tensor cores ", t.bm, "x", t.bn, ", split-K 2"),
                         ConfigOf({sh.m, sh.n, sh.k, ElemType::kF16, false, true, t, false, 2}));
    }
  }
  const GemmConfig chosen_cfg = GemmConfigFor(base, sh.m, kSms);
  const std::string chosen_key = chosen_cfg.Key();
  if (std::none_of(forms.begin(), forms.end(),
                   [&](const auto& f) { return f.second.Key() == chosen_key; })) {
    forms.emplace_back(absl::StrCat("the pick, split-K ", chosen_cfg.split_k), chosen_cfg);
  }
  double best = 0, chosen = 0;
  std::string best_name;
  for (const auto& [name, cfg] : forms) {
    const cost::Estimate e = EstimateGemm(cfg, sh.m).estimate;
    const double us = e.seconds * 1e6;
    const bool is_chosen = cfg.Key() == chosen_key;
    absl::PrintF("estimate (not measured): gemm %dx%dx%d f16 on h100, %s: %s%s\n", sh.m, sh.n, sh.k,
                 name, Describe(e), is_chosen ? "  <- chosen" : "");
    if (best == 0 || us < best) {
      best = us;
      best_name = name;
    }
    if (is_chosen) chosen = us;
  }
  ASSERT_GT(chosen, 0) << "the chosen form " << chosen_key << " is not among the candidates";
  EXPECT_LE(chosen, 1.35 * best) << "cheapest: " << best_name;
}

INSTANTIATE_TEST_SUITE_P(Llama1bProjections, GemmMmaPick,
                         ::testing::Values(GemmShape{16, 2048, 2048}, GemmShape{64, 2048, 2048},
                                           GemmShape{256, 2048, 2048}, GemmShape{1024, 2048, 2048},
                                           GemmShape{16, 512, 2048}, GemmShape{256, 512, 2048},
                                           GemmShape{16, 16384, 2048}, GemmShape{64, 16384, 2048},
                                           GemmShape{256, 16384, 2048}, GemmShape{16, 2048, 8192},
                                           GemmShape{64, 2048, 8192}, GemmShape{256, 2048, 8192},
                                           GemmShape{1024, 16384, 2048},
                                           GemmShape{2048, 16384, 2048},
                                           GemmShape{1024, 2048, 8192}, GemmShape{2048, 2048, 8192},
                                           GemmShape{2048, 2048, 2048}, GemmShape{2048, 512, 2048}),
                         [](const ::testing::TestParamInfo<GemmShape>& info) {
                           return absl::StrCat(info.param.m, "x", info.param.n, "x", info.param.k);
                         });

}  // namespace
}  // namespace ptxserve::kernels::testing
