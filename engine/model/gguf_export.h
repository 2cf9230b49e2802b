// Converting a loaded model into GGUF tensors and llama.* metadata, as llama.cpp's
// converter lays them out: q_proj/k_proj rows reordered from Hugging Face's rotate-half
// layout to Meta's interleaved one (a GGUF llama model is read with
// RopeStyle::kInterleaved), norms and biases in f32, matrices in the requested type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"

namespace ptxserve {

// The element type of a GGUF file's matrices: a plain dtype or a block type.
struct GgufWeightType {
  QuantType quant = QuantType::kNone;
  DType dtype = DType::kF32;  // when quant is kNone
};
// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k"; nullopt for anything else.
std::optional<GgufWeightType> ParseGgufWeightType(std::string_view name);
// The names ParseGgufWeightType accepts, for usage lines.
std::vector<std::string> GgufWeightTypeNames();

// Copies every tokenizer.* key of `from` to `w` (re-encoding a GGUF keeps its tokenizer).
void CopyTokenizerMetadata(const GgufFile& from, GgufWriter* w);

// Rows of a q or k projection ([heads * head_dim, ...], row-major, `row_elems` per row)
// reordered per head from rotate-half to interleaved order: out row 2i is in row i and
// out row 2i + 1 is in row i + head_dim / 2. A bias is the case row_elems == 1.
std::vector<float> PermuteRopeRows(const std::vector<float>& rows, int64_t heads, int64_t head_dim,
                                   int64_t row_elems);

// Adds general.* and llama.* metadata and every tensor of `model` to `w`: q/k rows are
// permuted for a rotate-half model (from a Hugging Face directory), copied for an
// interleaved one (from a GGUF). `name` becomes general.name. For q4_k the matrices are
// llama.cpp's Q4_K_M mix, which general.file_type 15 says they are: q6_k for the LM head
// (the token embedding when tied) and for attn_v and ffn_down in the first and last eighth
// of the layers and every third between, q4_k for the rest (gguf_export.cc). Errors
// name the tensor (e.g. a row that is not whole blocks of the requested type).
// `calibrated` (may be null): block rows of `type` by Hugging Face weight name, in HF row
// order (hf_quant_calibrate.h's CalibrateQ4_0), stored for those matrices instead of the
// reference encoder's (q/k rows reordered as the values would be).
absl::Status AddModelToGguf(
    const Model& model, GgufWeightType type, const std::string& name, GgufWriter* w,
    const std::map<std::string, std::vector<uint8_t>>* calibrated = nullptr);

}  // namespace ptxserve
