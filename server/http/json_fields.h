// Reading a request's JSON the way OpenAI's API does: optional fields where absent and
// null mean "not given", and errors that start with the parameter's name (ToApiError
// takes it from there for the error object's "param").
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ptxserve::server::http {

// Ordered: objects keep the keys in the order the client sent them (a chat template's
// tojson prints them so).
using json = nlohmann::ordered_json;

// InvalidArgument "<param> <what>".
absl::Status Invalid(absl::string_view param, absl::string_view what);
// "a number", "a string", ... for messages.
const char* TypeName(const json& v);
// The field, or null when absent or JSON null.
const json* Field(const json& obj, const char* name);
// Typed optional fields: nullopt (or `fallback`) when not given, InvalidArgument naming the
// field when of another type.
absl::StatusOr<std::optional<double>> OptNumber(const json& obj, const char* name);
absl::StatusOr<std::optional<int64_t>> OptInt(const json& obj, const char* name);
absl::StatusOr<bool> OptBool(const json& obj, const char* name, bool fallback);

// Arrays and objects nested deeper than this are refused before parsing: copying, dumping
// or rendering a value recurses once per level, and a 4 MiB body could nest two million
// levels, far past any thread's stack. (Python's json stops near 1000.)
inline constexpr int kMaxJsonDepth = 256;

// Parses `body` as a JSON object; InvalidArgument with the byte offset when it is not one
// or nests deeper than kMaxJsonDepth.
absl::StatusOr<json> ParseJsonObject(absl::string_view body);

}  // namespace ptxserve::server::http
