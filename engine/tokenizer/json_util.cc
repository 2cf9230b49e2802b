#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {
namespace {

std::string Join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(Sv(path), ".", Sv(key));
}

// The member `key` as a T: nullopt when absent or null, an error unless `(v.*is_t)()`.
template <class T>
absl::StatusOr<std::optional<T>> OptMember(const Json& obj, std::string_view key,
                                           std::string_view origin, std::string_view path,
                                           bool (Json::*is_t)() const noexcept,
                                           std::string_view expected) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!(v->*is_t)()) return FieldError(origin, Join(path, key), expected);
  return v->get<T>();
}

}  // namespace

absl::StatusOr<std::optional<std::string>> OptString(const Json& obj, std::string_view key,
                                                     std::string_view origin,
                                                     std::string_view path) {
  return OptMember<std::string>(obj, key, origin, path, &Json::is_string, "expected a string");
}

absl::StatusOr<std::optional<bool>> OptBool(const Json& obj, std::string_view key,
                                            std::string_view origin, std::string_view path) {
  return OptMember<bool>(obj, key, origin, path, &Json::is_boolean, "expected true or false");
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj, std::string_view key,
                                              std::string_view origin, std::string_view path) {
  return OptMember<int64_t>(obj, key, origin, path, &Json::is_number_integer,
                            "expected an integer");
}

absl::StatusOr<std::string> ReqString(const Json& obj, std::string_view key,
                                      std::string_view origin, std::string_view path) {
  auto v = OptString(obj, key, origin, path);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return FieldError(origin, Join(path, key), "missing");
  return **v;
}

absl::StatusOr<std::string> ComponentType(const Json& obj, std::string_view origin,
                                          std::string_view path) {
  if (!obj.is_object()) return FieldError(origin, path, "expected an object");
  return ReqString(obj, "type", origin, path);
}

absl::StatusOr<Pattern> ParsePattern(const Json& obj, std::string_view origin,
                                     std::string_view path) {
  if (const Json* s = Member(obj, "String"); s != nullptr && s->is_string()) {
    return Pattern{s->get<std::string>(), false};
  }
  if (const Json* r = Member(obj, "Regex"); r != nullptr && r->is_string()) {
    return Pattern{r->get<std::string>(), true};
  }
  return FieldError(origin, path, R"(expected {"String": ...} or {"Regex": ...})");
}

absl::StatusOr<Pattern> ReqPattern(const Json& obj, std::string_view key, std::string_view origin,
                                   std::string_view path) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return FieldError(origin, Join(path, key), "missing");
  return ParsePattern(*v, origin, Join(path, key));
}

absl::Status ParseSequence(
    const Json& obj, std::string_view key, std::string_view origin, const std::string& path,
    const std::function<absl::Status(const Json& item, const std::string& item_path)>& parse) {
  const Json* list = Member(obj, key);
  if (list == nullptr || !list->is_array()) {
    return FieldError(origin, Join(path, key), "missing or not an array");
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (auto s = parse((*list)[i], absl::StrCat(Join(path, key), "[", i, "]")); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::tok
