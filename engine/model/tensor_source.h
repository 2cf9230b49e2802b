// Where LoadModel finds a model's tensors: a safetensors directory or a GGUF file. Both
// are asked by Hugging Face tensor name ("model.layers.0.self_attn.q_proj.weight"), so the
// mapping onto ModelTensors and its shape checks exist once (model_loader.cc).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace ptxserve {

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // Tensor `hf_name`. NotFound naming the tensor and where it was looked for;
  // Unimplemented for an element type no backend loads.
  virtual absl::StatusOr<Tensor> Get(std::string_view hf_name) const = 0;
  // Whether Get(hf_name) would find a tensor (whatever its type).
  virtual bool Contains(std::string_view hf_name) const = 0;
  // The name the tensor has in its file ("blk.0.attn_q.weight" in a GGUF).
  virtual std::string StoredName(std::string_view hf_name) const = 0;
  // The path of the file holding the tensor, or source() when absent.
  virtual const std::string& PathOf(std::string_view hf_name) const = 0;
  // The file tensors are reported against in errors.
  virtual const std::string& source() const = 0;
};

}  // namespace ptxserve
