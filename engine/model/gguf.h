// Read-only access to GGUF files (llama.cpp's model format), versions 2 and 3, little-endian:
//   "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x {string key, u32 value type, value},
//   tensor_count x {string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset},
//   padding to general.alignment (default 32), then the data section.
// A string is a u64 byte length and the bytes; an array is a u32 element type, a u64 count
// and the elements. ne[0] is the fastest-varying dimension. The file is mmapped and every
// header field is validated before use; tensor views point into the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace ptxserve {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// "u8", "string", "array", ...; "type N" for an id outside the table.
std::string GgufTypeName(uint32_t type);

// One metadata value. Integers of every width are held in `i` (signed kinds, bool) or `u`
// (unsigned kinds), floats in `f`; an array holds its elements, all of `array_type`.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufType array_type = GgufType::kU8;
  std::vector<GgufValue> array;

  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue Array(GgufType element_type, std::vector<GgufValue> elements);
  static GgufValue StringArray(const std::vector<std::string>& v);
};

// The GGML tensor element types: the id, llama.cpp's name and the block geometry. Types
// whose id GGML has retired are absent (an id not in the table is an unknown type).
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;  // "f32", "q4_0", "q4_K", ...
  int block_elems;        // 1 for plain element types
  int block_bytes;
};
// nullptr for an unknown id.
const GgmlTypeInfo* FindGgmlType(uint32_t id);
inline constexpr uint32_t kGgmlF32 = 0;
inline constexpr uint32_t kGgmlF16 = 1;
inline constexpr uint32_t kGgmlBF16 = 30;

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] is the fastest-varying dimension
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  size_t header_offset = 0;  // where the tensor's info starts in the file (for errors)
};

class GgufFile {
 public:
  // Maps and validates `path`. NotFound for a missing file; InvalidArgument naming the
  // file and the byte offset for anything malformed.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // The same over bytes in memory (kept by the object); `origin` names them in errors.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string bytes,
                                                             const std::string& origin);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  // The read-only file mapping (Open), or nullptr for bytes given to FromBytes.
  const uint8_t* mapping() const { return mapped_ ? base_ : nullptr; }
  size_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed metadata reads. NotFound when absent; InvalidArgument naming the file and the
  // key when the value has another kind or does not fit.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;   // any integer type
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // f32, f64 or an integer
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // An array of the given element kind: strings; numbers (any integer or float type).
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetNumberArray(std::string_view key) const;

  // InvalidArgument "FILE: metadata 'KEY' PROBLEM", for checks of values made by callers.
  absl::Status KeyError(std::string_view key, std::string_view problem) const;

  // A view of tensor `name` with the HF row-major shape (ne reversed). F32/F16/BF16 give
  // Tensor::dtype; q8_0/q4_0/q4_K/q6_K give Tensor::quant. NotFound when absent;
  // Unimplemented naming the tensor and the GGML type for any other type.
  absl::StatusOr<Tensor> GetTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();
  // Data offsets aligned, inside the file and not overlapping.
  absl::Status CheckTensorData() const;

  std::string path_;
  std::string owned_;  // FromBytes: the bytes; Open: empty (base_ is a mapping)
  bool mapped_ = false;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

// Whether `path` names a GGUF file rather than a model directory: it ends in ".gguf", or
// it is a regular file (a model directory is a directory).
bool IsGgufPath(std::string_view path);

}  // namespace ptxserve
