// Log-probs of a batch of logit rows on the device, so a backend copies back one small
// record per row instead of whole logits rows. One CTA per row. The rules are those of
// the host sampler's SequenceSampler::ComputeLogprobs (engine/sampler.cc), on the RAW
// logits (before penalties and temperature):
//   lse = m + ln(sum_i exp(l_i - m)), m = the row's max ignoring NaN (NaN and -inf
//         weigh 0); when m is not finite (every logit -inf/NaN, or a +inf) lse = m.
//   logprob(id) = l_id - lse (a NaN l_id counts as -inf), computed in f64 and rounded
//         to f32, so -inf - -inf and +inf - +inf give NaN exactly as on the host.
//   top-N: the N best ids by raw logit (descending, lower id first among ties); -inf
//         and NaN logits are never listed, so fewer than N may be found.
//
// Contract (device pointers, row-major): LogprobsArgs, in .param order.
// Accuracy: exponentials use ex2.approx.ftz.f32 of (l - m) * log2(e), summed per
// thread in f64 and reduced in f64; ln of the sum is exact to f64 (range reduction and
// an atanh series). Tolerance vs the host: |got - want| <= 1e-5 + 1e-5 * |want| for
// vocab up to 128k; on the emulator (exact exp2) the gap is one f32 rounding (<= 1e-6
// for |logprob| < 32), and ex2.approx's ~2 ulp on hardware adds ~3e-7 to the lse.
// Top ids match the host exactly. Rows whose max is not finite behave as on the host
// (see lse above). tests/kernels/logprobs_test.cc measures the gap.
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

inline constexpr char kLogprobsEntry[] = "logprobs";

// One slot of an output record (the device layout, little-endian words).
struct LogprobsEntry {
  int32_t id = -1;
  float logprob = 0.0f;
};
static_assert(sizeof(LogprobsEntry) == 8);

struct LogprobsConfig : KernelConfig<LogprobsConfig, kLogprobsEntry> {
  int threads = 256;  // per CTA (one CTA per row): 32..1024, a multiple of 32
  int max_top = 20;   // top entries per record: 0..32 (the host API allows 20)
  ptx::Target target;
  static constexpr auto kFields =
      std::make_tuple(ThreadsField(&LogprobsConfig::threads),
                      Field("max_top", &LogprobsConfig::max_top).Key("top").Range(0, 32));
};

// Bytes of one row's record: (1 + max_top) * sizeof(LogprobsEntry).
inline int64_t LogprobsRecordBytes(const LogprobsConfig& cfg) {
  return (1 + int64_t{cfg.max_top}) * static_cast<int64_t>(sizeof(LogprobsEntry));
}

struct LogprobsArgs {
  // f32 [num_rows][vocab]
  DevicePtr logits;
  // s32 [num_rows]: the sampled token of each row; an id outside [0, vocab) gets logprob NaN (and
  // is copied to the record as is)
  DevicePtr chosen;
  // s32 [num_rows]: how many top entries the row wants; clamped to [0, max_top]
  DevicePtr top_n;
  // record [num_rows][1 + max_top], 8-byte aligned, a record being LogprobsEntry {s32 id; f32
  // logprob} (8 bytes): entry 0 = {chosen[r], its logprob}; entries 1..max_top = the top-N in rank
  // order, then {-1, -inf} up to max_top. Rows are contiguous (LogprobsRecordBytes(cfg) apart), so
  // the records of rows [0, R) are ONE device->host copy of R * that many bytes, and they carry the
  // chosen ids too. Every word of rows < num_rows is written.
  DevicePtr out;
  // >= 1; vocab * 4 < 2^32
  uint32_t vocab = 0;
  uint32_t num_rows = 0;
  PTXSERVE_PARAMS(LogprobsArgs, logits, chosen, top_n, out, vocab, num_rows);
};

absl::StatusOr<std::string> GenerateLogprobs(const LogprobsConfig& cfg);
inline constexpr auto LogprobsLaunch = &RowLaunchFor<LogprobsConfig>;

}  // namespace ptxserve::kernels
