// Writing a Hugging Face quantized checkpoint (what `ptxserve quantize --type fp8|awq|gptq`
// produces): a directory as vLLM and transformers lay it out, which LoadModel reads back
// through hf_quant_source.h.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "engine/model/hf_quant_calibrate.h"
#include "engine/model/hf_quant_config.h"
#include "engine/model/model.h"

namespace ptxserve {

// Writes `model`, loaded unquantized from the Hugging Face directory model.dir, into the
// directory `out_dir` (created when missing): config.json with the quantization_config of
// `method`, model.safetensors, and the tokenizer and generation files copied. The seven
// projections of every layer are quantized:
//   fp8:  F8_E4M3 "<p>.weight" with one F32 "<p>.weight_scale" of shape [] (max |w| / 448
//         over the tensor), as vLLM's fp8 checkpoints store them;
//   awq:  "<p>.qweight", "<p>.qzeros", "<p>.scales" (hf_quant_layout.h);
//   gptq: the same in GPTQ's packing with classic zero - 1 zeros, plus an identity g_idx.
// Embeddings, LM head and norms keep their dtype. InvalidArgument when the model is
// already quantized or not from a directory, or a matrix does not fit the format (its
// input dimension not a multiple of 32 for fp8 or 128 for awq/gptq), naming the tensor.
absl::Status WriteHfQuantized(const Model& model, HfQuantization::Method method,
                              const std::string& out_dir);
// The same with awq or gptq blocks calibrated on data (hf_quant_calibrate.h): its blocks
// replace the round-to-nearest ones of the tensors it names, its folded values those
// tensors' values (stored in their dtype). The checkpoint's format is unchanged.
absl::Status WriteHfQuantized(const Model& model, HfQuantization::Method method,
                              const CalibratedInt4& calibrated, const std::string& out_dir);

}  // namespace ptxserve
