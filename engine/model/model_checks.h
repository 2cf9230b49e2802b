// What every backend requires of a loaded model before building from it, checked in one
// place so that both backends refuse the same models with the same words.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/model.h"

namespace ptxserve {

// Positive sizes, whole GQA groups (num_heads a multiple of num_kv_heads), an even
// head_dim (RoPE rotates pairs) and one layer of tensors per configured layer.
absl::Status CheckModelShape(const ModelConfig& config, const ModelTensors& tensors);

// `t` is present, has exactly `shape` (whole blocks per row when quantized) and holds the
// bytes that shape needs. `what` names it when the loader left its name empty.
absl::Status CheckTensorShape(const Tensor& t, const std::vector<int64_t>& shape,
                              const std::string& what);

}  // namespace ptxserve
