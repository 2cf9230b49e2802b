// Conversion between nlohmann JSON and template values, and Python's json.dumps, which
// Hugging Face installs as the `tojson` filter (so tool schemas print byte-identically).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "engine/chat/value.h"
#include "nlohmann/json.hpp"

namespace ptxserve::chat {

// Objects keep the key order of `json` (ordered_json keeps the document's order, as
// Python's json.loads does; nlohmann::json has already sorted it).
template <typename Json>
Value ValueFromJson(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::Int(static_cast<int64_t>(json.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(ValueFromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData dict;
      dict.items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        dict.items.emplace_back(it.key(), ValueFromJson(it.value()));
      }
      return Value::Dict(std::move(dict));
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  return Value::None();
}

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps(indent=...): spaces or the given string
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};

// json.dumps(value, ...) byte for byte; Undefined, namespaces and callables are a
// TemplateError ("Object of type ... is not JSON serializable").
std::string PyJsonDumps(const Value& value, const JsonDumpOptions& options);

}  // namespace ptxserve::chat
