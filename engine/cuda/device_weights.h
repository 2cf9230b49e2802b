// The model's weights on the device: uploaded once at Create, in the layout the kernels
// read (q/k/v rows and o columns padded to whole 32-element heads; q, k and v stacked, gate
// and up stacked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_set.h"
#include "engine/model/model.h"

namespace ptxserve::cuda {

// head_dim as the device holds it: `padded` (PaddedHeadDim) lanes per head, real
// dimension j at lane index[j]. Rotate-half pairs (i, i + d/2) become (i, i + padded/2)
// so RoPE's pairs stay pairs; interleaved pairs keep their indices. Lanes no dimension
// maps to hold zeros in the weights and the K/V pools, so results equal the unpadded
// model's.
struct PaddedHeads {
  int64_t dim = 0;
  int64_t padded = 0;
  std::vector<int64_t> index;
};
PaddedHeads PadHeads(const ModelConfig& config);

struct DeviceWeights {
  struct Layer {
    DeviceBuffer attn_norm, mlp_norm;  // f32 [hidden]
    // [(heads + 2 kv_heads) * padded][hidden]: the q, then k, then v rows (padded heads), in
    // one type (WeightTypes::q; blocks: the roles' bytes concatenated)
    DeviceBuffer wqkv;
    DeviceBuffer bqkv;       // f32 [(heads + 2 kv_heads) * padded], with attention_bias only
    DeviceBuffer wo;         // [hidden][heads * padded] (padded cols)
    DeviceBuffer w_gate_up;  // [2 * inter][hidden]: gate, then up
    DeviceBuffer w_down;     // [hidden][inter]
  };
  DeviceBuffer embed;       // [vocab][hidden] in its file dtype, or its blocks as stored
  DeviceBuffer final_norm;  // f32 [hidden]
  DeviceBuffer lm_head;     // empty when tied to embed (the head reads embed's buffer)
  DeviceBuffer inv_freq;    // f32 [padded / 2], padding pairs 0
  std::vector<Layer> layers;
  WeightTypes types;       // element types by role (layer 0's file dtype; others converted to it)
  size_t bytes = 0;        // all of the above
  size_t layer_bytes = 0;  // of them, one layer's (every layer has the same)
  // What the GEMMs read per step whatever the batch (every linear weight + LM head).
  size_t step_bytes = 0;

  CUdeviceptr lm_head_ptr() const { return lm_head.size() > 0 ? lm_head.ptr() : embed.ptr(); }
};

// Checks every tensor's shape (nothing is allocated for a model that cannot load), then
// uploads them through a pinned staging buffer, logging progress with `log_progress`.
absl::StatusOr<DeviceWeights> UploadWeights(const Model& model, const PaddedHeads& heads,
                                            Device& device, bool log_progress);

}  // namespace ptxserve::cuda
