// Each candidate's error is measured as the checkpoint would compute: the input divided by
// s, times round(W diag(s)), i.e. W replaced by round(W diag(s)) diag(1/s).
#include "engine/model/hf_quant_awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

absl::StatusOr<AwqScales> SearchAwqScales(const LayerInputs& inputs,
                                          const std::vector<AwqMatrix>& matrices,
                                          const std::vector<int64_t>& slot_of,
                                          const std::vector<double>& alphas) {
  const int64_t k = inputs.width();
  AwqScales best;
  best.error = std::numeric_limits<double>::infinity();
  std::vector<float> scaled, restored;
  std::vector<uint8_t> blocks;
  for (double alpha : alphas) {
    const std::vector<float> scale = AwqScalesFor(inputs, slot_of, alpha);
    double error = 0;
    for (const AwqMatrix& m : matrices) {
      scaled.resize(static_cast<size_t>(m.out * k));
      for (int64_t i = 0; i < m.out * k; ++i) scaled[i] = m.w[i] * scale[i % k];
      if (absl::Status s = QuantizeInt4Rows(scaled.data(), m.out, k, &blocks, &restored); !s.ok()) {
        return s;
      }
      for (int64_t i = 0; i < m.out * k; ++i) restored[i] /= scale[i % k];
      error += OutputError(inputs, m.w, restored.data(), m.out);
    }
    if (alpha == 0) best.rtn_error = error;
    if (error < best.error) {
      best.error = error;
      best.alpha = alpha;
      best.scale = scale;
    }
  }
  return best;
}

}  // namespace ptxserve
