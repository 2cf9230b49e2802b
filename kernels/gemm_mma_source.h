// A source of gen::GemmMma's weight tiles other than f16/bf16 rows in global memory (which
// GemmMma copies into its shared stages by cp.async itself): the block-quantized weights of
// gemm_quant_mma.cc, staged raw and dequantized to f16 by the threads that staged them.
//
// With a source GemmMma keeps two f16 weight stages (like the activations'), written before
// each step's barrier and read by ldmatrix after it; the source's own staging follows them
// in dynamic shared memory. Per step s GemmMma calls, in order: Decode(s) (after waiting
// for all but the newest stages - 2 cp.async groups, so step s's copies are complete), the
// barrier, Copy(s + stages - 1) (while that step exists), then its commit. A thread decodes
// only bytes it copied itself, so the staging needs no barrier of its own.
#pragma once

#include "kernels/gemm.h"
#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

class MmaWeightSource {
 public:
  virtual ~MmaWeightSource() = default;
  // Dynamic shared bytes of the source's staging.
  virtual int StagingBytes() const = 0;
  // Once, before any copy: `w` is the weights' kernel parameter, `staging` the shared
  // address of the staging region, `n0` the CTA's first weight row.
  virtual void Begin(KernelBuilder& kb, Reg w, Reg staging, Reg n0) = 0;
  // Issue the cp.async copies of k step `t` (32 elements of k a step: the source's configs
  // have one k slice of 32 per step and k a multiple of 32).
  virtual void Copy(KernelBuilder& kb, Reg t) = 0;
  // Write step `t`'s weights as f16 into the tile of bn rows at `tile` (rows of `row_bytes`).
  virtual void Decode(KernelBuilder& kb, Reg t, Reg tile, int row_bytes) = 0;
};

// GemmMma with `source`'s weights (cfg.weight_dtype f16, warps_k 1, split_k 1, k % 32 == 0,
// no swiglu). No split-K: its partial sums would need the engine's workspace and a
// gemm_reduce launch per quantized GEMM, and QuantGemmFormFor picks tiles small enough to
// fill the GPU's waves without it (see gemm_quant.h).
std::string GemmMma(KernelBuilder& kb, const GemmConfig& cfg, MmaWeightSource* source);
// The dynamic shared memory of that form: the activations' two stages, two f16 weight
// stages, then `staging_bytes`.
int GemmMmaSharedBytes(const GemmConfig& cfg, int staging_bytes);
// The opt-in dynamic shared memory per block: 163 KiB on sm_80, 227 KiB on sm_90, 99 KiB on
// sm_86/sm_89 (CUDA C++ Programming Guide, compute capabilities table).
inline int MmaSharedLimitKiB(const ptx::Target& target) {
  return target.sm == 80 ? 163 : target.sm >= 90 ? 227 : 99;
}

}  // namespace ptxserve::kernels::gen
