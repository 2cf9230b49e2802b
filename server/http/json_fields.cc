#include "server/http/json_fields.h"

#include "absl/strings/str_cat.h"

namespace ptxserve::server::http {

absl::Status Invalid(absl::string_view param, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(param, " ", what));
}

const char* TypeName(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// Optional fields: absent and null both mean "not given", as in OpenAI's SDKs.
const json* Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> OptNumber(const json& obj, const char* name) {
  const json* v = Field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return Invalid(name, absl::StrCat("must be a number, got ", TypeName(*v)));
  return v->get<double>();
}

absl::StatusOr<std::optional<int64_t>> OptInt(const json& obj, const char* name) {
  const json* v = Field(obj, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return Invalid(name, "is out of range");
    }
    return v->get<int64_t>();
  }
  return Invalid(name, absl::StrCat("must be an integer, got ", TypeName(*v)));
}

absl::StatusOr<bool> OptBool(const json& obj, const char* name, bool fallback) {
  const json* v = Field(obj, name);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    return Invalid(name, absl::StrCat("must be a boolean, got ", TypeName(*v)));
  }
  return v->get<bool>();
}

namespace {

// The offset of the first '[' or '{' (outside strings) that opens level max_depth + 1, or
// npos. Malformed text is left to the parser.
size_t FindTooDeep(absl::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::string_view::npos;
}

}  // namespace

absl::StatusOr<json> ParseJsonObject(absl::string_view body) {
  if (const size_t at = FindTooDeep(body, kMaxJsonDepth); at != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON body: nested deeper than ",
                                                   kMaxJsonDepth, " levels at byte ", at));
  }
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON body: error at byte ", e.byte));
  } catch (const json::exception& e) {
    // A number beyond double's range (1e309) is out_of_range, which has no byte offset.
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON body: ", e.what()));
  }
  if (!parsed.is_object()) return absl::InvalidArgumentError("The body must be a JSON object");
  return parsed;
}

}  // namespace ptxserve::server::http
