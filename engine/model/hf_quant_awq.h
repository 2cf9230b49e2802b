// AWQ's scale search (Lin et al., "AWQ: Activation-aware Weight Quantization for LLM
// Compression and Acceleration", 2023; AutoAWQ's auto_scale): a linear layer's input
// channels that carry large activations matter most, so each input channel c of the
// matrices reading one input is multiplied by s_c = mean|x_c|^alpha before rounding, and
// the input by 1 / s_c, which the checkpoint folds into the op that produced the input
// (an RMSNorm's weight, or the rows of v_proj / up_proj), as AutoAWQ does: the layer
// then stores round(W diag(s)) in a plain AWQ checkpoint. alpha is searched on a grid
// for the smallest output error on the calibration inputs; a clipping search follows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/hf_quant_calibration.h"

namespace ptxserve {

// One matrix [out, inputs.width()] reading the shared input.
struct AwqMatrix {
  const float* w;
  int64_t out;
};

struct AwqScales {
  std::vector<float> scale;  // per input channel
  double alpha = 0;          // the exponent chosen
  double error = 0;          // the objective's error with `scale`
  double rtn_error = 0;      // the same without scales (alpha 0: plain rounding), when searched
};

// The grid AutoAWQ searches: 0, 0.05, ..., 0.95.
std::vector<double> AwqAlphaGrid();

// Scales s_c = max(m_c^alpha, 1e-4), normalized by sqrt(max s * min s) as AutoAWQ does,
// where m_c is mean |x| of channel c averaged over the channels sharing its slot:
// slot_of[c] names the output of the previous op that channel c divides (o_proj's heads
// that read one kv head share v_proj's row); empty means a slot per channel. alpha 0
// gives 1 everywhere.
std::vector<float> AwqScalesFor(const LayerInputs& inputs, const std::vector<int64_t>& slot_of,
                                double alpha);

// The error of the matrices replaced by `restored` (round(W diag(s)) diag(1/s), one per
// matrix, in order) on the calibration inputs.
using AwqObjective = std::function<double(const std::vector<std::vector<float>>& restored)>;

// The matrices' own output error, summed (OutputError): AutoAWQ's objective for o_proj and
// down_proj. For q/k/v and gate/up AutoAWQ measures the block's output instead (the
// attention, the MLP), which calibrate passes in through BlockProbe.
AwqObjective LinearOutputError(const LayerInputs& inputs, const std::vector<AwqMatrix>& matrices);

// The scales among `alphas` with the smallest `error` (ties to the earlier alpha).
// InvalidArgument when a scaled matrix cannot be encoded.
absl::StatusOr<AwqScales> SearchAwqScales(const LayerInputs& inputs,
                                          const std::vector<AwqMatrix>& matrices,
                                          const std::vector<int64_t>& slot_of,
                                          const std::vector<double>& alphas,
                                          const AwqObjective& error);

// AWQ's clipping search (AutoAWQ's auto_clip), for a matrix already scaled: W [out, in]
// holds W diag(s) (`scale` = s, all 1 for none). Each row's group of 128 is clamped to
// [-r max|w|, r max|w|] with r in 1, 0.95, ..., 0.55, the r whose rounding gives the
// smallest output error of the group on the calibration inputs (d^T G_gg d, d the group's
// error in the unscaled weights, G_gg its block of X^T X), r = 1 being plain rounding.
// Returns the output error over all groups before and after (pairs within a group only).
struct AwqClip {
  double error = 0, rtn_error = 0;
};
absl::StatusOr<AwqClip> ClipAwqGroups(float* w, int64_t out, int64_t in, const LayerInputs& inputs,
                                      const std::vector<float>& scale);

}  // namespace ptxserve
