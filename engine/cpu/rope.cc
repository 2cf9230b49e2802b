// Rotary position embeddings (their frequencies: engine/model/rope.h). Angles are
// computed in double and rounded once to f32: at long positions an f32 product
// pos * inv_freq already loses the low bits of the angle, and this op is the numerical
// reference.
#include <cmath>
#include <vector>

#include "engine/cpu/ops.h"

namespace ptxserve::cpu {
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
