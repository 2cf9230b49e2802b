// The GEMM's AVX-512 kernel (gemm_avx512.cc) against its AVX2 kernel (gemm.cc), and the
// q8_0/q4_0 integer kernel for AVX512-VNNI (gemm_quant_vnni.cc) against its AVX2 one
// (gemm_quant.cc): the same outputs, bit for bit, so a token's logits do not depend on the
// machine. Skipped, with the reason printed, on CPUs without the instruction set.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
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

// Runs `gemm` under Isa::kAvx2 and under `wide` and expects equal bytes.
template <class Gemm>
void ExpectSameUnderBothIsas(int64_t M, int64_t N, const Gemm& gemm, Isa wide = Isa::kAvx512) {
  std::vector<float> avx2(M * N, -1.0f), avx512(M * N, -2.0f);
  ASSERT_TRUE(SetGemmIsa(Isa::kAvx2));
  gemm(avx2.data());
  ASSERT_TRUE(SetGemmIsa(wide));
  gemm(avx512.data());
  SetGemmIsa(DetectIsa());
  for (int64_t i = 0; i < M * N; ++i) {
    ASSERT_EQ(std::memcmp(&avx2[i], &avx512[i], sizeof(float)), 0)
        << "row " << i / N << " col " << i % N << ": " << avx2[i] << " vs " << avx512[i];
  }
}

class GemmIsaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DetectIsa() < Isa::kAvx512) {
      std::printf("skipping: this CPU lacks AVX-512 F/VL, only the AVX2 kernel runs\n");
      GTEST_SKIP() << "no AVX-512 F/VL on this CPU";
    }
  }
};

// M across the 8-row AVX-512 and 3-row AVX2 tiles, the AVX-512 kernel's packed x from 16
// rows on (6-row tiles: 16, 17 and 19 leave 4, 5 and 1) and the 48-row blocks, N across the
// 4-row tiles and the packed path's 8-row ones (odd counts leave half a register pair), K
// with and without a tail.
TEST_F(GemmIsaTest, DTypeWeightsGiveTheSameBits) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t M : {1, 2, 7, 9, 16, 17, 19, 50, 100}) {
      for (int64_t N : {1, 3, 6, 13, 23, 67}) {
        for (int64_t K : {8, 13, 64, 100}) {
          SCOPED_TRACE(::testing::Message()
                       << DTypeName(dt) << " M=" << M << " N=" << N << " K=" << K);
          const std::vector<float> x = Random(M * K, 1), wf = Random(N * K, 2), bias = Random(N, 3);
          std::vector<uint8_t> w(N * K * DTypeSize(dt));
          ConvertFromFloat(dt, wf.data(), wf.size(), w.data());
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
            ExpectSameUnderBothIsas(M, N, [&](float* y) {
              Gemm(x.data(), WeightMatrix{w.data(), dt}, b, M, N, K, y);
            });
          }
        }
      }
    }
  }
}

// A weight matrix past the AVX-512 kernel's 4 MiB panels (f32, K = 1024: 1024 rows a
// panel), so each thread's rows (half of 2100 on two cores, all on one) span a panel
// boundary and a short last panel.
TEST_F(GemmIsaTest, WeightPanelsGiveTheSameBits) {
  const int64_t M = 17, N = 2100, K = 1024;
  const std::vector<float> x = Random(M * K, 4), w = Random(N * K, 5);
  ExpectSameUnderBothIsas(M, N, [&](float* y) {
    Gemm(x.data(), WeightMatrix{w.data(), DType::kF32}, nullptr, M, N, K, y);
  });
}

// Block formats whose rows gemm_quant.cc widens to f32 for gemm.cc's kernel.
TEST_F(GemmIsaTest, WidenedQuantRowsGiveTheSameBits) {
  const int64_t M = 20, N = 11, K = 256;
  const std::vector<float> x = Random(M * K, 4), wf = Random(N * K, 5);
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K}) {
    const int64_t row_bytes = QuantRowBytes(q, K);
    std::vector<uint8_t> w(N * row_bytes);
    for (int64_t n = 0; n < N; ++n) {
      ASSERT_TRUE(QuantizeRow(q, wf.data() + n * K, K, w.data() + n * row_bytes).ok());
    }
    ExpectSameUnderBothIsas(M, N, [&](float* y) {
      GemmQuantized(x.data(), WeightMatrix{w.data(), DType::kF32, q}, nullptr, M, N, K, y,
                    BlockKernel::kWidenedRows);
    });
  }
}

// The integer kernel (x rounded to 8 bits per block) over q8_0 and q4_0: M across the VNNI
// kernel's decode tiles (under 4 rows), its packed 8-row tiles and the 3-row AVX2 tiles and
// 48-row blocks, N across the 4-row tiles (odd counts leave half a register pair), the
// packed 16-row tiles (67 leaves 3) and the thread split, K of 1 to 9 blocks. Weight codes
// at the extremes (q8_0's -128 and 127, q4_0's 0 and 15) and x blocks of one sign, of
// zeros and with a single large element exercise the offset trick's corrections.
TEST(GemmIsaVnniTest, IntegerKernelGivesTheSameBits) {
  if (DetectIsa() < Isa::kAvx512Vnni) {
    std::printf("skipping: this CPU lacks AVX512-VNNI, only the AVX2 integer kernel runs\n");
    GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  }
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    for (int64_t M : {1, 2, 7, 8, 9, 50, 100}) {
      for (int64_t N : {1, 3, 6, 67}) {
        for (int64_t K : {32, 96, 288}) {
          SCOPED_TRACE(::testing::Message()
                       << QuantName(q) << " M=" << M << " N=" << N << " K=" << K);
          std::vector<float> x = Random(M * K, 6);
          for (int64_t k = 0; k < 32; ++k) {
            x[k] = 0.0f;                                       // row 0, block 0: zeros
            if (M > 1) x[K + k] = std::fabs(x[K + k]) + 1.0f;  // row 1, block 0: positive
          }
          if (M > 2) x[2 * K + 5] = 1e4f;  // row 2: one element dominates its block
          const std::vector<float> wf = Random(N * K, 7), bias = Random(N, 8);
          const int64_t row_bytes = QuantRowBytes(q, K);
          std::vector<uint8_t> w(N * row_bytes);
          for (int64_t n = 0; n < N; ++n) {
            ASSERT_TRUE(QuantizeRow(q, wf.data() + n * K, K, w.data() + n * row_bytes).ok());
          }
          // Row 0's first block: the extreme codes, alternating.
          const int code_bytes = q == QuantType::kQ8_0 ? 32 : 16;
          for (int i = 0; i < code_bytes; ++i) {
            w[2 + i] = q == QuantType::kQ8_0 ? (i % 2 ? 0x7F : 0x80) : (i % 2 ? 0xF0 : 0x0F);
          }
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
            ExpectSameUnderBothIsas(
                M, N,
                [&](float* y) {
                  GemmQuantized(x.data(), WeightMatrix{w.data(), DType::kF32, q}, b, M, N, K, y,
                                BlockKernel::kInteger);
                },
                Isa::kAvx512Vnni);
          }
        }
      }
    }
  }
}

// x larger than the VNNI kernel's pass over x (2 MiB of codes: 64 rows at K = 32768), so
// the packed weight tiles are repacked for a second pass of 6 rows.
TEST(GemmIsaVnniTest, IntegerKernelPassesOverXGiveTheSameBits) {
  if (DetectIsa() < Isa::kAvx512Vnni) {
    std::printf("skipping: this CPU lacks AVX512-VNNI, only the AVX2 integer kernel runs\n");
    GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  }
  const int64_t M = 70, N = 17, K = 32768;
  const std::vector<float> x = Random(M * K, 9), wf = Random(N * K, 10);
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    SCOPED_TRACE(QuantName(q));
    const int64_t row_bytes = QuantRowBytes(q, K);
    std::vector<uint8_t> w(N * row_bytes);
    for (int64_t n = 0; n < N; ++n) {
      ASSERT_TRUE(QuantizeRow(q, wf.data() + n * K, K, w.data() + n * row_bytes).ok());
    }
    ExpectSameUnderBothIsas(
        M, N,
        [&](float* y) {
          GemmQuantized(x.data(), WeightMatrix{w.data(), DType::kF32, q}, nullptr, M, N, K, y,
                        BlockKernel::kInteger);
        },
        Isa::kAvx512Vnni);
  }
}

}  // namespace
}  // namespace ptxserve::cpu
