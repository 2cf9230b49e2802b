// Residual add: x[i] += y[i].
//
// Contract (device pointers); parameters in this order:
//   x  f32 [n], updated in place
//   y  f32 [n]
//   n  u32
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kResidualAddEntry[] = "residual_add";

struct ResidualAddConfig {
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple();

  absl::Status Validate() const { return target.Validate(); }
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateResidualAdd(const ResidualAddConfig& cfg);
// 256 threads per CTA, 4 elements per thread.
LaunchDims ResidualAddLaunch(const ResidualAddConfig& cfg, int64_t n);

}  // namespace ptxserve::kernels
