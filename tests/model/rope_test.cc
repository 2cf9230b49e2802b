// RoPE's inverse frequencies against transformers' formulas.
#include "engine/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace ptxserve {
namespace {

// transformers' rope_init functions, transcribed (default, linear, llama3).
std::vector<double> HfInvFreq(const ModelConfig& c) {
  std::vector<double> inv;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    inv.push_back(1.0 / std::pow(c.rope_theta, static_cast<double>(i) / c.head_dim));
  }
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScaling::Type::kLinear) {
    for (double& f : inv) f /= rs.factor;
  } else if (rs.type == RopeScaling::Type::kLlama3) {
    const double old_context_len = rs.original_max_position_embeddings;
    const double low_freq_wavelen = old_context_len / rs.low_freq_factor;
    const double high_freq_wavelen = old_context_len / rs.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      double llama = wavelen > low_freq_wavelen ? f / rs.factor : f;
      const double smooth_factor = (old_context_len / wavelen - rs.low_freq_factor) /
                                   (rs.high_freq_factor - rs.low_freq_factor);
      const double smoothed = (1 - smooth_factor) * llama / rs.factor + smooth_factor * llama;
      const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = is_medium ? smoothed : llama;
    }
  }
  return inv;
}

TEST(RopeInvFreqTest, MatchesTransformersFormulas) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 500000.0;
  for (auto type :
       {RopeScaling::Type::kNone, RopeScaling::Type::kLinear, RopeScaling::Type::kLlama3}) {
    c.rope_scaling = RopeScaling();
    c.rope_scaling.type = type;
    c.rope_scaling.factor = 8.0;
    if (type == RopeScaling::Type::kLlama3) c.rope_scaling.original_max_position_embeddings = 8192;
    const std::vector<double> want = HfInvFreq(c);
    std::vector<float> got(32);
    RopeInvFreq(c, got.data());
    int scaled = 0, medium = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-7 * want[i]) << "i " << i << " type " << int(type);
      const double plain = 1.0 / std::pow(c.rope_theta, 2.0 * i / 64);
      if (std::abs(want[i] - plain / 8) < 1e-9 * plain) ++scaled;
      if (std::abs(want[i] - plain) > 1e-9 * plain &&
          std::abs(want[i] - plain / 8) > 1e-9 * plain) {
        ++medium;
      }
    }
    // The llama3 case must exercise all three bands of the formula.
    if (type == RopeScaling::Type::kLlama3) {
      EXPECT_GT(scaled, 0);
      EXPECT_GT(medium, 0);
      EXPECT_LT(scaled + medium, 32);
    }
  }
}

}  // namespace
}  // namespace ptxserve
