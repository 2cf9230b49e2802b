// The second pass of a split-K GEMM (GemmConfig::split_k): y[m][j] = the sum of the k
// slices' partial sums, in slice order (so the result does not depend on timing), with the
// GEMM's epilogues applied once: SwiGLU (silu(gate sums) * up sums), then the bias, then
// the residual (accumulate: y += ...), in the order the unsplit tensor-core epilogue uses.
//
// Contract (device pointers, row-major, non-aliasing): GemmReduceArgs, in .param order.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/gemm.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kGemmReduceEntry[] = "gemm_reduce";

struct GemmReduceConfig : KernelConfig<GemmReduceConfig, kGemmReduceEntry> {
  int n = 4096;    // output columns
  int splits = 2;  // k slices (GemmConfig::split_k)
  bool has_bias = false;
  bool accumulate = false;
  bool swiglu = false;  // partial rows hold 2n sums: n gate, then n up
  // The output's type (GemmConfig::y_dtype): f32, or f16/bf16 without accumulate; the sums and
  // epilogues stay f32, only the store rounds.
  ElemType y_dtype = ElemType::kF32;
  ptx::Target target;
  using C = GemmReduceConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("n", &C::n).Key("n").Range(1, 1 << 24),
      Field("splits", &C::splits).Key("s").Range(2, 64),
      Field("has_bias", &C::has_bias).Key("bias"), Field("accumulate", &C::accumulate).Key("acc"),
      Field("swiglu", &C::swiglu).Key("swiglu"), Field("y_dtype", &C::y_dtype).KeyUnlessF32("y"));
  absl::Status CheckAcrossFields() const;
};

struct GemmReduceArgs {
  // f32 [splits][M][cols], cols = n (2n with swiglu): the GEMM's workspace
  DevicePtr partial;
  // f32 [N] (has_bias; unused otherwise, may be 0)
  DevicePtr bias;
  // y_dtype [M][N]; read first when accumulate (f32 then)
  DevicePtr y;
  // M, the rows
  uint32_t m = 0;
  PTXSERVE_PARAMS(GemmReduceArgs, partial, bias, y, m);
};

// The reduction of a split-K GEMM config (split_k > 1): its columns, slices and epilogues.
GemmReduceConfig GemmReduceFor(const GemmConfig& gemm);
// f32 elements of a split-K GEMM's workspace per row of M: split_k x cols; 0 unsplit.
int64_t GemmWorkspaceFloatsPerRow(const GemmConfig& gemm);

absl::StatusOr<std::string> GenerateGemmReduce(const GemmReduceConfig& cfg);
// 256 threads per CTA, 4 outputs of a row-major [M][N] per thread.
LaunchDims GemmReduceLaunch(const GemmReduceConfig& cfg, int64_t m);

}  // namespace ptxserve::kernels
