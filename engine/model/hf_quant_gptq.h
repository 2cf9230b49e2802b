// GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers", 2022) into int4_g128 blocks, as AutoGPTQ runs it without
// act-order: the inputs are quantized in order, and each one's rounding error is fed
// forward onto the inputs not yet quantized through the inverse Hessian H^-1 of the
// layer's calibration inputs (H = 2 X^T X, dampened), so the layer's output on those
// inputs moves as little as the order allows. Groups are static: every group's scale and
// zero are the round-to-nearest ones of the original weights, so the blocks are plain
// int4_g128 rows any AWQ/GPTQ loader reads.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/model/hf_quant_calibration.h"

namespace ptxserve {

// GPTQ's error feedback with the encoder left to the caller (QuantizeInt4Gptq below, q4_0
// in q4_0_gptq.h). For(inputs, damp) factors H^-1 for inputs.width() inputs, H = 2 X^T X
// with `damp` times its mean diagonal added to the diagonal (AutoGPTQ's damp_percent,
// 0.01) and inputs never seen (a zero diagonal) given 1 there first; InvalidArgument when
// the dampened H is not positive definite in double precision.
class GptqFeedback {
 public:
  static absl::StatusOr<GptqFeedback> For(const LayerInputs& inputs, double damp);

  // One row of W (one value per input) quantized in place, inputs in order: row[i] becomes
  // quantize(i, row), the value input i is stored as, and its rounding error is fed onto
  // row[j > i]. `quantize` sees the row as fed so far (input i's value included).
  void QuantizeRow(
      std::vector<double>& row,
      absl::FunctionRef<double(int64_t i, const std::vector<double>& row)> quantize) const;

 private:
  GptqFeedback(int64_t width, std::vector<double> u) : width_(width), u_(std::move(u)) {}
  int64_t width_;
  std::vector<double> u_;  // upper Cholesky factor of H^-1, row-major
};

// Quantizes W [out, in] (in a multiple of 128, in == inputs.width()) into out rows of
// int4_g128 blocks. `damp` is the fraction of H's mean diagonal added to its diagonal
// (AutoGPTQ's damp_percent, 0.01); inputs never seen (a zero diagonal) get 1 there first.
// InvalidArgument when a row cannot be encoded (as QuantizeInt4Rows) or the dampened H
// is not positive definite in double precision.
absl::StatusOr<std::vector<uint8_t>> QuantizeInt4Gptq(const float* w, int64_t out, int64_t in,
                                                      const LayerInputs& inputs,
                                                      double damp = 0.01);

}  // namespace ptxserve
