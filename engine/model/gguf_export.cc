#include "engine/model/gguf_export.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf_model.h"
#include "engine/model/rope.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

constexpr std::array<std::string_view, 6> kWeightTypeNames = {"f32",  "f16",  "bf16",
                                                              "q8_0", "q4_0", "q4_k"};

uint32_t GgmlTypeOf(GgufWeightType t) {
  if (t.quant != QuantType::kNone) return LayoutOf(t.quant).ggml_type;
  return t.dtype == DType::kF32 ? kGgmlF32 : t.dtype == DType::kF16 ? kGgmlF16 : kGgmlBF16;
}

// PermuteRopeRows on rows of any element (floats, or the bytes of block rows).
template <typename T>
std::vector<T> PermuteRows(const std::vector<T>& rows, int64_t heads, int64_t head_dim,
                           int64_t row_elems) {
  std::vector<T> out(rows.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j : {int64_t{0}, int64_t{1}}) {
        const T* src = rows.data() + (h * head_dim + i + j * half) * row_elems;
        T* dst = out.data() + (h * head_dim + 2 * i + j) * row_elems;
        std::memcpy(dst, src, static_cast<size_t>(row_elems) * sizeof(T));
      }
    }
  }
  return out;
}

// A tensor's values; quantized rows are dequantized (re-encoding a quantized GGUF).
std::vector<float> ToFloat(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.quant == QuantType::kNone) {
    ConvertToFloat(t.dtype, t.data, v.size(), v.data());
    return v;
  }
  const int64_t row = t.shape.back(), row_bytes = QuantRowBytes(t.quant, row);
  for (int64_t r = 0; r * row < t.numel(); ++r) {
    DequantizeRow(t.quant, static_cast<const uint8_t*>(t.data) + r * row_bytes, row,
                  v.data() + r * row);
  }
  return v;
}

// Adds `values` (HF shape `shape`, row-major) as tensor `name` of type `type`.
absl::Status AddTensor(const std::string& name, const std::vector<int64_t>& shape,
                       const std::vector<float>& values, GgufWeightType type, GgufWriter* w) {
  const int64_t row = shape.back();
  const int64_t rows = static_cast<int64_t>(values.size()) / row;
  std::vector<uint64_t> ne(shape.rbegin(), shape.rend());
  std::vector<uint8_t> bytes;
  if (type.quant == QuantType::kNone) {
    bytes.resize(values.size() * DTypeSize(type.dtype));
    ConvertFromFloat(type.dtype, values.data(), values.size(), bytes.data());
  } else {
    const QuantLayout& l = LayoutOf(type.quant);
    if (row % l.block_elems != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': rows of ", row, " elements are not whole ",
                       std::string(l.name), " blocks of ", l.block_elems));
    }
    const int64_t row_bytes = row / l.block_elems * l.block_bytes;
    bytes.resize(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      absl::Status s =
          QuantizeRow(type.quant, values.data() + r * row, row, bytes.data() + r * row_bytes);
      if (!s.ok())
        return absl::Status(s.code(), absl::StrCat("tensor '", name, "': ", s.message()));
    }
  }
  w->AddTensor(name, GgmlTypeOf(type), std::move(ne), std::move(bytes));
  return absl::OkStatus();
}

// A model tensor under its GGUF name; `rope_heads` > 0 reorders its rows for RoPE. A
// matrix whose name `calibrated` holds is stored as those rows of `type`'s blocks instead.
absl::Status AddModelTensor(const Tensor& t, GgufWeightType type, int64_t rope_heads,
                            int64_t head_dim, GgufWriter* w,
                            const std::map<std::string, std::vector<uint8_t>>* calibrated) {
  if (!t.present()) return absl::OkStatus();
  if (calibrated != nullptr && t.shape.size() == 2 && calibrated->contains(t.name)) {
    std::vector<uint8_t> bytes = calibrated->at(t.name);
    const int64_t row_bytes = QuantRowBytes(type.quant, t.shape[1]);
    if (static_cast<int64_t>(bytes.size()) != t.shape[0] * row_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", bytes.size(),
                                                     " calibrated bytes for ", t.shape[0],
                                                     " rows of ", row_bytes));
    }
    if (rope_heads > 0) bytes = PermuteRows(bytes, rope_heads, head_dim, row_bytes);
    w->AddTensor(GgufTensorName(t.name), GgmlTypeOf(type),
                 {static_cast<uint64_t>(t.shape[1]), static_cast<uint64_t>(t.shape[0])},
                 std::move(bytes));
    return absl::OkStatus();
  }
  std::vector<float> v = ToFloat(t);
  if (rope_heads > 0) {
    const int64_t row_elems = t.shape.size() == 2 ? t.shape[1] : 1;
    v = PermuteRows(v, rope_heads, head_dim, row_elems);
  }
  // Vectors (norms, biases) stay f32: they are small and read element by element.
  const GgufWeightType vector_type{QuantType::kNone, DType::kF32};
  return AddTensor(GgufTensorName(t.name), t.shape, v, t.shape.size() == 1 ? vector_type : type, w);
}

void AddMetadata(const ModelConfig& c, GgufWeightType type, const std::string& name,
                 GgufWriter* w) {
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w->Set("general.architecture", GgufValue::String("llama"));
  w->Set("general.name", GgufValue::String(name));
  // llama.cpp's llama_ftype: what most of the matrices are.
  const uint32_t file_type = type.quant == QuantType::kQ8_0   ? 7
                             : type.quant == QuantType::kQ4_0 ? 2
                             : type.quant == QuantType::kQ4_K ? 15
                             : type.dtype == DType::kF32      ? 0
                             : type.dtype == DType::kF16      ? 1
                                                              : 32;
  w->Set("general.file_type", GgufValue::U32(file_type));
  w->Set("llama.context_length", u32(c.max_position_embeddings));
  w->Set("llama.embedding_length", u32(c.hidden_size));
  w->Set("llama.block_count", u32(c.num_layers));
  w->Set("llama.feed_forward_length", u32(c.intermediate_size));
  w->Set("llama.attention.head_count", u32(c.num_heads));
  w->Set("llama.attention.head_count_kv", u32(c.num_kv_heads));
  w->Set("llama.attention.key_length", u32(c.head_dim));
  w->Set("llama.attention.value_length", u32(c.head_dim));
  w->Set("llama.rope.dimension_count", u32(c.head_dim));
  w->Set("llama.attention.layer_norm_rms_epsilon",
         GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  w->Set("llama.rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w->Set("llama.vocab_size", u32(c.vocab_size));
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) {
    w->Set("llama.rope.scaling.type", GgufValue::String("linear"));
    w->Set("llama.rope.scaling.factor", GgufValue::F32(static_cast<float>(c.rope_scaling.factor)));
  }
  if (c.bos_token_id >= 0) w->Set("tokenizer.ggml.bos_token_id", u32(c.bos_token_id));
  if (c.eos_token_id >= 0) w->Set("tokenizer.ggml.eos_token_id", u32(c.eos_token_id));
}

// llama3 and per-frequency scaling as llama.cpp writes them: each frequency's divisor, the
// unscaled frequency over the scaled one, in rope_freqs.weight.
absl::Status AddRopeFactors(const ModelConfig& c, GgufWriter* w) {
  const RopeScaling::Type t = c.rope_scaling.type;
  if (t != RopeScaling::Type::kLlama3 && t != RopeScaling::Type::kFactors) {
    return absl::OkStatus();
  }
  const int64_t half = c.head_dim / 2;
  ModelConfig unscaled = c;
  unscaled.rope_scaling = RopeScaling{};
  std::vector<float> base(static_cast<size_t>(half)), scaled(static_cast<size_t>(half));
  RopeInvFreq(unscaled, base.data());
  RopeInvFreq(c, scaled.data());
  std::vector<float> factors(static_cast<size_t>(half));
  for (size_t i = 0; i < factors.size(); ++i) {
    factors[i] = t == RopeScaling::Type::kFactors ? c.rope_scaling.factors[i] : base[i] / scaled[i];
  }
  return AddTensor(kRopeFreqsTensor, {half}, factors, {QuantType::kNone, DType::kF32}, w);
}

// llama.cpp's Q4_K_M mix for the Llama family (its llama_tensor_get_type, read as a
// specification): a q4_k file's matrices are q4_k except the LM head (the token embedding
// when the head is tied to it), which is q6_k, and attn_v and ffn_down, which are q6_k in
// the layers UsesMoreBits picks: the first and last eighth and every third layer between.
// Not followed: its rule for 80-layer GQA models (Llama-2/3 70B), which raises the other
// attn_v tensors to q5_k, a type this writer does not have; they stay q4_k.
bool UsesMoreBits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// What a matrix is, as far as the mix's rules tell matrices apart.
enum class MatrixRole { kEmbed, kLmHead, kAttnV, kFfnDown, kOther };

// The type a matrix of role `role` in layer `layer` is written in, in a file of `type`.
GgufWeightType MatrixType(GgufWeightType type, const ModelConfig& c, MatrixRole role,
                          int64_t layer) {
  if (type.quant != QuantType::kQ4_K) return type;
  const GgufWeightType q6_k{QuantType::kQ6_K, DType::kF32};
  const bool head =
      role == MatrixRole::kLmHead || (role == MatrixRole::kEmbed && c.tie_word_embeddings);
  const bool layer_rule = role == MatrixRole::kAttnV || role == MatrixRole::kFfnDown;
  return head || (layer_rule && UsesMoreBits(layer, c.num_layers)) ? q6_k : type;
}

// A q4_k file's matrices are all 256-element super-blocks (q4_k or q6_k): checked before
// anything is encoded, naming the first matrix whose rows are not.
absl::Status CheckSuperBlockRows(const Model& model) {
  const ModelTensors& t = model.tensors;
  std::vector<const Tensor*> matrices = {&t.embed};
  if (!model.config.tie_word_embeddings) matrices.push_back(&t.lm_head);
  for (const LayerTensors& l : t.layers) {
    for (const Tensor* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      matrices.push_back(m);
    }
  }
  const QuantLayout& q4_k = LayoutOf(QuantType::kQ4_K);
  for (const Tensor* m : matrices) {
    if (m->present() && m->shape.back() % q4_k.block_elems != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", GgufTensorName(m->name), "': rows of ", m->shape.back(),
                       " elements are not whole q4_k blocks of ", q4_k.block_elems,
                       " (a q4_k file holds q4_k and q6_k matrices, both in super-blocks of ",
                       q4_k.block_elems, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckExportable(const ModelConfig& c) {
  if (c.sliding_window > 0) {
    return absl::UnimplementedError("sliding-window attention has no llama GGUF metadata");
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<GgufWeightType> ParseGgufWeightType(std::string_view name) {
  for (const QuantLayout& l : kQuantLayouts) {
    if (l.type != QuantType::kNone && l.type != QuantType::kQ6_K && l.ggml_type != kNoGgmlType &&
        l.name == name) {
      return GgufWeightType{l.type, DType::kF32};
    }
  }
  for (const DTypeSpelling& s : kDTypeSpellings) {
    if (s.name == name) return GgufWeightType{QuantType::kNone, s.dtype};
  }
  return std::nullopt;
}

std::vector<std::string> GgufWeightTypeNames() {
  return {kWeightTypeNames.begin(), kWeightTypeNames.end()};
}

void CopyTokenizerMetadata(const GgufFile& from, GgufWriter* w) {
  for (const auto& [key, value] : from.metadata()) {
    if (key.starts_with("tokenizer.")) w->Set(key, value);
  }
}

std::vector<float> PermuteRopeRows(const std::vector<float>& rows, int64_t heads, int64_t head_dim,
                                   int64_t row_elems) {
  return PermuteRows(rows, heads, head_dim, row_elems);
}

absl::Status AddModelToGguf(const Model& model, GgufWeightType type, const std::string& name,
                            GgufWriter* w,
                            const std::map<std::string, std::vector<uint8_t>>* calibrated) {
  const ModelConfig& c = model.config;
  PTX_RETURN_IF_ERROR(CheckExportable(c));
  AddMetadata(c, type, name, w);
  const ModelTensors& t = model.tensors;
  // A model read from a GGUF is interleaved already.
  const bool permute = c.rope_style == RopeStyle::kRotateHalf;
  const int64_t q_heads = permute ? c.num_heads : 0;
  const int64_t kv_heads = permute ? c.num_kv_heads : 0;
  if (type.quant == QuantType::kQ4_K) PTX_RETURN_IF_ERROR(CheckSuperBlockRows(model));
  PTX_RETURN_IF_ERROR(AddRopeFactors(c, w));
  auto matrix_type = [&](MatrixRole role, int64_t layer) {
    return MatrixType(type, c, role, layer);
  };
  PTX_RETURN_IF_ERROR(
      AddModelTensor(t.embed, matrix_type(MatrixRole::kEmbed, 0), 0, 0, w, calibrated));
  PTX_RETURN_IF_ERROR(AddModelTensor(t.final_norm, type, 0, 0, w, nullptr));
  if (!c.tie_word_embeddings) {
    PTX_RETURN_IF_ERROR(
        AddModelTensor(t.lm_head, matrix_type(MatrixRole::kLmHead, 0), 0, 0, w, calibrated));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(t.layers.size()); ++i) {
    const LayerTensors& l = t.layers[i];
    // Each tensor with the number of RoPE heads its rows hold (0: not rotated) and its role.
    struct Part {
      const Tensor* tensor;
      int64_t rope_heads;
      MatrixRole role;
    };
    for (const Part& p : {Part{&l.attn_norm, 0, MatrixRole::kOther},
                          {&l.wq, q_heads, MatrixRole::kOther},
                          {&l.bq, q_heads, MatrixRole::kOther},
                          {&l.wk, kv_heads, MatrixRole::kOther},
                          {&l.bk, kv_heads, MatrixRole::kOther},
                          {&l.wv, 0, MatrixRole::kAttnV},
                          {&l.bv, 0, MatrixRole::kOther},
                          {&l.wo, 0, MatrixRole::kOther},
                          {&l.mlp_norm, 0, MatrixRole::kOther},
                          {&l.w_gate, 0, MatrixRole::kOther},
                          {&l.w_up, 0, MatrixRole::kOther},
                          {&l.w_down, 0, MatrixRole::kFfnDown}}) {
      PTX_RETURN_IF_ERROR(AddModelTensor(*p.tensor, matrix_type(p.role, i), p.rope_heads,
                                         c.head_dim, w, calibrated));
    }
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
