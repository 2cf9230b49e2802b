// Parsing reads through a bounds-checked cursor: every count is checked against the bytes
// left before anything is allocated for it, and every error carries the byte offset where
// the bad field starts.
#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

constexpr std::array<const char*, 13> kTypeNames = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

// GGML's type table (ggml.c type_traits); retired ids (4, 5, 31-33) are left out.
constexpr std::array<GgmlTypeInfo, 31> kGgmlTypes = {{
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},
    {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
    {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
    {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
    {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},
    {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},
}};

// Arrays larger than this are refused: real vocabularies hold a few hundred thousand
// entries, and each parsed element costs far more memory than its bytes in the file.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
// Arrays of arrays are legal; the nesting is bounded so a crafted file cannot recurse deep.
constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;

absl::Status ErrnoError(const std::string& path, const char* what, int err) {
  const std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, size_t size)
      : path_(path), base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  absl::Status Error(size_t at, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": byte offset ", at, ": ", what));
  }

  template <typename T>
  absl::Status Read(T* out, const std::string& what) {
    if (left() < sizeof(T)) {
      return Error(pos_, absl::StrCat("truncated ", what, " (needs ", sizeof(T), " bytes, ", left(),
                                      " left)"));
    }
    std::memcpy(out, base_ + pos_, sizeof(T));  // the host is little-endian, as is GGUF
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, const std::string& what) {
    const size_t at = pos_;
    uint64_t n = 0;
    PTX_RETURN_IF_ERROR(Read(&n, absl::StrCat(what, " length")));
    if (n > left()) {
      return Error(at, absl::StrCat("truncated ", what, ": length ", n, " but ", left(),
                                    " bytes left in the file"));
    }
    out->assign(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status ReadValue(uint32_t type, GgufValue* v, int depth);

 private:
  absl::Status ReadArray(GgufValue* v, int depth);

  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

// The fewest bytes one element of `type` can take, to bound a count before allocating.
uint64_t MinEncodedSize(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kString:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

template <typename T>
absl::Status ReadNumber(Cursor& c, GgufValue* v, const std::string& what) {
  T x{};
  PTX_RETURN_IF_ERROR(c.Read(&x, what));
  if constexpr (std::is_floating_point_v<T>) {
    v->f = x;
  } else if constexpr (std::is_signed_v<T>) {
    v->i = x;
  } else {
    v->u = x;
  }
  return absl::OkStatus();
}

absl::Status Cursor::ReadValue(uint32_t type, GgufValue* v, int depth) {
  const size_t at = pos_;
  if (type >= kTypeNames.size()) return Error(at, absl::StrCat("unknown value type ", type));
  v->type = static_cast<GgufType>(type);
  const std::string what = absl::StrCat(kTypeNames[type], " value");
  switch (v->type) {
    case GgufType::kU8:
      return ReadNumber<uint8_t>(*this, v, what);
    case GgufType::kI8:
      return ReadNumber<int8_t>(*this, v, what);
    case GgufType::kU16:
      return ReadNumber<uint16_t>(*this, v, what);
    case GgufType::kI16:
      return ReadNumber<int16_t>(*this, v, what);
    case GgufType::kU32:
      return ReadNumber<uint32_t>(*this, v, what);
    case GgufType::kI32:
      return ReadNumber<int32_t>(*this, v, what);
    case GgufType::kF32:
      return ReadNumber<float>(*this, v, what);
    case GgufType::kU64:
      return ReadNumber<uint64_t>(*this, v, what);
    case GgufType::kI64:
      return ReadNumber<int64_t>(*this, v, what);
    case GgufType::kF64:
      return ReadNumber<double>(*this, v, what);
    case GgufType::kBool: {
      uint8_t b = 0;
      PTX_RETURN_IF_ERROR(Read(&b, what));
      if (b > 1) return Error(at, absl::StrCat("bool value ", int{b}, " is neither 0 nor 1"));
      v->i = b;
      return absl::OkStatus();
    }
    case GgufType::kString:
      return ReadString(&v->s, "string value");
    case GgufType::kArray:
      return ReadArray(v, depth);
  }
  return Error(at, absl::StrCat("unknown value type ", type));
}

absl::Status Cursor::ReadArray(GgufValue* v, int depth) {
  const size_t at = pos_;
  if (depth >= kMaxArrayDepth) {
    return Error(at, absl::StrCat("arrays nested deeper than ", kMaxArrayDepth));
  }
  uint32_t elem = 0;
  uint64_t n = 0;
  PTX_RETURN_IF_ERROR(Read(&elem, "array element type"));
  if (elem >= kTypeNames.size())
    return Error(at, absl::StrCat("unknown array element type ", elem));
  PTX_RETURN_IF_ERROR(Read(&n, "array length"));
  if (n > kMaxArrayElements) {
    return Error(
        at, absl::StrCat("array of ", n, " elements exceeds the limit of ", kMaxArrayElements));
  }
  if (n > left() / MinEncodedSize(elem)) {
    return Error(at,
                 absl::StrCat("truncated array: ", n, " ", kTypeNames[elem], " elements need ",
                              "at least ", n * MinEncodedSize(elem), " bytes, ", left(), " left"));
  }
  v->array_type = static_cast<GgufType>(elem);
  v->array.resize(n);
  for (GgufValue& e : v->array) PTX_RETURN_IF_ERROR(ReadValue(elem, &e, depth + 1));
  return absl::OkStatus();
}

// Bytes of a tensor of `type` with dimensions `ne`; an error string when they overflow or
// a row is not whole blocks.
std::string TensorBytes(const GgmlTypeInfo& type, const std::vector<uint64_t>& ne, uint64_t* out) {
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d) {
      return absl::StrCat("element count of ne [", absl::StrJoin(ne, ", "), "] overflows");
    }
    n *= d;
  }
  if (!ne.empty() && ne[0] % type.block_elems != 0) {
    return absl::StrCat("row of ", ne[0], " elements is not a multiple of ", std::string(type.name),
                        "'s block of ", type.block_elems);
  }
  const uint64_t blocks = n / type.block_elems;
  if (blocks > std::numeric_limits<uint64_t>::max() / type.block_bytes) {
    return absl::StrCat("byte size of ne [", absl::StrJoin(ne, ", "), "] overflows");
  }
  *out = blocks * type.block_bytes;
  return {};
}

}  // namespace

std::string GgufTypeName(uint32_t type) {
  if (type < kTypeNames.size()) return std::string(kTypeNames[type]);
  return absl::StrCat("type ", type);
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

bool IsGgufPath(std::string_view path) {
  std::error_code ec;
  return path.ends_with(".gguf") || std::filesystem::is_regular_file(path, ec);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    const int err = errno;
    const bool regular = S_ISREG(st.st_mode);
    ::close(fd);
    if (!regular) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    if (st.st_size == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
    return ErrnoError(path, "cannot stat", err);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  // MAP_PRIVATE + PROT_READ: the process can never write the model file.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (p == MAP_FAILED) return ErrnoError(path, "cannot mmap", err);
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->mapped_ = true;
  PTX_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes,
                                                              const std::string& origin) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = origin;
  f->owned_ = std::move(bytes);
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->size_ = f->owned_.size();
  PTX_RETURN_IF_ERROR(f->Parse());
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

absl::Status GgufFile::Parse() {
  Cursor c(path_, base_, size_);
  uint32_t magic = 0;
  PTX_RETURN_IF_ERROR(c.Read(&magic, std::string("magic")));
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    return c.Error(0, "bad magic: not a GGUF file (expected the bytes \"GGUF\")");
  }
  PTX_RETURN_IF_ERROR(c.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return c.Error(4, absl::StrCat("GGUF version ", version_, " is not supported (only 2 and 3)"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  PTX_RETURN_IF_ERROR(c.Read(&n_tensors, "tensor count"));
  PTX_RETURN_IF_ERROR(c.Read(&n_kv, "metadata count"));
  // Each key-value pair takes at least 12 bytes, each tensor info at least 24.
  if (n_kv > c.left() / 12) {
    return c.Error(
        16, absl::StrCat("metadata count ", n_kv, " cannot fit in the ", c.left(), " bytes left"));
  }
  if (n_tensors > c.left() / 24) {
    return c.Error(8, absl::StrCat("tensor count ", n_tensors, " cannot fit in the ", c.left(),
                                   " bytes left"));
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t at = c.pos();
    std::string key;
    uint32_t type = 0;
    PTX_RETURN_IF_ERROR(c.ReadString(&key, "metadata key"));
    PTX_RETURN_IF_ERROR(c.Read(&type, absl::StrCat("type of metadata '", key, "'")));
    GgufValue v;
    PTX_RETURN_IF_ERROR(c.ReadValue(type, &v, 0));
    if (!metadata_.emplace(key, std::move(v)).second) {
      return c.Error(at, absl::StrCat("duplicate metadata key '", key, "'"));
    }
  }
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (a->type != GgufType::kU32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return c.Error(c.pos(),
                     absl::StrCat("general.alignment must be a u32 power of two, got ",
                                  GgufTypeName(static_cast<uint32_t>(a->type)), " ", a->u));
    }
    alignment_ = a->u;
  }
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    info.header_offset = c.pos();
    PTX_RETURN_IF_ERROR(c.ReadString(&info.name, "tensor name"));
    const std::string what = absl::StrCat("tensor '", info.name, "'");
    uint32_t n_dims = 0;
    const size_t dims_at = c.pos();
    PTX_RETURN_IF_ERROR(c.Read(&n_dims, what + " n_dims"));
    if (n_dims > kMaxDims) {
      return c.Error(dims_at,
                     absl::StrCat(what, " has ", n_dims, " dimensions (at most ", kMaxDims, ")"));
    }
    info.ne.resize(n_dims);
    for (uint64_t& d : info.ne) PTX_RETURN_IF_ERROR(c.Read(&d, what + " ne"));
    const size_t type_at = c.pos();
    PTX_RETURN_IF_ERROR(c.Read(&info.ggml_type, what + " type"));
    const GgmlTypeInfo* type = FindGgmlType(info.ggml_type);
    if (type == nullptr) {
      return c.Error(type_at, absl::StrCat(what, " has unknown GGML type id ", info.ggml_type));
    }
    if (std::string e = TensorBytes(*type, info.ne, &info.nbytes); !e.empty()) {
      return c.Error(dims_at, absl::StrCat(what, ": ", e));
    }
    PTX_RETURN_IF_ERROR(c.Read(&info.offset, what + " offset"));
    if (!by_name_.emplace(info.name, tensors_.size()).second) {
      return c.Error(info.header_offset, absl::StrCat("duplicate tensor name '", info.name, "'"));
    }
    tensors_.push_back(std::move(info));
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && !tensors_.empty()) {
    return c.Error(c.pos(), absl::StrCat("data section would start at ", data_offset_,
                                         ", past the end of the file (", size_, " bytes)"));
  }
  return CheckTensorData();
}

absl::Status GgufFile::CheckTensorData() const {
  Cursor c(path_, base_, size_);
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  const uint64_t data_bytes = size_ >= data_offset_ ? size_ - data_offset_ : 0;
  uint64_t end_of_previous = 0;
  const GgufTensorInfo* previous = nullptr;
  for (const GgufTensorInfo* t : order) {
    const std::string what =
        absl::StrCat("tensor '", t->name, "' (info at byte offset ", t->header_offset, ")");
    if (t->offset % alignment_ != 0) {
      return c.Error(data_offset_ + t->offset,
                     absl::StrCat(what, ": data offset ", t->offset,
                                  " is not a multiple of the alignment ", alignment_));
    }
    if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset) {
      return c.Error(data_offset_ + t->offset,
                     absl::StrCat(what, ": data [", t->offset, ", +", t->nbytes,
                                  ") runs past the end of the file (data section of ", data_bytes,
                                  " bytes at ", data_offset_, ")"));
    }
    if (previous != nullptr && t->offset < end_of_previous) {
      return c.Error(data_offset_ + t->offset,
                     absl::StrCat(what, ": data overlaps tensor '", previous->name, "'"));
    }
    end_of_previous = t->offset + t->nbytes;
    previous = t;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ptxserve
