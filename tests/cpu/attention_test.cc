// cpu::PagedAttention (blocked, one-pass online softmax) against attention in double
// precision over the same cache contents, its bitwise determinism, and the polynomial
// exp2 it uses.
//
// Tolerance: 1e-5 relative (max abs error over a head's output / its max magnitude).
// The kernel differs from the double reference by f32 rounding of dot products over at
// most 128 terms, of a softmax over at most 100 positions, and exp2's 1.5e-7 relative
// error: together a few 1e-7 (at most 6.3e-7 measured on these cases). A wrong mask, block
// lookup, GQA head mapping or rescale moves outputs by O(1) relative, far above 1e-5.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
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

// A sequence of the batch: positions [0, cached) are in the cache from earlier steps,
// [cached, cached + rows) are this step's query rows (their K/V written too).
struct Seq {
  int32_t cached, rows;
  int32_t context() const { return cached + rows; }
};
// Decode rows, short and long prefills, chunks after a cached prefix; lengths that are
// not multiples of the kernel's 16-row K/V tiles or its query tiles.
const std::vector<Seq> kSeqs = {{8, 3}, {0, 1}, {0, 20}, {29, 37}, {99, 1}, {0, 45}};

// A paged cache holding random K/V for kSeqs, in blocks scattered over the pool, and
// the batch's queries in the StepBatch layout.
class PagedCache {
 public:
  explicit PagedCache(const AttnCase& c) : c_(c) {
    int32_t needed = 0;
    for (const Seq& s : kSeqs) {
      max_blocks_ = std::max<int32_t>(max_blocks_, (s.context() + c.block_size - 1) / c.block_size);
      needed += (s.context() + c.block_size - 1) / c.block_size;
    }
    num_blocks_ = needed + 1;
    if (num_blocks_ % 7 == 0) ++num_blocks_;
    const size_t pool_elems =
        static_cast<size_t>(num_blocks_) * c.kv_heads * c.block_size * c.head_dim;
    k_pool_.resize(pool_elems * DTypeSize(c.dtype));
    v_pool_.resize(k_pool_.size());
    tables_.assign(kSeqs.size() * max_blocks_, 0);
    int32_t next = 0;
    query_start_ = {0};
    for (size_t s = 0; s < kSeqs.size(); ++s) {
      const int32_t ctx = kSeqs[s].context();
      // Block k of the pool handed out is 7k mod num_blocks: sequences interleave.
      for (int32_t j = 0; j < (ctx + c.block_size - 1) / c.block_size; ++j) {
        tables_[s * max_blocks_ + j] = (7 * next++) % num_blocks_;
      }
      k_.push_back(RandomVec(int64_t{ctx} * c.kv_heads * c.head_dim, 20 + s));
      v_.push_back(RandomVec(int64_t{ctx} * c.kv_heads * c.head_dim, 40 + s));
      std::vector<int64_t> slots(ctx);
      for (int32_t p = 0; p < ctx; ++p) {
        slots[p] =
            int64_t{tables_[s * max_blocks_ + p / c.block_size]} * c.block_size + p % c.block_size;
      }
      KvScatter(k_[s].data(), v_[s].data(), slots.data(), ctx, c.kv_heads, c.head_dim, c.block_size,
                c.dtype, k_pool_.data(), v_pool_.data());
      if (c.dtype != DType::kF32) {  // what the pool holds after rounding
        std::vector<uint16_t> tmp(k_[s].size());
        for (auto* d : {&k_[s], &v_[s]}) {
          ConvertFromFloat(c.dtype, d->data(), d->size(), tmp.data());
          ConvertToFloat(c.dtype, tmp.data(), d->size(), d->data());
        }
      }
      for (int32_t r = 0; r < kSeqs[s].rows; ++r) {
        positions_.push_back(kSeqs[s].cached + r);
        seq_of_.push_back(static_cast<int32_t>(s));
      }
      query_start_.push_back(query_start_.back() + kSeqs[s].rows);
      seq_lens_.push_back(ctx);
    }
    q_ = RandomVec(rows() * c.heads * c.head_dim, 60, 2.0f);
  }

  int64_t rows() const { return query_start_.back(); }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }

  // All rows of the batch in one call.
  std::vector<float> RunBatch() const {
    std::vector<float> out(q_.size());
    PagedAttention(q_.data(), positions_.data(), query_start_.data(), seq_lens_.data(),
                   tables_.data(), max_blocks_, static_cast<int32_t>(kSeqs.size()), c_.heads,
                   c_.kv_heads, c_.head_dim, c_.block_size, c_.dtype, k_pool_.data(),
                   v_pool_.data(), scale(), out.data());
    return out;
  }

  // Row t alone, as a one-sequence decode step over its sequence's blocks.
  std::vector<float> RunRow(int64_t t) const {
    const int64_t n = c_.heads * c_.head_dim;
    std::vector<float> out(n);
    const int32_t qs[2] = {0, 1};
    const int32_t len = positions_[t] + 1;
    PagedAttention(q_.data() + t * n, &positions_[t], qs, &len,
                   tables_.data() + int64_t{seq_of_[t]} * max_blocks_, max_blocks_, 1, c_.heads,
                   c_.kv_heads, c_.head_dim, c_.block_size, c_.dtype, k_pool_.data(),
                   v_pool_.data(), scale(), out.data());
    return out;
  }

  // Softmax(q k^T * scale) v in double for row t, head h, over the rounded K/V.
  std::vector<double> Reference(int64_t t, int64_t h) const {
    const int64_t hd = c_.head_dim, nkv = c_.kv_heads;
    const int64_t kvh = h / (c_.heads / nkv);
    const std::vector<float>& k = k_[seq_of_[t]];
    const std::vector<float>& v = v_[seq_of_[t]];
    const float* q = q_.data() + (t * c_.heads + h) * hd;
    std::vector<double> sc(positions_[t] + 1);
    double mx = -1e300, sum = 0;
    for (size_t j = 0; j < sc.size(); ++j) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += double{q[i]} * k[(j * nkv + kvh) * hd + i];
      sc[j] = d * scale();
      mx = std::max(mx, sc[j]);
    }
    for (double& x : sc) sum += (x = std::exp(x - mx));
    std::vector<double> want(hd, 0.0);
    for (size_t j = 0; j < sc.size(); ++j) {
      for (int64_t i = 0; i < hd; ++i) want[i] += sc[j] / sum * v[(j * nkv + kvh) * hd + i];
    }
    return want;
  }

  int32_t seq_of(int64_t t) const { return seq_of_[t]; }

 private:
  AttnCase c_;
  int32_t num_blocks_ = 0, max_blocks_ = 0;
  std::vector<uint8_t> k_pool_, v_pool_;
  std::vector<int32_t> tables_, positions_, query_start_, seq_lens_, seq_of_;
  std::vector<std::vector<float>> k_, v_;  // dense [context][kv_heads][head_dim] per sequence
  std::vector<float> q_;
};

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PagedAttentionTest, MatchesDoubleReference) {
  const AttnCase c = GetParam();
  const PagedCache cache(c);
  const std::vector<float> out = cache.RunBatch();
  double worst = 0;
  for (int64_t t = 0; t < cache.rows(); ++t) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const std::vector<double> want = cache.Reference(t, h);
      const double err =
          RelErr(out.data() + (t * c.heads + h) * c.head_dim, want.data(), c.head_dim);
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-5) << "seq " << cache.seq_of(t) << " row " << t << " head " << h;
    }
  }
  std::printf("max relative error %.3g\n", worst);
}

// A row's output is the same bits whether it runs inside a prefill (with other rows in
// its query tile, on any thread) or alone as a decode step.
TEST_P(PagedAttentionTest, RowsDoNotDependOnTheBatch) {
  const AttnCase c = GetParam();
  const PagedCache cache(c);
  const std::vector<float> out = cache.RunBatch();
  const int64_t n = c.heads * c.head_dim;
  for (int64_t t = 0; t < cache.rows(); ++t) {
    const std::vector<float> alone = cache.RunRow(t);
    EXPECT_EQ(std::memcmp(alone.data(), out.data() + t * n, n * sizeof(float)), 0)
        << "seq " << cache.seq_of(t) << " row " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(AttnCase{4, 4, 32, 16, DType::kF32}, AttnCase{4, 2, 64, 5, DType::kF32},
                      AttnCase{8, 2, 32, 8, DType::kF16}, AttnCase{4, 1, 64, 16, DType::kF16},
                      AttnCase{2, 1, 20, 3, DType::kBF16},
                      // GQA 1, 4, 8 at head_dim 64 and 128
                      AttnCase{4, 4, 64, 16, DType::kF32}, AttnCase{4, 4, 128, 16, DType::kF16},
                      AttnCase{8, 2, 64, 5, DType::kBF16}, AttnCase{8, 2, 128, 16, DType::kF32},
                      AttnCase{8, 1, 64, 16, DType::kF16}, AttnCase{16, 2, 128, 7, DType::kF32}));

float Exp2(float x) {
  alignas(32) float out[8];
  _mm256_store_ps(out, simd::Exp2NonPositive(_mm256_set1_ps(x)));
  return out[0];
}

TEST(Exp2NonPositiveTest, RelativeErrorBelowDocumentedBound) {
  double worst = 0;
  // Every 64th float in [-126, 0]: about 2^24 samples over all exponents.
  const float hi = 126.0f;
  uint32_t bits;
  std::memcpy(&bits, &hi, 4);
  for (uint32_t b = 0; b <= bits; b += 64) {
    float x;
    std::memcpy(&x, &b, 4);
    x = -x;  // b counts up from +0, so -x walks [-126, 0]
    const double want = std::exp2(static_cast<double>(x));
    worst = std::max(worst, std::abs(Exp2(x) - want) / want);
  }
  std::printf("max relative error of Exp2NonPositive on [-126, 0]: %.3g\n", worst);
  EXPECT_LT(worst, 1.5e-7);
}

TEST(Exp2NonPositiveTest, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Exp2(0.0f), 1.0f);
  EXPECT_EQ(Exp2(-1.0f), 0.5f);
  EXPECT_EQ(Exp2(-126.5f), 0.0f);
  EXPECT_EQ(Exp2(-1000.0f), 0.0f);
  EXPECT_EQ(Exp2(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(Exp2(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace ptxserve::cpu
