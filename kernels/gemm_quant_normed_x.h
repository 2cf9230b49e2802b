// The quantized GEMV's CTA-wide staging of normed x (gemm_quant.cc, with the fused RMSNorm):
// where the CTA's rows of x times norm_w fit in shared memory, the CTA stages them once and
// every warp reads its lanes' units from there, where the warps would each scale and square
// every element of x themselves (on a GEMV of a 4-bit format that is a fifth of a warp's
// instructions). The GEMV emits these parts where its loop needs them: the PTX is one
// sequence, the same as from one function.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemm_quant.h"
#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

class NormedX {
 public:
  // Whether cfg's tile stages its rows: cfg.norm, and mt * K * 4 bytes within the budget
  // (K 4096 at one row); larger tiles scale x in each warp as they load it.
  static bool Fits(const QuantGemmConfig& cfg);

  // Declares the rows' shared array and the addresses of the lane's 16-byte chunks of its
  // first unit: unit `lane` of the row, or of slice `slice` of `nu` units (cfg.split > 1).
  NormedX(KernelBuilder& kb, const QuantGemmConfig& cfg, Reg lane, Reg slice, int64_t nu);

  // Stores x[m] * norm_w for the CTA's rows m0.. (rows past M as the last row) and returns
  // each row's sum of squares of x, the CTA's total, in every thread. Every thread of the
  // CTA runs it (it ends in bar.sync).
  std::vector<Reg> Stage(KernelBuilder& kb, const GemvParams& p, Reg m0, Reg last_row, Reg tid,
                         Reg lane, Reg warp) const;

  // The lane's unit of row m, `off` bytes past the step's first: 32 f32.
  std::vector<Reg> Load(KernelBuilder& kb, int m, int64_t off) const;

  // Moves the lane's chunks on by `bytes` of a row (the next step).
  void Advance(KernelBuilder& kb, int64_t bytes);

 private:
  QuantGemmConfig cfg_;
  ptx::Symbol xs_;
  std::vector<Reg> chunk_;  // the lane's chunk i of its unit, in row 0
};

}  // namespace ptxserve::kernels::gen
