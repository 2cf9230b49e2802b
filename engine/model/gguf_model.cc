#include "engine/model/gguf_model.h"

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

// Per-layer suffixes: Hugging Face's after "model.layers.N.", GGUF's after "blk.N.".
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kLayerNames = {{
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kModelNames = {{
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
}};

// A positive integer key; `fallback` (when >= 0) stands in for an absent key.
absl::StatusOr<int64_t> PositiveInt(const GgufFile& f, const std::string& key,
                                    int64_t fallback = -1) {
  auto v = f.GetInt(key);
  if (absl::IsNotFound(v.status()) && fallback >= 0) return fallback;
  if (!v.ok()) return v.status();
  if (*v <= 0) return f.KeyError(key, absl::StrCat("= ", *v, " must be positive"));
  return *v;
}

absl::StatusOr<double> OptionalFloat(const GgufFile& f, const std::string& key, double fallback) {
  auto v = f.GetFloat(key);
  if (absl::IsNotFound(v.status())) return fallback;
  return v;
}

absl::StatusOr<int32_t> OptionalTokenId(const GgufFile& f, const std::string& key,
                                        int64_t vocab_size) {
  auto v = f.GetInt(key);
  if (absl::IsNotFound(v.status())) return -1;
  if (!v.ok()) return v.status();
  if (*v < 0 || *v >= vocab_size) {
    return f.KeyError(key, absl::StrCat("= ", *v, " is outside the vocabulary of ", vocab_size));
  }
  return static_cast<int32_t>(*v);
}

absl::Status ParseSizes(const GgufFile& f, ModelConfig* c) {
  PTX_ASSIGN_OR_RETURN(c->hidden_size, PositiveInt(f, "llama.embedding_length"));
  PTX_ASSIGN_OR_RETURN(c->num_layers, PositiveInt(f, "llama.block_count"));
  PTX_ASSIGN_OR_RETURN(c->intermediate_size, PositiveInt(f, "llama.feed_forward_length"));
  PTX_ASSIGN_OR_RETURN(c->num_heads, PositiveInt(f, "llama.attention.head_count"));
  PTX_ASSIGN_OR_RETURN(c->num_kv_heads,
                       PositiveInt(f, "llama.attention.head_count_kv", c->num_heads));
  PTX_ASSIGN_OR_RETURN(c->max_position_embeddings,
                       PositiveInt(f, "llama.context_length", c->max_position_embeddings));
  if (c->num_heads % c->num_kv_heads != 0) {
    return f.KeyError(
        "llama.attention.head_count_kv",
        absl::StrCat("= ", c->num_kv_heads, " does not divide head_count ", c->num_heads));
  }
  PTX_ASSIGN_OR_RETURN(c->head_dim,
                       PositiveInt(f, "llama.attention.key_length", c->hidden_size / c->num_heads));
  // Partial rotary embeddings (fewer rotated dimensions than head_dim) are not served.
  PTX_ASSIGN_OR_RETURN(const int64_t rope_dims,
                       PositiveInt(f, "llama.rope.dimension_count", c->head_dim));
  if (rope_dims != c->head_dim) {
    return f.KeyError("llama.rope.dimension_count",
                      absl::StrCat("= ", rope_dims, " differs from the head dimension ",
                                   c->head_dim, " (partial rotary embeddings are not supported)"));
  }
  if (const GgufValue* vs = f.Find("llama.vocab_size"); vs != nullptr) {
    PTX_ASSIGN_OR_RETURN(c->vocab_size, PositiveInt(f, "llama.vocab_size"));
  } else if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens"); tokens != nullptr) {
    c->vocab_size = static_cast<int64_t>(tokens->array.size());
  }
  if (c->vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(),
        ": neither llama.vocab_size nor tokenizer.ggml.tokens gives the vocabulary size"));
  }
  return absl::OkStatus();
}

// GGUF records "linear" and "yarn" scaling as metadata; Llama 3.1's frequency scaling is
// a precomputed tensor instead, rope_freqs.weight: head_dim / 2 f32 divisors.
absl::Status ParseRope(const GgufFile& f, ModelConfig* c) {
  PTX_ASSIGN_OR_RETURN(c->rope_theta, OptionalFloat(f, "llama.rope.freq_base", c->rope_theta));
  PTX_ASSIGN_OR_RETURN(c->rms_norm_eps,
                       OptionalFloat(f, "llama.attention.layer_norm_rms_epsilon", c->rms_norm_eps));
  if (f.FindTensor(kRopeFreqsTensor) != nullptr) {
    PTX_ASSIGN_OR_RETURN(const Tensor t, f.GetTensor(kRopeFreqsTensor));
    if (t.quant != QuantType::kNone || t.dtype != DType::kF32 || t.shape.size() != 1 ||
        t.shape[0] != c->head_dim / 2) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor '", kRopeFreqsTensor,
                                                     "' must be f32 [", c->head_dim / 2, "]"));
    }
    c->rope_scaling.type = RopeScaling::Type::kFactors;
    c->rope_scaling.factors.resize(static_cast<size_t>(t.shape[0]));
    std::memcpy(c->rope_scaling.factors.data(), t.data, t.nbytes);
    for (float x : c->rope_scaling.factors) {
      if (!(x > 0) || !std::isfinite(x)) {
        return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor '", kRopeFreqsTensor,
                                                       "' holds ", x, "; want positive factors"));
      }
    }
    return absl::OkStatus();
  }
  auto type = f.GetString("llama.rope.scaling.type");
  if (absl::IsNotFound(type.status()) || (type.ok() && *type == "none")) return absl::OkStatus();
  if (!type.ok()) return type.status();
  if (*type != "linear") {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": llama.rope.scaling.type '", *type,
                                                 "' is not supported (only none and linear)"));
  }
  c->rope_scaling.type = RopeScaling::Type::kLinear;
  PTX_ASSIGN_OR_RETURN(c->rope_scaling.factor,
                       OptionalFloat(f, "llama.rope.scaling.factor", c->rope_scaling.factor));
  if (!(c->rope_scaling.factor > 0)) {
    return f.KeyError("llama.rope.scaling.factor", "must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

std::string GgufTensorName(std::string_view hf_name) {
  for (const auto& [hf, gguf] : kModelNames) {
    if (hf_name == hf) return std::string(gguf);
  }
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf_name.starts_with(kPrefix)) return std::string(hf_name);
  const std::string_view rest = hf_name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  uint32_t layer = 0;
  if (dot == std::string_view::npos ||
      !absl::SimpleAtoi(std::string(rest.substr(0, dot)), &layer)) {
    return std::string(hf_name);
  }
  for (const auto& [hf, gguf] : kLayerNames) {
    if (rest.substr(dot + 1) == hf) return absl::StrCat("blk.", layer, ".", std::string(gguf));
  }
  return std::string(hf_name);
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  PTX_ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  if (arch != "llama") {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": general.architecture is '", arch,
                                                 "'; ptxserve serves GGUF 'llama' models"));
  }
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.rope_style = RopeStyle::kInterleaved;
  PTX_RETURN_IF_ERROR(ParseSizes(f, &c));
  PTX_RETURN_IF_ERROR(ParseRope(f, &c));
  PTX_ASSIGN_OR_RETURN(c.bos_token_id,
                       OptionalTokenId(f, "tokenizer.ggml.bos_token_id", c.vocab_size));
  PTX_ASSIGN_OR_RETURN(c.eos_token_id,
                       OptionalTokenId(f, "tokenizer.ggml.eos_token_id", c.vocab_size));
  // llama.cpp's converter leaves out output.weight when the head is tied to the embedding.
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  c.attention_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  if (const GgufTensorInfo* e = f.FindTensor("token_embd.weight"); e != nullptr) {
    c.torch_dtype = e->ggml_type == kGgmlF32    ? DType::kF32
                    : e->ggml_type == kGgmlBF16 ? DType::kBF16
                                                : DType::kF16;
  }
  return c;
}

absl::StatusOr<Tensor> GgufTensorSource::Get(std::string_view hf_name) const {
  return file_.GetTensor(GgufTensorName(hf_name));
}

bool GgufTensorSource::Contains(std::string_view hf_name) const {
  return file_.FindTensor(GgufTensorName(hf_name)) != nullptr;
}

}  // namespace ptxserve
