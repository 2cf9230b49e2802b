// CUDA graphs of decode steps (the design is in gpu_backend.h): padding a decode batch to
// its bucket, the key a graph is held under, capture after a key's eager runs, replay,
// least-recently-used eviction, and dropping every graph when a buffer it holds moved.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/step_buffers.h"
#include "engine/cuda/step_metadata.h"
#include "engine/step_batch.h"

namespace ptxserve::cuda {

// CUDA graph counters (GpuBackend::graph_stats).
struct GraphStats {
  int64_t captures = 0;  // graphs captured and instantiated
  int64_t replays = 0;   // steps run as a graph launch
  int64_t live = 0;      // graphs held now
  int64_t dropped = 0;   // graphs destroyed: stale after a buffer grew, or over the limit
};

// The batch a decode step of `seqs` sequences runs as under CUDA graphs: 1, 2, 4, 8 (the
// GEMV tile sizes: padding within a tile costs no extra weight reads), then the next
// multiple of 8 (vLLM's capture sizes; at most 7 padding rows, each a few kernel threads
// and one wasted GEMM row); 0 when that exceeds `max_batch` (no graph).
int64_t CudaGraphBucket(int64_t seqs, int32_t max_batch);

struct DecodeGraphOptions {
  int32_t max_batch = 256;  // larger steps run launch by launch
  int32_t limit = 64;       // graphs held at most
  int32_t eager_runs = 1;   // launch-by-launch steps of a key before its capture
  // > 0: the attention partition is fixed (GpuBackendOptions::attention_partition) and
  // graph steps keep it.
  int32_t fixed_partition = 0;
};

class DecodeGraphs {
 public:
  // A step's forward pass, launch by launch (captured when a graph is being made).
  using Forward = absl::FunctionRef<absl::Status(const DeviceStep&)>;

  DecodeGraphs(Device* device, KernelCache* cache, DecodeGraphOptions options, int32_t block_size)
      : device_(device), cache_(cache), options_(options), block_size_(block_size) {}

  // For a decode-only step graphs cover: the padded batch to upload instead of `batch`,
  // with step->graph set; else `batch`.
  const StepBatch& Pad(const StepBatch& batch, DeviceStep* step);
  // For graph steps: the split partition rounded to a power of two of blocks.
  void RoundPartition(DeviceStep* step) const;
  // `forward` for `step`: as a graph launch for graph steps (captured on first use), else
  // launch by launch. Afterwards step->rows is the caller's row count (the first rows of
  // the logits buffer).
  absl::Status Run(DeviceStep* step, const StepBuffers& buffers, Forward forward);
  // Any thread.
  GraphStats stats() const;

 private:
  struct Key {
    int64_t rows = 0;        // the bucket: tokens = sequences = logits rows
    int64_t max_blocks = 0;  // block-table stride
    bool split = false;
    int num_splits = 1, partition = 0;
    static Key Of(const DeviceStep& s) {
      return {s.tokens, s.max_blocks, s.split, s.num_splits, s.partition};
    }
    bool operator<(const Key& o) const {
      return std::tie(rows, max_blocks, split, num_splits, partition) <
             std::tie(o.rows, o.max_blocks, o.split, o.num_splits, o.partition);
    }
  };
  struct Entry {
    GraphExec exec;
    LaunchTally tally;  // what one replay launches, for the kernel-cache counters
    std::string name;   // for errors: "decode graph of 8 rows, 45 kernels"
    uint64_t last_used = 0;
  };
  using Addresses = std::array<CUdeviceptr, StepBuffers::kForwardBuffers>;

  absl::Status RunGraph(const DeviceStep& step, const StepBuffers& buffers, Forward forward);
  // Captures `step`'s forward pass into a graph held under its key.
  absl::Status Capture(const DeviceStep& step, Forward forward);
  void DropAll();

  Device* device_;
  KernelCache* cache_;
  DecodeGraphOptions options_;
  int32_t block_size_;
  std::map<Key, Entry> by_key_;
  std::map<Key, int32_t> eager_runs_;  // launch-by-launch steps run per key before capture
  Addresses addresses_{};              // the buffers the graphs in by_key_ were captured with
  uint64_t clock_ = 0;                 // step counter for least-recently-used eviction
  bool disabled_ = false;              // a capture failed: launch by launch from then on
  StepBatch padded_;                   // scratch: the padded batch of the current step
  std::atomic<int64_t> captures_{0}, replays_{0}, live_{0}, dropped_{0};
};

}  // namespace ptxserve::cuda
