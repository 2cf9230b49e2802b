// The safetensors files of a Hugging Face model directory and where each tensor lives.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensor_source.h"

namespace ptxserve {

// Reads a whole (small) text file such as config.json. NotFound when it does not exist.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

class WeightFiles final : public TensorSource {
 public:
  // Opens dir/model.safetensors, or else every shard named by the "weight_map" of
  // dir/model.safetensors.index.json (each shard mapped once). Checks that every tensor
  // the index names exists in its shard. Errors name the index, the shard and the tensor.
  static absl::StatusOr<WeightFiles> Open(const std::string& dir);

  // Tensor `name`: from the index's shard (or the single file), else through a
  // "__metadata__" alias {removed name: kept name}, which is how safetensors records
  // tied weights saved once. NotFound names the tensor and where it was looked for;
  // Unimplemented for a dtype other than F32/F16/BF16. tensor.name is the stored name.
  absl::StatusOr<Tensor> Get(std::string_view name) const override;
  // Tensor `name` as stored, for the dtypes Get refuses (quantized checkpoints' "I32" and
  // "F8_E4M3"): its header entry and its bytes. NotFound as Get.
  struct Stored {
    const SafetensorsEntry* entry;
    const uint8_t* data;
  };
  absl::StatusOr<Stored> GetStored(std::string_view name) const;
  // Whether Get(name) would find a tensor (whatever its dtype).
  bool Contains(std::string_view name) const override;
  // Safetensors files use the Hugging Face names themselves.
  std::string StoredName(std::string_view name) const override { return std::string(name); }
  // The path of the file holding tensor `name` (after aliases), or source() when absent.
  const std::string& PathOf(std::string_view name) const override;

  // The file a tensor is reported against in errors: the single file, or the index.
  const std::string& source() const override { return source_; }
  // Transfers the mappings (Tensor views stay valid while they live); Get and Contains
  // must not be called afterwards.
  std::vector<std::unique_ptr<SafetensorsFile>> TakeFiles() { return std::move(files_); }

 private:
  // The file and stored name for `name`, or {nullptr, ""}.
  std::pair<const SafetensorsFile*, std::string> Locate(std::string_view name) const;

  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // From the index: tensor name -> file; empty for a single-file model.
  std::map<std::string, const SafetensorsFile*, std::less<>> weight_map_;
};

}  // namespace ptxserve
