// Linear layer: y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) (+ y[m, n] when
// accumulate), f32 accumulation, for M token rows (cpu::Gemm's layout).
//
// Contract (device pointers, row-major, non-aliasing); parameters in this order:
//   x     f32 [M][K]
//   w     weight_dtype [N][K]  (the Hugging Face linear layout)
//   bias  f32 [N]  (has_bias; unused otherwise, may be 0)
//   y     f32 [M][N]; read first when accumulate (fused residual add)
//   M     u32
//
// Bandwidth-oriented GEMV form: one warp per output column n streams w's row once per
// tile of m_tile rows with 128-bit loads, every lane keeping m_tile partial sums that a
// butterfly reduces at the end. Decode batches (M <= m_tile) read the weights exactly
// once; larger M re-reads them once per tile (from L2), which is what prefill pays
// until a shared-memory tiled form exists.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kGemmEntry[] = "gemm";

struct GemmConfig {
  int n = 4096;  // output features
  int k = 4096;  // input features
  ElemType weight_dtype = ElemType::kF16;
  bool has_bias = false;
  bool accumulate = false;  // y += x w^T (fuses the residual add)
  int m_tile = 4;           // token rows per CTA, 1..8
  int warps = 4;            // output columns per CTA (one per warp), 1..16
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateGemm(const GemmConfig& cfg);
// Grid (ceil(N / warps), ceil(M / m_tile)).
LaunchDims GemmLaunch(const GemmConfig& cfg, int64_t m);
// The m_tile to generate for batches of up to `m` rows (the launch-time choice).
int GemmMTileFor(int64_t m);

}  // namespace ptxserve::kernels
