// The GEMM over block-quantized weights against the f32 GEMM over the same weights
// dequantized: bit for bit for both widening kernels, within ops.h's bound (x's 8-bit
// rounding) for the integer one.
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/ops.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"

namespace ptxserve::cpu {
namespace {

struct QuantGemmCase {
  QuantType quant;
  int64_t M, N, K;
  bool bias;
};
std::string QuantGemmCaseName(const QuantGemmCase& c) {
  return absl::StrCat(std::string(QuantName(c.quant)), "_m", c.M, "_n", c.N, "_k", c.K,
                      c.bias ? "_bias" : "");
}
void PrintTo(const QuantGemmCase& c, std::ostream* os) { *os << QuantGemmCaseName(c); }

std::vector<float> RandomVec(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// N rows of K encoded from random floats.
std::vector<uint8_t> RandomQuantMatrix(QuantType t, int64_t N, int64_t K, uint64_t seed) {
  const int64_t row_bytes = QuantRowBytes(t, K);
  std::vector<uint8_t> w(N * row_bytes);
  const std::vector<float> f = RandomVec(N * K, seed);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_TRUE(QuantizeRow(t, f.data() + n * K, K, w.data() + n * row_bytes).ok());
  }
  return w;
}

class QuantGemmTest : public ::testing::TestWithParam<QuantGemmCase> {};

TEST_P(QuantGemmTest, MatchesDequantizedF32Gemm) {
  const auto [t, M, N, K, with_bias] = GetParam();
  const std::vector<float> x = RandomVec(M * K, 1);
  const std::vector<float> b = RandomVec(N, 3);
  const float* bias = with_bias ? b.data() : nullptr;
  const std::vector<uint8_t> w = RandomQuantMatrix(t, N, K, 2);
  std::vector<float> wf(N * K);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeRow(t, w.data() + n * QuantRowBytes(t, K), K, wf.data() + n * K);
  }
  std::vector<float> want(M * N), widened(M * N, -7.0f), chosen(M * N, -7.0f);
  Gemm(x.data(), wf.data(), bias, M, N, K, want.data());
  const WeightMatrix wm{w.data(), DType::kF32, t};
  for (BlockKernel k : {BlockKernel::kWidening, BlockKernel::kWidenedRows}) {
    GemmQuantized(x.data(), wm, bias, M, N, K, widened.data(), k);
    for (int64_t i = 0; i < M * N; ++i) {
      ASSERT_EQ(widened[i], want[i])
          << "kernel " << static_cast<int>(k) << " m " << i / N << " n " << i % N;
    }
  }

  Gemm(x.data(), wm, bias, M, N, K, chosen.data());
  if (t == QuantType::kFp8E4M3 || t == QuantType::kInt4G128) {  // no integer kernel
    EXPECT_EQ(chosen, want);
    return;
  }
  std::vector<float> integer(M * N, -7.0f);
  GemmQuantized(x.data(), wm, bias, M, N, K, integer.data(), BlockKernel::kInteger);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      // ops.h's bound, plus f32 rounding of both sums (K terms each).
      double bound = 0, magnitude = 0;
      for (int64_t k0 = 0; k0 < K; k0 += 32) {
        float amax = 0, wsum = 0;
        for (int64_t k = k0; k < k0 + 32; ++k) {
          amax = std::max(amax, std::fabs(x[m * K + k]));
          wsum += std::fabs(wf[n * K + k]);
          magnitude += std::fabs(x[m * K + k] * wf[n * K + k]);
        }
        bound += amax / 254 * wsum;
      }
      bound += 2 * K * 1.2e-7 * (magnitude + std::fabs(b[n]));
      ASSERT_LE(std::fabs(integer[m * N + n] - want[m * N + n]), bound) << "m " << m << " n " << n;
    }
  }
  EXPECT_EQ(chosen, ChooseBlockKernel(t, M) == BlockKernel::kInteger ? integer : want);
}

// Every E4M3 code but the two NaNs (which compare unequal), subnormals included, through
// the widening kernel's bit arithmetic and through DequantizeRow's table: the same sums.
TEST(QuantGemmFp8Test, WideningDecodesEveryCode) {
  const int64_t K = 256, N = 3;
  const int64_t row_bytes = QuantRowBytes(QuantType::kFp8E4M3, K);
  std::vector<uint8_t> w(N * row_bytes);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < K / 32; ++b) {
      uint8_t* block = w.data() + n * row_bytes + b * 36;
      const float s = 0.5f * static_cast<float>(n + 1);
      std::memcpy(block, &s, 4);
      for (int i = 0; i < 32; ++i) {
        const int code = static_cast<int>((b * 32 + i + 37 * n) % 256);
        block[4 + i] = static_cast<uint8_t>((code & 0x7F) == 0x7F ? 0 : code);
      }
    }
  }
  const std::vector<float> x = RandomVec(2 * K, 5);
  std::vector<float> wf(N * K), want(2 * N), got(2 * N);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeRow(QuantType::kFp8E4M3, w.data() + n * row_bytes, K, wf.data() + n * K);
  }
  Gemm(x.data(), wf.data(), nullptr, 2, N, K, want.data());
  GemmQuantized(x.data(), {w.data(), DType::kF32, QuantType::kFp8E4M3}, nullptr, 2, N, K,
                got.data(), BlockKernel::kWidening);
  EXPECT_EQ(got, want);
}

std::vector<QuantGemmCase> Cases() {
  std::vector<QuantGemmCase> cases;
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_K, QuantType::kQ6_K,
                      QuantType::kFp8E4M3, QuantType::kInt4G128}) {
    for (int64_t m : {1, 3, 8, 17}) {
      cases.push_back({t, m, 33, 256, false});
      cases.push_back({t, m, 7, 512, true});
    }
    cases.push_back({t, 100, 130, 512, true});  // several M blocks, every thread
    cases.push_back({t, 2, 1, 256, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemmTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return QuantGemmCaseName(info.param); });

}  // namespace
}  // namespace ptxserve::cpu
