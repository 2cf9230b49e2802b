// Writes .safetensors files in the layout of the reference implementation: an 8-byte
// little-endian header length, a JSON header (sorted keys, space-padded to a multiple of
// 8 bytes), then the tensors' bytes back to back in the order of their names.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/dtype.h"

namespace ptxserve {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  // Set for an element type outside DType (a quantized checkpoint's "I32" or "F8_E4M3"):
  // the header's dtype, with raw_element_size bytes per element; `dtype` is then unused.
  std::string raw_dtype;
  size_t raw_element_size = 0;
  std::vector<int64_t> shape;
  // The tensor's bytes (little-endian, row-major), used when `fill` is empty.
  std::vector<uint8_t> bytes;
  // When set, called once right before the tensor is written with a buffer of exactly
  // nbytes() bytes to fill, so large files never hold all tensors in memory.
  std::function<absl::Status(std::span<uint8_t>)> fill;

  int64_t numel() const;
  size_t nbytes() const {
    return static_cast<size_t>(numel()) * (raw_dtype.empty() ? DTypeSize(dtype) : raw_element_size);
  }
};

// Builds the JSON header text (without the length prefix and padding) for `tensors`
// laid out in name order; `metadata` becomes "__metadata__" when non-empty.
// InvalidArgument on duplicate or empty names, negative dims, or bytes of the wrong size.
absl::StatusOr<std::string> SafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                              const std::map<std::string, std::string>& metadata);

// Writes `tensors` to `path` (through path + ".tmp", renamed when complete). Tensors are
// written one at a time; a `fill` error aborts the write and is returned with the tensor
// name. Errors name the path and the tensor.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace ptxserve
