#include "engine/model/rope.h"

#include <cmath>
#include <numbers>

namespace ptxserve {

void RopeInvFreq(const ModelConfig& cfg, float* inv_freq) {
  const int64_t half = cfg.head_dim / 2;
  const RopeScaling& rs = cfg.rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(cfg.rope_theta,
                              static_cast<double>(2 * i) / static_cast<double>(cfg.head_dim));
    if (rs.type == RopeScaling::Type::kLinear) {
      f /= rs.factor;
    } else if (rs.type == RopeScaling::Type::kFactors) {
      f /= rs.factors.at(static_cast<size_t>(i));
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

}  // namespace ptxserve
