// What the calibrated 4-bit encoders (AWQ's scale search, hf_quant_awq.h; GPTQ's error
// feedback, hf_quant_gptq.h) know of a linear layer's input: its calibration rows summed
// into X^T X and per-channel mean |x|, and the output error a quantized matrix makes on
// those rows. Matrices are HF's [out, in] f32; quantized ones are int4_g128 rows
// (engine/model/quant.h), the blocks AWQ and GPTQ checkpoints store.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace ptxserve {

// The calibration inputs of one linear layer, `width` channels wide.
class LayerInputs {
 public:
  explicit LayerInputs(int64_t width);

  // Adds `rows` input rows, row t at x + t * stride.
  void Add(const float* x, int64_t rows, int64_t stride);

  int64_t width() const { return width_; }
  int64_t rows() const { return rows_; }
  // (X^T X)[i][j] over the rows added, row-major [width][width].
  const std::vector<double>& gram() const { return gram_; }
  // mean over the rows of |x[i]| (0 before any row).
  double MeanAbs(int64_t i) const;
  // mean over the rows of x[i]^2, X^T X's diagonal over the rows (0 before any row): the
  // importance llama.cpp's imatrix gives input i.
  double MeanSquare(int64_t i) const;

 private:
  int64_t width_;
  int64_t rows_ = 0;
  std::vector<double> gram_;
  std::vector<double> abs_sum_;
};

// sum over the calibration rows x of ||x W^T - x V^T||^2 for W and V [out, width]:
// sum_n (w_n - v_n)^T (X^T X) (w_n - v_n).
double OutputError(const LayerInputs& inputs, const float* w, const float* v, int64_t out);

// Round-to-nearest int4_g128 of W [out, in] (quant.cc's encoder, what an uncalibrated
// checkpoint stores) into `blocks`, and the values they decode to into `dequantized`
// when not null. InvalidArgument naming the row when a row cannot be encoded.
absl::Status QuantizeInt4Rows(const float* w, int64_t out, int64_t in, std::vector<uint8_t>* blocks,
                              std::vector<float>* dequantized);

// The values int4_g128 rows decode to ([out, in]).
std::vector<float> DequantizeInt4Rows(const std::vector<uint8_t>& blocks, int64_t out, int64_t in);

}  // namespace ptxserve
