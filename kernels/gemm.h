// Linear layer: y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) (+ y[m, n] when
// accumulate), f32 accumulation, for M token rows (cpu::Gemm's layout).
//
// Contract (device pointers, row-major, non-aliasing): GemmArgs, in .param order.
//
// Two forms. GEMV (tiled = false), bandwidth-oriented for decode batches: one warp per
// output column n streams w's row once per tile of m_tile rows with 128-bit loads,
// every lane keeping m_tile partial sums that a butterfly reduces at the end; batches
// of M <= m_tile read the weights exactly once. Tiled (tiled = true) for many rows
// (prefill): 64x64 output tiles staged through shared memory (gemm_tiled.cc).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kGemmEntry[] = "gemm";

// The tensor-core form's CTA tile (gemm_mma.cc): bm x bn outputs (bn weight rows); its four
// or eight warps laid out wm x wn x wk, each owning a (bm / wm) x (bn / wn) part and, with
// wk > 1, a 32-wide k slice of every step (k steps of 32 wk); the weights' tiles in `stages`
// shared-memory stages (stages - 1 steps in flight by cp.async).
struct GemmMmaTile {
  int bm = 64, bn = 64;
  int wm = 2, wn = 2, wk = 1;
  int stages = 2;
};
// Wide: 64x64 tiles. Narrow: 16x16 tiles with k split over the warps, so a few rows still
// spread over many CTAs (N / 16). Large: 128x128 tiles of four 64x64 warp tiles, each
// ldmatrix feeding four or eight mma, three stages (prefill).
inline constexpr GemmMmaTile kMmaWideTile{64, 64, 2, 2, 1};
inline constexpr GemmMmaTile kMmaNarrowTile{16, 16, 1, 1, 4};
inline constexpr GemmMmaTile kMmaLargeTile{128, 128, 2, 2, 1, 3};

struct GemmConfig : KernelConfig<GemmConfig, kGemmEntry> {
  int n = 4096;  // output features
  int k = 4096;  // input features
  ElemType weight_dtype = ElemType::kF16;
  // The input rows' type: f32, or the model's f16/bf16 between kernels (the tensor-core form
  // then copies them into shared memory as they are, so there it must be the weights' type).
  ElemType x_dtype = ElemType::kF32;
  // The output's type: f32, or f16/bf16 for a tensor-core form that does not accumulate (the
  // SwiGLU epilogue writing the down projection's input in the model's dtype).
  ElemType y_dtype = ElemType::kF32;
  bool has_bias = false;
  bool accumulate = false;  // y += x w^T (fuses the residual add)
  // GEMV only: the input rows' RMSNorm fused (NormGemmArgs): x is the un-normalised rows.
  bool norm = false;
  int m_tile = 4;      // token rows per CTA, 1..8
  int warps = 4;       // output columns per CTA (one per warp), 1..16
  bool tiled = false;  // the shared-memory tiled form (m_tile and warps unused)
  // The tiled form on tensor cores (gemm_mma.cc: f16/bf16 weights, k a multiple of 8), its
  // CTA tile in the fields after it (GemmMmaTile's); without it, f32 FMA in 64x64 tiles.
  bool tensor_cores = false;
  int tile_m = 64, tile_n = 64, warps_m = 2, warps_n = 2, warps_k = 1, stages = 2;
  // The gate/up projection with SwiGLU in the tensor-core form's epilogue: w is [2][n][k]
  // (gate rows, then up rows) and y[m][j] = silu(x gate_j) * (x up_j), n columns.
  bool swiglu = false;
  // Split-K (tensor-core form, one k slice per warp): the grid's z dimension splits K's steps
  // into split_k slices of equal steps (the last may be shorter), and each slice writes its
  // raw f32 partial sums to y as a workspace [split_k][M][cols] (cols = n, or 2n with swiglu:
  // the gate sums then the up sums of a row); a gemm_reduce launch (gemm_reduce.h) adds the
  // slices in order and applies the bias, accumulate and SwiGLU epilogues once, storing y in
  // y_dtype (the partial sums stay f32 whatever y_dtype is). For grids short of a wave of CTAs.
  int split_k = 1;
  ptx::Target target;
  int Threads() const {  // per CTA
    if (!tiled) return warps * 32;
    return tensor_cores ? 32 * warps_m * warps_n * warps_k : 256;
  }
  GemmMmaTile MmaTile() const { return {tile_m, tile_n, warps_m, warps_n, warps_k, stages}; }
  // Whether the kernel is a programmatic dependent launch (kernels::GridDependent): the
  // GEMV form on sm_90, which starts with griddepcontrol.launch_dependents (the next
  // kernel's launch overlaps this one) and waits (griddepcontrol.wait) for the previous
  // kernel only after its prologue, which reads parameters and weights and prefetches the
  // first weights into L2; every read of x (and of y when accumulating) follows the wait.
  // Older targets have neither instruction; the tiled forms wait for nothing.
  bool GridDependent() const { return !tiled && !tensor_cores && target.sm >= 90; }
  void SetMmaTile(const GemmMmaTile& t);
  // norm: not tiled. tensor_cores: tiled, f16/bf16 weights, k % 8 == 0, four or eight warps
  // of whole 16x16 blocks, activation tiles a whole number of float4 per thread, the shared
  // memory within an h100's opt-in limit; swiglu: tensor cores, no bias, no accumulate;
  // split_k > 1: tensor cores, one k slice per warp, every slice at least one k step.
  // x_dtype f16/bf16: not norm (which reads the f32 residual), the weights' type on tensor
  // cores; y_dtype f16/bf16: tensor cores, no accumulate, n even (each lane stores whole
  // 4-byte pairs, never a half of a word another warp writes).
  absl::Status CheckAcrossFields() const;
  using C = GemmConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("n", &C::n).Key("n").Range(1, 1 << 24), Field("k", &C::k).Key("k").Range(1, 1 << 20),
      Field("weight_dtype", &C::weight_dtype).Key(""), Field("has_bias", &C::has_bias).Key("bias"),
      Field("accumulate", &C::accumulate).Key("acc"), Field("norm", &C::norm).Key("norm"),
      Field("m_tile", &C::m_tile).Key("mt", &C::tiled).Range(1, 8),
      Field("warps", &C::warps).Key("w", &C::tiled).Range(1, 16),
      Field("tiled", &C::tiled).Key("tiled"), Field("tensor_cores", &C::tensor_cores).Key("tc"),
      Field("tile_m", &C::tile_m).KeyWhen("bm", &C::tensor_cores).Range(16, 256, 16),
      Field("tile_n", &C::tile_n).KeyWhen("bn", &C::tensor_cores).Range(16, 256, 16),
      Field("warps_m", &C::warps_m).KeyWhen("wm", &C::tensor_cores).Range(1, 4),
      Field("warps_n", &C::warps_n).KeyWhen("wn", &C::tensor_cores).Range(1, 4),
      Field("warps_k", &C::warps_k).KeyWhen("wk", &C::tensor_cores).Range(1, 4),
      Field("stages", &C::stages).KeyWhen("st", &C::tensor_cores).Range(2, 4),
      Field("swiglu", &C::swiglu).Key("swiglu"),
      Field("split_k", &C::split_k).KeyUnlessValue("sk", 1).Range(1, 64),
      Field("x_dtype", &C::x_dtype).KeyUnlessF32("x"),
      Field("y_dtype", &C::y_dtype).KeyUnlessF32("y"));
};

struct GemmArgs {
  // x_dtype [M][K]
  DevicePtr x;
  // weight_dtype [N][K] (the Hugging Face linear layout)
  DevicePtr w;
  // f32 [N] (has_bias; unused otherwise, may be 0)
  DevicePtr bias;
  // y_dtype [M][N]; read first when accumulate (fused residual add). Split-K: the f32
  // workspace instead (split_k).
  DevicePtr y;
  // M, the rows
  uint32_t m = 0;
  PTXSERVE_PARAMS(GemmArgs, x, w, bias, y, m);
};

// The GEMV with its input's RMSNorm fused (GemmConfig::norm): the product of
// RMSNorm(x) * norm_w (kernels/rmsnorm.h) with w. Each warp sums its rows' squares while it
// streams them and scales the warp's sums by 1 / sqrt(mean + eps) at the end, with norm_w
// applied to the weights as they load (x * norm_w . w = x . (norm_w * w)): no normalised
// copy of x is written or read, and the rmsnorm launch before the GEMV goes away. Equal to
// rmsnorm then gemm up to f32 rounding order (a relative 1e-6 or so per output, below the
// 2e-5 the op tests hold both to).
struct NormGemmArgs {
  // f32 [M][K]: the rows before their RMSNorm
  DevicePtr x;
  // f32 [K]: the RMSNorm weight
  DevicePtr norm_w;
  // weight_dtype [N][K]
  DevicePtr w;
  // f32 [N] (has_bias; unused otherwise, may be 0)
  DevicePtr bias;
  // f32 [M][N]; read first when accumulate
  DevicePtr y;
  uint32_t m = 0;
  float eps = 0;  // the RMSNorm's epsilon
  PTXSERVE_PARAMS(NormGemmArgs, x, norm_w, w, bias, y, m, eps);
};

absl::StatusOr<std::string> GenerateGemm(const GemmConfig& cfg);
// GEMV: grid (ceil(N / warps), ceil(M / m_tile)), warps * 32 threads.
// Tiled: grid (ceil(N / 64), ceil(M / 64)), 256 threads; tensor cores: grid
// (ceil(N / tile_n), ceil(M / tile_m), split_k) (tile_n / 2 output columns a CTA with
// swiglu), Threads() threads and GemmMmaSharedBytes(cfg) of dynamic shared memory.
LaunchDims GemmLaunch(const GemmConfig& cfg, int64_t m);
// The tensor-core form's dynamic shared memory per CTA: two stages of the activation tile
// (or the warps' partial sums when k is split over them) and `stages` of the weights'.
int GemmMmaSharedBytes(const GemmConfig& cfg);
// The form for batches of up to `m` rows on a device of `sm_count` SMs: `base` with its
// form fields set. Rules fitted to the cost model's estimates (gemm_mma_test prints them at
// the Llama-3.2-1B shapes on h100, 16 to 2048 rows, and holds each pick to within 1.35x of
// the cheapest form there); the rules count CTAs per SM:
//  - up to 8 rows: GEMV with m_tile = m, which streams the weights once;
//  - while GEMV 8-row tiles give at most 16 CTAs per SM: GEMV with m_tile 8, its row tiles
//    re-reading the weights (from L2 when they fit);
//  - tensor cores when the weights allow (f16/bf16, k % 8 == 0): the largest of 128x256
//    (eight warps) from 3.5 CTAs per SM, 128x128, 64x128 and 64x64 from 1.9, each when the
//    batch has at least its rows (the larger the
//    warp part, the fewer shared-memory wavefronts and instructions per mma, what bounds
//    many rows);
//    else 16x16 tiles with k over the warps while they give at most 8 CTAs per SM, else
//    16x64, else 32x64 (for few rows the chain of k steps, not the tile's arithmetic, is
//    what costs);
//  - else the f32 FMA tiled form.
GemmConfig GemmConfigFor(GemmConfig base, int64_t m, int sm_count);
namespace gen {
// The parameters of GemmArgs, the bias pointer a plain .u64 when cfg has no bias.
ParamRegs<GemmArgs> DeclareGemmParams(KernelBuilder& kb, const GemmConfig& cfg);
// A GEMV's parameters (qgemm's too): GemmArgs, or NormGemmArgs with the input's RMSNorm
// fused (norm_w and eps stay unset registers without it); the bias pointer a plain .u64
// without a bias.
struct GemvParams {
  ptx::Reg x, norm_w, w, bias, y, m_rows, eps;
};
GemvParams DeclareGemvParams(KernelBuilder& kb, bool norm, bool has_bias);
// Write the tiled forms into GenerateGemm's builder and return their header notes: f32 FMA
// (gemm_tiled.cc) and tensor cores (gemm_mma.cc; f32 activations rounded to the weights' type).
std::string GemmTiled(KernelBuilder& kb, const GemmConfig& cfg);
std::string GemmMma(KernelBuilder& kb, const GemmConfig& cfg);
}  // namespace gen

}  // namespace ptxserve::kernels
