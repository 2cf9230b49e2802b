// Small helpers for reading JSON files and quoting JSON values in error messages.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptxserve {

// A short description of `v` for an error message: scalars as JSON text (cut at 80
// characters), containers by type name only, since dumping an attacker-controlled
// nested value would recurse without bound.
inline std::string DescribeJson(const nlohmann::json& v) {
  if (v.is_structured()) return std::string(v.type_name());
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Parses `text`, the contents of `file`, which must be a JSON object. Errors name the file
// and, for a syntax error, the byte offset.
absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, const std::string& file);

}  // namespace ptxserve
