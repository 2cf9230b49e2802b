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

// `t` is present, has exactly `shape` and holds the bytes that shape needs. `what` names
// it when the loader left its name empty. A block-quantized tensor (whole blocks per row)
// passes only where the caller can read blocks (`blocks_ok`); elsewhere it is refused,
// naming its format, rather than read as elements.
absl::Status CheckTensorShape(const Tensor& t, const std::vector<int64_t>& shape,
                              const std::string& what, bool blocks_ok = false);

}  // namespace ptxserve
