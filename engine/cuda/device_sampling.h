// Sampling on the device after a step's forward pass: penalties, then argmax or the
// sampling kernel, then log-probs, so only ids or log-prob records come back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/kernel_set.h"
#include "engine/cuda/step_buffers.h"
#include "engine/cuda/step_metadata.h"

namespace ptxserve::cuda {

// What the sampling kernels leave for the copy back.
struct SampledRows {
  CUdeviceptr src = 0;
  size_t bytes = 0;
  bool records = false;  // log-prob records (kLogprobsRecordBytes a row), else s32 ids
};

// Enqueues the kernels that sample `step`'s rows of the logits buffer: the penalties
// kernel (a penalised copy the draw reads) when some row has entries, argmax when every
// row is greedy or else the sampling kernel, then, with `want_records` and some row
// wanting log-probs, the logprobs kernel on the raw logits.
absl::StatusOr<SampledRows> EnqueueSampling(KernelSet& kernels, KernelCache& cache,
                                            const StepBuffers& buffers, const DeviceStep& step,
                                            int64_t vocab, bool want_records);

// The ids (and, when `logprobs` is not null, the log-probs) of `sampled.bytes` copied
// back to `host`, for `rows`.
void ReadSampled(const uint8_t* host, const SampledRows& sampled,
                 const std::vector<RowSampling>& rows, std::vector<int32_t>* ids,
                 std::vector<SampleResult>* logprobs);

}  // namespace ptxserve::cuda
