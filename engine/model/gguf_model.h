// A GGUF llama model as LoadModel sees it: its ModelConfig from the llama.* metadata and
// its tensors under their Hugging Face names.
//
// llama.cpp's converter stores q_proj/k_proj rows in Meta's interleaved order and
// llama.cpp rotates adjacent pairs, so a GGUF model loads with RopeStyle::kInterleaved and
// no permutation of the data.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/gguf.h"
#include "engine/model/tensor_source.h"

namespace ptxserve {

// Per-frequency RoPE divisors ([head_dim / 2] f32), llama.cpp's form of Llama 3.1 scaling.
inline constexpr char kRopeFreqsTensor[] = "rope_freqs.weight";

// The GGUF name of a Hugging Face llama tensor name ("model.layers.3.mlp.up_proj.weight"
// -> "blk.3.ffn_up.weight"); the name unchanged when it has no GGUF counterpart.
std::string GgufTensorName(std::string_view hf_name);

// The config of a general.architecture "llama" file (Unimplemented naming any other
// architecture). Errors name the file and the metadata key.
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

class GgufTensorSource final : public TensorSource {
 public:
  explicit GgufTensorSource(const GgufFile& file) : file_(file) {}

  absl::StatusOr<Tensor> Get(std::string_view hf_name) const override;
  bool Contains(std::string_view hf_name) const override;
  std::string StoredName(std::string_view hf_name) const override {
    return GgufTensorName(hf_name);
  }
  const std::string& PathOf(std::string_view) const override { return file_.path(); }
  const std::string& source() const override { return file_.path(); }

 private:
  const GgufFile& file_;
};

}  // namespace ptxserve
