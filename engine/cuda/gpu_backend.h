// The GPU backend: the whole forward step from the generated kernels (kernels/), through a
// DriverTable (the real driver or the emulated device), with everything resident on the
// device between steps.
//
// At Create: weights uploaded once (f32 as-is, f16/bf16 kept in their dtype: the GEMM,
// embedding and norm kernels convert on load), per-layer K/V pools allocated and zeroed,
// activation buffers and the metadata buffers preallocated, every kernel the model's shapes
// can use compiled (GpuBackendOptions::warmup) and its CUfunction resolved.
//
// Per Step: the StepBatch metadata is packed into pinned memory and goes host->device in
// ONE async copy; then the kernels of the forward pass (embedding, per layer rmsnorm, q/k/v
// GEMMs, rope, kv_scatter, decode or ragged attention (+ merge when split), o GEMM with the
// residual fused, rmsnorm, fused gate/up GEMM, silu_mul, down GEMM with the residual fused;
// then a row gather, final rmsnorm and the LM head); then ONE device->host copy and the
// step's only synchronisation. Step copies back the logits rows (R x vocab x 4 bytes);
// StepSampled samples on the device and copies back only the ids (4 x R bytes).
//
// head_dim that is not a multiple of 32 (the kernels' granularity; e.g. 16 in the
// TinyStories test model) runs padded to the next multiple of 32: q/k/v weight rows and
// o-projection columns are scattered into the padded layout with zeros in between (RoPE's
// pairs stay pairs), the K/V pools hold zero padding, and attention scales by the real
// 1/sqrt(head_dim), so results equal the unpadded model's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/engine_stats.h"
#include "engine/model/model.h"

namespace ptxserve::cuda {

struct GpuBackendOptions {
  // Compile every kernel the model's shapes can use at Create (GEMM forms for every batch
  // size, split and unsplit attention, sampling). false: compile each on first use.
  bool warmup = true;
  // Token rows and sequences per step the activation and metadata buffers are first sized
  // for; a larger step grows them once (an allocation inside that step).
  int32_t max_tokens = 512;
  int32_t max_seqs = 64;
  // > 0: split attention over contexts longer than this many tokens (rounded up to the
  // block size) and merge (flash-decoding) whatever the device; tests use it to run the
  // split path on short contexts. 0: kernels::PlanDecodeAttention decides.
  int32_t attention_partition = 0;
  int ptx_version = 78;  // PTX ISA of the generated kernels (x10)
  // When KvCacheConfig::num_blocks <= 0: size the K/V pools to this fraction of the device
  // memory free after weights and activations (serve --kv_memory_fraction).
  double kv_memory_fraction = 0.9;
  // Called after each kernel compilation (key, seconds): the compile-seconds histogram.
  std::function<void(absl::string_view key, double seconds)> on_compile;
  bool log_progress = true;  // weight upload and warm-up progress at INFO
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
  // backend stays usable for later steps as far as the device allows.
  absl::Status Step(const StepBatch& batch, std::vector<float>* logits) override;
  // The same forward pass, then the sampling kernel (argmax when every row is greedy) on
  // the device: only `ids` (one per logits row, 4 bytes each) come back. rows.size() must
  // equal batch.logits_rows.size().
  absl::Status StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids) override;
  // Greedy rows without penalties or log-probs: the argmax kernel picks what the host
  // sampler's argmax picks (lowest id among ties, NaN never). Stochastic rows stay on the
  // host: the sampling kernel draws from the same distribution but walks the kept ids in
  // another order, so a seed would give other tokens depending on the path.
  bool CanSampleOnDevice(const SamplingParams& params) const override;

  const ModelConfig& config() const override { return config_; }
  const KvCacheConfig& kv_config() const override { return kv_; }
  std::string name() const override { return device_->info().emulated ? "emulated" : "cuda"; }

  // Kernel and transfer counters in the engine's shape (EngineStats::kernels). Any thread.
  KernelStats kernel_stats() const;
  KernelCacheStats cache_stats() const { return cache_->stats(); }
  TransferStats transfer_stats() const { return device_->transfers(); }
  const DeviceInfo& device_info() const { return device_->info(); }
  Device& device() { return *device_; }
  // Bytes of weights on the device, and of the K/V pools.
  size_t weight_bytes() const { return weight_bytes_; }
  size_t kv_bytes() const { return kv_bytes_; }
  // Bytes the GEMMs read per step whatever the batch (every linear weight + LM head).
  size_t step_weight_bytes() const { return step_weight_bytes_; }
  // head_dim as the device holds it (a multiple of 32).
  int64_t padded_head_dim() const { return dp_; }

 private:
  struct Weights;
  struct Buffers;
  struct Kernels;
  struct StepPlan;

  GpuBackend(const ModelConfig& config, const KvCacheConfig& kv, std::unique_ptr<Device> device,
             GpuBackendOptions options);
  absl::Status Init(const Model& model);
  absl::Status UploadWeights(const Model& model);
  absl::Status AllocateKv();
  // Grows the activation (tokens), logits (rows) and metadata buffers to hold a step.
  absl::Status Reserve(int64_t tokens, int64_t rows, size_t meta_bytes);
  absl::Status ReserveSplits(int64_t rows, int64_t splits);
  absl::Status InitKernels();
  // Packs the metadata (and sampling rows when given) and enqueues its one copy.
  absl::Status Upload(const StepBatch& batch, const std::vector<RowSampling>* rows, StepPlan* plan);
  absl::Status Forward(const StepPlan& plan);
  absl::Status RunLayer(int layer, const StepPlan& plan);

  ModelConfig config_;
  KvCacheConfig kv_;
  GpuBackendOptions options_;
  int64_t dp_ = 0;            // padded head_dim
  std::vector<int64_t> pad_;  // real head dimension j -> its padded index
  size_t weight_bytes_ = 0, kv_bytes_ = 0, step_weight_bytes_ = 0;
  // Declared first so it is destroyed last: everything below lives on it.
  std::unique_ptr<Device> device_;
  std::unique_ptr<KernelCache> cache_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Buffers> buf_;
  std::unique_ptr<Kernels> k_;
};

// Opens a device for `kind` ("cuda": libcuda.so.1, device 0; "emulated": the PTX
// emulator) and creates a GpuBackend on it.
absl::StatusOr<std::unique_ptr<GpuBackend>> CreateGpuBackend(const Model& model,
                                                             const KvCacheConfig& kv,
                                                             absl::string_view kind,
                                                             GpuBackendOptions options = {});

// The server's --backend: "cpu", "cuda", "emulated" or "auto" (cuda when the driver
// loads and the backend comes up on device 0, else cpu). `*note` (may be null) receives,
// for auto, why the CUDA backend was not used (empty when it was). kv.num_blocks <= 0:
// a real GPU sizes the pools from options.kv_memory_fraction of its free memory; cpu and
// emulated (host memory) take DefaultHostKvBlocks(config, kv, options.max_seqs).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view kind, const Model& model,
                                                       const KvCacheConfig& kv,
                                                       GpuBackendOptions options = {},
                                                       std::string* note = nullptr);

}  // namespace ptxserve::cuda
