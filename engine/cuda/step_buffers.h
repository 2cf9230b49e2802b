// The device buffers a step runs in, preallocated at Create and grown (never shrunk) when
// a step needs more. A buffer that grows moves, which makes captured graphs stale
// (decode_graphs.h compares addresses()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_set.h"
#include "engine/model/config.h"
#include "kernels/logprobs.h"

namespace ptxserve::cuda {

// Bytes of a log-prob record: the row's id and log-prob, then kLogprobsTop entries.
inline constexpr int64_t kLogprobsRecordBytes =
    (1 + kLogprobsTop) * static_cast<int64_t>(sizeof(kernels::LogprobsEntry));

class StepBuffers {
 public:
  StepBuffers(Device* device, const ModelConfig& config, int64_t padded_head_dim)
      : device_(device), config_(config), head_dim_(padded_head_dim) {}

  // Grows the activations to `tokens` rows, the logits side to `rows` and the metadata
  // to `meta_bytes` (by half again at least, so growth is rare).
  absl::Status Reserve(int64_t tokens, int64_t rows, size_t meta_bytes);
  // Grows the split-attention partials to `rows` x `splits`, and the split counters (zeroed
  // when allocated; every split launch leaves them zero) to `rows`.
  absl::Status ReserveSplits(int64_t rows, int64_t splits);
  // Grows the split-K GEMMs' workspace to `floats` (KernelSet::GemmWorkspaceFloats).
  absl::Status ReserveGemmWorkspace(int64_t floats);

  // Where the unfused up projection starts in gate_up for `tokens` rows: after the gate
  // rows, on a 256-byte boundary (silu_mul reads 128-bit vectors).
  CUdeviceptr up(int64_t tokens) const {
    return gate_up.ptr() +
           static_cast<CUdeviceptr>((tokens * config_.intermediate_size * 4 + 255) / 256 * 256);
  }

  // Every buffer a forward pass's kernels take the address of.
  static constexpr int kForwardBuffers = 14;
  std::array<CUdeviceptr, kForwardBuffers> forward_addresses() const {
    return {x.ptr(),          h.ptr(),       qkv.ptr(), q.ptr(),
            attn.ptr(),       gate_up.ptr(), act.ptr(), rows_in.ptr(),
            logits.ptr(),     partial.ptr(), lse.ptr(), split_counters.ptr(),
            gemm_split.ptr(), meta.ptr()};
  }

  DeviceBuffer x;  // f32 [tokens][hidden] residual stream
  // h, attn and act: f32, or KernelSet::act_dtype when the step's reading GEMM form runs on
  // tensor cores (sized for f32 either way).
  DeviceBuffer h;          // f32 [tokens][hidden] normed input
  DeviceBuffer qkv;        // f32 [tokens][(heads + 2 kv_heads) * padded]: q, k, v heads
  DeviceBuffer q;          // f32 [tokens][heads][padded] rotated (K/V go to the pools)
  DeviceBuffer attn;       // f32 [tokens][heads][padded]
  DeviceBuffer gate_up;    // f32 [tokens][2 * inter] (fused) / gate then up arrays
  DeviceBuffer act;        // f32 [tokens][inter]
  DeviceBuffer rows_in;    // f32 [rows][hidden] the residual rows that become logits
  DeviceBuffer logits;     // f32 [rows][vocab]
  DeviceBuffer ids;        // s32 [rows]
  DeviceBuffer records;    // log-prob records [rows][kLogprobsRecordBytes]
  DeviceBuffer penalized;  // f32 [rows][vocab]: penalised logits (StepSampled)
  DeviceBuffer partial;    // f32 split attention partials
  DeviceBuffer lse;        // f32 split log-sum-exps
  // u32 [rows][num_heads]: split CTAs done per (row, KV head chunk), a chunk at most a head
  DeviceBuffer split_counters;
  DeviceBuffer gemm_split;  // f32 split-K GEMM partial sums (GemmConfig::split_k)
  DeviceBuffer meta;        // the packed StepBatch (step_metadata.h)
  PinnedBuffer meta_host;
  PinnedBuffer out_host;  // logits, ids or log-prob records coming back

 private:
  Device* device_;
  const ModelConfig& config_;
  int64_t head_dim_;
  int64_t tokens_ = 0;  // token rows of the activation buffers
  int64_t rows_ = 0;    // logits rows
  size_t meta_bytes_ = 0;
  int64_t split_elems_ = 0;  // floats of `partial`
  int64_t split_rows_ = 0;   // rows of `split_counters`
  int64_t gemm_split_floats_ = 0;
};

}  // namespace ptxserve::cuda
