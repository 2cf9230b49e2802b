// RMSNorm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, one CTA per row.
//
// Contract (device pointers, row-major); parameters in this order:
//   x       f32 [num_rows][dim]
//   w       weight_dtype [dim]
//   out     f32 [num_rows][dim]; may alias x (each thread reads its elements before
//           the reduction and writes them after)
//   num_rows u32, eps f32
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kRmsNormEntry[] = "rmsnorm";

struct RmsNormConfig {
  int dim = 4096;
  ElemType weight_dtype = ElemType::kF32;
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateRmsNorm(const RmsNormConfig& cfg);
// One CTA per row; a single warp when the row is short, up to 8 warps.
LaunchDims RmsNormLaunch(const RmsNormConfig& cfg, int64_t num_rows);

}  // namespace ptxserve::kernels
