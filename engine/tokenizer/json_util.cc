#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {
namespace {

std::string Join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(Sv(path), ".", Sv(key));
}

}  // namespace

absl::StatusOr<std::optional<std::string>> OptString(const Json& obj, std::string_view key,
                                                     std::string_view origin,
                                                     std::string_view path) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return FieldError(origin, Join(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<std::optional<bool>> OptBool(const Json& obj, std::string_view key,
                                            std::string_view origin, std::string_view path) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return FieldError(origin, Join(path, key), "expected true or false");
  return v->get<bool>();
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj, std::string_view key,
                                              std::string_view origin, std::string_view path) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return FieldError(origin, Join(path, key), "expected an integer");
  return v->get<int64_t>();
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

}  // namespace ptxserve::tok
