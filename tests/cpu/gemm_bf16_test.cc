// The bf16 GEMM on AVX512-BF16's dot products (engine/cpu/gemm_bf16.h) against sums in double
// over x rounded to bf16, within the error bound gemm_bf16.h derives; its rounding of x; which
// calls Gemm sends to it; and the detection and forcing of the instruction set it needs.
// Kernel tests are skipped, with the reason printed, on CPUs without AVX512-BF16.
#include "engine/cpu/gemm_bf16.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "gtest/gtest.h"

namespace ptxserve::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBF16(v[i]);
  return b;
}

// gamma(n) = n u / (1 - n u), u = 2^-24: the bound on n roundings of a sum in f32.
double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * 0x1p-24;
  return nu / (1 - nu);
}

class Bf16DotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DetectIsa() < Isa::kAvx512Bf16) {
      std::printf("skipping: this CPU lacks AVX512-BF16, bf16 weights take the f32 kernel\n");
      GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    }
  }
};

// M across the 6-row tiles (1, 5, 7, 13 leave remainders) and the 48-row blocks, N across the
// 4-row tiles and the thread split, K below, at and across the 32-k steps (a masked last
// step), with and without bias. Each output within gemm_bf16.h's f32 term of the double sum
// over bf16(x), and within the whole bound (x's rounding too) of the double sum over x.
TEST_F(Bf16DotTest, MatchesDoubleSumsOverRoundedX) {
  int64_t rounding_visible = 0;  // outputs where x's rounding moved the sum beyond f32's bound
  for (int64_t M : {1, 5, 7, 13, 16, 50}) {
    for (int64_t N : {1, 3, 4, 5, 9, 67}) {
      for (int64_t K : {1, 31, 32, 33, 64, 100, 257}) {
        SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
        const std::vector<float> x = Random(M * K, 1), bias = Random(N, 3);
        const std::vector<uint16_t> w = ToBf16(Random(N * K, 2));
        const std::vector<uint16_t> xb = ToBf16(x);
        const int64_t roundings = 2 * ((K + 31) / 32) + 5;
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> y(M * N, NAN);
          GemmBf16Dot(x.data(), w.data(), b, M, N, K, y.data());
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < N; ++n) {
              double rounded = 0, exact = 0, magnitude = 0, magnitude_x = 0, magnitude_w = 0;
              for (int64_t k = 0; k < K; ++k) {
                const double wk = BF16ToFloat(w[n * K + k]);
                const double xk = BF16ToFloat(xb[m * K + k]);
                rounded += xk * wk;
                exact += static_cast<double>(x[m * K + k]) * wk;
                magnitude += std::fabs(xk * wk);
                magnitude_x += std::fabs(static_cast<double>(x[m * K + k]) * wk);
                magnitude_w += std::fabs(xk) + std::fabs(wk);
              }
              const double bias_n = b != nullptr ? b[n] : 0.0;
              const double f32_bound = Gamma(roundings) * magnitude + std::fabs(bias_n) * 0x1p-24 +
                                       0x1p-126 * (magnitude_w + static_cast<double>(K) + 48);
              const double got = y[m * N + n];
              ASSERT_LE(std::fabs(got - (rounded + bias_n)), f32_bound)
                  << "row " << m << " col " << n;
              ASSERT_LE(std::fabs(got - (exact + bias_n)), 0x1p-8 * magnitude_x + f32_bound)
                  << "row " << m << " col " << n;
              if (std::fabs(got - (exact + bias_n)) > f32_bound) ++rounding_visible;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(rounding_visible, 0) << "x was not rounded to bf16";
}

// One non-zero weight per row (w = the identity) makes each output one of x's values as the
// kernel rounded it: ties go to the even neighbour, in a full 32-k step and in the masked tail.
TEST_F(Bf16DotTest, RoundsXToNearestEven) {
  const int64_t M = 2, K = 40, N = K;
  std::vector<float> x(M * K);
  const float one_ulp = 0x1p-7f;                         // bf16's spacing in [1, 2)
  const float ties[] = {1.0f + one_ulp / 2,              // -> 1 (even)
                        1.0f + 3 * one_ulp / 2,          // -> 1 + 2 ulp (even)
                        -(1.0f + one_ulp / 2),           // -> -1
                        1.0f + one_ulp / 2 + 0x1p-20f};  // just above the tie -> 1 + 1 ulp
  const std::vector<float> rest = Random(M * K, 4);
  for (int64_t i = 0; i < M * K; ++i) x[i] = i % 5 == 4 ? rest[i] : ties[i % 5 % 4];
  std::vector<uint16_t> w(N * K, 0);
  for (int64_t n = 0; n < N; ++n) w[n * K + n] = FloatToBF16(1.0f);
  std::vector<float> y(M * N);
  GemmBf16Dot(x.data(), w.data(), nullptr, M, N, K, y.data());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f + 2 * one_ulp);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 1.0f + one_ulp);
  for (int64_t i = 0; i < M * K; ++i) {
    ASSERT_EQ(y[i], BF16ToFloat(FloatToBF16(x[i]))) << "row " << i / K << " k " << i % K;
  }
}

// Gemm sends bf16 weights to the dot-product kernel from kBf16DotMinRows rows on, and only at
// Isa::kAvx512Bf16; fewer rows, or the level below it forced by SetGemmIsa, give the exact f32
// sums of the widened weights, as before.
TEST_F(Bf16DotTest, GemmTakesTheKernelFromMinRowsAtItsLevel) {
  const int64_t N = 9, K = 100;
  for (int64_t M : {kBf16DotMinRows - 1, kBf16DotMinRows, kBf16DotMinRows + 21}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M);
    const std::vector<float> x = Random(M * K, 5), bias = Random(N, 7);
    const std::vector<uint16_t> w = ToBf16(Random(N * K, 6));
    std::vector<float> wf(N * K);
    ConvertToFloat(DType::kBF16, w.data(), w.size(), wf.data());
    std::vector<float> dot(M * N), widened(M * N), got(M * N), forced(M * N);
    GemmBf16Dot(x.data(), w.data(), bias.data(), M, N, K, dot.data());
    Gemm(x.data(), wf.data(), bias.data(), M, N, K, widened.data());
    ASSERT_EQ(GemmIsa(), Isa::kAvx512Bf16);
    Gemm(x.data(), WeightMatrix{w.data(), DType::kBF16}, bias.data(), M, N, K, got.data());
    ASSERT_TRUE(SetGemmIsa(Isa::kAvx512Vnni));
    Gemm(x.data(), WeightMatrix{w.data(), DType::kBF16}, bias.data(), M, N, K, forced.data());
    ASSERT_TRUE(SetGemmIsa(DetectIsa()));
    EXPECT_EQ(got, M >= kBf16DotMinRows ? dot : widened);
    EXPECT_EQ(forced, widened);
    EXPECT_NE(dot, widened);
  }
}

// SetGemmIsa takes every level up to DetectIsa() and refuses the ones above it, changing
// nothing, so a CPU without AVX512-BF16 keeps the kernels it has.
TEST(IsaTest, SetGemmIsaRefusesLevelsAboveTheCpus) {
  const Isa detected = DetectIsa();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16}) {
    SCOPED_TRACE(IsaName(isa));
    ASSERT_TRUE(SetGemmIsa(detected));
    if (isa <= detected) {
      EXPECT_TRUE(SetGemmIsa(isa));
      EXPECT_EQ(GemmIsa(), isa);
    } else {
      EXPECT_FALSE(SetGemmIsa(isa));
      EXPECT_EQ(GemmIsa(), detected);
    }
  }
  ASSERT_TRUE(SetGemmIsa(detected));
  EXPECT_STREQ(IsaName(Isa::kAvx512Bf16), "avx512_bf16");
}

// DetectIsa's cpuid reading agrees with the kernel's list of CPU flags (Linux only).
TEST(IsaTest, DetectIsaAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) {
    std::printf("skipping: no flags line in /proc/cpuinfo here\n");
    GTEST_SKIP() << "no /proc/cpuinfo flags";
  }
  std::istringstream words(line);
  bool f = false, vl = false, vnni = false, bw = false, bf16 = false;
  for (std::string w; words >> w;) {
    f |= w == "avx512f";
    vl |= w == "avx512vl";
    vnni |= w == "avx512_vnni";
    bw |= w == "avx512bw";
    bf16 |= w == "avx512_bf16";
  }
  const Isa want = !(f && vl)   ? Isa::kAvx2
                   : !vnni      ? Isa::kAvx512
                   : bw && bf16 ? Isa::kAvx512Bf16
                                : Isa::kAvx512Vnni;
  EXPECT_EQ(DetectIsa(), want) << IsaName(DetectIsa()) << " vs " << IsaName(want);
}

}  // namespace
}  // namespace ptxserve::cpu
