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
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/hf_quant_calibration.h"

namespace ptxserve {

// Quantizes W [out, in] (in a multiple of 128, in == inputs.width()) into out rows of
// int4_g128 blocks. `damp` is the fraction of H's mean diagonal added to its diagonal
// (AutoGPTQ's damp_percent, 0.01); inputs never seen (a zero diagonal) get 1 there first.
// InvalidArgument when a row cannot be encoded (as QuantizeInt4Rows) or the dampened H
// is not positive definite in double precision.
absl::StatusOr<std::vector<uint8_t>> QuantizeInt4Gptq(const float* w, int64_t out, int64_t in,
                                                      const LayerInputs& inputs,
                                                      double damp = 0.01);

}  // namespace ptxserve
