// GPTQ's error feedback (hf_quant_gptq.h) into plain q4_0 blocks (blocks of 32, an f16
// scale, codes nibble - 8), for `ptxserve quantize --type q4_0 --calibration`: each
// block's scale is the one the importance-weighted search (weighted_quant.h) picks for the
// original weights, the importance of input i its mean square on the calibration inputs
// (X^T X's diagonal over the rows); then a row's inputs are rounded in order against those
// scales, each one's rounding error fed onto the inputs not yet rounded through the
// inverse Hessian of the calibration inputs, as QuantizeInt4Gptq does for int4 groups.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/hf_quant_calibration.h"

namespace ptxserve {

// W [out, in] (in a multiple of 32, in == inputs.width()) into out rows of q4_0 blocks.
// `damp` as QuantizeInt4Gptq. InvalidArgument naming the row when a row cannot be
// encoded (as QuantizeRow says), or as GptqFeedback::For.
absl::StatusOr<std::vector<uint8_t>> QuantizeQ4_0Gptq(const float* w, int64_t out, int64_t in,
                                                      const LayerInputs& inputs,
                                                      double damp = 0.01);

}  // namespace ptxserve
