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

struct AttnCase {
  int64_t heads, kv_heads, head_dim, block_size;
  DType dtype;
};
// Without it gtest prints the struct's bytes, padding included, so test names would
// change between builds.
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "h" << c.heads << "_kv" << c.kv_heads << "_d" << c.head_dim << "_bs" << c.block_size << "_"
      << DTypeName(c.dtype);
}

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

// Three sequences (context 11 with 3 new rows, 1 with 1, a 20-row prefill) scattered into
// shuffled blocks, against dense attention over the same (dtype-rounded) K/V.
TEST_P(PagedAttentionTest, MatchesDenseAttention) {
  const auto [nh, nkv, hd, bs, dtype] = GetParam();
  const std::vector<int32_t> lens = {11, 1, 20};
  const std::vector<int32_t> rows = {3, 1, 20};  // new rows per sequence this step
  const int32_t num_blocks = 16, max_blocks = 8;
  // Block tables: a fixed shuffle so sequences interleave in the pool.
  const std::vector<int32_t> order = {9, 2, 14, 5, 0, 11, 7, 3, 12, 1, 15, 6};
  std::vector<int32_t> tables(3 * max_blocks, 0);
  int next = 0;
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < (lens[s] + bs - 1) / bs; ++j) tables[s * max_blocks + j] = order[next++];
  }
  const size_t pool_elems = static_cast<size_t>(num_blocks) * nkv * bs * hd;
  std::vector<uint8_t> k_pool(pool_elems * DTypeSize(dtype)), v_pool(k_pool.size());
  // Dense K/V per sequence, written through KvScatter in one call over all positions.
  std::vector<std::vector<float>> kd(3), vd(3);
  for (int s = 0; s < 3; ++s) {
    kd[s] = RandomVec(lens[s] * nkv * hd, 20 + s);
    vd[s] = RandomVec(lens[s] * nkv * hd, 30 + s);
    std::vector<int64_t> slots(lens[s]);
    for (int p = 0; p < lens[s]; ++p)
      slots[p] = int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs;
    KvScatter(kd[s].data(), vd[s].data(), slots.data(), lens[s], nkv, hd, bs, dtype, k_pool.data(),
              v_pool.data());
    if (dtype != DType::kF32) {
      std::vector<uint16_t> tmp(kd[s].size());
      for (auto* d : {&kd[s], &vd[s]}) {  // what the pool holds after rounding
        ConvertFromFloat(dtype, d->data(), d->size(), tmp.data());
        ConvertToFloat(dtype, tmp.data(), d->size(), d->data());
      }
    }
  }
  std::vector<int32_t> qs = {0}, positions;
  for (int s = 0; s < 3; ++s) {
    qs.push_back(qs.back() + rows[s]);
    for (int r = 0; r < rows[s]; ++r) positions.push_back(lens[s] - rows[s] + r);
  }
  const int64_t T = qs.back();
  const std::vector<float> q = RandomVec(T * nh * hd, 40, 2.0f);
  std::vector<float> out(T * nh * hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttention(q.data(), positions.data(), qs.data(), lens.data(), tables.data(), max_blocks, 3,
                 nh, nkv, hd, bs, dtype, k_pool.data(), v_pool.data(), scale, out.data());
  for (int s = 0; s < 3; ++s) {
    for (int t = qs[s]; t < qs[s + 1]; ++t) {
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t kvh = h / (nh / nkv);
        std::vector<double> sc(positions[t] + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= positions[t]; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) {
            d += double{q[(t * nh + h) * hd + i]} * kd[s][(j * nkv + kvh) * hd + i];
          }
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        std::vector<double> want(hd, 0.0);
        for (int j = 0; j <= positions[t]; ++j) {
          for (int64_t i = 0; i < hd; ++i) want[i] += sc[j] / sum * vd[s][(j * nkv + kvh) * hd + i];
        }
        EXPECT_LT(RelErr(out.data() + (t * nh + h) * hd, want.data(), hd), 1e-5)
            << "seq " << s << " row " << t << " head " << h;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(AttnCase{4, 4, 32, 16, DType::kF32},
                                           AttnCase{4, 2, 64, 5, DType::kF32},
                                           AttnCase{8, 2, 32, 8, DType::kF16},
                                           AttnCase{4, 1, 64, 16, DType::kF16},
                                           AttnCase{2, 1, 20, 3, DType::kBF16}));

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
