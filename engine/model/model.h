// A loaded model: its config and views of its tensors in the files' own dtypes.
// Backends convert these once into their own layout (the CPU backend to f32,
// the GPU backend uploads them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"

namespace ptxserve {

// A read-only view of one tensor; the bytes belong to the Model's storage (mmap).
struct Tensor {
  std::string name;
  DType dtype = DType::kF32;  // the element type; meaningless when quant != kNone
  // kNone: plain elements of `dtype`. Otherwise rows of blocks (engine/model/quant.h);
  // shape stays the logical element shape.
  QuantType quant = QuantType::kNone;
  std::vector<int64_t> shape;  // row-major, HF layout: linear weights are [out, in]
  const void* data = nullptr;  // nullptr: absent (e.g. no bias)
  size_t nbytes = 0;

  bool present() const { return data != nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct LayerTensors {
  Tensor attn_norm;       // [hidden]
  Tensor wq, wk, wv, wo;  // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Tensor bq, bk, bv;      // [q_dim], [kv_dim] x2; present only with attention_bias
  Tensor mlp_norm;        // [hidden]
  Tensor w_gate, w_up;    // [intermediate, hidden]
  Tensor w_down;          // [hidden, intermediate]
};

struct ModelTensors {
  Tensor embed;       // [vocab, hidden]
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; the same bytes as embed when tied
  std::vector<LayerTensors> layers;
};

struct Model {
  std::string dir;  // the directory or the .gguf file it was loaded from
  ModelConfig config;
  ModelTensors tensors;
  std::shared_ptr<const void> storage;  // keeps the mapped files alive
  // Every tensor's bytes are held by `storage` (LoadModel: file mappings, and the
  // loader's own copies of repacked tensors): a backend that holds `storage` may keep
  // views into them.
  bool storage_holds_tensors = false;
  // The read-only file mappings among them, as (first byte, size).
  std::vector<std::pair<const uint8_t*, size_t>> file_mappings;

  // Drops `t`'s resident pages from this process when `t` lies in a file mapping (the
  // kernel reads them back from the file if they are touched again), so a backend that
  // keeps its own copy of a tensor does not hold its bytes twice. No-op otherwise: other
  // memory would lose its contents.
  void ReleasePages(const Tensor& t) const;

  // Total bytes of all distinct weight tensors as stored in the files.
  size_t WeightBytes() const;
  // The linear weights' format as loaded (layer 0's q projection): a block format such as
  // "q4_0", else its dtype ("f16").
  std::string WeightFormat() const;
};

// Loads a Hugging Face model directory (config.json plus model.safetensors or
// model.safetensors.index.json shards) or, for a path ending in ".gguf", a GGUF llama
// model (engine/model/gguf_model.h). Files are mmapped; every tensor is checked against
// the config. Errors name the file, the tensor and the problem.
absl::StatusOr<Model> LoadModel(const std::string& dir);

}  // namespace ptxserve
