// RoPE's inverse frequencies: model math from config.json (rope_theta, rope_scaling), the
// same for every backend; each backend rotates with them in its own op.
#pragma once

#include "engine/model/config.h"

namespace ptxserve {

// inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2, with linear or llama3 scaling
// applied as config.json describes. Computed in double and rounded once to f32.
void RopeInvFreq(const ModelConfig& cfg, float* inv_freq);

}  // namespace ptxserve
