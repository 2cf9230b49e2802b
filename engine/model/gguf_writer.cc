#include "engine/model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host, as GGUF requires
  out->append(b, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

void PutValue(std::string* out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8:
      return Put<uint8_t>(out, static_cast<uint8_t>(v.u));
    case GgufType::kI8:
      return Put<int8_t>(out, static_cast<int8_t>(v.i));
    case GgufType::kU16:
      return Put<uint16_t>(out, static_cast<uint16_t>(v.u));
    case GgufType::kI16:
      return Put<int16_t>(out, static_cast<int16_t>(v.i));
    case GgufType::kU32:
      return Put<uint32_t>(out, static_cast<uint32_t>(v.u));
    case GgufType::kI32:
      return Put<int32_t>(out, static_cast<int32_t>(v.i));
    case GgufType::kF32:
      return Put<float>(out, static_cast<float>(v.f));
    case GgufType::kBool:
      return Put<uint8_t>(out, v.i != 0 ? 1 : 0);
    case GgufType::kString:
      return PutString(out, v.s);
    case GgufType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) PutValue(out, e);
      return;
    case GgufType::kU64:
      return Put<uint64_t>(out, v.u);
    case GgufType::kI64:
      return Put<int64_t>(out, v.i);
    case GgufType::kF64:
      return Put<double>(out, v.f);
  }
}

uint64_t AlignUp(uint64_t n) {
  return (n + GgufWriter::kAlignment - 1) / GgufWriter::kAlignment * GgufWriter::kAlignment;
}

}  // namespace

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::Remove(const std::string& key) {
  std::erase_if(metadata_, [&](const auto& kv) { return kv.first == key; });
}

void GgufWriter::AddTensor(std::string name, uint32_t ggml_type, std::vector<uint64_t> ne,
                           std::vector<uint8_t> data) {
  for (PendingTensor& t : tensors_) {
    if (t.name == name) {
      t = {std::move(name), ggml_type, std::move(ne), std::move(data)};
      return;
    }
  }
  tensors_.push_back({std::move(name), ggml_type, std::move(ne), std::move(data)});
}

absl::StatusOr<std::string> GgufWriter::Serialize() const {
  std::string out = "GGUF";
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    PutString(&out, k);
    Put<uint32_t>(&out, static_cast<uint32_t>(v.type));
    PutValue(&out, v);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    const GgmlTypeInfo* type = FindGgmlType(t.ggml_type);
    if (type == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': unknown GGML type id ", t.ggml_type));
    }
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    if (n % type->block_elems != 0 || n / type->block_elems * type->block_bytes != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", t.data.size(),
                                                     " bytes do not hold ", n, " ",
                                                     std::string(type->name), " elements"));
    }
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) Put<uint64_t>(&out, d);
    Put<uint32_t>(&out, t.ggml_type);
    Put<uint64_t>(&out, offset);
    offset = AlignUp(offset + t.data.size());
  }
  out.resize(AlignUp(out.size()), '\0');
  for (const PendingTensor& t : tensors_) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    out.resize(AlignUp(out.size()), '\0');
  }
  return out;
}

absl::Status GgufWriter::Write(const std::string& path) const {
  PTX_ASSIGN_OR_RETURN(std::string bytes, Serialize());
  const std::string tmp = absl::StrCat(path, ".partial");
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create ", tmp));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat(path, ": writing ", tmp, " failed"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot rename ", tmp, " into place: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
