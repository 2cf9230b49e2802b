// The calibrated 4-bit encoders on small synthetic layers whose expected effect can be
// checked: the input statistics and the output error against direct sums, GPTQ against
// round-to-nearest (never worse on its calibration inputs; the same blocks when the
// inputs are uncorrelated, where there is no error to feed forward), AWQ's scales (alpha
// 0 is plain rounding; salient channels make it pick alpha > 0 and beat rounding).
#include "engine/model/hf_quant_calibration.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/model/hf_quant_awq.h"
#include "engine/model/hf_quant_gptq.h"
#include "gtest/gtest.h"
#include "tests/model/synthetic_layer.h"

namespace ptxserve {
namespace {

using Layer = testing::SyntheticLayer;
using testing::DirectOutputError;
using testing::InputsOf;

// Correlated inputs, `salient` channels `boost` times larger.
Layer SyntheticLayer(int64_t rows, int64_t in, int64_t out, int salient, float boost,
                     unsigned seed) {
  return testing::MakeSyntheticLayer(
      rows, in, out, 8, [=](int64_t i) { return i < salient ? boost : 1.0f; }, seed);
}

double RtnError(const Layer& l, const LayerInputs& inputs) {
  std::vector<uint8_t> blocks;
  std::vector<float> values;
  EXPECT_TRUE(QuantizeInt4Rows(l.w.data(), l.out, l.in, &blocks, &values).ok());
  return OutputError(inputs, l.w.data(), values.data(), l.out);
}

TEST(LayerInputsTest, GramAndMeanAbsAreTheDirectSums) {
  const Layer l = SyntheticLayer(5, 128, 8, 0, 1, 1);
  LayerInputs inputs(l.in);
  inputs.Add(l.x.data(), 2, l.in);  // in two calls: sums accumulate
  inputs.Add(l.x.data() + 2 * l.in, 3, l.in);
  EXPECT_EQ(inputs.rows(), 5);
  for (int64_t i : {0, 17, 127}) {
    double abs_sum = 0;
    for (int64_t t = 0; t < 5; ++t) abs_sum += std::fabs(l.x[t * l.in + i]);
    EXPECT_NEAR(inputs.MeanAbs(i), abs_sum / 5, 1e-6);
    for (int64_t j : {0, 5, 127}) {
      double g = 0;
      for (int64_t t = 0; t < 5; ++t) g += double{l.x[t * l.in + i]} * l.x[t * l.in + j];
      EXPECT_NEAR(inputs.gram()[i * l.in + j], g, 1e-9 * (1 + std::fabs(g))) << i << "," << j;
    }
  }
}

TEST(OutputErrorTest, EqualsTheErrorOfTheProducts) {
  const Layer l = SyntheticLayer(40, 128, 16, 4, 10, 2);
  std::vector<float> v = l.w;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0, 0.01f);
  for (float& e : v) e += noise(rng);
  const double direct = DirectOutputError(l, v);
  EXPECT_NEAR(OutputError(InputsOf(l), l.w.data(), v.data(), l.out), direct, 1e-6 * direct);
  EXPECT_EQ(OutputError(InputsOf(l), l.w.data(), l.w.data(), l.out), 0);
}

TEST(GptqTest, OutputErrorOnItsCalibrationInputsIsBelowRoundToNearest) {
  for (unsigned seed : {4u, 5u, 6u}) {
    const Layer l = SyntheticLayer(512, 256, 32, 8, 8, seed);
    const LayerInputs inputs = InputsOf(l);
    auto blocks = QuantizeInt4Gptq(l.w.data(), l.out, l.in, inputs);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    const std::vector<float> v = DequantizeInt4Rows(*blocks, l.out, l.in);
    const double gptq = DirectOutputError(l, v), rtn = RtnError(l, inputs);
    std::printf("[ gptq ] seed %u: output error %.4g, round-to-nearest %.4g (%.1f%%)\n", seed, gptq,
                rtn, 100 * gptq / rtn);
    EXPECT_LT(gptq, 0.8 * rtn);
  }
}

TEST(GptqTest, StaticGroupsKeepRoundToNearestScalesAndZeros) {
  const Layer l = SyntheticLayer(300, 256, 8, 4, 5, 7);
  auto blocks = QuantizeInt4Gptq(l.w.data(), l.out, l.in, InputsOf(l));
  ASSERT_TRUE(blocks.ok());
  std::vector<uint8_t> rtn;
  ASSERT_TRUE(QuantizeInt4Rows(l.w.data(), l.out, l.in, &rtn, nullptr).ok());
  ASSERT_EQ(blocks->size(), rtn.size());
  size_t codes_changed = 0;
  for (size_t b = 0; b < rtn.size(); b += 68) {
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*blocks)[b + i], rtn[b + i]) << "block " << b / 68;
    for (size_t i = 4; i < 68; ++i) codes_changed += (*blocks)[b + i] != rtn[b + i];
  }
  EXPECT_GT(codes_changed, 0u);
}

TEST(GptqTest, UncorrelatedInputsLeaveNothingToFeedForward) {
  // Rows that are scaled unit vectors: X^T X is diagonal, so H^-1 is too and every
  // input's error stays its own: GPTQ is round-to-nearest.
  Layer l = SyntheticLayer(1, 128, 16, 0, 1, 8);
  l.rows = 128;
  l.x.assign(128 * 128, 0.0f);
  for (int64_t i = 0; i < 128; ++i) l.x[i * 128 + i] = 1.0f + static_cast<float>(i % 7);
  auto blocks = QuantizeInt4Gptq(l.w.data(), l.out, l.in, InputsOf(l));
  ASSERT_TRUE(blocks.ok());
  std::vector<uint8_t> rtn;
  ASSERT_TRUE(QuantizeInt4Rows(l.w.data(), l.out, l.in, &rtn, nullptr).ok());
  EXPECT_EQ(*blocks, rtn);
}

TEST(GptqTest, RefusesInputsOfAnotherWidth) {
  const Layer l = SyntheticLayer(10, 128, 8, 0, 1, 9);
  const absl::StatusOr<std::vector<uint8_t>> r =
      QuantizeInt4Gptq(l.w.data(), l.out, l.in, LayerInputs(256));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("256 wide"), std::string::npos) << r.status();
}

TEST(AwqTest, AlphaZeroIsPlainRounding) {
  const Layer l = SyntheticLayer(64, 256, 16, 8, 20, 10);
  const LayerInputs inputs = InputsOf(l);
  for (float s : AwqScalesFor(inputs, {}, 0)) EXPECT_EQ(s, 1.0f);
  auto found = SearchAwqScales(inputs, {{l.w.data(), l.out}}, {}, {0.0},
                               LinearOutputError(inputs, {{l.w.data(), l.out}}));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->alpha, 0);
  EXPECT_EQ(found->error, found->rtn_error);
  EXPECT_EQ(found->error, RtnError(l, inputs));
}

TEST(AwqTest, SalientChannelsMakeTheSearchScaleAndBeatRounding) {
  const Layer l = SyntheticLayer(256, 256, 32, 8, 30, 11);
  const LayerInputs inputs = InputsOf(l);
  auto found = SearchAwqScales(inputs, {{l.w.data(), l.out}}, {}, AwqAlphaGrid(),
                               LinearOutputError(inputs, {{l.w.data(), l.out}}));
  ASSERT_TRUE(found.ok()) << found.status();
  std::printf("[ awq ] alpha %.2f: output error %.4g, round-to-nearest %.4g (%.1f%%)\n",
              found->alpha, found->error, found->rtn_error, 100 * found->error / found->rtn_error);
  EXPECT_GT(found->alpha, 0);
  EXPECT_LT(found->error, 0.9 * found->rtn_error);
  // The salient channels (the first 8) get the largest scales.
  EXPECT_GT(found->scale[0], found->scale[100]);
  // The error reported is that of W replaced by round(W diag(s)) diag(1/s).
  std::vector<float> scaled(l.w.size());
  for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = l.w[i] * found->scale[i % l.in];
  std::vector<uint8_t> blocks;
  std::vector<float> v;
  ASSERT_TRUE(QuantizeInt4Rows(scaled.data(), l.out, l.in, &blocks, &v).ok());
  for (size_t i = 0; i < v.size(); ++i) v[i] /= found->scale[i % l.in];
  EXPECT_NEAR(DirectOutputError(l, v), found->error, 1e-6 * found->error);
}

TEST(AwqTest, ChannelsSharingASlotShareTheirScale) {
  // o_proj's view: 4 heads of 64 over 2 kv heads, heads 2h and 2h + 1 reading kv head h.
  const Layer l = SyntheticLayer(64, 256, 8, 8, 10, 12);
  std::vector<int64_t> slot_of(256);
  for (int64_t c = 0; c < 256; ++c) slot_of[c] = (c / 64) / 2 * 64 + c % 64;
  const std::vector<float> s = AwqScalesFor(InputsOf(l), slot_of, 0.5);
  for (int64_t c = 0; c < 64; ++c) {
    EXPECT_EQ(s[c], s[c + 64]) << c;
    EXPECT_EQ(s[128 + c], s[192 + c]) << c;
  }
  EXPECT_NE(s[0], s[128]);
}

TEST(AwqTest, ClippingNeverLosesToRoundingAndWinsOnOutliers) {
  // One group per row, so the per-group error the search minimises is the whole output
  // error, which the test recomputes from the blocks of the clamped matrix.
  Layer l = SyntheticLayer(200, 128, 16, 0, 1, 13);
  for (int64_t n = 0; n < l.out; ++n) l.w[n * l.in + (n * 7) % l.in] = 0.6f;  // outliers
  const LayerInputs inputs = InputsOf(l);
  std::vector<float> clipped = l.w;
  auto clip = ClipAwqGroups(clipped.data(), l.out, l.in, inputs, std::vector<float>(l.in, 1.0f));
  ASSERT_TRUE(clip.ok()) << clip.status();
  EXPECT_NEAR(clip->rtn_error, RtnError(l, inputs), 1e-6 * clip->rtn_error);
  std::vector<uint8_t> blocks;
  std::vector<float> v;
  ASSERT_TRUE(QuantizeInt4Rows(clipped.data(), l.out, l.in, &blocks, &v).ok());
  EXPECT_NEAR(OutputError(inputs, l.w.data(), v.data(), l.out), clip->error, 1e-6 * clip->error);
  std::printf("[ awq clip ] output error %.4g, round-to-nearest %.4g (%.1f%%)\n", clip->error,
              clip->rtn_error, 100 * clip->error / clip->rtn_error);
  EXPECT_LT(clip->error, 0.9 * clip->rtn_error);
  size_t clamped = 0;
  for (size_t i = 0; i < l.w.size(); ++i) {
    EXPECT_LE(std::fabs(clipped[i]), std::fabs(l.w[i]));
    clamped += clipped[i] != l.w[i];
  }
  EXPECT_GT(clamped, 0u);
}

TEST(AwqTest, ClippingPicksTheRatioWithTheSmallestGroupOutputError) {
  // One row, one group, scaled inputs (s != 1): each ratio r = 1, 0.95, ..., 0.55 clamps the
  // scaled row to r max|w|, rounds it, and is judged here by the direct output error of the
  // unscaled weights, sum_t (x_t . (w - q / s))^2; the search must keep the best clamp.
  Layer l = SyntheticLayer(64, 128, 1, 0, 1, 14);
  l.w[5] = 0.5f;  // an outlier worth clipping
  l.w[77] = -0.3f;
  std::vector<float> scale(128);
  for (int64_t i = 0; i < 128; ++i) scale[i] = 0.5f + static_cast<float>(i % 5) / 4;
  std::vector<float> scaled(128);
  for (int64_t i = 0; i < 128; ++i) scaled[i] = l.w[i] * scale[i];
  float amax = 0;
  for (float v : scaled) amax = std::max(amax, std::fabs(v));
  double best_error = INFINITY;
  std::vector<float> best;
  for (int step = 0; step < 10; ++step) {
    const float limit = amax * (1.0f - static_cast<float>(step) / 20);
    std::vector<float> clamped(128);
    for (int64_t i = 0; i < 128; ++i) clamped[i] = std::clamp(scaled[i], -limit, limit);
    std::vector<uint8_t> blocks;
    std::vector<float> q;
    ASSERT_TRUE(QuantizeInt4Rows(clamped.data(), 1, 128, &blocks, &q).ok());
    for (int64_t i = 0; i < 128; ++i) q[i] /= scale[i];
    const double error = DirectOutputError(l, q);
    std::printf("[ awq clip ] ratio %.2f: output error %.4g\n", limit / amax, error);
    if (error < best_error) {
      best_error = error;
      best = clamped;
    }
  }
  std::vector<float> clipped = scaled;
  auto clip = ClipAwqGroups(clipped.data(), 1, 128, InputsOf(l), scale);
  ASSERT_TRUE(clip.ok()) << clip.status();
  EXPECT_EQ(clipped, best);
  EXPECT_NEAR(clip->error, best_error, 1e-6 * best_error);
  EXPECT_NE(clipped, scaled);  // the outlier made a ratio below 1 pay
}

}  // namespace
}  // namespace ptxserve
