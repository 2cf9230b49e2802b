// A Hugging Face quantized checkpoint as a TensorSource: a linear layer stored as FP8
// E4M3 "<p>.weight" with "<p>.weight_scale", or as AWQ/GPTQ "<p>.qweight", "<p>.qzeros"
// and "<p>.scales" (hf_quant_layout.h), is repacked once into quant.h's fp8_e4m3 or
// int4_g128 row blocks and served as "<p>.weight" with its logical shape [out, in], so
// the loader's shape checks and the CPU kernels see one format per method. Every other
// tensor passes through unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/hf_quant_config.h"
#include "engine/model/tensor_source.h"
#include "engine/model/weight_files.h"

namespace ptxserve {

class HfQuantSource final : public TensorSource {
 public:
  // `files` and `owned` must outlive this; `owned` receives the repacked buffers, which
  // the returned tensors point into.
  HfQuantSource(const WeightFiles& files, const HfQuantization& q,
                std::vector<std::unique_ptr<uint8_t[]>>* owned)
      : files_(files), q_(q), owned_(owned) {}

  // Errors name the stored tensor and what is wrong with it: dtype, shape, a scale that
  // is not finite, a g_idx that reorders inputs.
  absl::StatusOr<Tensor> Get(std::string_view hf_name) const override;
  bool Contains(std::string_view hf_name) const override;
  // A repacked layer keeps its Hugging Face name ("<p>.weight"), so the model's tensors are
  // named as an unquantized checkpoint's and convert (to GGUF, say) the same way.
  std::string StoredName(std::string_view hf_name) const override { return std::string(hf_name); }
  const std::string& PathOf(std::string_view hf_name) const override;
  const std::string& source() const override { return files_.source(); }

 private:
  // "<p>.qweight" when `hf_name` is "<p>.weight" of an AWQ/GPTQ layer, else "".
  std::string QweightName(std::string_view hf_name) const;
  absl::StatusOr<Tensor> GetFp8(std::string_view name, const WeightFiles::Stored& w) const;
  absl::StatusOr<Tensor> GetInt4(std::string_view name, const std::string& qweight) const;
  uint8_t* Allocate(size_t bytes) const;

  const WeightFiles& files_;
  HfQuantization q_;
  std::vector<std::unique_ptr<uint8_t[]>>* owned_;
};

}  // namespace ptxserve
