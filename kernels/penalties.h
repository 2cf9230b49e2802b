// Repetition / presence / frequency penalties on the device, so a penalised row keeps
// its sampling step on the GPU. One CTA per row: the row's raw logits are copied to `out`,
// then every entry of the row's list rewrites its id there with the host's exact float
// operations (SequenceSampler::ApplyPenalties, engine/sampler.cc), in this order:
//   repeated != 0:  x = x > 0 ? x / rp : x * rp          (div.rn / mul as fma.rn(x, rp, -0))
//   count > 0:      x = x - fma(freq, f32(count), pres)   (one fma, then one rounded sub)
// The host's `frequency * count + presence` is one fused multiply-add (it says std::fma).
// Every op is IEEE round to nearest and written as div.rn / fma.rn / cvt.rn, which ptxas
// never contracts or approximates, so the penalised row is bit-identical to the host's
// (NaN stays NaN, -inf stays -inf). The sampling kernel (or argmax) then reads `out`; the
// logprobs kernel keeps reading the raw logits, as the host does.
//
// Contract (device pointers, row-major): PenaltiesArgs, in .param order.
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

inline constexpr char kPenaltiesEntry[] = "penalties";

// One list entry (the device layout, little-endian words).
struct PenaltyEntryWords {
  int32_t id = 0;
  int32_t count = 0;     // times generated: presence / frequency apply when > 0
  int32_t repeated = 0;  // != 0: seen in the prompt or output, the repetition penalty applies
};
static_assert(sizeof(PenaltyEntryWords) == 12);

struct PenaltiesConfig : KernelConfig<PenaltiesConfig, kPenaltiesEntry> {
  int threads = 256;  // per CTA (one CTA per row): 32..1024, a multiple of 32
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple(ThreadsField(&PenaltiesConfig::threads));
};

struct PenaltiesArgs {
  // f32 [num_rows][vocab]: raw logits, not modified
  DevicePtr logits;
  // f32 [num_rows][vocab]: the penalised rows (every element of rows < num_rows is written); must
  // not overlap `logits`
  DevicePtr out;
  // s32 [num_rows + 1]: row r's entries are [offsets[r], offsets[r + 1])
  DevicePtr offsets;
  // PenaltyEntryWords [..] (12 bytes each, 4-byte aligned); an id may appear at most once per row;
  // ids outside [0, vocab) are skipped (as the host skips them)
  DevicePtr entries;
  // f32 [num_rows]: repetition_penalty per row
  DevicePtr repetition;
  // f32 [num_rows]: presence_penalty per row
  DevicePtr presence;
  // f32 [num_rows]: frequency_penalty per row
  DevicePtr frequency;
  // >= 1; vocab * 4 < 2^32
  uint32_t vocab = 0;
  uint32_t num_rows = 0;
  PTXSERVE_PARAMS(PenaltiesArgs, logits, out, offsets, entries, repetition, presence, frequency,
                  vocab, num_rows);
};

absl::StatusOr<std::string> GeneratePenalties(const PenaltiesConfig& cfg);
inline constexpr auto PenaltiesLaunch = &RowLaunchFor<PenaltiesConfig>;

}  // namespace ptxserve::kernels
