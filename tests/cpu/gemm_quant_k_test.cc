// The q4_k/q6_k integer GEMM (gemm_quant_k.cc) on raw super-blocks, random and extreme
// (largest and subnormal f16 scales, every 6-bit scale and min at 63, signed q6_k scales at
// -128 and 127, all codes 0 or all at their maximum): against the dequantized weights
// (quant.h's reference decoder) dotted in double with x rounded as the kernel rounds it (to
// f32 rounding), and against x itself within ops.h's bound; every instruction set's tile alike.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"

namespace ptxserve::cpu {
namespace {

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

// Super-block `kind` of format t: 0 and 1 random (any code, scale and min), 2 every code and
// scale at its maximum with the largest f16 d, 3 every code 0 with the largest mins (q4_k)
// or scales (q6_k, where code 0 is -32), 4 random codes with subnormal f16 scales.
void FillSuperBlock(QuantType t, int kind, std::mt19937_64& rng, uint8_t* b) {
  const int bytes = LayoutOf(t).block_bytes;
  for (int i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(1e-3f, 1.0f);
  const float d = kind == 2 ? 65504.0f : kind == 4 ? 6e-8f : scale(rng);
  const float dmin = kind == 3 ? 65504.0f : kind == 4 ? 1.2e-7f : scale(rng);
  if (t == QuantType::kQ4_K) {
    PutHalf(b, d);
    PutHalf(b + 2, dmin);
    if (kind == 2 || kind == 3) std::memset(b + 4, 0xFF, 12);  // scales and mins 63
    if (kind == 2) std::memset(b + 16, 0xFF, 128);             // codes 15
    if (kind == 3) std::memset(b + 16, 0x00, 128);             // codes 0
  } else {
    PutHalf(b + 208, d);
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    if (kind == 2) std::memset(b, 0xFF, 192);  // codes 63
    if (kind == 3) std::memset(b, 0x00, 192);  // codes 0 (value -32)
    if (kind == 2 || kind == 3) {
      for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(i % 2 ? 127 : -128);
    }
  }
}

// x rounded as gemm_quant.cc's QuantizeActivations does: d = amax / 127 per block of 32,
// codes round(x / d) (x times 1 / d in f32, to nearest even).
void RoundX(const std::vector<float>& x, std::vector<float>* rounded, std::vector<float>* amax) {
  rounded->resize(x.size());
  amax->resize(x.size() / 32);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float m = 0;
    for (int k = 0; k < 32; ++k) m = std::max(m, std::fabs(x[b * 32 + k]));
    const float d = m / 127;
    const float id = d != 0 ? 1 / d : 0;
    for (int k = 0; k < 32; ++k) {
      (*rounded)[b * 32 + k] = d * std::nearbyint(x[b * 32 + k] * id);
    }
    (*amax)[b] = m;
  }
}

struct Shape {
  QuantType t;
  int64_t M, N, K;
};

class KQuantGemmTest : public ::testing::TestWithParam<Shape> {};

TEST_P(KQuantGemmTest, MatchesReferenceWithinBound) {
  const auto [t, M, N, K] = GetParam();
  std::mt19937_64 rng(M * 131 + N * 7 + K);
  const int64_t row_bytes = QuantRowBytes(t, K), supers = K / 256;
  std::vector<uint8_t> w(N * row_bytes);
  for (int64_t s = 0; s < N * supers; ++s) {
    FillSuperBlock(t, static_cast<int>(s % 5), rng, w.data() + s * LayoutOf(t).block_bytes);
  }
  // Each weight, and the magnitude of the terms the kernel sums for it (q4_k: its scale
  // times code and its min separately; they can cancel in the weight).
  std::vector<float> wf(N * K), wmag(N * K);
  std::vector<uint8_t> part(row_bytes);
  std::vector<float> scaled(K), mins(K);
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* row = w.data() + n * row_bytes;
    DequantizeRow(t, row, K, wf.data() + n * K);
    for (int64_t k = 0; k < K; ++k) wmag[n * K + k] = std::fabs(wf[n * K + k]);
    if (t != QuantType::kQ4_K) continue;
    for (int pass = 0; pass < 2; ++pass) {  // dmin = 0: scale * code; d = 0: -min
      std::copy(row, row + row_bytes, part.begin());
      for (int64_t s = 0; s < supers; ++s) PutHalf(part.data() + s * 144 + 2 * (1 - pass), 0.0f);
      DequantizeRow(t, part.data(), K, pass == 0 ? scaled.data() : mins.data());
    }
    for (int64_t k = 0; k < K; ++k) wmag[n * K + k] = std::fabs(scaled[k]) + std::fabs(mins[k]);
  }
  // x: random, one row all zeros (scale 0), one a single spike per block.
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(M * K), bias(N);
  for (float& v : x) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  if (M > 2) std::fill(x.begin() + K, x.begin() + 2 * K, 0.0f);
  if (M > 3) {
    for (int64_t k = 0; k < K; ++k) x[2 * K + k] = k % 32 == 5 ? 1e3f : 1e-4f;
  }
  std::vector<float> xr, amax;
  RoundX(x, &xr, &amax);

  std::vector<float> got(M * N, -7.0f), chosen(M * N, -7.0f);
  const WeightMatrix wm{w.data(), DType::kF32, t};
  GemmQuantized(x.data(), wm, bias.data(), M, N, K, got.data(), BlockKernel::kInteger);
  Gemm(x.data(), wm, bias.data(), M, N, K, chosen.data());
  ASSERT_EQ(ChooseBlockKernel(t, M), BlockKernel::kInteger);
  EXPECT_EQ(chosen, got);
  const double u = std::ldexp(1.0, -24);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double want = bias[n], exact = bias[n], mag = std::fabs(bias[n]);
      for (int64_t k = 0; k < K; ++k) {
        const double wk = wf[n * K + k];
        want += wk * xr[m * K + k];
        exact += wk * x[m * K + k];
        mag += wmag[n * K + k] * std::fabs(xr[m * K + k]);
      }
      double wsum_bound = 0;  // ops.h: sum over blocks of amax / 254 * sum |w|
      for (int64_t k0 = 0; k0 < K; k0 += 32) {
        double wsum = 0;
        for (int64_t k = k0; k < k0 + 32; ++k) wsum += std::fabs(wf[n * K + k]);
        wsum_bound += amax[(m * K + k0) / 32] / 254 * wsum;
      }
      // f32: each of a lane's K / 32 + K / 256 accumulations and the scales' products,
      // the final sum of 8 lanes and the bias.
      const double f32 = 4.0 * (K / 32 + K / 256 + 8) * u * mag;
      ASSERT_NEAR(got[m * N + n], want, f32) << "m " << m << " n " << n;
      // The weights as DequantizeRow rounds them (q4_k: scale * code - min in f32) differ
      // from the kernel's exact terms by at most u * mag as well.
      ASSERT_NEAR(got[m * N + n], exact, wsum_bound + f32 + u * mag) << "m " << m << " n " << n;
    }
  }
  // AVX2 and AVX512-VNNI tiles (gemm_quant_k_vnni.cc) give the same sums bit for bit (AVX-512
  // without VNNI runs the AVX2 tile).
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (!SetGemmIsa(isa)) continue;
    std::vector<float> again(M * N);
    Gemm(x.data(), wm, bias.data(), M, N, K, again.data());
    EXPECT_EQ(again, got) << IsaName(isa);
  }
  SetGemmIsa(DetectIsa());
}

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (QuantType t : {QuantType::kQ4_K, QuantType::kQ6_K}) {
    for (int64_t m = 1; m <= 9; ++m) shapes.push_back({t, m, m % 2 ? 13 : 5, 256});
    shapes.push_back({t, 4, 37, 768});
    shapes.push_back({t, 9, 1, 512});
    shapes.push_back({t, 50, 11, 256});  // two passes of x rows over the weights
    shapes.push_back({t, 4, 6, 256});    // tiles of 2 weight rows (one 512-bit pair)
    shapes.push_back({t, 7, 7, 512});    // tiles of 3 (the last pair's second row repeated)
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, KQuantGemmTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return std::string(QuantName(s.t)) + "_m" + std::to_string(s.M) + "_n" +
                                  std::to_string(s.N) + "_k" + std::to_string(s.K);
                         });

}  // namespace
}  // namespace ptxserve::cpu
