// Calibrated 4-bit checkpoints (`ptxserve quantize --type awq|gptq --calibration FILE`):
// the model runs on calibration tokens (calibration_forward.h) and each layer's seven
// projections are quantized with what their inputs show:
//   awq:  AWQ's scale search per input (hf_quant_awq.h): q/k/v and gate/up scaled against
//         their RMSNorm's weight (judged by the attention block's and the MLP's output,
//         through o_proj and down_proj), o_proj against v_proj's rows (o_proj's heads
//         sharing a kv head share its scales) and down_proj against up_proj's rows, on the
//         unquantized model's activations, as AutoAWQ does; then its clipping search for
//         all but q/k, and round-to-nearest (AwqRounding::kNearest, as AutoAWQ) or, with
//         AwqRounding::kGptq, gptq's error feedback below run on the scaled and clipped
//         weights against their round-to-nearest groups (llm-compressor's AWQModifier
//         stacked with its GPTQModifier).
//   gptq: GPTQ (hf_quant_gptq.h) layer after layer in the forward's order, each Linear's
//         inputs computed through the projections already quantized, as AutoGPTQ's
//         sequential mode does.
// The result is what WriteHfQuantized stores instead of its round-to-nearest blocks; the
// checkpoints stay plain AWQ/GPTQ ones that any loader reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/calibration_forward.h"
#include "engine/model/hf_quant_config.h"
#include "engine/model/model.h"

namespace ptxserve {

struct CalibratedInt4 {
  // Weight tensor name ("model.layers.0.self_attn.q_proj.weight") -> its int4_g128 rows
  // (q4_0 rows from CalibrateQ4_0).
  std::map<std::string, std::vector<uint8_t>> blocks;
  // Other tensors whose values changed (AWQ's folded RMSNorm weights, v_proj's bias) ->
  // their new values, to be stored in the tensor's own dtype.
  std::map<std::string, std::vector<float>> folded;
  // Summed over every search, the error the method minimised with what it chose and with
  // plain rounding: gptq, each projection's output error on its calibration inputs
  // (OutputError); awq, its scale search's objective (before clipping).
  double error = 0;
  double rtn_error = 0;
  int64_t tokens = 0;  // calibration tokens run
};

// How awq picks each weight's 4-bit integer once its scales and clipping are found.
enum class AwqRounding {
  kNearest,  // round to nearest, as AutoAWQ does
  kGptq,     // gptq's error feedback against the groups' round-to-nearest scales and zeros
};

// Calibrates `model` (unquantized, from a model directory) for `method` (kAwq or kGptq)
// on `windows` (token sequences, each from position 0); `awq_rounding` is awq's last
// step. InvalidArgument naming the tensor for a block-quantized model, a matrix whose
// inputs are not a multiple of 128 or outputs of 8, or one that cannot be encoded; for
// an empty window list.
absl::StatusOr<CalibratedInt4> CalibrateInt4(const Model& model, HfQuantization::Method method,
                                             const std::vector<std::vector<int32_t>>& windows,
                                             AwqRounding awq_rounding = AwqRounding::kNearest);

// AWQ's part before rounding, on `layers` (FloatLayers of `model`, rewritten in place) over
// `windows`: each input's scales searched, weights scaled and 1/s folded into the previous
// op, then, with `clip`, the clipping search. Without `clip` the layers compute what they
// did before up to float rounding (x / s times W diag(s)). Adds the tokens run and the
// searches' errors to *errors. InvalidArgument for an empty window list or as the
// calibration forward.
absl::Status ApplyAwq(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                      bool clip, std::vector<FloatLayer>* layers, CalibratedInt4* errors);

// `ptxserve quantize --type q4_0 --calibration`: GPTQ into q4_0 blocks (q4_0_gptq.h) for
// the seven projections, layer after layer as CalibrateInt4's gptq, and the LM head (the
// embedding when tied) with importance-weighted scales (weighted_quant.h) from its inputs.
// `blocks` holds their q4_0 rows (in Hugging Face's row order), `error` and `rtn_error`
// the summed output errors against the reference encoder's. Rows must be whole blocks of
// 32. InvalidArgument as CalibrateInt4.
absl::StatusOr<CalibratedInt4> CalibrateQ4_0(const Model& model,
                                             const std::vector<std::vector<int32_t>>& windows);

}  // namespace ptxserve
