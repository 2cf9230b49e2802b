// X^T X is kept in double: it sums hundreds of products per entry, and GPTQ factors it,
// where float's rounding would make a nearly singular matrix indefinite.
#include "engine/model/hf_quant_calibration.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/model/quant.h"

namespace ptxserve {

LayerInputs::LayerInputs(int64_t width)
    : width_(width), gram_(static_cast<size_t>(width * width)), abs_sum_(width) {}

void LayerInputs::Add(const float* x, int64_t rows, int64_t stride) {
  std::vector<double> row(width_);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < width_; ++i) row[i] = x[t * stride + i];
    for (int64_t i = 0; i < width_; ++i) {
      abs_sum_[i] += std::fabs(row[i]);
      if (row[i] == 0) continue;
      double* g = gram_.data() + i * width_;
      // Only j >= i here; the lower triangle is mirrored below, halving the work.
      for (int64_t j = i; j < width_; ++j) g[j] += row[i] * row[j];
    }
  }
  for (int64_t i = 0; i < width_; ++i) {
    for (int64_t j = i + 1; j < width_; ++j) gram_[j * width_ + i] = gram_[i * width_ + j];
  }
  rows_ += rows;
}

double LayerInputs::MeanAbs(int64_t i) const {
  return rows_ > 0 ? abs_sum_[i] / static_cast<double>(rows_) : 0;
}

double LayerInputs::MeanSquare(int64_t i) const {
  return rows_ > 0 ? gram_[i * width_ + i] / static_cast<double>(rows_) : 0;
}

double OutputError(const LayerInputs& inputs, const float* w, const float* v, int64_t out) {
  const int64_t k = inputs.width();
  const std::vector<double>& g = inputs.gram();
  std::vector<double> d(k), gd(k);
  double total = 0;
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t i = 0; i < k; ++i) d[i] = static_cast<double>(w[n * k + i]) - v[n * k + i];
    // gd = G d as a sum of G's rows (G is symmetric): a multiply-add over contiguous rows,
    // which vectorizes where a dot product's strict summation order would not.
    std::fill(gd.begin(), gd.end(), 0.0);
    for (int64_t i = 0; i < k; ++i) {
      if (d[i] == 0) continue;
      const double* gi = g.data() + i * k;
      for (int64_t j = 0; j < k; ++j) gd[j] += d[i] * gi[j];
    }
    for (int64_t j = 0; j < k; ++j) total += d[j] * gd[j];
  }
  return total;
}

absl::Status QuantizeInt4Rows(const float* w, int64_t out, int64_t in, std::vector<uint8_t>* blocks,
                              std::vector<float>* dequantized) {
  const int64_t row_bytes = QuantRowBytes(QuantType::kInt4G128, in);
  blocks->resize(static_cast<size_t>(out * row_bytes));
  for (int64_t n = 0; n < out; ++n) {
    if (absl::Status s =
            QuantizeRow(QuantType::kInt4G128, w + n * in, in, blocks->data() + n * row_bytes);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", n, ": ", s.message()));
    }
  }
  if (dequantized != nullptr) *dequantized = DequantizeInt4Rows(*blocks, out, in);
  return absl::OkStatus();
}

std::vector<float> DequantizeInt4Rows(const std::vector<uint8_t>& blocks, int64_t out, int64_t in) {
  const int64_t row_bytes = QuantRowBytes(QuantType::kInt4G128, in);
  std::vector<float> v(static_cast<size_t>(out * in));
  for (int64_t n = 0; n < out; ++n) {
    DequantizeRow(QuantType::kInt4G128, blocks.data() + n * row_bytes, in, v.data() + n * in);
  }
  return v;
}

}  // namespace ptxserve
