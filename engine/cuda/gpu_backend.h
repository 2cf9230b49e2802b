// The GPU backend: the whole forward step from the generated kernels (kernels/), through a
// DriverTable (the real driver or the emulated device), with everything resident on the
// device between steps.
//
// Its parts, each in its own header: DeviceWeights (device_weights.h), KvPools
// (kv_pools.h), StepBuffers (step_buffers.h), the KernelSet (kernel_set.h, compiled and
// launched through kernel_launch.h), the step metadata and DeviceStep (step_metadata.h),
// DeviceForwardOps (device_forward_ops.h: the forward pass of engine/model/forward.h as
// launches), DecodeGraphs (decode_graphs.h) and device sampling (device_sampling.h).
// GpuBackend (this file, gpu_backend.cc, gpu_step.cc) builds them and runs the steps.
//
// At Create: weights uploaded once (f32 as-is, f16/bf16 kept in their dtype: the GEMM,
// embedding and norm kernels convert on load), per-layer K/V pools allocated and zeroed,
// activation buffers and the metadata buffers preallocated, every kernel the model's shapes
// can use compiled (GpuBackendOptions::warmup) and its CUfunction resolved.
//
// Per Step: the StepBatch metadata is packed into pinned memory and goes host->device in
// ONE async copy; then the kernels of the forward pass (embedding, per layer rmsnorm (fused
// into the GEMV after it at up to 4 rows), one stacked q/k/v GEMM, rope_kv (RoPE and the K/V cache
// write), decode attention (+ merge when split) or, for prefill and mixed steps, flash attention
// (f16/bf16 caches; else ragged decode attention), o GEMM with the residual fused, rmsnorm, fused
// gate/up GEMM (SwiGLU in its epilogue on tensor cores, else a silu_mul launch), down GEMM with
// the residual fused; then a row gather, final rmsnorm and the LM head); then ONE device->host
// copy and the step's only synchronisation. Step copies back the logits rows (R x vocab x 4
// bytes); StepSampled samples on the device and copies back only the ids (4 x R bytes), or, when
// a row wants log-probs, the logprobs kernel's records instead (R x 168 bytes: each carries the
// row's id, its log-prob and up to 20 top entries; kernels/logprobs.h).
//
// CUDA graphs (GpuBackendOptions::cuda_graphs, decode_graphs.h). A decode-only step (every
// sequence exactly one token, one logits row each, in order) runs as a padded batch of
// CudaGraphBucket(B) sequences whose forward pass (embedding .. LM head: everything
// between the metadata copy and the sampling kernel) is captured into a graph once and
// replayed: one cuGraphLaunch instead of 8 to 11 launches per layer. Sampling (argmax or the
// sampling kernel, after penalties when a row has them, then logprobs when wanted) stays
// plain launches after the graph, on the real rows only; so do the copies. Padding rows are inert:
// token 0 at position 0, slot -1 (rope_kv writes no K/V for it), context 1 over block 0, and their
// logits rows are computed but never copied back, so transfers stay one metadata copy up and R x
// vocab x 4 (Step), 4 x R (StepSampled) or R x 168 (StepSampled with log-probs) bytes down. Every
// row is computed independently and the bucket uses the GEMM form the real batch would (buckets 1,
// 2, 4, 8 are the GEMV tiles), so graph steps give the same bits as launch-by-launch steps (on a
// real GPU the attention plan, chosen by row count, may split differently; see below).
//   What a graph bakes in, and so what keys it: kernel parameters are copied at capture,
// so every buffer address is fixed (a buffer that grows makes every graph stale: they are
// dropped and recaptured) and per-step values (token ids, positions, slots, context
// lengths, block tables) are read from the metadata buffer, never from parameters. The
// parameters that vary are the row count (the bucket), the block-table stride (padded to
// the next power of two of the step's max_blocks_per_seq, so contexts growing by a block
// rarely change it) and the flash-decoding split: graphs are keyed by (bucket, stride,
// split count, partition). With the automatic plan the partition is rounded up to a
// power-of-two number of blocks, trailing partitions staying empty where contexts are
// shorter (the split kernel writes -inf for them and the merge ignores them), so a
// growing context changes the key only at powers of two; a fixed
// GpuBackendOptions::attention_partition is kept as is.
//   A key's graph is captured after cuda_graph_eager_runs launch-by-launch steps of it
// (1 by default), so no kernel is compiled (warm-up off) or loaded onto the device (lazy
// module loading, which drivers before CUDA 12.3 cannot do during a capture) while
// capturing. At most cuda_graph_limit
// are kept (least recently used dropped), and steps larger than cuda_graph_max_batch, or
// any step once a capture has failed, run launch by launch. Replayed kernels count in
// the kernel-cache launch and hit counters exactly as launched ones do.
//
// head_dim that is not a multiple of 32 (the kernels' granularity; e.g. 16 in the
// TinyStories test model) runs padded to the next multiple of 32 (PaddedHeads): q/k/v weight rows
// and o-projection columns are scattered into the padded layout with zeros in between (RoPE's pairs
// stay pairs), the K/V pools hold zero padding, and attention scales by the real 1/sqrt(head_dim),
// so results equal the unpadded model's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/backend_options.h"
#include "engine/cuda/decode_graphs.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/kernel_set.h"
#include "engine/cuda/kv_pools.h"
#include "engine/cuda/step_buffers.h"
#include "engine/cuda/step_metadata.h"
#include "engine/engine_stats.h"
#include "engine/model/model.h"

namespace ptxserve::cuda {

// The options every backend kind takes (BackendOptions: buffer sizes, CUDA graphs on or
// off, K/V memory fraction, emulated profile, compile callback, logging), and the GPU
// backend's own.
struct GpuBackendOptions : BackendOptions {
  // Compile every kernel the model's shapes can use at Create (GEMM forms for every batch
  // size, split and unsplit attention, sampling). false: compile each on first use.
  bool warmup = true;
  // > 0: split attention over contexts longer than this many tokens (rounded up to the
  // block size) and merge (flash-decoding) whatever the device; tests use it to run the
  // split path on short contexts. 0: kernels::PlanDecodeAttention decides.
  int32_t attention_partition = 0;
  // A step with prefill chunks and at least this many decode rows runs the decode rows'
  // attention in the decode kernel, apart from flash attention's launch for the chunks
  // (kernels::kMixedDecodeRows says why there); tests lower it to run that path in small
  // batches.
  int32_t mixed_decode_rows = kernels::kMixedDecodeRows;
  int ptx_version = 78;  // PTX ISA of the generated kernels (x10)
  // With cuda_graphs (see above): steps of more than cuda_graph_max_batch sequences run
  // launch by launch; at most cuda_graph_limit graphs are kept.
  int32_t cuda_graph_max_batch = 256;
  int32_t cuda_graph_limit = 64;
  // Launch-by-launch steps of a key before its graph is captured (at least 1 when warm-up
  // is off). One run loads the key's kernels onto the device first: with lazy module
  // loading (the default since CUDA 12.2) drivers before 12.3 cannot load one during a
  // capture. 0 captures at first use.
  int32_t cuda_graph_eager_runs = 1;
};

class GpuBackend final : public Backend {
 public:
  // Uploads `model` to `device` and prepares everything (see above). Errors name the
  // tensor, the unsupported shape, or the failing driver call; nothing leaks on error.
  // The Model need not outlive the backend.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(const Model& model,
                                                            const KvCacheConfig& kv,
                                                            std::unique_ptr<Device> device,
                                                            GpuBackendOptions options = {});
  ~GpuBackend() override;

  // Backend: validates `batch` (InvalidArgument naming the field), runs the step and
  // returns the logits rows. A driver failure is INTERNAL naming the call and kernel; the
  // backend stays usable for later steps as far as the device allows: after a sticky
  // fault (Device::lost) every step fails at once with that fault, touching no device.
  absl::Status Step(const StepBatch& batch, std::vector<float>* logits) override;
  // The same forward pass, then, when some row has penalty entries, the penalties kernel
  // (a penalised copy of the logits rows that the draw reads), then the sampling kernel
  // (argmax when every row is greedy) on the device, then, when a row wants log-probs (and
  // `logprobs` is not null), the logprobs kernel: only `ids` (4 bytes per row) or the log-prob
  // records (R x 168 bytes, the ids inside) come back, in one copy. rows.size() must equal
  // batch.logits_rows.size().
  absl::Status StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids, std::vector<SampleResult>* logprobs) override;
  using Backend::StepSampled;  // the three-argument form (no log-probs)
  // Rows with at most 20 log-probs (the logprobs kernel's records), in a vocabulary below
  // 2^24, penalties or not (the penalties kernel repeats ApplyPenalties' float operations
  // on RowSampling::penalties, bit for bit): greedy rows by the argmax kernel (lowest id among
  // ties, NaN never), stochastic ones by the sampling kernel, which implements SequenceSampler's
  // canonical algorithm (kernels/sampling.h) bit for bit, so a seed gives the same tokens on either
  // path; log-probs by the logprobs kernel, within 1e-5 of the host's and with the same top ids.
  bool CanSampleOnDevice(const SamplingParams& params) const override;

  const ModelConfig& config() const override { return config_; }
  const KvCacheConfig& kv_config() const override { return kv_; }
  std::string name() const override { return device_->info().emulated ? "emulated" : "cuda"; }
  // False once a sticky fault has lost the device's context.
  bool usable() const override { return !device_->lost(); }

  // Kernel and transfer counters in the engine's shape (EngineStats::kernels). Any thread.
  KernelStats kernel_stats() const override;
  KernelCacheStats cache_stats() const { return kernel_cache_->stats(); }
  TransferStats transfer_stats() const { return device_->transfers(); }
  // CUDA graph counters. Any thread.
  GraphStats graph_stats() const { return graphs_ ? graphs_->stats() : GraphStats{}; }
  const DeviceInfo& device_info() const { return device_->info(); }
  Device& device() { return *device_; }
  // Bytes of weights on the device, and of the K/V pools.
  size_t weight_bytes() const { return weights_.bytes; }
  size_t layer_weight_bytes() const { return weights_.layer_bytes; }  // of them, per layer
  size_t kv_bytes() const { return kv_pools_.bytes; }
  // Bytes the GEMMs read per step whatever the batch (every linear weight + LM head).
  size_t step_weight_bytes() const { return weights_.step_bytes; }
  // head_dim as the device holds it (a multiple of 32).
  int64_t padded_head_dim() const { return heads_.padded; }

 private:
  GpuBackend(const ModelConfig& config, const KvCacheConfig& kv, std::unique_ptr<Device> device,
             GpuBackendOptions options);
  absl::Status Init(const Model& model);
  absl::Status InitKernels();
  // Plans the step's attention, packs its metadata (and, when given, the sampling rows)
  // and enqueues the one copy up.
  absl::Status Upload(const StepBatch& batch, const std::vector<RowSampling>* rows,
                      DeviceStep* step);
  // The forward pass for `step` (RunForward over DeviceForwardOps), as a graph for graph
  // steps. Afterwards step->rows is the caller's row count.
  absl::Status Forward(DeviceStep* step);
  // Waits for the step's copy back; after a failure, drains what was enqueued first (the
  // pinned buffers are refilled by the next step and must not be read by a copy still
  // queued from this one).
  absl::Status Finish(absl::Status enqueued);

  ModelConfig config_;
  KvCacheConfig kv_;
  GpuBackendOptions options_;
  // A mixed step with its decode rows moved last (DecodeRowsLast), reused step to step.
  StepBatch decode_last_;
  PaddedHeads heads_;
  // Declared first so it is destroyed last: everything below lives on it.
  std::unique_ptr<Device> device_;
  std::unique_ptr<KernelCache> kernel_cache_;
  DeviceWeights weights_;
  KvPools kv_pools_;
  std::unique_ptr<StepBuffers> buffers_;
  std::unique_ptr<KernelSet> kernels_;
  std::unique_ptr<DecodeGraphs> graphs_;  // with cuda_graphs only; destroyed first
};

// Opens a device for `kind` ("cuda": libcuda.so.1, device 0; "emulated": the PTX
// emulator with options.emulated_device's profile) and creates a GpuBackend on it. The
// engine's backend factory (engine/backend_factory.h) chooses between backends.
absl::StatusOr<std::unique_ptr<GpuBackend>> CreateGpuBackend(const Model& model,
                                                             const KvCacheConfig& kv,
                                                             absl::string_view kind,
                                                             GpuBackendOptions options = {});

}  // namespace ptxserve::cuda
