// Rotary position embeddings. Frequencies and angles are computed in double and
// rounded once to f32: at long positions an f32 product pos * inv_freq already loses
// the low bits of the angle, and this op is the numerical reference.
#include <cmath>
#include <numbers>
#include <vector>

#include "engine/cpu/ops.h"

namespace ptxserve::cpu {

void RopeInvFreq(const ModelConfig& cfg, float* inv_freq) {
  const int64_t half = cfg.head_dim / 2;
  const RopeScaling& rs = cfg.rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(cfg.rope_theta,
                              static_cast<double>(2 * i) / static_cast<double>(cfg.head_dim));
    if (rs.type == RopeScaling::Type::kLinear) {
      f /= rs.factor;
    } else if (rs.type == RopeScaling::Type::kLlama3) {
      // transformers' _compute_llama3_parameters: long wavelengths are slowed by
      // `factor`, short ones kept, the band between interpolated smoothly.
      const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
      const double low_freq_wavelen = old_ctx / rs.low_freq_factor;
      const double high_freq_wavelen = old_ctx / rs.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= rs.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
}

namespace {

// Rotates one head in place: pair (a, b) -> (a cos - b sin, b cos + a sin).
void RotateHead(float* x, const float* cos_t, const float* sin_t, int64_t half, RopeStyle style) {
  if (style == RopeStyle::kRotateHalf) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i];
      const float b = x[i + half];
      x[i] = a * cos_t[i] - b * sin_t[i];
      x[i + half] = b * cos_t[i] + a * sin_t[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i];
      const float b = x[2 * i + 1];
      x[2 * i] = a * cos_t[i] - b * sin_t[i];
      x[2 * i + 1] = b * cos_t[i] + a * sin_t[i];
    }
  }
}

}  // namespace

void Rope(float* q, float* k, const int32_t* positions, int64_t tokens, int64_t num_heads,
          int64_t num_kv_heads, int64_t head_dim, const float* inv_freq, RopeStyle style) {
  const int64_t half = head_dim / 2;
  std::vector<float> cos_t(half);
  std::vector<float> sin_t(half);
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = positions[t];
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * static_cast<double>(inv_freq[i]);
      cos_t[i] = static_cast<float>(std::cos(angle));
      sin_t[i] = static_cast<float>(std::sin(angle));
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      RotateHead(q + (t * num_heads + h) * head_dim, cos_t.data(), sin_t.data(), half, style);
    }
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      RotateHead(k + (t * num_kv_heads + h) * head_dim, cos_t.data(), sin_t.data(), half, style);
    }
  }
}

}  // namespace ptxserve::cpu
