// One step on the device: pack and upload the metadata (one copy), enqueue the forward
// pass (and the sampling kernels), copy the result back (one copy) and synchronise once.
// Nothing here generates PTX, formats strings or looks kernels up on the success path.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cuda/device_forward_ops.h"
#include "engine/cuda/device_sampling.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/model/forward.h"
#include "engine/step_batch_check.h"

namespace ptxserve::cuda {

absl::Status GpuBackend::Upload(const StepBatch& given, const std::vector<RowSampling>* rows,
                                DeviceStep* step) {
  DeviceStep& p = *step;
  const StepBatch* in = &given;
  p.tokens = given.num_tokens();
  p.seqs = given.num_seqs();
  p.rows = static_cast<int64_t>(given.logits_rows.size());
  p.max_blocks = given.max_blocks_per_seq;
  const int64_t entries = PenaltyEntries(rows);
  if (entries > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepSampled: ", entries, " penalty entries: want at most 2^31 - 1"));
  }
  const MetaLayout m = LayoutMeta(p.tokens, p.seqs, p.max_blocks, p.rows, entries);
  if (absl::Status s = buffers_->Reserve(p.tokens, p.rows, m.total); !s.ok()) return s;
  if (absl::Status s = buffers_->ReserveGemmWorkspace(kernels_->GemmWorkspaceFloats(p.tokens));
      !s.ok()) {
    return s;
  }

  // Decode mode needs exactly one row per sequence; anything else runs ragged (causal
  // limits per row), which is also right for decode rows mixed into a prefill batch.
  p.ragged = p.tokens != p.seqs;
  int64_t max_context = 0, decodes = 0;
  for (int64_t s = 0; s < p.seqs; ++s) {
    if (given.query_start[s + 1] - given.query_start[s] != 1) {
      p.ragged = true;
    } else {
      ++decodes;
    }
    max_context = std::max<int64_t>(max_context, given.seq_lens[s]);
  }
  // Ragged steps run flash attention when the kernel set has it. Their decode rows ride
  // along in the same launch while they are few beside the chunks' rows; from there on the
  // step's decode sequences move last and their rows run in the decode kernel, a launch of
  // their own (kernels::MixedDecodeRowsApart gives the cost model's crossover, at least
  // options_.mixed_decode_rows decode rows).
  p.flash = p.ragged && kernels_->flash.used();
  p.decode_rows = 0;
  if (p.flash && kernels::MixedDecodeRowsApart(decodes, p.tokens - decodes,
                                               std::max(options_.mixed_decode_rows, 1))) {
    p.decode_rows = DecodeRowsLast(given, &decode_last_);
    in = &decode_last_;
  }
  // The decode kernel's rows and their longest context: the whole step, or the decode rows
  // beside flash attention (none when flash takes every row).
  const int64_t attn_rows = p.flash ? p.decode_rows : p.tokens;
  if (p.flash) {
    max_context = 0;
    for (int64_t s = p.seqs - p.decode_rows; s < p.seqs; ++s) {
      max_context = std::max<int64_t>(max_context, in->seq_lens[s]);
    }
  }
  const bool ragged_kernel = p.ragged && !p.flash;
  p.split = false;
  p.partition = 0;
  p.num_splits = 1;
  if (attn_rows == 0) {
    // flash attention alone
  } else if (options_.attention_partition > 0) {
    const int64_t part =
        (options_.attention_partition + kv_.block_size - 1) / kv_.block_size * kv_.block_size;
    p.split = max_context > part;
    p.partition = p.split ? static_cast<int>(part) : 0;
    p.num_splits = p.split ? static_cast<int>((max_context + part - 1) / part) : 1;
  } else {
    const kernels::AttentionPlan plan = kernels::PlanDecodeAttention(
        kernels_->attn_cfg[ragged_kernel][0], attn_rows, max_context, device_->info().num_sms);
    p.split = plan.split;
    p.partition = plan.partition_tokens;
    p.num_splits = plan.num_splits;
  }
  if (p.graph) graphs_->RoundPartition(&p);
  if (p.split) {
    if (absl::Status s = buffers_->ReserveSplits(attn_rows, p.num_splits); !s.ok()) return s;
  }
  const CUdeviceptr meta = buffers_->meta.ptr();
  uint8_t* host = buffers_->meta_host.data();
  const size_t bytes = PackStepMetadata(*in, rows, m, host, meta, &p);
  return device_->CopyToDevice(meta, host, bytes, "step metadata");
}

absl::Status GpuBackend::Forward(DeviceStep* step) {
  auto forward = [this](const DeviceStep& s) {
    DeviceForwardOps ops(config_, *kernels_, *kernel_cache_, weights_, kv_pools_, *buffers_, s);
    return RunForward(config_, s.rows, ops);
  };
  if (graphs_ == nullptr) return forward(*step);
  return graphs_->Run(step, *buffers_, forward);
}

absl::Status GpuBackend::Finish(absl::Status enqueued) {
  if (!enqueued.ok()) {
    (void)device_->Synchronize("after a failed step");
    return enqueued;
  }
  return device_->Synchronize("step");
}

absl::Status GpuBackend::Step(const StepBatch& batch, std::vector<float>* logits) {
  if (absl::Status s = ValidateStepBatch(batch, config_, kv_); !s.ok()) return s;
  DeviceStep p;
  // A decode step graphs cover runs padded (decode_graphs.h); p.rows is then the real
  // rows again once Forward returns.
  const StepBatch& run = graphs_ != nullptr ? graphs_->Pad(batch, &p) : batch;
  absl::Status s = Upload(run, nullptr, &p);
  if (s.ok()) s = Forward(&p);
  const size_t bytes = static_cast<size_t>(p.rows * config_.vocab_size) * sizeof(float);
  if (s.ok() && bytes > 0) {
    s = device_->CopyToHost(buffers_->out_host.data(), buffers_->logits.ptr(), bytes, "logits");
  }
  if (s = Finish(s); !s.ok()) return s;
  logits->resize(bytes / sizeof(float));
  if (bytes > 0) std::memcpy(logits->data(), buffers_->out_host.data(), bytes);
  return absl::OkStatus();
}

absl::Status GpuBackend::StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                                     std::vector<int32_t>* ids,
                                     std::vector<SampleResult>* logprobs) {
  if (absl::Status s = ValidateStepBatch(batch, config_, kv_); !s.ok()) return s;
  if (rows.size() != batch.logits_rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("StepSampled: ", rows.size(),
                                                   " sampling rows for ", batch.logits_rows.size(),
                                                   " logits rows"));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].logprobs < 0 || rows[r].logprobs > kLogprobsTop) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StepSampled: rows[", r, "].logprobs = ", rows[r].logprobs, ": want 0..", kLogprobsTop));
    }
  }
  DeviceStep p;
  const StepBatch& run = graphs_ != nullptr ? graphs_->Pad(batch, &p) : batch;
  absl::Status s = Upload(run, &rows, &p);
  if (s.ok()) s = Forward(&p);
  SampledRows sampled;
  if (s.ok() && p.rows > 0) {
    absl::StatusOr<SampledRows> r = EnqueueSampling(*kernels_, *kernel_cache_, *buffers_, p,
                                                    config_.vocab_size, logprobs != nullptr);
    if (r.ok()) {
      sampled = *r;
      s = device_->CopyToHost(buffers_->out_host.data(), sampled.src, sampled.bytes,
                              sampled.records ? "log-prob records" : "sampled ids");
    } else {
      s = r.status();
    }
  }
  if (s = Finish(s); !s.ok()) return s;
  ReadSampled(buffers_->out_host.data(), sampled, rows, ids, logprobs);
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
