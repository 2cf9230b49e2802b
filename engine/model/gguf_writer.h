// Writes GGUF version 3 files (the format engine/model/gguf.h reads): metadata in the
// order it was set, tensor infos in the order they were added, each tensor's data
// aligned to 32 bytes (general.alignment is left at its default).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/gguf.h"

namespace ptxserve {

class GgufWriter {
 public:
  static constexpr uint64_t kAlignment = 32;

  // Sets `key`; setting a key again replaces its value in place.
  void Set(const std::string& key, GgufValue value);
  // Removes `key` if set.
  void Remove(const std::string& key);
  // Adds a tensor with GGUF dimensions `ne` (ne[0] fastest) of GGML type `ggml_type`;
  // `data` must hold exactly the bytes those imply. Adding a name again replaces it.
  void AddTensor(std::string name, uint32_t ggml_type, std::vector<uint64_t> ne,
                 std::vector<uint8_t> data);

  // The whole file as bytes. InvalidArgument when a tensor's data size does not match
  // its type and dimensions, or a type id is unknown.
  absl::StatusOr<std::string> Serialize() const;
  // Serializes and writes to `path` (through a temporary sibling renamed into place, so
  // a failed write leaves no partial file). Errors name the path.
  absl::Status Write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ptxserve
