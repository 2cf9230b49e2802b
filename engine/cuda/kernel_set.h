// The GPU backend's kernel set: one Config per kernel and shape of a model, with its cache
// spec (key formatted once). It is a pure function of the model's shapes, the element
// types of its weights, the KV cache layout and the target the device runs, so it is
// built without a device or weights: GpuBackend builds its own with BuildKernelSet
// (gpu_backend.cc), and tests/kernels/kernel_manifest lists the same sets, for every
// model and device profile, in tests/golden/kernel_manifest.txt.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/model/config.h"
#include "engine/model/dtype.h"
#include "kernels/kernel_list.h"
#include "kernels/ptx/types.h"

namespace ptxserve::cuda {

kernels::ElemType ToElemType(DType t);

// head_dim as the device holds it: the next multiple of 32, the kernels' granularity
// (gpu_backend.h: smaller or odd heads run zero-padded).
inline int64_t PaddedHeadDim(int64_t head_dim) { return (head_dim + 31) / 32 * 32; }

// The target the kernels are generated for on a device of compute capability
// cc_major.cc_minor: the newest architecture the generator knows that the device runs
// (PTX for it is JIT-compiled forward to newer GPUs), at ISA `ptx_version` (x10).
// Error when the pair does not validate (ptx::Target::Validate).
absl::StatusOr<ptx::Target> KernelTarget(int cc_major, int cc_minor, int ptx_version);

// Element types of the weights by role, as the backend uploads them (device_weights.cc:
// each role in layer 0's file dtype, other layers converted to it; a tied LM head in the
// embedding's). q, k and v are one stacked matrix: their types are equal (BuildKernelSet
// rejects others).
struct WeightTypes {
  kernels::ElemType embed = kernels::ElemType::kF32, lm_head = kernels::ElemType::kF32;
  kernels::ElemType q = kernels::ElemType::kF32, k = kernels::ElemType::kF32;
  kernels::ElemType v = kernels::ElemType::kF32, o = kernels::ElemType::kF32;
  kernels::ElemType gate_up = kernels::ElemType::kF32, down = kernels::ElemType::kF32;

  // Roles uploaded as blocks, as a GGUF stores them or an fp8/AWQ/GPTQ checkpoint loads
  // (kernels/gemm_quant.h, and the embedding gather's kernels/embedding.h); the role's element
  // type above is then unused.
  std::optional<kernels::BlockFormat> embed_blocks, q_blocks, k_blocks, v_blocks, o_blocks,
      gate_up_blocks, down_blocks, lm_head_blocks;

  // Every role in `t`: a model whose tensors share one dtype, as most files do.
  static WeightTypes Uniform(kernels::ElemType t) {
    WeightTypes w;
    w.embed = w.lm_head = w.q = w.k = w.v = w.o = w.gate_up = w.down = t;
    return w;
  }
  // Every matrix in blocks of `f`, as a GGUF of `ptxserve quantize` loads (device_weights.cc),
  // except with `padded_heads` (head_dim not a multiple of 32) the o projection, whose blocks
  // cannot be split per head: it is decoded to f32.
  static WeightTypes Blocks(kernels::BlockFormat f, bool padded_heads) {
    WeightTypes w = Uniform(kernels::ElemType::kF32);
    w.embed_blocks = w.q_blocks = w.k_blocks = w.v_blocks = w.gate_up_blocks = w.down_blocks =
        w.lm_head_blocks = f;
    if (!padded_heads) w.o_blocks = f;
    return w;
  }
};

// Top entries per log-prob record: the most SamplingParams::logprobs allows (20).
inline constexpr int kLogprobsTop = 20;

// A kernel the backend may launch: its cache spec (key formatted once, at Create) and,
// once compiled, the resolved kernel. An empty key marks a slot the model does not use.
struct KernelSlot {
  KernelSpec spec;
  const CompiledKernel* kernel = nullptr;
  bool used() const { return !spec.key.empty(); }
};

// GEMM forms by batch rows: form f serves batches of up to kGemmFormRows[f] rows (the last
// any number), its Config chosen for that many (kernels::GemmConfigFor). 2048 rows (a long
// prefill chunk) fill the waves of larger tiles than 1024 do.
inline constexpr std::array<int64_t, 12> kGemmFormRows = {1,  2,   4,   8,   16,   32,
                                                          64, 128, 256, 512, 1024, 2048};
inline constexpr int kGemmForms = static_cast<int>(kGemmFormRows.size());
// The form for m rows: the first whose rows hold them, else the last.
inline int GemmForm(int64_t m) {
  int f = 0;
  while (f + 1 < kGemmForms && kGemmFormRows[f] < m) ++f;
  return f;
}
struct GemmSlots {
  std::array<kernels::GemmConfig, kGemmForms> cfg;
  // Set for block-quantized weights: the forms are these instead of cfg's.
  std::optional<std::array<kernels::QuantGemmConfig, kGemmForms>> quant;
  std::array<KernelSlot, kGemmForms> slot;
  // A split-K form's second launch (cfg[form].split_k > 1; unused otherwise): the slices'
  // sums from the workspace, with the bias, residual and SwiGLU epilogues.
  std::array<kernels::GemmReduceConfig, kGemmForms> reduce_cfg;
  std::array<KernelSlot, kGemmForms> reduce;

  bool Accumulates(int form) const;
  // Form `form` writes silu(gate) * up itself (the stacked gate/up GEMM's tensor-core forms).
  bool Swiglu(int form) const { return !quant && cfg[form].swiglu; }
  // Form `form` reads its input rows in the model's f16/bf16 (KernelSet::act_dtype).
  bool HalfInput(int form) const { return !quant && cfg[form].x_dtype != kernels::ElemType::kF32; }
  const std::string& Key(int form) const { return slot[form].spec.key; }
  kernels::LaunchDims Launch(int form, int64_t m) const;
  // Bytes of one weight row (k elements or their blocks).
  int64_t RowBytes() const;
  // f32 of split-K workspace that form `form` needs per row (0 unsplit).
  int64_t WorkspaceFloatsPerRow(int form) const;
};

struct KernelSet {
  kernels::EmbeddingConfig embed_cfg, gather_cfg;
  KernelSlot embed, gather;
  // The activations that only GEMMs read (h, attn, act) are in act_dtype where the GEMM form
  // that reads them runs on tensor cores (GemmSlots::HalfInput): the model's f16/bf16 when all
  // of q/k/v, o, gate/up and down hold it as elements, f32 otherwise (f32 weights take the
  // FMA forms; block-quantized GEMMs read f32). The GEMV forms (up to 8 rows, and 8-row tiles)
  // read f32: they convert their input once per output column, which the cost model finds
  // issue-bound (Llama-3.2-1B f16, h100, batch 16: 1425 -> 2017 us a step, estimated), while
  // tensor-core forms copy f16/bf16 rows into shared memory as they are. Each producer has an
  // f32 slot and, with act_dtype f16/bf16, a *_half slot writing act_dtype, picked per step by
  // its consumer's form. The residual stream, qkv/q, logits rows and sampling stay f32.
  kernels::ElemType act_dtype = kernels::ElemType::kF32;
  kernels::RmsNormConfig norm_cfg, norm_half_cfg;
  KernelSlot norm, norm_half;
  // q, k and v as one product over the stacked matrix (DeviceWeights::Layer::wqkv).
  GemmSlots qkv, o, gate_up, gate, up, down, lm_head;
  bool fused_gate_up = true;
  // The GEMMs that read an RMSNorm's output, in their GEMV forms of up to 4 rows with that
  // norm fused (GemmConfig::norm; gate_up_norm only with fused_gate_up). A form whose slot
  // is unused (more rows, tiled, block weights) runs after a separate rmsnorm launch.
  GemmSlots qkv_norm, gate_up_norm, lm_head_norm;
  // RoPE and the K/V cache write in one launch, from the qkv product's rows.
  kernels::RopeKvConfig rope_kv_cfg;
  KernelSlot rope_kv;
  // [ragged][split]; the ragged slots are unused when flash is.
  kernels::DecodeAttentionConfig attn_cfg[2][2];
  kernels::DecodeAttentionShape attn_shape[2][2];
  KernelSlot attn[2][2];
  // Ragged steps (prefill chunks, mixed) on tensor cores: f16/bf16 K/V pools and head_dim
  // (padded) up to 128; unused otherwise (f32 caches keep the ragged decode kernel).
  kernels::FlashAttentionConfig flash_cfg, flash_half_cfg;
  KernelSlot flash, flash_half;
  // The decode kernels writing act_dtype, [ragged][split] (split: the partials stay f32, the
  // merging CTA's store rounds); used where attn[ragged][split] is.
  kernels::DecodeAttentionConfig attn_half_cfg[2][2];
  KernelSlot attn_half[2][2];
  kernels::SiluMulConfig silu_cfg, silu_half_cfg;
  KernelSlot silu, silu_half;
  kernels::ArgmaxConfig argmax_cfg;
  KernelSlot argmax;
  kernels::SamplingConfig sampling_cfg;
  KernelSlot sampling;
  kernels::LogprobsConfig logprobs_cfg;  // max_top = kLogprobsTop
  KernelSlot logprobs;
  kernels::PenaltiesConfig penalties_cfg;
  KernelSlot penalties;

  // f32 of split-K workspace a step of `tokens` rows needs: enough for any of its GEMMs.
  int64_t GemmWorkspaceFloats(int64_t tokens) const;

  // Every used slot: what warm-up compiles. Slots may share a key (q/k/v of equal shape,
  // gate and up); the cache compiles each key once.
  std::vector<KernelSlot*> All();
};

// The kernels for `config`'s shapes (head_dim padded: PaddedHeadDim) with weights of
// `weights`' types, K/V pools of kv.block_size and kv.dtype (kv.num_blocks is not read),
// generated for `target` on a device of `sm_count` SMs (the GEMM forms depend on it).
// Nothing is generated here: each slot's spec generates its PTX
// when the cache compiles it. Error for a shape the attention kernel cannot take.
absl::StatusOr<KernelSet> BuildKernelSet(const ModelConfig& config, const WeightTypes& weights,
                                         const KvCacheConfig& kv, const ptx::Target& target,
                                         int sm_count);

}  // namespace ptxserve::cuda
