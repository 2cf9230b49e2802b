// GgufFile's typed reads of metadata and its tensor views, and GgufValue's constructors.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf.h"

namespace ptxserve {
namespace {

bool IsSignedInt(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}
bool IsUnsignedInt(GgufType t) {
  return t == GgufType::kU8 || t == GgufType::kU16 || t == GgufType::kU32 || t == GgufType::kU64;
}
std::string KindName(GgufType t) { return GgufTypeName(static_cast<uint32_t>(t)); }

}  // namespace

GgufValue GgufValue::U32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::kU32;
  x.u = v;
  return x;
}
GgufValue GgufValue::I32(int32_t v) {
  GgufValue x;
  x.type = GgufType::kI32;
  x.i = v;
  return x;
}
GgufValue GgufValue::U64(uint64_t v) {
  GgufValue x;
  x.type = GgufType::kU64;
  x.u = v;
  return x;
}
GgufValue GgufValue::F32(float v) {
  GgufValue x;
  x.type = GgufType::kF32;
  x.f = v;
  return x;
}
GgufValue GgufValue::Bool(bool v) {
  GgufValue x;
  x.type = GgufType::kBool;
  x.i = v ? 1 : 0;
  return x;
}
GgufValue GgufValue::String(std::string v) {
  GgufValue x;
  x.type = GgufType::kString;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::Array(GgufType element_type, std::vector<GgufValue> elements) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.array_type = element_type;
  x.array = std::move(elements);
  return x;
}
GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  std::vector<GgufValue> e;
  e.reserve(v.size());
  for (const std::string& s : v) e.push_back(String(s));
  return Array(GgufType::kString, std::move(e));
}

absl::Status GgufFile::KeyError(std::string_view key, std::string_view problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": metadata '", std::string(key), "' ", std::string(problem)));
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  if (IsSignedInt(v->type)) return v->i;
  if (IsUnsignedInt(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return KeyError(key, absl::StrCat("= ", v->u, " does not fit an int64"));
    }
    return static_cast<int64_t>(v->u);
  }
  return KeyError(key, absl::StrCat("is a ", KindName(v->type), ", expected an integer"));
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->f;
  if (IsSignedInt(v->type)) return static_cast<double>(v->i);
  if (IsUnsignedInt(v->type)) return static_cast<double>(v->u);
  return KeyError(key, absl::StrCat("is a ", KindName(v->type), ", expected a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  if (v->type != GgufType::kString) {
    return KeyError(key, absl::StrCat("is a ", KindName(v->type), ", expected a string"));
  }
  return v->s;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  if (v->type != GgufType::kBool) {
    return KeyError(key, absl::StrCat("is a ", KindName(v->type), ", expected a bool"));
  }
  return v->i != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  if (v->type != GgufType::kArray || v->array_type != GgufType::kString) {
    return KeyError(key, "is not an array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetNumberArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata '", std::string(key), "'"));
  const GgufType t = v->array_type;
  const bool number = t == GgufType::kF32 || t == GgufType::kF64 || IsSignedInt(t) ||
                      IsUnsignedInt(t) || t == GgufType::kBool;
  if (v->type != GgufType::kArray || !number) return KeyError(key, "is not an array of numbers");
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    out.push_back(t == GgufType::kF32 || t == GgufType::kF64 ? e.f
                  : IsUnsignedInt(t)                         ? static_cast<double>(e.u)
                                                             : static_cast<double>(e.i));
  }
  return out;
}

absl::StatusOr<Tensor> GgufFile::GetTensor(std::string_view name) const {
  const GgufTensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in ", path_));
  }
  Tensor t;
  t.name = info->name;
  if (info->ggml_type == kGgmlF32) {
    t.dtype = DType::kF32;
  } else if (info->ggml_type == kGgmlF16) {
    t.dtype = DType::kF16;
  } else if (info->ggml_type == kGgmlBF16) {
    t.dtype = DType::kBF16;
  } else {
    const auto q =
        std::find_if(kQuantLayouts.begin() + 1, kQuantLayouts.end(),
                     [&](const QuantLayout& l) { return l.ggml_type == info->ggml_type; });
    if (q == kQuantLayouts.end()) {
      return absl::UnimplementedError(
          absl::StrCat(path_, ": tensor '", info->name, "' has GGML type ",
                       std::string(FindGgmlType(info->ggml_type)->name),
                       "; ptxserve loads f32, f16, bf16, q8_0, q4_0, q4_K and q6_K"));
    }
    t.quant = q->type;
  }
  t.shape.assign(info->ne.rbegin(), info->ne.rend());
  t.data = base_ + data_offset_ + info->offset;
  t.nbytes = info->nbytes;
  return t;
}

}  // namespace ptxserve
