// Token sampling over a batch of logit rows: greedy, or temperature -> top-k ->
// top-p -> an inverse-CDF draw with one host-supplied uniform per row. One CTA per row.
//
// Contract (device pointers, row-major); parameters in this order:
//   logits       f32 [num_rows][vocab]
//   temperature  f32 [num_rows]  0 = greedy
//   top_k        s32 [num_rows]  0 (or >= vocab) = off; 1 = greedy
//   top_p        f32 [num_rows]  1 = off, else in (0, 1)
//   uniform      f32 [num_rows]  in [0, 1): the row's random draw
//   out          s32 [num_rows]  the sampled token id
//   vocab, num_rows  u32
// Rules: greedy rows take argmax (lowest id among ties, NaN never). Otherwise the
// weights are w_i = exp((l_i - max) / T) (NaN logits weigh 0); candidates rank by
// logit descending, lower id first among ties; top-k keeps the k best; top-p keeps the
// shortest best-first prefix of those whose weight reaches top_p of their total; the
// draw walks the kept ids in ascending id order and returns the first at which the
// running weight sum exceeds uniform * (kept total), falling back to the last kept id
// with weight when rounding leaves the target past the end. Rows whose max logit is
// not finite fall back to greedy. The filter thresholds are found by bisection over
// the 64-bit (logit, id) rank keys with block-wide counts/sums (f32), so results can
// differ from the CPU sampler's double sums exactly at a top-p boundary, and the draw
// walks ids in id order where the CPU sampler walks top-k/top-p candidates best first:
// the distribution is the same, the token for a given uniform is not.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kSamplingEntry[] = "sampling";

struct SamplingConfig {
  int threads = 256;  // per CTA: 32..1024, a multiple of 32
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateSampling(const SamplingConfig& cfg);
LaunchDims SamplingLaunch(const SamplingConfig& cfg, int64_t num_rows);

}  // namespace ptxserve::kernels
