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

struct GemmConfig : KernelConfig<GemmConfig, kGemmEntry> {
  int n = 4096;  // output features
  int k = 4096;  // input features
  ElemType weight_dtype = ElemType::kF16;
  bool has_bias = false;
  bool accumulate = false;  // y += x w^T (fuses the residual add)
  int m_tile = 4;           // token rows per CTA, 1..8
  int warps = 4;            // output columns per CTA (one per warp), 1..16
  bool tiled = false;       // the shared-memory tiled form (m_tile and warps unused)
  ptx::Target target;
  int Threads() const { return tiled ? 256 : warps * 32; }  // per CTA
  using C = GemmConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("n", &C::n).Key("n").Range(1, 1 << 24), Field("k", &C::k).Key("k").Range(1, 1 << 20),
      Field("weight_dtype", &C::weight_dtype).Key(""), Field("has_bias", &C::has_bias).Key("bias"),
      Field("accumulate", &C::accumulate).Key("acc"),
      Field("m_tile", &C::m_tile).Key("mt", &C::tiled).Range(1, 8),
      Field("warps", &C::warps).Key("w", &C::tiled).Range(1, 16),
      Field("tiled", &C::tiled).Key("tiled"));
};

struct GemmArgs {
  // f32 [M][K]
  DevicePtr x;
  // weight_dtype [N][K] (the Hugging Face linear layout)
  DevicePtr w;
  // f32 [N] (has_bias; unused otherwise, may be 0)
  DevicePtr bias;
  // f32 [M][N]; read first when accumulate (fused residual add)
  DevicePtr y;
  // M, the rows
  uint32_t m = 0;
  PTXSERVE_PARAMS(GemmArgs, x, w, bias, y, m);
};

absl::StatusOr<std::string> GenerateGemm(const GemmConfig& cfg);
// GEMV: grid (ceil(N / warps), ceil(M / m_tile)), warps * 32 threads.
// Tiled: grid (ceil(N / 64), ceil(M / 64)), 256 threads.
LaunchDims GemmLaunch(const GemmConfig& cfg, int64_t m);
// The form for a batch of `m` rows: `base` with tiled and m_tile set (GEMV with
// m_tile = m up to 8 rows, tiled beyond).
GemmConfig GemmConfigFor(GemmConfig base, int64_t m);
// The tensor-core form's CTA tile (gemm_mma.cc): bm x bn outputs; its four warps laid out
// wm x wn x wk, each owning a (bm / wm) x (bn / wn) part and, with wk > 1, a 32-wide k slice
// of every step (k steps of 32 wk).
struct GemmMmaTile {
  int bm = 64, bn = 64;
  int wm = 2, wn = 2, wk = 1;
};
// Wide: 64x64 tiles for many rows. Narrow: 16x16 tiles with k split over the warps, so a
// few rows still spread over many CTAs (N / 16).
inline constexpr GemmMmaTile kMmaWideTile{64, 64, 2, 2, 1};
inline constexpr GemmMmaTile kMmaNarrowTile{16, 16, 1, 1, 4};
// The tensor-core form for f16/bf16 weights and k a multiple of 8. Activations are rounded
// to the weights' type.
absl::StatusOr<std::string> GenerateGemmMma(const GemmConfig& cfg, const GemmMmaTile& tile);
// Grid (ceil(N / bn), ceil(M / bm)), 128 threads.
LaunchDims GemmMmaLaunch(const GemmMmaTile& tile, const GemmConfig& cfg, int64_t m);

namespace gen {
// The parameters of GemmArgs, the bias pointer a plain .u64 when cfg has no bias.
ParamRegs<GemmArgs> DeclareGemmParams(KernelBuilder& kb, const GemmConfig& cfg);
// Writes the tiled form (gemm_tiled.cc) into GenerateGemm's builder; returns its header note.
std::string GemmTiled(KernelBuilder& kb, const GemmConfig& cfg);
}  // namespace gen

}  // namespace ptxserve::kernels
