// Tensor-core form of the gemm kernel for f16 and bf16 weights (gen::GemmMma). A CTA of
// four or eight warps computes a bm x bn output tile with mma.sync m16n8k16 and f32
// accumulators; the warps are laid out wm x wn x wk (GemmConfig's tile fields): each owns a
// (bm / wm) x (bn / wn) part and, with wk > 1, a k slice of every step, the slices' sums
// added through shared memory at the end in warp order (so the result does not depend on
// timing). A 64x64 warp part reads its fragments with 8 ldmatrix.x4 per k16 for 32 mma: the
// larger the part, the fewer shared-memory wavefronts per mma (what bounds these tiles).
//
// K goes in steps of 32 wk. The weights come by cp.async (16-byte chunks, zero-filled past N
// and K) into `stages` shared stages, stages - 1 steps ahead of the one multiplied; the
// activations come through registers one step ahead into one of two shared stages: f32 ones
// rounded to the weights' type on their way (the one rounding this form adds; gemm_mma_test
// derives its tolerance from it), f16/bf16 ones (x_dtype, the model's type between kernels)
// as they are, four halves a chunk. The output is f32, or with y_dtype f16/bf16 rounded as
// it is stored. Both tiles are read with ldmatrix from rows of (32 wk + 8) halves:
// 80, 144 or 272 bytes, so the eight 16-byte rows of each 8x8 matrix fall in distinct bank
// groups; with one k slice a warp stores rows r, r + 4, r + 2, r + 6 of the activation tile
// (20-word rows: 0, 16, 8 and 24 words apart mod 32), so its stores take the ideal two
// wavefronts. No bank conflicts either way. Rows, columns and k past the matrix are zeros,
// so every warp reaches every barrier and every mma. The tile lives in dynamic shared
// memory (GemmMmaSharedBytes; above 48 KiB the launch raises the function's limit).
//
// SwiGLU (cfg.swiglu): weight rows [2][n][k]. A CTA's bn tile rows are bn / 2 output columns'
// gate and up rows in blocks of 8 (gate j..j+7, then up j..j+7), so every lane's n8 tiles
// 2p and 2p + 1 hold gate and up of the same columns, and the epilogue writes
// silu(gate) * up itself: no gate/up activations in memory, no silu_mul launch.
//
// Split-K (cfg.split_k > 1): CTA z multiplies k steps [z s, min((z + 1) s, steps)) of
// s = ceil(steps / split_k), its loop bounds and each step's kind (full, the k tail, past
// the slice) then in registers, and stores its raw sums to slice z of the workspace y; the
// epilogues are gemm_reduce's.
//
// The generator is in parts (gemm_mma_parts.h): the staging and k loop (gemm_mma_loop.cc)
// and the epilogues (gemm_mma_epilogue.cc), which this file's GemmMma calls in turn.
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"
#include "kernels/gemm_mma_parts.h"
#include "kernels/gemm_mma_source.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

int GemmMmaSharedBytes(const GemmConfig& cfg) {
  const gen::MmaShape sh(cfg.MmaTile());
  return sh.a_bytes + sh.b_bytes;
}

namespace gen {

int GemmMmaSharedBytes(const GemmConfig& cfg, int staging_bytes) {
  const MmaShape sh(cfg.MmaTile());
  return sh.a_bytes + 2 * sh.b_stage_bytes + staging_bytes;
}

std::string GemmMma(KernelBuilder& kb, const GemmConfig& cfg) { return GemmMma(kb, cfg, nullptr); }

std::string GemmMma(KernelBuilder& kb, const GemmConfig& cfg, MmaWeightSource* source) {
  const GemmMmaTile tile = cfg.MmaTile();
  const MmaShape sh(tile);
  const auto [x, w, bias, y, m_rows] = gen::DeclareGemmParams(kb, cfg);
  // [2][bm][row] halves of activations, then [stages][bn][row] halves of weights.
  const Reg a_tile = kb.AddressOf(kb.DynamicShared(16));
  const Reg b_tile = gen::UAdd(kb, a_tile, sh.a_bytes);

  const Reg tid = kb.Special(SReg::kTidX);
  const Reg lane = kb.Special(SReg::kLaneId);
  const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
  // Output columns of this CTA from n0; with swiglu its tile_n weight rows are tile_n / 2
  // gate and tile_n / 2 up rows.
  const int out_cols = cfg.swiglu ? tile.bn / 2 : tile.bn;
  const Reg n0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidX), out_cols});
  const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), tile.bm});
  const MmaCta cta{x, w, bias, y, m_rows, a_tile, b_tile, tid, lane, warp, n0, m0};

  const MmaWarpSums sums = GemmMmaMainLoop(kb, cfg, sh, cta, source);
  GemmMmaEpilogue(kb, cfg, sh, cta, sums);
  kb.Ret();
  return absl::StrCat(
      "tensor cores: ", tile.bm, "x", tile.bn, " CTA tile, warps ", tile.wm, "x", tile.wn, "x",
      tile.wk, " of mma.m16n8k16, k step ", sh.bk, ", ", tile.stages, " weight stages",
      cfg.swiglu ? ", SwiGLU epilogue" : "",
      cfg.split_k > 1 ? absl::StrCat(", split-K over ", cfg.split_k, " slices") : "");
}

}  // namespace gen

}  // namespace ptxserve::kernels
