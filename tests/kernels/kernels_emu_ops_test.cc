// The non-attention decode-step kernels on the PTX emulator against engine/cpu/ops.h
// (and the CPU sampler's greedy rules for argmax). Sizes are chosen off the tile
// grid: 17, 31, 33, 100 rows/elements, K not a multiple of the warp-wide chunk.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/cpu/ops.h"
#include "engine/model/dtype.h"
#include "gtest/gtest.h"
#include "kernels/argmax.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"
#include "kernels/silu_mul.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/residual_add.h"

namespace ptxserve::kernels::testing {
namespace {

// Values representable in `t`, returned as f32, with the device copy in `t`.
std::vector<float> Quantised(ElemType t, std::vector<float> v, std::vector<uint8_t>* bytes) {
  bytes->resize(v.size() * ElemSize(t));
  ConvertFromFloat(ToDType(t), v.data(), v.size(), bytes->data());
  ConvertToFloat(ToDType(t), bytes->data(), v.size(), v.data());
  return v;
}

const ElemType kAllTypes[] = {ElemType::kF32, ElemType::kF16, ElemType::kBF16};

TEST(KernelsEmuOps, EmbeddingMatchesCpu) {
  std::mt19937 rng(3);
  for (ElemType dt : kAllTypes) {
    for (int dim : {4, 31, 100, 128, 1000}) {
      SCOPED_TRACE(absl::StrCat(ElemTypeName(dt), " dim ", dim));
      const int vocab = 37;
      std::vector<uint8_t> table_bytes;
      const std::vector<float> table = Quantised(dt, RandomFloats(rng, vocab * dim), &table_bytes);
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17, -1, 37, 1000, 2};
      const int n = static_cast<int>(ids.size());
      std::vector<float> want(n * dim, 0.0f);
      for (int t = 0; t < n; ++t) {
        if (ids[t] >= 0 && ids[t] < vocab)
          cpu::Embed({table.data(), DType::kF32}, &ids[t], 1, dim, &want[t * dim]);
      }
      EmbeddingConfig cfg;
      cfg.dim = dim;
      cfg.table_dtype = dt;
      absl::StatusOr<std::string> ptx = GenerateEmbedding(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      EmuHarness h;
      const uint64_t dt_ = h.Upload(table_bytes), di = h.Upload(ids), dout = h.Alloc(n * dim * 4);
      const absl::Status st = h.Run(*ptx, kEmbeddingEntry, EmbeddingLaunch(cfg, n),
                                    {Ptr(dt_), Ptr(di), Ptr(dout), U32(n), U32(vocab)});
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE(Near(h.Download<float>(dout, n * dim), want, 0, 0));
    }
  }
}

// Trap: a one-warp row reduces with shfl.down and must broadcast lane 0's sum (dims
// up to 128); wider rows go through per-warp slots and a separate block-result slot.
TEST(KernelsEmuOps, RmsNormMatchesCpu) {
  std::mt19937 rng(4);
  for (ElemType dt : kAllTypes) {
    for (int dim : {17, 33, 100, 128, 1000, 4096, 5000}) {
      SCOPED_TRACE(absl::StrCat(ElemTypeName(dt), " dim ", dim));
      const int rows = 3;
      const std::vector<float> x = RandomFloats(rng, rows * dim, -3, 3);
      std::vector<uint8_t> w_bytes;
      const std::vector<float> w = Quantised(dt, RandomFloats(rng, dim, 0.5f, 1.5f), &w_bytes);
      const float eps = 1e-5f;
      std::vector<float> want(x.size());
      cpu::RmsNorm(x.data(), w.data(), rows, dim, eps, want.data());
      RmsNormConfig cfg;
      cfg.dim = dim;
      cfg.weight_dtype = dt;
      absl::StatusOr<std::string> ptx = GenerateRmsNorm(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      EmuHarness h;
      const uint64_t dx = h.Upload(x), dw = h.Upload(w_bytes);
      // In place (out aliases x), as the engine runs it.
      const absl::Status st = h.Run(*ptx, kRmsNormEntry, RmsNormLaunch(cfg, rows),
                                    {Ptr(dx), Ptr(dw), Ptr(dx), U32(rows), F32(eps)});
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE(Near(h.Download<float>(dx, x.size()), want, 1e-5f, 1e-5f));
      // The model's f16/bf16 activations (h): the same values rounded once as stored, so
      // within the type's unit roundoff u (relative) of the reference, plus the f32 tolerance.
      for (ElemType out : {ElemType::kF16, ElemType::kBF16}) {
        SCOPED_TRACE(absl::StrCat("out ", ElemTypeName(out)));
        RmsNormConfig oc = cfg;
        oc.out_dtype = out;
        absl::StatusOr<std::string> optx = GenerateRmsNorm(oc);
        if (dim % 2 != 0) {  // whole pairs per thread only
          EXPECT_FALSE(optx.ok());
          continue;
        }
        ASSERT_TRUE(optx.ok()) << optx.status();
        const uint64_t dx2 = h.Upload(x), dout = h.Alloc(x.size() * 2);
        const absl::Status ost = h.Run(*optx, kRmsNormEntry, RmsNormLaunch(oc, rows),
                                       {Ptr(dx2), Ptr(dw), Ptr(dout), U32(rows), F32(eps)});
        ASSERT_TRUE(ost.ok()) << ost;
        EXPECT_TRUE(
            Near(DownloadAs(h, out, dout, x.size()), want, 1e-5f, UnitRoundoff(out) + 2e-5f));
      }
    }
  }
}

TEST(KernelsEmuOps, SiluMulAndResidualAddMatchCpu) {
  std::mt19937 rng(6);
  for (int n : {1, 3, 4, 17, 100, 1031, 4096}) {
    SCOPED_TRACE(absl::StrCat("n ", n));
    const std::vector<float> g = RandomFloats(rng, n, -20, 20), u = RandomFloats(rng, n, -2, 2);
    std::vector<float> want(n);
    cpu::SiluMul(g.data(), u.data(), n, want.data());
    SiluMulConfig sc;
    absl::StatusOr<std::string> ptx = GenerateSiluMul(sc);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EmuHarness h;
    const uint64_t dg = h.Upload(g), du = h.Upload(u), dout = h.Alloc(n * 4);
    absl::Status st =
        h.Run(*ptx, kSiluMulEntry, SiluMulLaunch(sc, n), {Ptr(dg), Ptr(du), Ptr(dout), U32(n)});
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Near(h.Download<float>(dout, n), want, 1e-6f, 2e-6f));

    std::vector<float> x = g;
    cpu::AddInPlace(x.data(), u.data(), n);
    ResidualAddConfig rc;
    ptx = GenerateResidualAdd(rc);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    st = h.Run(*ptx, kResidualAddEntry, ResidualAddLaunch(rc, n), {Ptr(dg), Ptr(du), U32(n)});
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Near(h.Download<float>(dg, n), x, 0, 0));
  }
  // Fused gate_up rows [rows][2][I].
  const int rows = 3, inter = 36;
  const std::vector<float> gu = RandomFloats(rng, rows * 2 * inter, -6, 6);
  std::vector<float> want(rows * inter);
  for (int r = 0; r < rows; ++r) {
    cpu::SiluMul(&gu[r * 2 * inter], &gu[r * 2 * inter + inter], inter, &want[r * inter]);
  }
  SiluMulConfig fc;
  fc.fused_inter = inter;
  absl::StatusOr<std::string> ptx = GenerateSiluMul(fc);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EmuHarness h;
  const uint64_t dgu = h.Upload(gu), dout = h.Alloc(rows * inter * 4);
  const absl::Status st = h.Run(*ptx, kSiluMulEntry, SiluMulLaunch(fc, rows * inter),
                                {Ptr(dgu), Ptr(0), Ptr(dout), U32(rows * inter)});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(Near(h.Download<float>(dout, rows * inter), want, 1e-6f, 2e-6f));
  // Writing the model's f16/bf16 activations (act): rounded once as stored.
  for (ElemType out : {ElemType::kF16, ElemType::kBF16}) {
    SCOPED_TRACE(absl::StrCat("out ", ElemTypeName(out)));
    SiluMulConfig oc = fc;
    oc.out_dtype = out;
    absl::StatusOr<std::string> optx = GenerateSiluMul(oc);
    ASSERT_TRUE(optx.ok()) << optx.status();
    const uint64_t dhalf = h.Alloc(rows * inter * 2);
    const absl::Status ost = h.Run(*optx, kSiluMulEntry, SiluMulLaunch(oc, rows * inter),
                                   {Ptr(dgu), Ptr(0), Ptr(dhalf), U32(rows * inter)});
    ASSERT_TRUE(ost.ok()) << ost;
    EXPECT_TRUE(
        Near(DownloadAs(h, out, dhalf, rows * inter), want, 1e-6f, UnitRoundoff(out) + 4e-6f));
  }
}

struct GemmCase {
  int m, n, k;
  ElemType dt;
  int m_tile;  // 0: the tiled form
  bool bias, accumulate;
  ElemType x_dt = ElemType::kF32;  // the input rows' type (the model's activations)
};

TEST(KernelsEmuOps, GemmMatchesCpu) {
  const GemmCase cases[] = {
      {1, 33, 128, ElemType::kF16, 1, false, false},
      {3, 17, 100, ElemType::kF32, 4, true, false},
      {5, 31, 1000, ElemType::kBF16, 4, false, true},
      {8, 64, 4096, ElemType::kF16, 8, true, true},
      {17, 40, 264, ElemType::kF32, 4, false, false},
      {2, 100, 36, ElemType::kF16, 2, false, false},
      {4, 8, 2056, ElemType::kBF16, 8, true, false},
      // Tiled form: M, N, K off the 64/64/16 tile grid, and on it.
      {100, 33, 100, ElemType::kF32, 0, true, false},
      {17, 130, 37, ElemType::kF16, 0, false, true},
      {64, 64, 64, ElemType::kBF16, 0, true, true},
      {9, 7, 1000, ElemType::kF16, 0, false, false},
      // f16/bf16 input rows: GEMV (K off the chunk grid, odd K) and tiled forms.
      {1, 33, 128, ElemType::kF16, 1, false, false, ElemType::kF16},
      {5, 31, 1000, ElemType::kBF16, 4, false, true, ElemType::kBF16},
      {3, 17, 101, ElemType::kF16, 4, true, false, ElemType::kF16},
      {8, 64, 4096, ElemType::kBF16, 8, true, true, ElemType::kF16},
      {17, 130, 37, ElemType::kF16, 0, false, true, ElemType::kF16},
      {100, 33, 100, ElemType::kBF16, 0, true, false, ElemType::kBF16},
  };
  std::mt19937 rng(7);
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", ElemTypeName(c.dt), " mt ",
                              c.m_tile, " x ", ElemTypeName(c.x_dt)));
    // The inputs as stored in their type (the reference takes the same values).
    std::vector<uint8_t> x_bytes;
    const std::vector<float> x = Quantised(c.x_dt, RandomFloats(rng, c.m * c.k), &x_bytes);
    std::vector<uint8_t> w_bytes;
    const std::vector<float> w = Quantised(c.dt, RandomFloats(rng, c.n * c.k), &w_bytes);
    const std::vector<float> bias = RandomFloats(rng, c.n);
    const std::vector<float> y0 = RandomFloats(rng, c.m * c.n);
    std::vector<float> want(c.m * c.n);
    cpu::Gemm(x.data(), w.data(), c.bias ? bias.data() : nullptr, c.m, c.n, c.k, want.data());
    if (c.accumulate) {
      for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
    }
    GemmConfig cfg;
    cfg.n = c.n;
    cfg.k = c.k;
    cfg.weight_dtype = c.dt;
    cfg.has_bias = c.bias;
    cfg.accumulate = c.accumulate;
    cfg.m_tile = c.m_tile == 0 ? 4 : c.m_tile;
    cfg.tiled = c.m_tile == 0;
    cfg.x_dtype = c.x_dt;
    absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EmuHarness h;
    const uint64_t dx = h.Upload(x_bytes), dw = h.Upload(w_bytes), db = h.Upload(bias);
    const uint64_t dy = h.Upload(y0);
    const absl::Status st = h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, c.m),
                                  {Ptr(dx), Ptr(dw), Ptr(db), Ptr(dy), U32(c.m)});
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Near(h.Download<float>(dy, want.size()), want, 1e-4f, 1e-4f));
  }
}

// The CPU sampler's greedy rule: largest value, lowest id among ties; NaN never wins;
// no value above -inf -> the first -inf, all NaN -> 0.
int32_t RefArgmax(const float* l, int n) {
  int32_t best = -1;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(l[i])) continue;
    if (best < 0 || l[i] > l[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

TEST(KernelsEmuOps, ArgmaxMatchesSamplerRules) {
  std::mt19937 rng(8);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int threads : {32, 256}) {
    for (int vocab : {1, 31, 100, 2048, 32003}) {
      SCOPED_TRACE(absl::StrCat("threads ", threads, " vocab ", vocab));
      const int rows = 6;
      std::vector<float> l = RandomFloats(rng, rows * vocab, -5, 5);
      // Row 1: a tie between two ids far apart; row 2: NaNs and -inf only;
      // row 3: all NaN; row 4: +inf; row 5: ties at the maximum everywhere.
      if (vocab > 1) {
        l[vocab + vocab - 1] = 9.0f;
        l[vocab + vocab / 3] = 9.0f;
      }
      for (int i = 0; i < vocab; ++i) l[2 * vocab + i] = (i % 3 == 0) ? nan : -inf;
      for (int i = 0; i < vocab; ++i) l[3 * vocab + i] = nan;
      l[4 * vocab + vocab / 2] = inf;
      for (int i = 0; i < vocab; ++i) l[5 * vocab + i] = 1.0f;
      ArgmaxConfig cfg;
      cfg.threads = threads;
      absl::StatusOr<std::string> ptx = GenerateArgmax(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      EmuHarness h;
      const uint64_t dl = h.Upload(l), dout = h.Alloc(rows * 4);
      const absl::Status st = h.Run(*ptx, kArgmaxEntry, ArgmaxLaunch(cfg, rows),
                                    {Ptr(dl), Ptr(dout), U32(vocab), U32(rows)});
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<int32_t> got = h.Download<int32_t>(dout, rows);
      for (int r = 0; r < rows; ++r) EXPECT_EQ(got[r], RefArgmax(&l[r * vocab], vocab)) << r;
    }
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
