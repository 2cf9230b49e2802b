// Greedy sampling: out[r] = argmax_i logits[r, i], the lowest id among equal maxima.
// NaN never wins; a row with no value above -inf yields its first -inf id, or 0 when
// every value is NaN (the rules of the CPU sampler's ArgMax).
//
// Contract (device pointers, row-major): ArgmaxArgs, in .param order.
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

inline constexpr char kArgmaxEntry[] = "argmax";

struct ArgmaxConfig : KernelConfig<ArgmaxConfig, kArgmaxEntry> {
  // Per CTA (one CTA per row, so a decode step's few rows run on few SMs: each thread
  // keeps four float4 loads in flight): 32..1024, a multiple of 32.
  int threads = 1024;
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple(ThreadsField(&ArgmaxConfig::threads));
};

struct ArgmaxArgs {
  // f32 [num_rows][vocab]
  DevicePtr logits;
  // s32 [num_rows]
  DevicePtr out;
  uint32_t vocab = 0;
  uint32_t num_rows = 0;
  PTXSERVE_PARAMS(ArgmaxArgs, logits, out, vocab, num_rows);
};

absl::StatusOr<std::string> GenerateArgmax(const ArgmaxConfig& cfg);
inline constexpr auto ArgmaxLaunch = &RowLaunchFor<ArgmaxConfig>;

namespace gen {
// Block-wide (value, id) max with the argmax tie rules above; the result is valid in
// thread 0 only. `scratch` holds 2 * num_warps words. Contains bar.sync.
void BlockArgmax(KernelBuilder& kb, Reg* val, Reg* id, int num_warps, const ptx::Symbol& scratch,
                 Reg lane, Reg warp);
}  // namespace gen

}  // namespace ptxserve::kernels
