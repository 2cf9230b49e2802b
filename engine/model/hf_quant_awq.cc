// Each candidate's error is measured as the checkpoint would compute: the input divided by
// s, times round(W diag(s)), i.e. W replaced by round(W diag(s)) diag(1/s).
#include "engine/model/hf_quant_awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/quant.h"

namespace ptxserve {

std::vector<double> AwqAlphaGrid() {
  std::vector<double> grid;
  for (int i = 0; i < 20; ++i) grid.push_back(i / 20.0);
  return grid;
}

std::vector<float> AwqScalesFor(const LayerInputs& inputs, const std::vector<int64_t>& slot_of,
                                double alpha) {
  const int64_t k = inputs.width();
  std::vector<float> scale(k, 1.0f);
  if (alpha == 0) return scale;
  int64_t slots = 0;
  for (int64_t c = 0; c < k; ++c) slots = std::max(slots, slot_of.empty() ? c + 1 : slot_of[c] + 1);
  std::vector<double> sum(slots), count(slots);
  for (int64_t c = 0; c < k; ++c) {
    const int64_t slot = slot_of.empty() ? c : slot_of[c];
    sum[slot] += inputs.MeanAbs(c);
    count[slot] += 1;
  }
  std::vector<double> s(slots);
  double lo = std::numeric_limits<double>::max(), hi = 0;
  for (int64_t i = 0; i < slots; ++i) {
    s[i] = std::max(std::pow(count[i] > 0 ? sum[i] / count[i] : 0, alpha), 1e-4);
    lo = std::min(lo, s[i]);
    hi = std::max(hi, s[i]);
  }
  const double norm = std::sqrt(lo * hi);
  for (int64_t c = 0; c < k; ++c) {
    scale[c] = static_cast<float>(s[slot_of.empty() ? c : slot_of[c]] / norm);
  }
  return scale;
}

AwqObjective LinearOutputError(const LayerInputs& inputs, const std::vector<AwqMatrix>& matrices) {
  return [&inputs, matrices](const std::vector<std::vector<float>>& restored) {
    double error = 0;
    for (size_t m = 0; m < matrices.size(); ++m) {
      error += OutputError(inputs, matrices[m].w, restored[m].data(), matrices[m].out);
    }
    return error;
  };
}

absl::StatusOr<AwqScales> SearchAwqScales(const LayerInputs& inputs,
                                          const std::vector<AwqMatrix>& matrices,
                                          const std::vector<int64_t>& slot_of,
                                          const std::vector<double>& alphas,
                                          const AwqObjective& objective) {
  const int64_t k = inputs.width();
  AwqScales best;
  best.error = std::numeric_limits<double>::infinity();
  std::vector<float> scaled;
  std::vector<uint8_t> blocks;
  std::vector<std::vector<float>> restored(matrices.size());
  for (double alpha : alphas) {
    const std::vector<float> scale = AwqScalesFor(inputs, slot_of, alpha);
    for (size_t m = 0; m < matrices.size(); ++m) {
      const int64_t n = matrices[m].out;
      scaled.resize(static_cast<size_t>(n * k));
      for (int64_t i = 0; i < n * k; ++i) scaled[i] = matrices[m].w[i] * scale[i % k];
      if (absl::Status s = QuantizeInt4Rows(scaled.data(), n, k, &blocks, &restored[m]); !s.ok()) {
        return s;
      }
      for (int64_t i = 0; i < n * k; ++i) restored[m][i] /= scale[i % k];
    }
    const double error = objective(restored);
    if (alpha == 0) best.rtn_error = error;
    if (error < best.error) {
      best.error = error;
      best.alpha = alpha;
      best.scale = scale;
    }
  }
  return best;
}

absl::StatusOr<AwqClip> ClipAwqGroups(float* w, int64_t out, int64_t in, const LayerInputs& inputs,
                                      const std::vector<float>& scale) {
  constexpr int64_t kGroup = 128;
  const std::vector<double>& g = inputs.gram();
  std::vector<float> clamped(kGroup), restored(kGroup), best(kGroup);
  std::vector<double> d(kGroup);
  uint8_t block[LayoutOf(QuantType::kInt4G128).block_bytes];
  AwqClip total;
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t g0 = 0; g0 < in; g0 += kGroup) {
      float* wg = w + n * in + g0;
      float amax = 0;
      for (int64_t i = 0; i < kGroup; ++i) amax = std::max(amax, std::fabs(wg[i]));
      double best_error = std::numeric_limits<double>::infinity();
      for (int step = 0; step < 10; ++step) {
        const float limit = amax * (1.0f - static_cast<float>(step) / 20);
        for (int64_t i = 0; i < kGroup; ++i) clamped[i] = std::clamp(wg[i], -limit, limit);
        if (absl::Status s = QuantizeRow(QuantType::kInt4G128, clamped.data(), kGroup, block);
            !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("row ", n, ": ", s.message()));
        }
        DequantizeRow(QuantType::kInt4G128, block, kGroup, restored.data());
        for (int64_t i = 0; i < kGroup; ++i) {
          d[i] = (static_cast<double>(wg[i]) - restored[i]) / scale[g0 + i];
        }
        double error = 0;
        for (int64_t i = 0; i < kGroup; ++i) {
          const double* gi = g.data() + (g0 + i) * in + g0;
          double dot = 0;
          for (int64_t j = 0; j < kGroup; ++j) dot += gi[j] * d[j];
          error += d[i] * dot;
        }
        if (step == 0) total.rtn_error += error;
        if (error < best_error) {
          best_error = error;
          best = clamped;
        }
      }
      total.error += best_error;
      std::copy(best.begin(), best.end(), wg);
    }
  }
  return total;
}

}  // namespace ptxserve
