// Block encoders that weigh each element's rounding error by its importance: llama.cpp's
// imatrix idea, where a weight's importance is the mean square of the activation it
// multiplies on calibration text (hf_quant_calibrate.h's InputImportance), so the block's
// scale is chosen for the layer's output rather than for the weights alone.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace ptxserve {

// Encodes n floats (a multiple of 32) into q4_0 blocks at `out` (as QuantizeRow), each
// block's scale the one among llama.cpp's reference scale and a range of candidates (the
// block's signed largest element mapped to -(8 + k / 10), k = -9..9, each also refined by
// weighted least squares) with the smallest sum of w[i] * (x[i] - value[i])^2, where
// w[i] = importance[i] * sqrt(sigma^2 + x[i]^2) and sigma^2 is the row's mean square, as
// llama.cpp weighs them; the codes are rounded against the scale stored. importance[i] >= 0
// for each element. Never worse than the reference encoder by that measure. InvalidArgument
// as QuantizeRow.
absl::Status QuantizeRowQ4_0Weighted(const float* x, int64_t n, const float* importance,
                                     uint8_t* out);

}  // namespace ptxserve
