// The seam between the engine and a device: one forward step over a ragged batch.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine_stats.h"
#include "engine/model/config.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/step_batch.h"

namespace ptxserve {

struct KvCacheConfig {
  int32_t num_blocks = 256;
  int32_t block_size = 16;
  DType dtype = DType::kF32;  // element type of the K/V pools
};

// How a device draws one logits row: the canonical sampling algorithm of
// kernels/sampling.h, which SequenceSampler implements too.
struct RowSampling {
  float temperature = 0;  // 0 = greedy
  int32_t top_k = 0;      // 0 = off
  float top_p = 1;        // 1 = off
  double uniform = 0;     // the row's random draw in [0, 1) (SequenceSampler::TakeUniform)
  float min_p = 0;        // 0 = off
  int32_t logprobs = 0;   // top-N log-probs wanted (SamplingParams::logprobs); > 0 also
                          // returns the chosen token's log-prob
  // The penalties SequenceSampler::ApplyPenalties applies before the draw: the params'
  // values and the sequence's history (SequenceSampler::PenaltyEntries for the model's
  // vocab). Empty `penalties` leaves the row as it is. Log-probs stay those of the raw row.
  float repetition_penalty = 1;
  float presence_penalty = 0;
  float frequency_penalty = 0;
  std::vector<PenaltyEntry> penalties = {};
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Runs the forward pass for `batch`: writes every token's K/V rows into the paged
  // cache at its slot, attends over each sequence's blocks, and fills `logits` with
  // [batch.logits_rows.size() x vocab] floats (row-major, in logits_rows order).
  virtual absl::Status Step(const StepBatch& batch, std::vector<float>* logits) = 0;

  // Optional device-side sampling. True when StepSampled picks, for a row with `params`,
  // exactly the token SequenceSampler::Sample would pick from Step's logits with the same
  // uniform (so the engine may use either path for a sequence without changing its tokens),
  // and, when params.logprobs > 0, returns the log-probs Sample would (within 1e-5, the
  // same top ids).
  virtual bool CanSampleOnDevice(const SamplingParams& /*params*/) const { return false; }
  // The forward pass of Step, then sampling on the device: `ids` receives one token per
  // logits row (rows.size() == batch.logits_rows.size()). `logprobs`, when not null,
  // receives one SampleResult per row: token = ids[r]; for a row with rows[r].logprobs > 0
  // the token's log-prob and the top rows[r].logprobs as SequenceSampler::Sample reports
  // them (log_softmax of the raw logits), else logprob 0 and no top. Only called when
  // CanSampleOnDevice held for every row's parameters.
  virtual absl::Status StepSampled(const StepBatch& /*batch*/,
                                   const std::vector<RowSampling>& /*rows*/,
                                   std::vector<int32_t>* /*ids*/,
                                   std::vector<SampleResult>* /*logprobs*/) {
    return absl::UnimplementedError("this backend does not sample on the device");
  }
  // StepSampled without log-probs (decorators override only the form above).
  absl::Status StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids) {
    return StepSampled(batch, rows, ids, nullptr);
  }

  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheConfig& kv_config() const = 0;
  // "cpu", "cuda", "emulated".
  virtual std::string name() const = 0;
  // False once no step can ever succeed again (a GPU context lost to a sticky fault):
  // the engine then fails for good at once, whatever EngineConfig::max_step_failures
  // would tolerate, instead of retrying on a dead device.
  virtual bool usable() const { return true; }
  // Cumulative kernel, kernel-cache, transfer and graph counters (EngineStats::kernels), so
  // callers reach them without knowing the backend's type. Any thread. The CPU backend
  // launches no kernels: all zero.
  virtual KernelStats kernel_stats() const { return {}; }
};

}  // namespace ptxserve
