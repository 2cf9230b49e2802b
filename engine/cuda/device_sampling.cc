#include "engine/cuda/device_sampling.h"

#include <cstring>

#include "engine/cuda/kernel_launch.h"

namespace ptxserve::cuda {

absl::StatusOr<SampledRows> EnqueueSampling(KernelSet& k, KernelCache& cache, const StepBuffers& b,
                                            const DeviceStep& p, int64_t vocab_size,
                                            bool want_records) {
  const CUdeviceptr logits = b.logits.ptr();
  const uint32_t vocab = static_cast<uint32_t>(vocab_size);
  const uint32_t rows = static_cast<uint32_t>(p.rows);
  SampledRows out{.src = b.ids.ptr(), .bytes = static_cast<size_t>(p.rows) * 4};
  // The draw reads the penalised copy when some row has penalty entries (rows without
  // entries are copied as they are); the log-probs below keep the raw logits.
  CUdeviceptr drawn = logits;
  if (p.penalties) {
    drawn = b.penalized.ptr();
    absl::Status s =
        LaunchSlot(cache, k.penalties, kernels::PenaltiesLaunch(k.penalties_cfg, p.rows),
                   kernels::PenaltiesArgs{.logits = logits,
                                          .out = drawn,
                                          .offsets = p.pen_offsets,
                                          .entries = p.pen_entries,
                                          .repetition = p.repetition,
                                          .presence = p.presence,
                                          .frequency = p.frequency,
                                          .vocab = vocab,
                                          .num_rows = rows});
    if (!s.ok()) return s;
  }
  absl::Status s =
      p.greedy ? LaunchSlot(cache, k.argmax, kernels::ArgmaxLaunch(k.argmax_cfg, p.rows),
                            kernels::ArgmaxArgs{
                                .logits = drawn, .out = out.src, .vocab = vocab, .num_rows = rows})
               : LaunchSlot(cache, k.sampling, kernels::SamplingLaunch(k.sampling_cfg, p.rows),
                            kernels::SamplingArgs{.logits = drawn,
                                                  .temperature = p.temperature,
                                                  .top_k = p.top_k,
                                                  .top_p = p.top_p,
                                                  .min_p = p.min_p,
                                                  .uniform = p.uniform,
                                                  .out = out.src,
                                                  .vocab = vocab,
                                                  .num_rows = rows});
  if (!s.ok()) return s;
  if (!want_records || !p.logprobs) return out;
  // On the raw logits, with the ids just sampled as the chosen tokens; the records carry
  // the ids, so they replace the ids copy.
  const CUdeviceptr records = b.records.ptr();
  s = LaunchSlot(cache, k.logprobs, kernels::LogprobsLaunch(k.logprobs_cfg, p.rows),
                 kernels::LogprobsArgs{.logits = logits,
                                       .chosen = out.src,
                                       .top_n = p.top_n,
                                       .out = records,
                                       .vocab = vocab,
                                       .num_rows = rows});
  if (!s.ok()) return s;
  return SampledRows{
      .src = records, .bytes = static_cast<size_t>(p.rows) * kLogprobsRecordBytes, .records = true};
}

void ReadSampled(const uint8_t* host, const SampledRows& sampled,
                 const std::vector<RowSampling>& rows, std::vector<int32_t>* ids,
                 std::vector<SampleResult>* logprobs) {
  const size_t n = rows.size();
  ids->resize(n);
  if (logprobs != nullptr) logprobs->resize(n);
  if (!sampled.records) {
    if (n > 0) std::memcpy(ids->data(), host, n * 4);
    if (logprobs != nullptr) {
      for (size_t r = 0; r < n; ++r)
        (*logprobs)[r] = SampleResult{.token = (*ids)[r], .logprob = 0.0f, .top = {}};
    }
    return;
  }
  // Entry 0 carries the row's id and its log-prob, then the top entries in rank order
  // until the first unused {-1, -inf}.
  for (size_t r = 0; r < n; ++r) {
    kernels::LogprobsEntry e[1 + kLogprobsTop];
    std::memcpy(e, host + r * kLogprobsRecordBytes, sizeof(e));
    SampleResult& out = (*logprobs)[r];
    (*ids)[r] = e[0].id;
    out.token = e[0].id;
    out.top.clear();
    const int32_t wanted = rows[r].logprobs;
    out.logprob = wanted > 0 ? e[0].logprob : 0.0f;
    for (int32_t i = 1; i <= wanted && e[i].id >= 0; ++i)
      out.top.push_back({e[i].id, e[i].logprob});
  }
}

}  // namespace ptxserve::cuda
