// The parts of gen::GemmMma (gemm_mma.cc says what the kernel does): the tile's sizes,
// the staging and k loop that leave each warp's f32 sums in registers (gemm_mma_loop.cc),
// and the epilogues that store them (gemm_mma_epilogue.cc). GemmMma declares the
// parameters and the CTA's place, then calls the loop and the epilogue in that order: the
// PTX is emitted in one sequence, so the kernel's text is the same as from one function.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemm_mma_source.h"
#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

// The tile's derived sizes, in elements unless named bytes.
struct MmaShape {
  explicit MmaShape(const GemmMmaTile& t)
      : tile(t),
        threads(32 * t.wm * t.wn * t.wk),
        bk(32 * t.wk),
        row_bytes((bk + 8) * 2),
        warp_rows(t.bm / t.wm),
        warp_cols(t.bn / t.wn),
        a_stage_bytes(t.bm * row_bytes),
        b_stage_bytes(t.bn * row_bytes),
        // With wk > 1 the activation stages hold the warps' partial sums at the end.
        a_bytes(std::max(2 * a_stage_bytes, t.wk > 1 ? t.wk * t.bm * t.bn * 4 : 0)),
        b_bytes(t.stages * b_stage_bytes) {}
  GemmMmaTile tile;
  int threads;
  int bk;         // k per step
  int row_bytes;  // a shared tile row
  int warp_rows, warp_cols;
  int a_stage_bytes, b_stage_bytes;
  int a_bytes, b_bytes;  // the regions: activations (two stages), then weights
};

// The kernel's parameters (GemmArgs) and the CTA's place, set up before the loop.
struct MmaCta {
  Reg x, w, bias, y, m_rows;
  Reg a_tile, b_tile;  // shared: [2][bm][row] halves of activations, then the weight stages
  Reg tid, lane, warp;
  Reg n0, m0;  // the CTA's first output column and row
};

// What the k loop leaves: the warp's place (wk, wm, wn) in the CTA's wm x wn x wk layout,
// and acc[i][j], its m16 tile i and n8 tile j (mma.m16n8k16's four f32 a lane).
struct MmaWarpSums {
  Reg wk, wm, wn;
  std::vector<std::vector<std::vector<Reg>>> acc;
};

// The loaders, the weights' cp.async stages (or `source`'s), the activations' register
// stage and the k loop of ldmatrix and mma.sync over them.
MmaWarpSums GemmMmaMainLoop(KernelBuilder& kb, const GemmConfig& cfg, const MmaShape& sh,
                            const MmaCta& cta, MmaWeightSource* source);
// Stores the sums: split-K's raw partials to the workspace, or each output with its bias,
// residual and SwiGLU, from the registers (wk = 1) or summed over the k slices in shared
// memory.
void GemmMmaEpilogue(KernelBuilder& kb, const GemmConfig& cfg, const MmaShape& sh,
                     const MmaCta& cta, const MmaWarpSums& sums);

}  // namespace ptxserve::kernels::gen
