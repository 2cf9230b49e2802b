// Internal to the GPU backend's .cc files: the device-resident state behind GpuBackend.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/kernel_set.h"
#include "kernels/logprobs.h"

namespace ptxserve::cuda {

struct GpuBackend::Weights {
  struct Layer {
    DeviceBuffer attn_norm, mlp_norm;  // f32 [hidden]
    DeviceBuffer wq, wk, wv;           // [heads * dp][hidden] (padded rows)
    DeviceBuffer bq, bk, bv;           // f32, with attention_bias only
    DeviceBuffer wo;                   // [hidden][heads * dp] (padded cols)
    DeviceBuffer w_gate_up;            // [2 * inter][hidden]: gate, then up
    DeviceBuffer w_down;               // [hidden][inter]
    DeviceBuffer k_pool, v_pool;       // kv dtype [blocks][kvh][bs][dp]
  };
  DeviceBuffer embed;       // [vocab][hidden] in its file dtype
  DeviceBuffer final_norm;  // f32 [hidden]
  DeviceBuffer lm_head;     // empty when tied to embed
  DeviceBuffer inv_freq;    // f32 [dp / 2], padded pairs 0
  std::vector<Layer> layers;
  WeightTypes types;  // element types by role (layer 0's file dtype; others converted to it)

  CUdeviceptr lm_head_ptr() const { return lm_head.size() > 0 ? lm_head.ptr() : embed.ptr(); }
};

// Preallocated per-step buffers; capacities grow, never shrink.
struct GpuBackend::Buffers {
  int64_t tokens = 0;  // token rows of the activation buffers
  int64_t rows = 0;    // logits rows
  size_t meta_bytes = 0;
  int64_t split_elems = 0;  // floats of `partial`
  DeviceBuffer x;           // f32 [tokens][hidden] residual stream
  DeviceBuffer h;           // f32 [tokens][hidden] normed input
  DeviceBuffer q;           // f32 [tokens][heads][dp]
  DeviceBuffer k, v;        // f32 [tokens][kv_heads][dp]
  DeviceBuffer attn;        // f32 [tokens][heads][dp]
  DeviceBuffer gate_up;     // f32 [tokens][2 * inter] (fused) / gate then up arrays
  DeviceBuffer act;         // f32 [tokens][inter]
  DeviceBuffer hr;          // f32 [rows][hidden] gathered logits rows
  DeviceBuffer logits;      // f32 [rows][vocab]
  DeviceBuffer ids;         // s32 [rows]
  DeviceBuffer records;     // log-prob records [rows][kLogprobsRecordBytes]
  DeviceBuffer penalized;   // f32 [rows][vocab]: penalised logits (StepSampled)
  DeviceBuffer partial;     // f32 split attention partials
  DeviceBuffer lse;         // f32 split log-sum-exps
  DeviceBuffer meta;        // the packed StepBatch
  PinnedBuffer meta_host;
  PinnedBuffer out_host;  // logits, ids or log-prob records coming back
};

// Bytes of a log-prob record: the row's id and log-prob, then kLogprobsTop entries.
inline constexpr int64_t kLogprobsRecordBytes =
    (1 + kLogprobsTop) * static_cast<int64_t>(sizeof(kernels::LogprobsEntry));

// What one step runs with: sizes, the attention mode and device pointers into the
// uploaded metadata.
struct GpuBackend::StepPlan {
  int64_t tokens = 0, seqs = 0, rows = 0, max_blocks = 0;
  bool ragged = false;  // not every sequence decodes exactly one token
  bool split = false;
  int num_splits = 1;
  int partition = 0;
  bool sample = false;     // StepSampled
  bool greedy = true;      // every sampled row greedy (argmax kernel)
  bool logprobs = false;   // some sampled row wants log-probs (logprobs kernel)
  bool penalties = false;  // some sampled row has penalty entries (penalties kernel)
  bool graph = false;      // a padded decode step run as a CUDA graph (gpu_graphs.cc)
  int64_t real_rows = 0;   // graph steps: the caller's rows, the first of `rows`
  CUdeviceptr token_ids = 0, positions = 0, slots = 0, query_start = 0, seq_lens = 0,
              block_tables = 0, logits_rows = 0;
  CUdeviceptr top_n = 0, temperature = 0, top_k = 0, top_p = 0, min_p = 0, uniform = 0;
  CUdeviceptr repetition = 0, presence = 0, frequency = 0, pen_offsets = 0, pen_entries = 0;
};

// The CUDA graphs of decode steps (gpu_graphs.cc), keyed by the kernel parameters that
// vary between decode steps (see gpu_backend.h).
struct GpuBackend::Graphs {
  struct Key {
    int64_t rows = 0;        // the bucket: tokens = sequences = logits rows
    int64_t max_blocks = 0;  // block-table stride
    bool split = false;
    int num_splits = 1, partition = 0;
    static Key Of(const StepPlan& p) {
      return {p.tokens, p.max_blocks, p.split, p.num_splits, p.partition};
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
  // Every buffer whose address a graph holds (ForwardGraph lists them).
  static constexpr int kBuffers = 13;
  using Addresses = std::array<CUdeviceptr, kBuffers>;

  std::map<Key, Entry> by_key;
  std::map<Key, int32_t> eager_runs;  // launch-by-launch steps run per key before capture
  Addresses addresses{};              // the buffers the graphs in by_key were captured with
  uint64_t clock = 0;                 // step counter for least-recently-used eviction
  bool disabled = false;              // a capture failed: launch by launch from then on
  StepBatch padded;                   // scratch: the padded batch of the current step
};

// Byte offsets of the packed StepBatch in the metadata buffer (16-byte aligned sections):
// token_ids, positions s32 [T]; slot_mapping s64 [T]; query_start s32 [S + 1];
// seq_lens s32 [S]; block_tables s32 [S * MB]; logits_rows s32 [R]; then the sampling
// rows: top_n s32 (log-probs wanted), temperature f32, top_k s32, top_p f32, min_p f32,
// uniform f64, each [R]; then the penalties: repetition, presence, frequency f32 [R],
// pen_offsets s32 [R + 1] and pen_entries kernels::PenaltyEntryWords [E] (the rows' lists
// one after another, a CSR). The order lets a step upload a prefix: up to logits_rows
// (Step, greedy StepSampled), up to top_n (greedy with log-probs), up to repetition (no
// penalty entries), or everything.
struct MetaLayout {
  size_t token_ids = 0, positions = 0, slots = 0, query_start = 0, seq_lens = 0, block_tables = 0,
         logits_rows = 0, top_n = 0, temperature = 0, top_k = 0, top_p = 0, min_p = 0, uniform = 0;
  size_t repetition = 0, presence = 0, frequency = 0, pen_offsets = 0, pen_entries = 0;
  size_t total = 0;
};
MetaLayout LayoutMeta(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t rows,
                      int64_t penalty_entries = 0);

// Compiles `slot` on first use (a cache miss), then launches it.
absl::Status LaunchSlot(KernelCache& cache, KernelSlot& slot, const kernels::LaunchDims& dims,
                        void** params);
// The same with the kernel's typed arguments (kernels/kernel_params.h), packed in .param
// order.
template <class Args>
absl::Status LaunchSlot(KernelCache& cache, KernelSlot& slot, const kernels::LaunchDims& dims,
                        Args args) {
  auto params = kernels::PackParams(args);
  return LaunchSlot(cache, slot, dims, params.data());
}

}  // namespace ptxserve::cuda
