// The seam between the engine and a device: one forward step over a ragged batch.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/step_batch.h"

namespace ptxserve {

struct KvCacheConfig {
  int32_t num_blocks = 256;
  int32_t block_size = 16;
  DType dtype = DType::kF32;  // element type of the K/V pools
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Runs the forward pass for `batch`: writes every token's K/V rows into the paged
  // cache at its slot, attends over each sequence's blocks, and fills `logits` with
  // [batch.logits_rows.size() x vocab] floats (row-major, in logits_rows order).
  virtual absl::Status Step(const StepBatch& batch, std::vector<float>* logits) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheConfig& kv_config() const = 0;
  // "cpu", "cuda", "emulated".
  virtual std::string name() const = 0;
};

}  // namespace ptxserve
