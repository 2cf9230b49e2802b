// The CPU ops against naive double-precision loops written out in the test.
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/ops.h"
#include "engine/model/rope.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"

namespace ptxserve::cpu {
namespace {

using ::ptxserve::testing::RelErr;

std::vector<float> RandomVec(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct GemmCase {
  int64_t M, N, K;
  bool bias;
};
std::string GemmCaseName(const GemmCase& c) {
  return absl::StrCat("m", c.M, "_n", c.N, "_k", c.K, c.bias ? "_bias" : "");
}
// The case by its name, not its bytes (padding), in test names and failure messages.
void PrintTo(const GemmCase& c, std::ostream* os) { *os << GemmCaseName(c); }

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesNaiveLoop) {
  const auto [M, N, K, with_bias] = GetParam();
  const std::vector<float> x = RandomVec(M * K, 1);
  const std::vector<float> w = RandomVec(N * K, 2);
  const std::vector<float> b = RandomVec(N, 3);
  std::vector<float> y(M * N, -7.0f);
  Gemm(x.data(), w.data(), with_bias ? b.data() : nullptr, M, N, K, y.data());
  std::vector<double> want(M * N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = with_bias ? b[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(x[m * K + k]) * w[n * K + k];
      want[m * N + n] = s;
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    EXPECT_LT(RelErr(y.data() + m * N, want.data() + m * N, N), 1e-5) << "row " << m;
  }
  // A row's result must not depend on the batch around it (decode vs prefill).
  for (int64_t m = 0; m < M; ++m) {
    std::vector<float> single(N);
    Gemm(x.data() + m * K, w.data(), with_bias ? b.data() : nullptr, 1, N, K, single.data());
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(single[n], y[m * N + n]) << "m " << m << " n " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GemmTest,
                         ::testing::Values(GemmCase{1, 33, 100, false}, GemmCase{3, 33, 100, true},
                                           GemmCase{17, 33, 100, false},
                                           GemmCase{17, 33, 100, true}, GemmCase{1, 1, 1, true},
                                           GemmCase{2, 7, 5, false}, GemmCase{1, 300, 64, true},
                                           GemmCase{100, 65, 72, true},  // several M blocks
                                           GemmCase{5, 4, 0, true}),
                         [](const auto& info) { return GemmCaseName(info.param); });

TEST(RmsNormTest, MatchesFormulaAndMayAlias) {
  const int64_t rows = 3, dim = 37;
  std::vector<float> x = RandomVec(rows * dim, 4, 3.0f);
  const std::vector<float> w = RandomVec(dim, 5);
  std::vector<float> out(rows * dim);
  RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    std::vector<double> want(dim);
    for (int64_t i = 0; i < dim; ++i) want[i] = x[r * dim + i] * inv * w[i];
    EXPECT_LT(RelErr(out.data() + r * dim, want.data(), dim), 1e-6);
  }
  RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, x.data());
  EXPECT_EQ(x, out);
}

TEST(ElementwiseTest, SiluMulAddEmbed) {
  const std::vector<float> g = RandomVec(19, 6, 4.0f), u = RandomVec(19, 7);
  std::vector<float> out(19);
  SiluMul(g.data(), u.data(), 19, out.data());
  for (int i = 0; i < 19; ++i) {
    EXPECT_NEAR(out[i], g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i], 1e-6);
  }
  std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {0.5f, -2, 10};
  AddInPlace(a.data(), b.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{1.5f, 0, 13}));
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};
  const int32_t ids[] = {2, 0, 2};
  std::vector<float> e(6);
  Embed({table.data(), DType::kF32}, ids, 3, 2, e.data());
  EXPECT_EQ(e, (std::vector<float>{20, 21, 0, 1, 20, 21}));
}

TEST(RopeTest, BothStylesMatchDirectFormula) {
  const int64_t tokens = 4, heads = 3, kv_heads = 1, hd = 16;
  const int32_t positions[] = {0, 1, 7, 1000};
  ModelConfig c;
  c.head_dim = hd;
  std::vector<float> inv(hd / 2);
  RopeInvFreq(c, inv.data());
  for (RopeStyle style : {RopeStyle::kRotateHalf, RopeStyle::kInterleaved}) {
    std::vector<float> q = RandomVec(tokens * heads * hd, 8);
    std::vector<float> k = RandomVec(tokens * kv_heads * hd, 9);
    const std::vector<float> q0 = q, k0 = k;
    Rope(q.data(), k.data(), positions, tokens, heads, kv_heads, hd, inv.data(), style);
    auto check = [&](const std::vector<float>& before, const std::vector<float>& after,
                     int64_t nh) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < nh; ++h) {
          const float* x = before.data() + (t * nh + h) * hd;
          const float* y = after.data() + (t * nh + h) * hd;
          for (int64_t i = 0; i < hd / 2; ++i) {
            const int64_t a = style == RopeStyle::kRotateHalf ? i : 2 * i;
            const int64_t b = style == RopeStyle::kRotateHalf ? i + hd / 2 : 2 * i + 1;
            const double th = positions[t] * double{inv[i]};
            EXPECT_NEAR(y[a], x[a] * std::cos(th) - x[b] * std::sin(th), 1e-6);
            EXPECT_NEAR(y[b], x[b] * std::cos(th) + x[a] * std::sin(th), 1e-6);
          }
        }
      }
    };
    check(q0, q, heads);
    check(k0, k, kv_heads);
  }
}

TEST(KvScatterTest, WritesLayoutFromDesign) {
  // [num_blocks][num_kv_heads][block_size][head_dim]: element (block b, head h, offset o, d).
  const int64_t nkv = 2, hd = 3, bs = 4, nb = 3;
  const std::vector<float> k = {1, 2, 3, 4, 5, 6};  // one token, 2 heads
  const std::vector<float> v = {7, 8, 9, 10, 11, 12};
  const int64_t slot = 2 * bs + 1;  // block 2, offset 1
  std::vector<float> kp(nb * nkv * bs * hd, 0), vp(kp.size(), 0);
  KvScatter(k.data(), v.data(), &slot, 1, nkv, hd, bs, DType::kF32, kp.data(), vp.data());
  for (int64_t h = 0; h < nkv; ++h) {
    for (int64_t d = 0; d < hd; ++d) {
      EXPECT_EQ(kp[((2 * nkv + h) * bs + 1) * hd + d], k[h * hd + d]);
      EXPECT_EQ(vp[((2 * nkv + h) * bs + 1) * hd + d], v[h * hd + d]);
    }
  }
  float sum = 0;
  for (float x : kp) sum += x;
  EXPECT_EQ(sum, 21.0f);  // nothing else written
  std::vector<uint16_t> hp(kp.size(), 0), hv(kp.size(), 0);
  KvScatter(k.data(), v.data(), &slot, 1, nkv, hd, bs, DType::kF16, hp.data(), hv.data());
  EXPECT_EQ(hp[((2 * nkv + 1) * bs + 1) * hd + 2], FloatToHalf(6.0f));
}

}  // namespace
}  // namespace ptxserve::cpu
