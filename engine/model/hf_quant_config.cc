// Reading and writing config.json's quantization_config. The field names follow the
// libraries that write these checkpoints: AutoAWQ (zero_point, version), AutoGPTQ /
// GPTQModel (sym, desc_act, checkpoint_format), vLLM's and transformers' fp8
// (activation_scheme, weight_block_size).
#include "engine/model/hf_quant_config.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/model/json_util.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

using json = nlohmann::json;

class QuantFields {
 public:
  QuantFields(const json& q, const std::string& file) : q_(q), file_(file) {}

  absl::Status Error(const std::string& key, const std::string& problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": field 'quantization_config.", key, "': ", problem));
  }
  const json* Get(const std::string& key) const {
    auto it = q_.find(key);
    return it == q_.end() || it->is_null() ? nullptr : &*it;
  }
  // An integer field that must equal `want` (the only value supported).
  absl::Status RequireInt(const std::string& key, int64_t want, int64_t* out) const {
    const json* v = Get(key);
    if (v == nullptr) return Error(key, "missing (required)");
    if (!v->is_number_integer() || v->get<int64_t>() != want) {
      return Error(key, absl::StrCat(DescribeJson(*v), " is not supported (only ", want, ")"));
    }
    *out = want;
    return absl::OkStatus();
  }
  // A string field, lower-cased, into *out; `fallback` when absent.
  absl::Status String(const std::string& key, const std::string& fallback, std::string* out) const {
    const json* v = Get(key);
    if (v == nullptr) {
      *out = fallback;
      return absl::OkStatus();
    }
    if (!v->is_string()) {
      return Error(key, absl::StrCat("expected a string, got ", DescribeJson(*v)));
    }
    *out = absl::AsciiStrToLower(v->get<std::string>());
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    const json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean())
      return Error(key, absl::StrCat("expected a boolean, got ", DescribeJson(*v)));
    return v->get<bool>();
  }

 private:
  const json& q_;
  const std::string& file_;
};

absl::Status ParseFp8(const QuantFields& f, HfQuantization* out) {
  if (const json* b = f.Get("weight_block_size"); b != nullptr) {
    // A tile's columns must be whole fp8_e4m3 blocks of 32, each taking one tile's scale.
    const bool ok = b->is_array() && b->size() == 2 && (*b)[0].is_number_integer() &&
                    (*b)[1].is_number_integer() && (*b)[0].get<int64_t>() > 0 &&
                    (*b)[1].get<int64_t>() > 0 && (*b)[1].get<int64_t>() % 32 == 0;
    if (!ok) {
      const bool pair = b->is_array() && b->size() == 2 && (*b)[0].is_number_integer() &&
                        (*b)[1].is_number_integer();
      return f.Error("weight_block_size",
                     absl::StrCat(pair ? absl::StrCat("[", (*b)[0].get<int64_t>(), ", ",
                                                      (*b)[1].get<int64_t>(), "]")
                                       : DescribeJson(*b),
                                  " is not supported: expected [rows, cols], both positive, "
                                  "cols a multiple of 32"));
    }
    out->fp8_block_rows = (*b)[0].get<int64_t>();
    out->fp8_block_cols = (*b)[1].get<int64_t>();
  }
  std::string scheme;
  PTX_RETURN_IF_ERROR(f.String("activation_scheme", "dynamic", &scheme));
  if (scheme != "dynamic" && scheme != "static") {
    return f.Error("activation_scheme",
                   absl::StrCat("'", scheme, "' is not supported (static or dynamic)"));
  }
  // vLLM's early checkpoints name the format; E5M2 weights are another code table.
  std::string fmt;
  PTX_RETURN_IF_ERROR(f.String("fmt", "e4m3", &fmt));
  if (fmt != "e4m3") return f.Error("fmt", absl::StrCat("'", fmt, "' is not supported (e4m3)"));
  return absl::OkStatus();
}

absl::Status ParseAwq(const QuantFields& f, HfQuantization* out) {
  PTX_RETURN_IF_ERROR(f.RequireInt("bits", 4, &out->bits));
  PTX_RETURN_IF_ERROR(f.RequireInt("group_size", 128, &out->group_size));
  PTX_ASSIGN_OR_RETURN(const auto zero_point, f.Bool("zero_point", true));
  if (!zero_point) return f.Error("zero_point", "false is not supported (AWQ with zeros only)");
  std::string version;
  PTX_RETURN_IF_ERROR(f.String("version", "gemm", &version));
  if (version != "gemm") {
    return f.Error("version", absl::StrCat("'", version, "' is not supported (only \"gemm\")"));
  }
  return absl::OkStatus();
}

absl::Status ParseGptq(const QuantFields& f, HfQuantization* out) {
  PTX_RETURN_IF_ERROR(f.RequireInt("bits", 4, &out->bits));
  PTX_RETURN_IF_ERROR(f.RequireInt("group_size", 128, &out->group_size));
  for (const char* key : {"sym", "desc_act"}) PTX_RETURN_IF_ERROR(f.Bool(key, false).status());
  std::string format;
  PTX_RETURN_IF_ERROR(f.String("checkpoint_format", "gptq", &format));
  if (format != "gptq" && format != "gptq_v2") {
    return f.Error("checkpoint_format",
                   absl::StrCat("'", format, "' is not supported (gptq or gptq_v2)"));
  }
  out->gptq_zero_minus_one = format == "gptq";
  return absl::OkStatus();
}

}  // namespace

std::string_view HfQuantMethodName(HfQuantization::Method m) {
  switch (m) {
    case HfQuantization::Method::kFp8:
      return "fp8";
    case HfQuantization::Method::kAwq:
      return "awq";
    case HfQuantization::Method::kGptq:
      return "gptq";
    case HfQuantization::Method::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<HfQuantization> ParseHfQuantization(const json& q, const std::string& file) {
  const QuantFields f(q, file);
  if (!q.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": field 'quantization_config': expected an object, got ", DescribeJson(q)));
  }
  std::string method;
  PTX_RETURN_IF_ERROR(f.String("quant_method", "", &method));
  HfQuantization out;
  if (method == "fp8") {
    out.method = HfQuantization::Method::kFp8;
    PTX_RETURN_IF_ERROR(ParseFp8(f, &out));
  } else if (method == "awq") {
    out.method = HfQuantization::Method::kAwq;
    PTX_RETURN_IF_ERROR(ParseAwq(f, &out));
  } else if (method == "gptq") {
    out.method = HfQuantization::Method::kGptq;
    PTX_RETURN_IF_ERROR(ParseGptq(f, &out));
  } else {
    return f.Error("quant_method",
                   absl::StrCat(method.empty() ? "missing" : "'" + method + "'",
                                " is not supported: ptxserve loads fp8 (E4M3, per-tensor or "
                                "per-channel scales), awq and gptq (4 bits, groups of 128) "
                                "checkpoints, and q8_0/q4_0/q4_k/q6_k weights from GGUF files"));
  }
  return out;
}

json HfQuantizationJson(const HfQuantization& q) {
  switch (q.method) {
    case HfQuantization::Method::kFp8:
      return {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
    case HfQuantization::Method::kAwq:
      return {{"quant_method", "awq"},
              {"bits", 4},
              {"group_size", 128},
              {"zero_point", true},
              {"version", "gemm"}};
    case HfQuantization::Method::kGptq:
      return {{"quant_method", "gptq"}, {"bits", 4},         {"group_size", 128},
              {"sym", false},           {"desc_act", false}, {"checkpoint_format", "gptq"}};
    case HfQuantization::Method::kNone:
      break;
  }
  return nullptr;
}

}  // namespace ptxserve
