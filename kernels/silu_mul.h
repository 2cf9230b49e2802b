// SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).
//
// Contract (device pointers, row-major): SiluMulArgs, in .param order.
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

inline constexpr char kSiluMulEntry[] = "silu_mul";

struct SiluMulConfig : KernelConfig<SiluMulConfig, kSiluMulEntry> {
  int fused_inter = 0;  // 0: separate gate/up arrays; I > 0 (a multiple of 4): gate_up rows of 2*I
  // The output's type: f32, or the model's f16/bf16 (the down projection's input).
  ElemType out_dtype = ElemType::kF32;
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple(
      Field("fused_inter", &SiluMulConfig::fused_inter).Key("fused").Range(0, 1 << 24, 4),
      Field("out_dtype", &SiluMulConfig::out_dtype).KeyUnlessF32("out"));
};

struct SiluMulArgs {
  // f32 [n] (fused_inter = 0); f32 [n / I][2][I] (fused_inter = I > 0: a fused gate/up GEMM output,
  // row r's gate then up halves)
  DevicePtr gate;
  // f32 [n] (fused_inter = 0; unused otherwise, may be 0)
  DevicePtr up;
  // out_dtype [n] (row-major [n / I][I] when fused); may alias gate when f32 and not fused
  DevicePtr out;
  // number of outputs
  uint32_t n = 0;
  PTXSERVE_PARAMS(SiluMulArgs, gate, up, out, n);
};

absl::StatusOr<std::string> GenerateSiluMul(const SiluMulConfig& cfg);
// 256 threads per CTA, 4 outputs per thread.
LaunchDims SiluMulLaunch(const SiluMulConfig& cfg, int64_t n);

}  // namespace ptxserve::kernels
