// The tensor-core GEMM (kernels/gemm_mma.cc) on the emulator against the CPU GEMM, with a
// tolerance derived from its one extra rounding, and through ptxas for sm_80 and sm_90.
//
// Tolerance: the kernel rounds each activation to the weights' type (unit roundoff u =
// 2^-11 for f16, 2^-8 for bf16), then multiplies exactly and accumulates in f32 like the
// reference. So |got - want| <= u * sum_k |x_k w_k| + the two f32 accumulations' error,
// bounded by 2 * K * 2^-24 * sum_k |x_k w_k| (Higham's gamma_K, twice).
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
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

struct MmaCase {
  int m, n, k;
  ElemType dtype;
  bool bias, accumulate;
  GemmMmaTile tile = kMmaWideTile;
};

std::string CaseName(const MmaCase& c) {
  return absl::StrCat("m", c.m, "_n", c.n, "_k", c.k, "_", ElemTypeName(c.dtype),
                      c.bias ? "_bias" : "", c.accumulate ? "_acc" : "", "_tile", c.tile.bm, "x",
                      c.tile.bn, "_w", c.tile.wm, c.tile.wn, c.tile.wk);
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
  cfg.target = target;
  return cfg;
}

class GemmMma : public ::testing::TestWithParam<MmaCase> {};

TEST_P(GemmMma, MatchesTheCpuGemmWithinItsRounding) {
  const MmaCase c = GetParam();
  const GemmConfig cfg = ConfigOf(c);
  absl::StatusOr<std::string> ptx = GenerateGemmMma(cfg, c.tile);
  ASSERT_TRUE(ptx.ok()) << ptx.status();

  std::mt19937 rng(c.m * 131 + c.n * 7 + c.k);
  const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(c.m) * c.k, -2, 2);
  std::vector<float> w = RandomFloats(rng, static_cast<size_t>(c.n) * c.k, -1, 1);
  const std::vector<float> bias = RandomFloats(rng, c.n);
  const std::vector<float> y0 = RandomFloats(rng, static_cast<size_t>(c.m) * c.n);
  const DType dt = c.dtype == ElemType::kF16 ? DType::kF16 : DType::kBF16;
  std::vector<uint8_t> w_bytes(w.size() * 2);
  ConvertFromFloat(dt, w.data(), w.size(), w_bytes.data());
  ConvertToFloat(dt, w_bytes.data(), w.size(), w.data());  // the weights as stored

  EmuHarness h;
  const uint64_t dx = h.Upload(x), dw = h.Upload(w_bytes), db = h.Upload(bias);
  const uint64_t dy = c.accumulate ? h.Upload(y0) : h.Alloc(y0.size() * 4);
  ASSERT_TRUE(h.Run(*ptx, kGemmEntry, GemmMmaLaunch(c.tile, cfg, c.m),
                    {Ptr(dx), Ptr(dw), Ptr(c.bias ? db : 0), Ptr(dy), U32(c.m)})
                  .ok());
  const std::vector<float> got = h.Download<float>(dy, y0.size());

  const double u = c.dtype == ElemType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double gamma = 2.0 * c.k * std::ldexp(1.0, -24);
  int misses = 0;
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double want = 0, magnitude = 0;
      for (int k = 0; k < c.k; ++k) {
        const double p = double{x[i * c.k + k]} * w[j * c.k + k];
        want += p;
        magnitude += std::fabs(p);
      }
      if (c.bias) want += bias[j];
      if (c.accumulate) want += y0[i * c.n + j];
      const double tol = (u + gamma) * magnitude + 1e-6 * std::fabs(want);
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
        MmaCase{5, 64, 264, ElemType::kBF16, false, true, GemmMmaTile{16, 32, 1, 2, 2}}),
    [](const ::testing::TestParamInfo<MmaCase>& i) { return CaseName(i.param); });

TEST(GemmMma, RefusesF32WeightsKNotAMultipleOf8AndBadTiles) {
  const GemmConfig f16 = ConfigOf({16, 64, 64, ElemType::kF16, false, false});
  EXPECT_FALSE(
      GenerateGemmMma(ConfigOf({16, 64, 64, ElemType::kF32, false, false}), kMmaWideTile).ok());
  EXPECT_FALSE(
      GenerateGemmMma(ConfigOf({16, 64, 60, ElemType::kF16, false, false}), kMmaWideTile).ok());
  EXPECT_FALSE(GenerateGemmMma(f16, GemmMmaTile{64, 64, 2, 2, 2}).ok());  // eight warps
  EXPECT_FALSE(GenerateGemmMma(f16, GemmMmaTile{32, 64, 4, 1, 1}).ok());  // 8-row warp tiles
  EXPECT_FALSE(GenerateGemmMma(f16, GemmMmaTile{64, 48, 2, 2, 1}).ok());  // 24-column warp tiles
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
      for (const GemmMmaTile& tile : {kMmaWideTile, kMmaNarrowTile}) {
        const GemmConfig cfg = ConfigOf({64, 2048, 2048, dt, true, true}, ptx::Target{sm, 78});
        absl::StatusOr<std::string> ptx = GenerateGemmMma(cfg, tile);
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
  }
}

// Registers and static shared memory of `cfg`'s PTX from ptxas (occupancy), or unknown
// (0: the cost model then leaves registers out) without ptxas.
cost::LaunchResources ResourcesOf(const GemmConfig& cfg, const std::string& ptx, int shared_bytes) {
  cost::LaunchResources r{.registers_per_thread = 0, .static_shared_bytes = shared_bytes};
  if (const std::string ptxas = FindPtxas(); !ptxas.empty()) {
    const PtxasResult a = AssembleAll(ptxas, {{cfg.Key(), ptx}}, "sm_90");
    if (a.ok && a.entries.size() == 1) r.registers_per_thread = a.entries[0].registers;
  }
  return r;
}

// The tensor-core form against the FMA-tiled form at the Llama-3.2-1B attention
// projection (2048 x 2048, f16 weights) for batches of 16, 64 and 256 rows: their sampled
// counters, the cost model's h100 estimates (printed, labelled as estimates), and the
// counter checks: ldmatrix reads without bank conflicts, and the tensor FLOPs of the padded
// tiles.
TEST(GemmMma, EstimateAgainstTheTiledFormAtALlamaProjection) {
  constexpr int kN = 2048, kK = 2048;
  const cost::DeviceSpec& h100 = *cost::FindDevice("h100");
  for (int m : {16, 64, 256}) {
    SCOPED_TRACE(m);
    const GemmConfig cfg = ConfigOf({m, kN, kK, ElemType::kF16, false, true});
    struct Form {
      const char* name;
      absl::StatusOr<std::string> ptx;
      LaunchDims dims;
      int shared_bytes;
    };
    Form forms[] = {
        {"tiled f32 FMA", GenerateGemm(cfg), GemmLaunch(cfg, m), 2 * 16 * 64 * 4},
        {"tensor cores, 64x64 tiles", GenerateGemmMma(cfg, kMmaWideTile),
         GemmMmaLaunch(kMmaWideTile, cfg, m), 2 * 2 * 64 * 80},
        {"tensor cores, 16x16 tiles, k over warps", GenerateGemmMma(cfg, kMmaNarrowTile),
         GemmMmaLaunch(kMmaNarrowTile, cfg, m), 2 * 2 * 16 * 272}};
    double seconds[3] = {};
    for (int f = 0; f < 3; ++f) {
      ASSERT_TRUE(forms[f].ptx.ok()) << forms[f].ptx.status();
      emu::EmulatorOptions options;
      options.collect_counters = true;
      options.sample_ctas = 6;
      options.poison_allocations = false;
      EmuHarness h(options);
      const uint64_t dx = h.Alloc(static_cast<size_t>(m) * kK * 4);
      const uint64_t dw = h.Alloc(static_cast<size_t>(kN) * kK * 2);
      const uint64_t dy = h.Alloc(static_cast<size_t>(m) * kN * 4);
      ASSERT_TRUE(h.Run(*forms[f].ptx, kGemmEntry, forms[f].dims,
                        {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy), U32(m)})
                      .ok());
      const std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
      ASSERT_EQ(counters.size(), 1u);
      const emu::KernelCounters& c = counters[0];
      if (f > 0) {
        const int bm = f == 1 ? kMmaWideTile.bm : kMmaNarrowTile.bm;
        // ldmatrix never conflicts; the narrow form's reduction reads one word a lane.
        EXPECT_EQ(c.shared_load.BankConflicts(), 0u);
        EXPECT_EQ(c.tensor_flops, 2ull * CeilDiv(m, bm) * bm * kN * kK);
      }
      const cost::Estimate e = cost::EstimateLaunch(
          h100, c, ResourcesOf(cfg, *forms[f].ptx, forms[f].shared_bytes), /*in_graph=*/true);
      seconds[f] = e.seconds;
      absl::PrintF(
          "estimate (not measured): gemm %dx%dx%d f16, %s on %s: %.1f us, bound by %s (dram "
          "%.1f, tensor %.1f, fp32 %.1f, issue %.1f, shared %.1f, latency %.1f us), %d CTAs/SM "
          "(%s); shared-load conflicts %d of %d wavefronts\n",
          m, kN, kK, forms[f].name, h100.description, e.seconds * 1e6, e.binding, e.dram_s * 1e6,
          e.tensor_s * 1e6, e.fp32_s * 1e6, e.issue_s * 1e6, e.shared_s * 1e6, e.latency_s * 1e6,
          e.occupancy.ctas_per_sm, e.occupancy.limit, c.shared_load.BankConflicts(),
          c.shared_load.wavefronts);
    }
    const double weights_s = 2.0 * kN * kK / h100.dram_bytes_per_s;
    absl::PrintF(
        "estimate (not measured): %d rows: against the tiled form, 64x64 tensor-core tiles "
        "%.2fx, 16x16 %.2fx; weight-read roofline %.1f us = %.0f%% and %.0f%% of them\n",
        m, seconds[0] / seconds[1], seconds[0] / seconds[2], weights_s * 1e6,
        100 * weights_s / seconds[1], 100 * weights_s / seconds[2]);
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
