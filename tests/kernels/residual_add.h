// Residual add, x[i] += y[i]: a test kernel. The model never launches it (the o and down
// GEMMs add the residual as they store), but the driver and kernel cache tests want a
// small kernel with a plain contract, and the emulator tests check it against the CPU.
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

namespace ptxserve::kernels::testing {

inline constexpr char kResidualAddEntry[] = "residual_add";

struct ResidualAddConfig : KernelConfig<ResidualAddConfig, kResidualAddEntry> {
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple();
};

absl::StatusOr<std::string> GenerateResidualAdd(const ResidualAddConfig& cfg);
// 256 threads per CTA, 4 elements per thread.
LaunchDims ResidualAddLaunch(const ResidualAddConfig& cfg, int64_t n);

}  // namespace ptxserve::kernels::testing
