// One step on the device: pack and upload the metadata (one copy), enqueue the forward
// pass, copy the result back (one copy) and synchronise once. Nothing here generates
// PTX, formats strings or looks kernels up on the success path.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cuda/gpu_backend_internal.h"
#include "engine/step_batch_check.h"

namespace ptxserve::cuda {
namespace {

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

template <class T>
void Put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

MetaLayout LayoutMeta(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t rows,
                      int64_t penalty_entries) {
  MetaLayout m;
  size_t off = 0;
  auto take = [&](size_t* field, int64_t bytes) {
    *field = off;
    off += Align16(static_cast<size_t>(bytes));
  };
  take(&m.token_ids, tokens * 4);
  take(&m.positions, tokens * 4);
  take(&m.slots, tokens * 8);
  take(&m.query_start, (seqs + 1) * 4);
  take(&m.seq_lens, seqs * 4);
  take(&m.block_tables, seqs * max_blocks * 4);
  take(&m.logits_rows, rows * 4);
  take(&m.top_n, rows * 4);
  take(&m.temperature, rows * 4);
  take(&m.top_k, rows * 4);
  take(&m.top_p, rows * 4);
  take(&m.min_p, rows * 4);
  take(&m.uniform, rows * 8);
  take(&m.repetition, rows * 4);
  take(&m.presence, rows * 4);
  take(&m.frequency, rows * 4);
  take(&m.pen_offsets, (rows + 1) * 4);
  take(&m.pen_entries, penalty_entries * static_cast<int64_t>(sizeof(kernels::PenaltyEntryWords)));
  m.total = off;
  return m;
}

absl::Status GpuBackend::Upload(const StepBatch& batch, const std::vector<RowSampling>* rows,
                                StepPlan* plan) {
  StepPlan& p = *plan;
  p.tokens = batch.num_tokens();
  p.seqs = batch.num_seqs();
  p.rows = static_cast<int64_t>(batch.logits_rows.size());
  p.max_blocks = batch.max_blocks_per_seq;
  int64_t entries = 0;
  if (rows != nullptr) {
    for (const RowSampling& rs : *rows) entries += static_cast<int64_t>(rs.penalties.size());
  }
  if (entries > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepSampled: ", entries, " penalty entries: want at most 2^31 - 1"));
  }
  const MetaLayout m = LayoutMeta(p.tokens, p.seqs, p.max_blocks, p.rows, entries);
  if (absl::Status s = Reserve(p.tokens, p.rows, m.total); !s.ok()) return s;

  // Decode mode needs exactly one row per sequence; anything else runs ragged (causal
  // limits per row), which is also right for decode rows mixed into a prefill batch.
  p.ragged = p.tokens != p.seqs;
  int64_t max_context = 0;
  for (int64_t s = 0; s < p.seqs; ++s) {
    if (batch.query_start[s + 1] - batch.query_start[s] != 1) p.ragged = true;
    max_context = std::max<int64_t>(max_context, batch.seq_lens[s]);
  }
  const int64_t attn_rows = p.tokens;
  if (options_.attention_partition > 0) {
    const int64_t part =
        (options_.attention_partition + kv_.block_size - 1) / kv_.block_size * kv_.block_size;
    p.split = max_context > part;
    p.partition = p.split ? static_cast<int>(part) : 0;
    p.num_splits = p.split ? static_cast<int>((max_context + part - 1) / part) : 1;
  } else {
    const kernels::AttentionPlan ap = kernels::PlanDecodeAttention(
        k_->attn_cfg[p.ragged][0], attn_rows, max_context, device_->info().num_sms);
    p.split = ap.split;
    p.partition = ap.partition_tokens;
    p.num_splits = ap.num_splits;
  }
  if (p.graph) RoundGraphPartition(&p);
  if (p.split) {
    if (absl::Status s = ReserveSplits(attn_rows, p.num_splits); !s.ok()) return s;
  }

  uint8_t* h = buf_->meta_host.data();
  Put(h, m.token_ids, batch.token_ids);
  Put(h, m.positions, batch.positions);
  Put(h, m.slots, batch.slot_mapping);
  Put(h, m.query_start, batch.query_start);
  Put(h, m.seq_lens, batch.seq_lens);
  Put(h, m.block_tables, batch.block_tables);
  Put(h, m.logits_rows, batch.logits_rows);
  p.sample = rows != nullptr;
  p.greedy = true;
  p.logprobs = false;
  p.penalties = entries > 0;
  if (rows != nullptr) {
    static_assert(sizeof(PenaltyEntry) == sizeof(kernels::PenaltyEntryWords));
    // `rows` are the real rows: a graph step's padding rows are never sampled (sampling
    // runs on the real rows), so their sections stay unwritten.
    const int64_t sampled = static_cast<int64_t>(rows->size());
    int32_t offset = 0;
    for (int64_t r = 0; r < sampled; ++r) {
      const RowSampling& rs = (*rows)[r];
      std::memcpy(h + m.top_n + 4 * r, &rs.logprobs, 4);
      if (rs.logprobs > 0) p.logprobs = true;
      std::memcpy(h + m.temperature + 4 * r, &rs.temperature, 4);
      std::memcpy(h + m.top_k + 4 * r, &rs.top_k, 4);
      std::memcpy(h + m.top_p + 4 * r, &rs.top_p, 4);
      std::memcpy(h + m.min_p + 4 * r, &rs.min_p, 4);
      std::memcpy(h + m.uniform + 8 * r, &rs.uniform, 8);
      if (rs.temperature > 0 && rs.top_k != 1) p.greedy = false;
      if (!p.penalties) continue;
      std::memcpy(h + m.repetition + 4 * r, &rs.repetition_penalty, 4);
      std::memcpy(h + m.presence + 4 * r, &rs.presence_penalty, 4);
      std::memcpy(h + m.frequency + 4 * r, &rs.frequency_penalty, 4);
      std::memcpy(h + m.pen_offsets + 4 * r, &offset, 4);
      Put(h, m.pen_entries + sizeof(PenaltyEntry) * static_cast<size_t>(offset), rs.penalties);
      offset += static_cast<int32_t>(rs.penalties.size());
    }
    if (p.penalties) std::memcpy(h + m.pen_offsets + 4 * sampled, &offset, 4);
  }
  const CUdeviceptr d = buf_->meta.ptr();
  p.token_ids = d + m.token_ids;
  p.positions = d + m.positions;
  p.slots = d + m.slots;
  p.query_start = d + m.query_start;
  p.seq_lens = d + m.seq_lens;
  p.block_tables = d + m.block_tables;
  p.logits_rows = d + m.logits_rows;
  p.top_n = d + m.top_n;
  p.temperature = d + m.temperature;
  p.top_k = d + m.top_k;
  p.top_p = d + m.top_p;
  p.min_p = d + m.min_p;
  p.uniform = d + m.uniform;
  p.repetition = d + m.repetition;
  p.presence = d + m.presence;
  p.frequency = d + m.frequency;
  p.pen_offsets = d + m.pen_offsets;
  p.pen_entries = d + m.pen_entries;
  // Only the sampling sections the step does not read are left out: all of them for Step
  // and greedy rows, all but top_n for greedy rows with log-probs, the penalties when no
  // row has entries.
  const size_t bytes = !p.sample     ? m.top_n
                       : p.penalties ? m.total
                       : !p.greedy   ? m.repetition
                       : p.logprobs  ? m.temperature
                                     : m.top_n;
  return device_->CopyToDevice(d, h, bytes, "step metadata");
}

absl::Status GpuBackend::RunLayer(int layer, const StepPlan& p) {
  const ModelConfig& c = config_;
  KernelSet& k = *k_;
  Buffers& b = *buf_;
  const Weights::Layer& w = w_->layers[layer];
  KernelCache& cache = *cache_;
  const uint32_t T = static_cast<uint32_t>(p.tokens);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int form = GemmForm(p.tokens);
  const CUdeviceptr x = b.x.ptr(), h = b.h.ptr(), q = b.q.ptr(), kk = b.k.ptr(), v = b.v.ptr();
  const CUdeviceptr attn = b.attn.ptr(), gu = b.gate_up.ptr(), act = b.act.ptr();

  auto gemm = [&](GemmSlots& g, CUdeviceptr in, CUdeviceptr wt, CUdeviceptr bias, CUdeviceptr out) {
    return LaunchSlot(cache, g.slot[form], kernels::GemmLaunch(g.cfg[form], p.tokens),
                      kernels::GemmArgs{.x = in, .w = wt, .bias = bias, .y = out, .m = T});
  };
  auto norm = [&](CUdeviceptr weight) {
    return LaunchSlot(
        cache, k.norm, kernels::RmsNormLaunch(k.norm_cfg, p.tokens),
        kernels::RmsNormArgs{.x = x, .w = weight, .out = h, .num_rows = T, .eps = eps});
  };

  absl::Status s = norm(w.attn_norm.ptr());
  if (s.ok()) s = gemm(k.q, h, w.wq.ptr(), w.bq.ptr(), q);
  if (s.ok()) s = gemm(k.k, h, w.wk.ptr(), w.bk.ptr(), kk);
  if (s.ok()) s = gemm(k.v, h, w.wv.ptr(), w.bv.ptr(), v);
  if (s.ok()) {
    s = LaunchSlot(cache, k.rope, kernels::RopeLaunch(k.rope_cfg, p.tokens),
                   kernels::RopeArgs{.q = q,
                                     .k = kk,
                                     .positions = p.positions,
                                     .inv_freq = w_->inv_freq.ptr(),
                                     .num_tokens = T});
  }
  if (s.ok()) {
    s = LaunchSlot(cache, k.kv_scatter, kernels::KvScatterLaunch(k.kv_cfg, p.tokens),
                   kernels::KvScatterArgs{.k = kk,
                                          .v = v,
                                          .slot_mapping = p.slots,
                                          .k_pool = w.k_pool.ptr(),
                                          .v_pool = w.v_pool.ptr(),
                                          .num_tokens = T});
  }
  if (s.ok()) {
    const kernels::DecodeAttentionArgs args{
        .q = q,
        .k_pool = w.k_pool.ptr(),
        .v_pool = w.v_pool.ptr(),
        .block_tables = p.block_tables,
        .seq_lens = p.seq_lens,
        .query_start = p.query_start,
        .positions = p.positions,
        .out = p.split ? b.partial.ptr() : attn,
        .partial_lse = p.split ? b.lse.ptr() : 0,
        .max_blocks_per_seq = static_cast<uint32_t>(p.max_blocks),
        .num_seqs = static_cast<uint32_t>(p.seqs),
        .num_rows = T,
        .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
        .partition = static_cast<uint32_t>(p.partition)};
    s = LaunchSlot(
        cache, k.attn[p.ragged][p.split],
        kernels::DecodeAttentionLaunch(k.attn_shape[p.ragged][p.split],
                                       static_cast<int>(c.num_kv_heads), p.tokens, p.num_splits),
        args);
    if (s.ok() && p.split) {
      s = LaunchSlot(cache, k.merge, kernels::AttentionMergeLaunch(k.merge_cfg, p.tokens),
                     kernels::AttentionMergeArgs{.partial_out = args.out,
                                                 .partial_lse = args.partial_lse,
                                                 .out = attn,
                                                 .num_splits = static_cast<uint32_t>(p.num_splits),
                                                 .num_rows = T});
    }
  }
  // o projection with the residual add fused: x += attn wo^T.
  if (s.ok()) s = gemm(k.o, attn, w.wo.ptr(), 0, x);
  if (s.ok()) s = norm(w.mlp_norm.ptr());
  const int64_t I = c.intermediate_size;
  const uint32_t n = static_cast<uint32_t>(p.tokens * I);
  if (k.fused_gate_up) {
    if (s.ok()) s = gemm(k.gate_up, h, w.w_gate_up.ptr(), 0, gu);
    if (s.ok()) {
      s = LaunchSlot(cache, k.silu, kernels::SiluMulLaunch(k.silu_cfg, n),
                     kernels::SiluMulArgs{.gate = gu, .up = 0, .out = act, .n = n});
    }
  } else {
    const size_t up_offset =
        static_cast<size_t>(I * c.hidden_size) * kernels::ElemSize(k.gate.cfg[0].weight_dtype);
    // The up half starts on a 256-byte boundary: silu_mul reads 128-bit vectors.
    const CUdeviceptr up = gu + static_cast<CUdeviceptr>((p.tokens * I * 4 + 255) / 256 * 256);
    if (s.ok()) s = gemm(k.gate, h, w.w_gate_up.ptr(), 0, gu);
    if (s.ok()) s = gemm(k.up, h, w.w_gate_up.ptr() + up_offset, 0, up);
    if (s.ok()) {
      s = LaunchSlot(cache, k.silu, kernels::SiluMulLaunch(k.silu_cfg, n),
                     kernels::SiluMulArgs{.gate = gu, .up = up, .out = act, .n = n});
    }
  }
  // down projection with the residual add fused: x += act w_down^T.
  if (s.ok()) s = gemm(k.down, act, w.w_down.ptr(), 0, x);
  return s;
}

absl::Status GpuBackend::Forward(const StepPlan& p) {
  const ModelConfig& c = config_;
  KernelSet& k = *k_;
  Buffers& b = *buf_;
  KernelCache& cache = *cache_;
  const CUdeviceptr x = b.x.ptr(), hr = b.hr.ptr();
  const uint32_t T = static_cast<uint32_t>(p.tokens), R = static_cast<uint32_t>(p.rows);
  {
    absl::Status s =
        LaunchSlot(cache, k.embed, kernels::EmbeddingLaunch(k.embed_cfg, p.tokens),
                   kernels::EmbeddingArgs{.table = w_->embed.ptr(),
                                          .ids = p.token_ids,
                                          .out = x,
                                          .num_tokens = T,
                                          .vocab = static_cast<uint32_t>(c.vocab_size)});
    if (!s.ok()) return s;
  }
  for (int l = 0; l < static_cast<int>(c.num_layers); ++l) {
    if (absl::Status s = RunLayer(l, p); !s.ok()) return s;
  }
  if (p.rows == 0) return absl::OkStatus();
  // Only the wanted rows reach the final norm and the LM head: gather them (an embedding
  // lookup whose table is the residual stream and whose ids are the row numbers).
  {
    absl::Status s =
        LaunchSlot(cache, k.gather, kernels::EmbeddingLaunch(k.gather_cfg, p.rows),
                   kernels::EmbeddingArgs{
                       .table = x, .ids = p.logits_rows, .out = hr, .num_tokens = R, .vocab = T});
    if (!s.ok()) return s;
  }
  {
    absl::Status s = LaunchSlot(cache, k.norm, kernels::RmsNormLaunch(k.norm_cfg, p.rows),
                                kernels::RmsNormArgs{.x = hr,
                                                     .w = w_->final_norm.ptr(),
                                                     .out = hr,
                                                     .num_rows = R,
                                                     .eps = static_cast<float>(c.rms_norm_eps)});
    if (!s.ok()) return s;
  }
  const int form = GemmForm(p.rows);
  return LaunchSlot(
      cache, k.lm_head.slot[form], kernels::GemmLaunch(k.lm_head.cfg[form], p.rows),
      kernels::GemmArgs{.x = hr, .w = w_->lm_head_ptr(), .bias = 0, .y = b.logits.ptr(), .m = R});
}

absl::Status GpuBackend::Step(const StepBatch& batch, std::vector<float>* logits) {
  if (absl::Status s = ValidateStepBatch(batch, config_, kv_); !s.ok()) return s;
  StepPlan p;
  // A decode step graphs cover runs padded (gpu_graphs.cc); p.rows is then the real rows
  // again once RunForward returns.
  absl::Status s = Upload(PadForGraph(batch, &p), nullptr, &p);
  if (s.ok()) s = RunForward(&p);
  const size_t bytes = static_cast<size_t>(p.rows * config_.vocab_size) * sizeof(float);
  if (s.ok() && bytes > 0) {
    s = device_->CopyToHost(buf_->out_host.data(), buf_->logits.ptr(), bytes, "logits");
  }
  if (!s.ok()) {
    // Drain what was enqueued before the failure: the pinned buffers are refilled by the
    // next step, and must not be read by a copy still queued from this one.
    (void)device_->Synchronize("after a failed step");
    return s;
  }
  if (s = device_->Synchronize("step"); !s.ok()) return s;
  logits->resize(bytes / sizeof(float));
  if (bytes > 0) std::memcpy(logits->data(), buf_->out_host.data(), bytes);
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
  StepPlan p;
  const StepBatch& run = PadForGraph(batch, &p);
  absl::Status s = Upload(run, &rows, &p);
  // Log-probs only for a caller that takes them; the records replace the ids copy.
  const bool records = p.logprobs && logprobs != nullptr;
  if (s.ok()) s = RunForward(&p);
  if (s.ok() && p.rows > 0) {
    const CUdeviceptr logits = buf_->logits.ptr();
    CUdeviceptr out = buf_->ids.ptr();
    const uint32_t vocab = static_cast<uint32_t>(config_.vocab_size);
    const uint32_t R = static_cast<uint32_t>(p.rows);
    // The draw reads the penalised copy when some row has penalty entries (rows without
    // entries are copied as they are); the log-probs below keep the raw logits.
    CUdeviceptr drawn = logits;
    if (p.penalties) {
      drawn = buf_->penalized.ptr();
      s = LaunchSlot(*cache_, k_->penalties, kernels::PenaltiesLaunch(k_->penalties_cfg, p.rows),
                     kernels::PenaltiesArgs{.logits = logits,
                                            .out = drawn,
                                            .offsets = p.pen_offsets,
                                            .entries = p.pen_entries,
                                            .repetition = p.repetition,
                                            .presence = p.presence,
                                            .frequency = p.frequency,
                                            .vocab = vocab,
                                            .num_rows = R});
    }
    if (!s.ok()) {
      // The failure is handled below.
    } else if (p.greedy) {
      s = LaunchSlot(
          *cache_, k_->argmax, kernels::ArgmaxLaunch(k_->argmax_cfg, p.rows),
          kernels::ArgmaxArgs{.logits = drawn, .out = out, .vocab = vocab, .num_rows = R});
    } else {
      s = LaunchSlot(*cache_, k_->sampling, kernels::SamplingLaunch(k_->sampling_cfg, p.rows),
                     kernels::SamplingArgs{.logits = drawn,
                                           .temperature = p.temperature,
                                           .top_k = p.top_k,
                                           .top_p = p.top_p,
                                           .min_p = p.min_p,
                                           .uniform = p.uniform,
                                           .out = out,
                                           .vocab = vocab,
                                           .num_rows = R});
    }
    if (s.ok() && records) {
      // On the raw logits, with the ids just sampled as the chosen tokens.
      const CUdeviceptr rec = buf_->records.ptr();
      s = LaunchSlot(*cache_, k_->logprobs, kernels::LogprobsLaunch(k_->logprobs_cfg, p.rows),
                     kernels::LogprobsArgs{.logits = logits,
                                           .chosen = out,
                                           .top_n = p.top_n,
                                           .out = rec,
                                           .vocab = vocab,
                                           .num_rows = R});
      out = rec;
    }
    if (s.ok()) {
      const size_t bytes =
          static_cast<size_t>(p.rows) * (records ? static_cast<size_t>(kLogprobsRecordBytes) : 4);
      s = device_->CopyToHost(buf_->out_host.data(), out, bytes,
                              records ? "log-prob records" : "sampled ids");
    }
  }
  if (!s.ok()) {
    (void)device_->Synchronize("after a failed step");
    return s;
  }
  if (s = device_->Synchronize("step"); !s.ok()) return s;
  ids->resize(p.rows);
  if (logprobs != nullptr) logprobs->resize(p.rows);
  if (p.rows > 0 && !records) {
    std::memcpy(ids->data(), buf_->out_host.data(), p.rows * 4);
    if (logprobs != nullptr) {
      for (int64_t r = 0; r < p.rows; ++r) {
        (*logprobs)[r].token = (*ids)[r];
        (*logprobs)[r].logprob = 0.0f;
        (*logprobs)[r].top.clear();
      }
    }
  }
  if (p.rows > 0 && records) {
    // Entry 0 carries the row's id and its log-prob, then the top entries in rank order
    // until the first unused {-1, -inf}.
    const uint8_t* base = buf_->out_host.data();
    for (int64_t r = 0; r < p.rows; ++r) {
      kernels::LogprobsEntry e[1 + kLogprobsTop];
      std::memcpy(e, base + r * kLogprobsRecordBytes, sizeof(e));
      SampleResult& out = (*logprobs)[r];
      (*ids)[r] = e[0].id;
      out.token = e[0].id;
      out.top.clear();
      const int32_t n = rows[r].logprobs;
      out.logprob = n > 0 ? e[0].logprob : 0.0f;
      for (int32_t i = 1; i <= n && e[i].id >= 0; ++i) out.top.push_back({e[i].id, e[i].logprob});
    }
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
