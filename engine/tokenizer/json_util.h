// Checked access to tokenizer.json / tokenizer_config.json fields: every failure is an
// absl::Status naming the file and the field path (internal to engine/tokenizer).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ptxserve::tok {

using Json = nlohmann::json;

// Debian's Abseil has its own string_view type; this bridges std::string_view into it.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// "origin: field: message" as InvalidArgument / Unimplemented.
inline absl::Status FieldError(std::string_view origin, std::string_view field,
                               std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": ", Sv(field), ": ", Sv(message)));
}
inline absl::Status FieldUnimplemented(std::string_view origin, std::string_view field,
                                       std::string_view message) {
  return absl::UnimplementedError(absl::StrCat(Sv(origin), ": ", Sv(field), ": ", Sv(message)));
}

// The member `key` of object `obj`, or nullptr when absent or JSON null.
inline const Json* Member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Optional typed members: nullopt when absent/null, an error when of the wrong type.
absl::StatusOr<std::optional<std::string>> OptString(const Json& obj, std::string_view key,
                                                     std::string_view origin,
                                                     std::string_view path);
absl::StatusOr<std::optional<bool>> OptBool(const Json& obj, std::string_view key,
                                            std::string_view origin, std::string_view path);
absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj, std::string_view key,
                                              std::string_view origin, std::string_view path);
// Required string member.
absl::StatusOr<std::string> ReqString(const Json& obj, std::string_view key,
                                      std::string_view origin, std::string_view path);
// The "type" member of a component object (normalizer, decoder, ...).
absl::StatusOr<std::string> ComponentType(const Json& obj, std::string_view origin,
                                          std::string_view path);

// A {"String": s} or {"Regex": r} pattern object.
struct Pattern {
  std::string text;
  bool is_regex = false;
};
absl::StatusOr<Pattern> ParsePattern(const Json& obj, std::string_view origin,
                                     std::string_view path);
// The required member `key` of `obj` as a pattern object.
absl::StatusOr<Pattern> ReqPattern(const Json& obj, std::string_view key, std::string_view origin,
                                   std::string_view path);

// A "Sequence" component: hands each element of the array member `key` (e.g. "normalizers")
// to `parse` with its path ("normalizer.normalizers[2]"); the first error is returned.
absl::Status ParseSequence(
    const Json& obj, std::string_view key, std::string_view origin, const std::string& path,
    const std::function<absl::Status(const Json& item, const std::string& item_path)>& parse);

}  // namespace ptxserve::tok
