// The forward pass's ops (engine/model/forward.h) as kernel launches from the backend's
// kernel set: each op only enqueues, so a whole RunForward can be captured into a CUDA
// graph (decode_graphs.h).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/kernel_set.h"
#include "engine/cuda/kv_pools.h"
#include "engine/cuda/step_buffers.h"
#include "engine/cuda/step_metadata.h"
#include "engine/model/forward.h"

namespace ptxserve::cuda {

class DeviceForwardOps final : public ForwardOps {
 public:
  DeviceForwardOps(const ModelConfig& config, KernelSet& kernels, KernelCache& cache,
                   const DeviceWeights& weights, const KvPools& kv, const StepBuffers& buffers,
                   const DeviceStep& step)
      : config_(config),
        kernels_(kernels),
        cache_(cache),
        weights_(weights),
        kv_(kv),
        buffers_(buffers),
        step_(step) {}

  absl::Status Embed() override;
  // Where the GEMM that reads the norm's output fuses it (KernelSet::qkv_norm, gate_up_norm,
  // lm_head_norm at the step's GEMM form), nothing is enqueued here: that GEMM, the next
  // Linear over `out`, normalises `in`'s rows itself. Else one rmsnorm launch.
  absl::Status RmsNorm(Act in, WeightRef weight, Act out) override;
  // q, k and v as one GEMM over the stacked matrix (their rows land in StepBuffers::qkv);
  // gate and up as one where the kernel set fuses them (KernelSet::fused_gate_up), whose
  // tensor-core forms write kMlp = silu(gate) * up directly (GemmConfig::swiglu). The residual
  // adds are the GEMMs' fused epilogue (GemmConfig::accumulate).
  absl::Status Linear(Act in, std::initializer_list<Projection> projections) override;
  // One rope_kv launch: q rotated from the qkv rows into kQ, k rotated and v into the pools.
  absl::Status RopeAndWriteKv(int layer) override;
  // Flash attention for a ragged step when the kernel set has it; else decode or ragged
  // attention by the step's plan, split and merged when it says so.
  absl::Status Attention(int layer) override;
  // Nothing when the step's gate/up GEMM applied SwiGLU itself; else the silu_mul kernel.
  absl::Status SiluMul() override;
  absl::Status GatherRows() override;

 private:
  int64_t Rows(Act a) const;
  CUdeviceptr Buffer(Act a) const;
  absl::Status Gemm(GemmSlots& gemm, Act in, CUdeviceptr weight, CUdeviceptr bias, CUdeviceptr out,
                    bool accumulate);
  // The GEMM of a Linear over `in` (a product of the stacked matrices): with the norm left
  // pending by RmsNorm fused when there is one, else Gemm.
  absl::Status NormedGemm(GemmSlots& gemm, GemmSlots& fused, Act in, CUdeviceptr weight,
                          CUdeviceptr bias, CUdeviceptr out);

  // An RMSNorm left to the GEMM after it: its output's name, input rows and weight.
  struct PendingNorm {
    Act out = Act::kNormed;
    CUdeviceptr in = 0;  // 0: none pending
    CUdeviceptr weight = 0;
  };

  const ModelConfig& config_;
  KernelSet& kernels_;
  KernelCache& cache_;
  const DeviceWeights& weights_;
  const KvPools& kv_;
  const StepBuffers& buffers_;
  const DeviceStep& step_;
  PendingNorm pending_;
};

}  // namespace ptxserve::cuda
