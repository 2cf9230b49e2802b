// RMSNorm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, one CTA per row.
//
// Contract (device pointers, row-major): RmsNormArgs.
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

inline constexpr char kRmsNormEntry[] = "rmsnorm";

struct RmsNormConfig : KernelConfig<RmsNormConfig, kRmsNormEntry> {
  int dim = 4096;
  ElemType weight_dtype = ElemType::kF32;
  // The output's type: f32, or the model's f16/bf16 when only GEMMs read it (dim even: each
  // thread stores whole 4-byte pairs, never a half of a word another warp writes).
  ElemType out_dtype = ElemType::kF32;
  absl::Status CheckAcrossFields() const;
  ptx::Target target;
  int Threads() const;  // per CTA
  static constexpr auto kFields =
      std::make_tuple(Field("dim", &RmsNormConfig::dim).Key("dim").Range(1, 65536),
                      Field("weight_dtype", &RmsNormConfig::weight_dtype).Key(""),
                      Field("out_dtype", &RmsNormConfig::out_dtype).KeyUnlessF32("out"));
};

struct RmsNormArgs {
  DevicePtr x;    // f32 [num_rows][dim]
  DevicePtr w;    // weight_dtype [dim]
  DevicePtr out;  // out_dtype [num_rows][dim]; may alias x when f32 (each thread reads its
                  // elements before the reduction and writes them after)
  uint32_t num_rows = 0;
  float eps = 0;
  PTXSERVE_PARAMS(RmsNormArgs, x, w, out, num_rows, eps);
};

absl::StatusOr<std::string> GenerateRmsNorm(const RmsNormConfig& cfg);
// One CTA per row; a single warp when the row is short, up to 8 warps.
inline constexpr auto RmsNormLaunch = &RowLaunchFor<RmsNormConfig>;

}  // namespace ptxserve::kernels
