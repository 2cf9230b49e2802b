// q4_0 with importance-weighted scales (weighted_quant.h) against the reference encoder:
// never worse by the weighted error, better on average, and the elements that matter
// most are rounded closer.
#include "engine/model/weighted_quant.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/model/quant.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

constexpr int64_t kRow = 256;

// sum of w[i] * (x[i] - decoded[i])^2 with llama.cpp's element weight.
double WeightedError(const std::vector<float>& x, const std::vector<float>& importance,
                     const std::vector<uint8_t>& blocks) {
  std::vector<float> v(x.size());
  DequantizeRow(QuantType::kQ4_0, blocks.data(), static_cast<int64_t>(x.size()), v.data());
  double sigma2 = 0;
  for (float e : x) sigma2 += double{e} * e;
  sigma2 /= static_cast<double>(x.size());
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double{x[i]} - v[i];
    err += importance[i] * std::sqrt(sigma2 + double{x[i]} * x[i]) * d * d;
  }
  return err;
}

std::vector<uint8_t> Encode(const std::vector<float>& x, const std::vector<float>* importance) {
  std::vector<uint8_t> b(QuantRowBytes(QuantType::kQ4_0, kRow));
  const absl::Status s = importance != nullptr
                             ? QuantizeRowQ4_0Weighted(x.data(), kRow, importance->data(), b.data())
                             : QuantizeRow(QuantType::kQ4_0, x.data(), kRow, b.data());
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

TEST(WeightedQ4_0Test, NeverWorseThanTheReferenceAndBetterOnAverage) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  std::exponential_distribution<float> spread(1.0f);
  double weighted = 0, reference = 0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(kRow), importance(kRow);
    for (float& v : x) v = 0.1f * normal(rng);
    for (float& v : importance) v = spread(rng) * spread(rng);
    const double w = WeightedError(x, importance, Encode(x, &importance));
    const double r = WeightedError(x, importance, Encode(x, nullptr));
    EXPECT_LE(w, r * (1 + 1e-9)) << "trial " << trial;
    weighted += w;
    reference += r;
  }
  std::printf("[ q4_0 weighted ] weighted error %.4g, reference encoder %.4g (%.1f%%)\n", weighted,
              reference, 100 * weighted / reference);
  EXPECT_LT(weighted, 0.95 * reference);
}

TEST(WeightedQ4_0Test, TheImportantElementIsRoundedCloser) {
  std::mt19937 rng(22);
  std::normal_distribution<float> normal;
  double err_weighted = 0, err_reference = 0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(kRow), importance(kRow, 1.0f);
    for (float& v : x) v = normal(rng);
    importance[5] = 1000;  // element 5 of block 0 dominates its block's output
    std::vector<float> vw(kRow), vr(kRow);
    DequantizeRow(QuantType::kQ4_0, Encode(x, &importance).data(), kRow, vw.data());
    DequantizeRow(QuantType::kQ4_0, Encode(x, nullptr).data(), kRow, vr.data());
    err_weighted += std::fabs(x[5] - vw[5]);
    err_reference += std::fabs(x[5] - vr[5]);
  }
  EXPECT_LT(err_weighted, 0.5 * err_reference);
}

TEST(WeightedQ4_0Test, BadRowsAreRefusedAsByTheReference) {
  std::vector<float> x(kRow, 0.5f), importance(kRow, 1.0f);
  std::vector<uint8_t> b(QuantRowBytes(QuantType::kQ4_0, kRow));
  x[40] = std::numeric_limits<float>::quiet_NaN();
  absl::Status s = QuantizeRowQ4_0Weighted(x.data(), kRow, importance.data(), b.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("element 40"), std::string::npos) << s;
  s = QuantizeRowQ4_0Weighted(x.data(), 48, importance.data(), b.data());
  EXPECT_NE(s.message().find("not a multiple of the block size 32"), std::string::npos) << s;
}

TEST(WeightedQ4_0Test, ZeroBlocksStayZero) {
  std::vector<float> x(kRow, 0.0f), importance(kRow, 1.0f);
  std::vector<float> v(kRow, 1.0f);
  DequantizeRow(QuantType::kQ4_0, Encode(x, &importance).data(), kRow, v.data());
  for (float e : v) EXPECT_EQ(e, 0.0f);
}

}  // namespace
}  // namespace ptxserve
