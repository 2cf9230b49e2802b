#include "engine/model/config.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/json_util.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using nlohmann::json;

constexpr int64_t kMaxSize = int64_t{1} << 30;

// A field that is missing or null counts as absent (HF writes null for defaults).
const json* GetField(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Every error carries the file and the field, so a user can fix config.json directly.
class FieldReader {
 public:
  FieldReader(const json& root, const std::string& file) : root_(root), file_(file) {}

  absl::Status Error(const std::string& field, const std::string& problem) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": field '", field, "': ", problem));
  }

  const json* Get(const std::string& key) const { return GetField(root_, key); }
  const json& root() const { return root_; }
  const std::string& file() const { return file_; }

  // Integers must be JSON integers: 128.0 or "128" is a broken config, not a size.
  absl::StatusOr<std::optional<int64_t>> Int(const json& obj, const std::string& key,
                                             const std::string& field) const {
    const json* v = GetField(obj, key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(field, absl::StrCat("integer ", u, " is out of range"));
      }
      return std::optional<int64_t>(static_cast<int64_t>(u));
    }
    if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
    return Error(field, absl::StrCat("expected an integer, got ", DescribeJson(*v)));
  }

  // A required size: present, an integer, and > 0.
  absl::Status PositiveInt(const std::string& key, int64_t* out) const {
    auto v = Int(root_, key, key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return Error(key, "missing (required)");
    return CheckPositive(key, **v, out);
  }

  // An optional size: keeps *out when absent, else must be > 0.
  absl::Status OptionalPositiveInt(const std::string& key, int64_t* out) const {
    auto v = Int(root_, key, key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return absl::OkStatus();
    return CheckPositive(key, **v, out);
  }

  // Sizes are capped so that products such as heads * head_dim or vocab * hidden cannot
  // overflow int64 further on; real models are orders of magnitude below the cap.
  absl::Status CheckPositive(const std::string& field, int64_t v, int64_t* out) const {
    if (v <= 0) return Error(field, absl::StrCat("must be positive, got ", v));
    if (v > kMaxSize) return Error(field, absl::StrCat("must be at most ", kMaxSize, ", got ", v));
    *out = v;
    return absl::OkStatus();
  }

  // An optional finite number > 0; keeps *out when absent.
  absl::Status OptionalPositiveNumber(const json& obj, const std::string& key,
                                      const std::string& field, double* out) const {
    const json* v = GetField(obj, key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number())
      return Error(field, absl::StrCat("expected a number, got ", DescribeJson(*v)));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d <= 0) {
      return Error(field, absl::StrCat("must be a positive number, got ", DescribeJson(*v)));
    }
    *out = d;
    return absl::OkStatus();
  }

  absl::Status OptionalBool(const std::string& key, bool* out) const {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean())
      return Error(key, absl::StrCat("expected a boolean, got ", DescribeJson(*v)));
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // Token ids: an integer, or a list of integers (generation may stop on several
  // EOS ids; the engine keeps the first one here).
  absl::Status OptionalTokenId(const std::string& key, int32_t* out) const {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    const json* id = v;
    if (v->is_array()) {
      if (v->empty()) return absl::OkStatus();
      id = &(*v)[0];
    }
    if (!id->is_number_integer()) {
      return Error(key, absl::StrCat("expected a token id, got ", DescribeJson(*v)));
    }
    const int64_t i = id->get<int64_t>();
    if (i < 0 || i > std::numeric_limits<int32_t>::max()) {
      return Error(key, absl::StrCat("token id ", i, " is out of range"));
    }
    *out = static_cast<int32_t>(i);
    return absl::OkStatus();
  }

 private:
  const json& root_;
  const std::string& file_;
};

struct ArchInfo {
  const char* architecture;
  const char* model_type;
};
constexpr ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
};

absl::Status ParseArchitecture(const FieldReader& r, ModelConfig* c) {
  std::string model_type;
  if (const json* mt = r.Get("model_type"); mt != nullptr) {
    if (!mt->is_string()) return r.Error("model_type", "expected a string");
    model_type = mt->get<std::string>();
  }
  std::string arch;
  if (const json* a = r.Get("architectures"); a != nullptr) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
      return r.Error("architectures",
                     absl::StrCat("expected a list of names, got ", DescribeJson(*a)));
    }
    arch = (*a)[0].get<std::string>();
  }
  std::vector<std::string> names;
  for (const ArchInfo& info : kArchitectures) {
    // Without "architectures" (some converted checkpoints), model_type decides.
    if ((!arch.empty() && arch == info.architecture) ||
        (arch.empty() && model_type == info.model_type)) {
      c->architecture = info.architecture;
      c->model_type = model_type.empty() ? info.model_type : model_type;
      return absl::OkStatus();
    }
    names.push_back(info.architecture);
  }
  if (arch.empty()) {
    return r.Error("architectures", absl::StrCat("missing, and model_type '", model_type,
                                                 "' is not one of llama, mistral, qwen2"));
  }
  return r.Error("architectures", absl::StrCat("unsupported architecture '", arch,
                                               "' (supported: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status ParseRopeScaling(const FieldReader& r, const json& rs, const std::string& field,
                              ModelConfig* c) {
  if (!rs.is_object())
    return r.Error(field, absl::StrCat("expected an object, got ", DescribeJson(rs)));
  const json* type = GetField(rs, "rope_type");
  std::string type_field = absl::StrCat(field, ".rope_type");
  if (type == nullptr) {
    type = GetField(rs, "type");
    type_field = absl::StrCat(field, ".type");
  }
  if (type == nullptr) return absl::OkStatus();  // rope_parameters holding only rope_theta
  if (!type->is_string()) return r.Error(type_field, "expected a string");
  const std::string t = type->get<std::string>();
  RopeScaling& s = c->rope_scaling;
  if (t == "default") {
    s = RopeScaling();
    return absl::OkStatus();
  }
  if (t != "linear" && t != "llama3") {
    return r.Error(type_field, absl::StrCat("unsupported rope scaling type '", t,
                                            "' (supported: default, linear, llama3)"));
  }
  s.type = t == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kLlama3;
  const std::string factor_field = absl::StrCat(field, ".factor");
  if (GetField(rs, "factor") == nullptr) return r.Error(factor_field, "missing (required)");
  PTX_RETURN_IF_ERROR(r.OptionalPositiveNumber(rs, "factor", factor_field, &s.factor));
  if (s.type == RopeScaling::Type::kLinear) return absl::OkStatus();
  PTX_RETURN_IF_ERROR(r.OptionalPositiveNumber(
      rs, "low_freq_factor", absl::StrCat(field, ".low_freq_factor"), &s.low_freq_factor));
  PTX_RETURN_IF_ERROR(r.OptionalPositiveNumber(
      rs, "high_freq_factor", absl::StrCat(field, ".high_freq_factor"), &s.high_freq_factor));
  if (s.high_freq_factor <= s.low_freq_factor) {
    // The llama3 formula divides by (high - low).
    return r.Error(absl::StrCat(field, ".high_freq_factor"),
                   "must be greater than low_freq_factor");
  }
  const std::string orig_field = absl::StrCat(field, ".original_max_position_embeddings");
  auto orig = r.Int(rs, "original_max_position_embeddings", orig_field);
  if (!orig.ok()) return orig.status();
  if (orig->has_value()) {
    PTX_RETURN_IF_ERROR(r.CheckPositive(orig_field, **orig, &s.original_max_position_embeddings));
  }
  return absl::OkStatus();
}

// Sliding-window attention (Mistral v0.1; Qwen2 when use_sliding_window, which its
// config class defaults to false): a token attends to the last `sliding_window` positions
// only. The kernels attend to the whole context, which is the same thing while the context
// fits in the window, so the served context is capped at the window: answers stay exact
// and longer contexts are refused as too long rather than computed wrongly.
absl::Status ParseSlidingWindow(const FieldReader& r, ModelConfig* c) {
  const json* sw = r.Get("sliding_window");
  if (sw == nullptr || sw->is_null()) return absl::OkStatus();
  bool use = c->architecture != "Qwen2ForCausalLM";
  PTX_RETURN_IF_ERROR(r.OptionalBool("use_sliding_window", &use));
  int64_t window = 0;
  PTX_RETURN_IF_ERROR(r.OptionalPositiveInt("sliding_window", &window));
  if (use && window < c->max_position_embeddings) {
    c->sliding_window = window;
    c->max_position_embeddings = window;
  }
  return absl::OkStatus();
}

absl::Status ParseFields(const FieldReader& r, ModelConfig* c) {
  PTX_RETURN_IF_ERROR(ParseArchitecture(r, c));
  PTX_RETURN_IF_ERROR(r.PositiveInt("vocab_size", &c->vocab_size));
  PTX_RETURN_IF_ERROR(r.PositiveInt("hidden_size", &c->hidden_size));
  PTX_RETURN_IF_ERROR(r.PositiveInt("intermediate_size", &c->intermediate_size));
  PTX_RETURN_IF_ERROR(r.PositiveInt("num_hidden_layers", &c->num_layers));
  PTX_RETURN_IF_ERROR(r.PositiveInt("num_attention_heads", &c->num_heads));
  c->num_kv_heads = c->num_heads;
  PTX_RETURN_IF_ERROR(r.OptionalPositiveInt("num_key_value_heads", &c->num_kv_heads));
  if (c->num_heads % c->num_kv_heads != 0) {
    return r.Error("num_key_value_heads",
                   absl::StrCat("num_attention_heads ", c->num_heads,
                                " is not divisible by num_key_value_heads ", c->num_kv_heads));
  }
  c->head_dim = 0;
  PTX_RETURN_IF_ERROR(r.OptionalPositiveInt("head_dim", &c->head_dim));
  if (c->head_dim == 0) {
    if (c->hidden_size % c->num_heads != 0) {
      return r.Error(
          "num_attention_heads",
          absl::StrCat("hidden_size ", c->hidden_size, " is not divisible by num_attention_heads ",
                       c->num_heads, " and no head_dim is given"));
    }
    c->head_dim = c->hidden_size / c->num_heads;
  }
  if (c->head_dim % 2 != 0) {  // RoPE rotates pairs of dimensions
    return r.Error("head_dim", absl::StrCat("must be even, got ", c->head_dim));
  }
  PTX_RETURN_IF_ERROR(
      r.OptionalPositiveInt("max_position_embeddings", &c->max_position_embeddings));
  PTX_RETURN_IF_ERROR(ParseSlidingWindow(r, c));
  PTX_RETURN_IF_ERROR(
      r.OptionalPositiveNumber(r.root(), "rms_norm_eps", "rms_norm_eps", &c->rms_norm_eps));
  PTX_RETURN_IF_ERROR(
      r.OptionalPositiveNumber(r.root(), "rope_theta", "rope_theta", &c->rope_theta));
  PTX_RETURN_IF_ERROR(r.OptionalBool("tie_word_embeddings", &c->tie_word_embeddings));
  // Qwen2 always has q/k/v biases; Llama declares them; Mistral never has them.
  if (c->architecture == "Qwen2ForCausalLM") {
    c->attention_bias = true;
  } else if (c->architecture == "LlamaForCausalLM") {
    PTX_RETURN_IF_ERROR(r.OptionalBool("attention_bias", &c->attention_bias));
  }
  bool mlp_bias = false;
  PTX_RETURN_IF_ERROR(r.OptionalBool("mlp_bias", &mlp_bias));
  if (mlp_bias) return r.Error("mlp_bias", "MLP biases are not supported");
  // A quantized Hugging Face checkpoint (AWQ, GPTQ, FP8, bitsandbytes, ...) stores other
  // tensors than the weights' own; say so by its method rather than by a missing tensor.
  if (const json* q = r.Get("quantization_config"); q != nullptr && !q->is_null()) {
    PTX_ASSIGN_OR_RETURN(c->quantization, ParseHfQuantization(*q, r.file()));
  }
  if (const json* act = r.Get("hidden_act"); act != nullptr) {
    if (!act->is_string() || act->get<std::string>() != "silu") {
      return r.Error("hidden_act", absl::StrCat("unsupported activation ", DescribeJson(*act),
                                                " (only \"silu\" is supported)"));
    }
  }
  PTX_RETURN_IF_ERROR(r.OptionalTokenId("bos_token_id", &c->bos_token_id));
  PTX_RETURN_IF_ERROR(r.OptionalTokenId("eos_token_id", &c->eos_token_id));
  // A special id without an embedding would fail every request that reaches it.
  for (auto [key, id] :
       {std::pair{"bos_token_id", c->bos_token_id}, {"eos_token_id", c->eos_token_id}}) {
    if (id >= c->vocab_size) {
      return r.Error(key,
                     absl::StrCat("token id ", id, " is outside vocab_size = ", c->vocab_size));
    }
  }
  // Newer transformers write "dtype"; the tensors' own dtypes are authoritative, so an
  // unknown name (e.g. an fp8 variant) is left to fail on the tensors themselves.
  const json* dt = r.Get("torch_dtype");
  if (dt == nullptr) dt = r.Get("dtype");
  if (dt != nullptr && dt->is_string()) ParseDType(dt->get<std::string>(), &c->torch_dtype);
  if (const json* rs = r.Get("rope_scaling"); rs != nullptr) {
    PTX_RETURN_IF_ERROR(ParseRopeScaling(r, *rs, "rope_scaling", c));
  }
  // transformers >= 5 folds rope_theta and the scaling into "rope_parameters".
  if (const json* rp = r.Get("rope_parameters"); rp != nullptr) {
    PTX_RETURN_IF_ERROR(ParseRopeScaling(r, *rp, "rope_parameters", c));
    PTX_RETURN_IF_ERROR(
        r.OptionalPositiveNumber(*rp, "rope_theta", "rope_parameters.rope_theta", &c->rope_theta));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& file) {
  PTX_ASSIGN_OR_RETURN(const json root, ParseJsonObject(json_text, file));
  ModelConfig c;
  FieldReader r(root, file);
  PTX_RETURN_IF_ERROR(ParseFields(r, &c));
  return c;
}

}  // namespace ptxserve
