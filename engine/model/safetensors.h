// Read-only access to .safetensors files: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the data.
// The file is mmapped; tensor views point straight into the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace ptxserve {

// One tensor entry of a safetensors header, as written.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16", "I64", ... (any dtype parses)
  std::vector<int64_t> shape;  // numel fits int64 and numel * dtype size fits the file
  uint64_t begin = 0;          // byte offsets into the data section (after the header)
  uint64_t end = 0;
};

// Element size of a safetensors dtype name ("F32" -> 4); 0 when unknown or sub-byte.
size_t SafetensorsDTypeSize(std::string_view dtype);

// A mapped .safetensors file whose header has been fully validated: offsets lie inside
// the data section, begin <= end, tensors do not overlap, and for every dtype of known
// size the byte size equals numel * dtype size. Immutable and thread-safe once opened.
// The file must not be truncated while mapped (that would fault on access).
class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors (InvalidArgument, NotFound for a missing file)
  // name the file, the tensor and the problem.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  // The read-only mapping of the whole file, file_size() bytes.
  const uint8_t* mapping() const { return base_; }
  // Byte offset of the data section within the file (8 + header length).
  size_t data_offset() const { return data_offset_; }
  // All tensors, sorted by data offset.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }
  // The entry named `name`, or nullptr.
  const SafetensorsEntry* Find(std::string_view name) const;
  // A view of tensor `name` into the mapping. NotFound when absent; Unimplemented
  // ("unsupported dtype X for tensor T in FILE") unless its dtype is F32, F16 or BF16.
  // The view may be unaligned for its dtype when the file's offsets are.
  absl::StatusOr<Tensor> GetTensor(std::string_view name) const;
  // The bytes of `e` (an entry of this file), whatever its dtype: e.end - e.begin bytes,
  // aligned only as the file's offsets are.
  const uint8_t* DataOf(const SafetensorsEntry& e) const { return base_ + data_offset_ + e.begin; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseHeader();

  std::string path_;
  const uint8_t* base_ = nullptr;  // the mapping, size_ bytes
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;  // index into entries_
  std::map<std::string, std::string, std::less<>> metadata_;
};

}  // namespace ptxserve
