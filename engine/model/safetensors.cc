#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/json_util.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using nlohmann::json;

// The reference implementation's limit; a larger header means a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::Status ErrnoError(const std::string& path, const char* what, int err) {
  const std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

// A JSON value that must be an integer >= 0 (offsets and dimensions).
bool AsUnsigned(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

size_t SafetensorsDTypeSize(std::string_view dtype) {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E5M2" ||
      dtype == "F8_E4M3") {
    return 1;
  }
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  return 0;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": file is ", size, " bytes, shorter than the 8-byte header length field"));
  }
  // MAP_PRIVATE + PROT_READ: the process can never write the model files.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (p == MAP_FAILED) return ErrnoError(path, "cannot mmap", err);
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  PTX_RETURN_IF_ERROR(f->ParseHeader());
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
}

absl::Status SafetensorsFile::ParseHeader() {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base_[i];  // little-endian
  if (header_len > size_ - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header length ", header_len,
                                                   " runs past the end of the file (", size_,
                                                   " bytes)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header length ", header_len,
                                                   " is absurd (limit ", kMaxHeaderBytes, ")"));
  }
  if (header_len == 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": empty header"));
  data_offset_ = 8 + static_cast<size_t>(header_len);
  const uint64_t data_size = size_ - data_offset_;
  const char* text = reinterpret_cast<const char*>(base_ + 8);

  json header;
  try {
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    // parse_error::byte counts from 1 within the header; report the file offset too.
    size_t byte = 0;
    if (const auto* pe = dynamic_cast<const json::parse_error*>(&e)) byte = pe->byte;
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header is not valid JSON at header byte ", byte, " (file offset ",
                     byte == 0 ? 8 : 8 + byte - 1, "): ", e.what()));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header is a JSON ", header.type_name(), ", not an object"));
  }

  for (const auto& item : header.items()) {
    // Named variables, not a structured binding: clang before 16 cannot capture those.
    const std::string& name = item.key();
    const json& value = item.value();
    auto bad = [&](const std::string& problem) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "': ", problem));
    };
    if (name == "__metadata__") {
      if (!value.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": __metadata__ is a ", value.type_name(), ", not an object"));
      }
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              path_, ": __metadata__ entry '", key, "' is ", DescribeJson(v), ", not a string"));
        }
        metadata_.emplace(key, v.get<std::string>());
      }
      continue;
    }
    if (!value.is_object()) return bad(absl::StrCat("entry is a ", value.type_name()));
    SafetensorsEntry e;
    e.name = name;

    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return bad("'dtype' missing or not a string");
    e.dtype = dtype->get<std::string>();

    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return bad("'shape' missing or not a list");
    uint64_t numel = 1;
    for (const json& d : *shape) {
      uint64_t dim = 0;
      if (!AsUnsigned(d, &dim)) {
        return bad(absl::StrCat("shape entry ", DescribeJson(d), " is not a non-negative integer"));
      }
      // Keep numel within int64 so Tensor::numel() and byte sizes cannot overflow.
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)) {
        return bad("shape element count overflows int64");
      }
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }

    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !AsUnsigned((*offsets)[0], &e.begin) || !AsUnsigned((*offsets)[1], &e.end)) {
      return bad("'data_offsets' must be a list of two non-negative integers");
    }
    const std::string range = absl::StrCat("data_offsets [", e.begin, ", ", e.end, "]");
    if (e.begin > e.end) return bad(absl::StrCat(range, ": begin is past end"));
    if (e.end > data_size) {
      return bad(
          absl::StrCat(range, " run past the end of the data section (", data_size, " bytes)"));
    }
    if (const size_t esize = SafetensorsDTypeSize(e.dtype); esize != 0) {
      uint64_t nbytes = 0;
      if (__builtin_mul_overflow(numel, esize, &nbytes) || nbytes != e.end - e.begin) {
        return bad(absl::StrCat(range, " hold ", e.end - e.begin, " bytes but shape ",
                                ShapeString(e.shape), " of ", e.dtype, " needs ", numel, " x ",
                                esize, " bytes"));
      }
    }
    entries_.push_back(std::move(e));
  }

  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Empty tensors own no bytes, so only non-empty neighbours can overlap.
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries_) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && e.begin < prev->end) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": tensor '", e.name, "' (data_offsets [", e.begin, ", ", e.end,
                       "]) overlaps tensor '", prev->name, "' (data_offsets [", prev->begin, ", ",
                       prev->end, "])"));
    }
    prev = &e;
  }
  for (size_t i = 0; i < entries_.size(); ++i) by_name_.emplace(entries_[i].name, i);
  return absl::OkStatus();
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<Tensor> SafetensorsFile::GetTensor(std::string_view name) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in ", path_));
  }
  Tensor t;
  // Only the safetensors spellings: any other has no validated byte size.
  const auto d = std::find_if(kDTypeSpellings.begin(), kDTypeSpellings.end(),
                              [&](const DTypeSpelling& s) { return s.safetensors == e->dtype; });
  if (d == kDTypeSpellings.end()) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", e->dtype, " for tensor '",
                                                 e->name, "' in ", path_,
                                                 " (supported: F32, F16, BF16)"));
  }
  t.dtype = d->dtype;
  t.name = e->name;
  t.shape = e->shape;
  t.data = base_ + data_offset_ + e->begin;
  t.nbytes = static_cast<size_t>(e->end - e->begin);
  return t;
}

}  // namespace ptxserve
