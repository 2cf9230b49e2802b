#include "engine/cuda/device_forward_ops.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/kernel_launch.h"

namespace ptxserve::cuda {

int64_t DeviceForwardOps::Rows(Act a) const {
  return a == Act::kRows || a == Act::kLogits ? step_.rows : step_.tokens;
}

CUdeviceptr DeviceForwardOps::Buffer(Act a) const {
  const StepBuffers& b = buffers_;
  switch (a) {
    case Act::kResidual:
      return b.x.ptr();
    case Act::kNormed:
      return b.h.ptr();
    case Act::kQ:  // rotated (RopeAndWriteKv); the product's q heads are in qkv rows
      return b.q.ptr();
    case Act::kK:  // in qkv rows, then in the K/V pools: no kernel takes them alone
    case Act::kV:
      return 0;
    case Act::kAttention:
      return b.attn.ptr();
    case Act::kGate:
      return b.gate_up.ptr();
    case Act::kUp:  // unfused; fused, up is the second half of each gate_up row
      return b.up(step_.tokens);
    case Act::kMlp:
      return b.act.ptr();
    case Act::kRows:
      return b.rows_in.ptr();
    case Act::kLogits:
      return b.logits.ptr();
  }
  return 0;
}

absl::Status DeviceForwardOps::Gemm(GemmSlots& gemm, Act in, CUdeviceptr weight, CUdeviceptr bias,
                                    CUdeviceptr out, bool accumulate) {
  const int64_t m = Rows(in);
  const int form = GemmForm(m);
  if (gemm.Accumulates(form) != accumulate) {
    return absl::InternalError(absl::StrCat("GEMM ", gemm.Key(form), ": the forward pass ",
                                            accumulate ? "adds" : "writes",
                                            " its product, the kernel set's GEMM does not"));
  }
  if (!gemm.reduce[form].used()) {
    return LaunchSlot(
        cache_, gemm.slot[form], gemm.Launch(form, m),
        kernels::GemmArgs{
            .x = Buffer(in), .w = weight, .bias = bias, .y = out, .m = static_cast<uint32_t>(m)});
  }
  // Split-K: the slices' partial sums into the workspace, then their sum and the epilogues.
  const CUdeviceptr ws = buffers_.gemm_split.ptr();
  if (absl::Status s = LaunchSlot(
          cache_, gemm.slot[form], gemm.Launch(form, m),
          kernels::GemmArgs{
              .x = Buffer(in), .w = weight, .bias = 0, .y = ws, .m = static_cast<uint32_t>(m)});
      !s.ok()) {
    return s;
  }
  return LaunchSlot(cache_, gemm.reduce[form], kernels::GemmReduceLaunch(gemm.reduce_cfg[form], m),
                    kernels::GemmReduceArgs{
                        .partial = ws, .bias = bias, .y = out, .m = static_cast<uint32_t>(m)});
}

absl::Status DeviceForwardOps::NormedGemm(GemmSlots& gemm, GemmSlots& fused, Act in,
                                          CUdeviceptr weight, CUdeviceptr bias, CUdeviceptr out) {
  if (pending_.in == 0) return Gemm(gemm, in, weight, bias, out, false);
  const PendingNorm norm = std::exchange(pending_, PendingNorm{});
  if (norm.out != in) {
    return absl::InternalError("a GEMM with a fused RMSNorm reads another activation");
  }
  const int64_t m = Rows(in);
  const int form = GemmForm(m);
  return LaunchSlot(cache_, fused.slot[form], fused.Launch(form, m),
                    kernels::NormGemmArgs{.x = norm.in,
                                          .norm_w = norm.weight,
                                          .w = weight,
                                          .bias = bias,
                                          .y = out,
                                          .m = static_cast<uint32_t>(m),
                                          .eps = static_cast<float>(config_.rms_norm_eps)});
}

absl::Status DeviceForwardOps::Embed() {
  return LaunchSlot(cache_, kernels_.embed,
                    kernels::EmbeddingLaunch(kernels_.embed_cfg, step_.tokens),
                    kernels::EmbeddingArgs{.table = weights_.embed.ptr(),
                                           .ids = step_.token_ids,
                                           .out = buffers_.x.ptr(),
                                           .num_tokens = static_cast<uint32_t>(step_.tokens),
                                           .vocab = static_cast<uint32_t>(config_.vocab_size)});
}

absl::Status DeviceForwardOps::GatherRows() {
  // An embedding lookup whose table is the residual stream and whose ids are the rows.
  return LaunchSlot(cache_, kernels_.gather,
                    kernels::EmbeddingLaunch(kernels_.gather_cfg, step_.rows),
                    kernels::EmbeddingArgs{.table = buffers_.x.ptr(),
                                           .ids = step_.logits_rows,
                                           .out = buffers_.rows_in.ptr(),
                                           .num_tokens = static_cast<uint32_t>(step_.rows),
                                           .vocab = static_cast<uint32_t>(step_.tokens)});
}

absl::Status DeviceForwardOps::RmsNorm(Act in, WeightRef weight, Act out) {
  const CUdeviceptr w =
      weight.role == Weight::kAttnNorm  ? weights_.layers[weight.layer].attn_norm.ptr()
      : weight.role == Weight::kMlpNorm ? weights_.layers[weight.layer].mlp_norm.ptr()
                                        : weights_.final_norm.ptr();
  const int64_t rows = Rows(in);
  GemmSlots* next = weight.role == Weight::kAttnNorm  ? &kernels_.qkv_norm
                    : weight.role == Weight::kMlpNorm ? &kernels_.gate_up_norm
                                                      : &kernels_.lm_head_norm;
  if (next->slot[GemmForm(rows)].used()) {
    pending_ = {.out = out, .in = Buffer(in), .weight = w};
    return absl::OkStatus();
  }
  // The GEMM that reads the output: in act_dtype when its form runs on tensor cores.
  const GemmSlots& reader = weight.role == Weight::kAttnNorm ? kernels_.qkv
                            : weight.role == Weight::kMlpNorm
                                ? (kernels_.fused_gate_up ? kernels_.gate_up : kernels_.gate)
                                : kernels_.lm_head;
  const bool half = reader.HalfInput(GemmForm(rows));
  return LaunchSlot(cache_, half ? kernels_.norm_half : kernels_.norm,
                    kernels::RmsNormLaunch(kernels_.norm_cfg, rows),
                    kernels::RmsNormArgs{.x = Buffer(in),
                                         .w = w,
                                         .out = Buffer(out),
                                         .num_rows = static_cast<uint32_t>(rows),
                                         .eps = static_cast<float>(config_.rms_norm_eps)});
}

absl::Status DeviceForwardOps::Linear(Act in, std::initializer_list<Projection> projections) {
  KernelSet& k = kernels_;
  if (projections.size() == 3 && projections.begin()[0].weight.role == Weight::kQ &&
      projections.begin()[1].weight.role == Weight::kK &&
      projections.begin()[2].weight.role == Weight::kV) {
    // Its output rows are [q | k | v], what rope_kv reads.
    const DeviceWeights::Layer& l = weights_.layers[projections.begin()->weight.layer];
    return NormedGemm(k.qkv, k.qkv_norm, in, l.wqkv.ptr(), l.bqkv.ptr(), buffers_.qkv.ptr());
  }
  if (k.fused_gate_up && projections.size() == 2 &&
      projections.begin()->weight.role == Weight::kGate) {
    // Its output rows are [gate | up], what the fused silu_mul reads; or, where the form
    // applies SwiGLU in its epilogue, already silu(gate) * up (SiluMul then has nothing to do).
    const int layer = projections.begin()->weight.layer;
    // The fused RMSNorm (GEMV forms) and SwiGLU (tensor-core forms) never meet in one form.
    const bool swiglu = k.gate_up.Swiglu(GemmForm(Rows(in)));
    return NormedGemm(k.gate_up, k.gate_up_norm, in, weights_.layers[layer].w_gate_up.ptr(), 0,
                      Buffer(swiglu ? Act::kMlp : Act::kGate));
  }
  if (projections.size() == 1 && projections.begin()->weight.role == Weight::kLmHead) {
    return NormedGemm(k.lm_head, k.lm_head_norm, in, weights_.lm_head_ptr(), 0,
                      Buffer(projections.begin()->out));
  }
  if (pending_.in != 0) {
    return absl::InternalError("Linear: an RMSNorm left to this GEMM, which cannot fuse it");
  }
  for (const Projection& p : projections) {
    const int layer = p.weight.layer;
    const DeviceWeights::Layer* l = layer >= 0 ? &weights_.layers[layer] : nullptr;
    GemmSlots* gemm = nullptr;
    CUdeviceptr weight = 0, bias = 0;
    switch (p.weight.role) {
      case Weight::kQ:
      case Weight::kK:
      case Weight::kV:
        return absl::InternalError(
            "Linear: q, k and v are one stacked product on the GPU; give the three together");
      case Weight::kO:
        gemm = &k.o;
        weight = l->wo.ptr();
        break;
      case Weight::kGate:
        gemm = &k.gate;
        weight = l->w_gate_up.ptr();
        break;
      case Weight::kUp:  // the second half of the stacked matrix
        gemm = &k.up;
        weight = l->w_gate_up.ptr() +
                 static_cast<CUdeviceptr>(config_.intermediate_size * k.gate.RowBytes());
        break;
      case Weight::kDown:
        gemm = &k.down;
        weight = l->w_down.ptr();
        break;
      default:
        return absl::InternalError("Linear: a norm weight is not a projection");
    }
    if (absl::Status s = Gemm(*gemm, in, weight, bias, Buffer(p.out), p.accumulate); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceForwardOps::RopeAndWriteKv(int layer) {
  return LaunchSlot(cache_, kernels_.rope_kv,
                    kernels::RopeKvLaunch(kernels_.rope_kv_cfg, step_.tokens),
                    kernels::RopeKvArgs{.qkv = buffers_.qkv.ptr(),
                                        .q = buffers_.q.ptr(),
                                        .positions = step_.positions,
                                        .inv_freq = weights_.inv_freq.ptr(),
                                        .slot_mapping = step_.slots,
                                        .k_pool = kv_.k[layer].ptr(),
                                        .v_pool = kv_.v[layer].ptr(),
                                        .num_tokens = static_cast<uint32_t>(step_.tokens)});
}

absl::Status DeviceForwardOps::Attention(int layer) {
  const DeviceStep& p = step_;
  const CUdeviceptr attn = buffers_.attn.ptr();
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  // The output in act_dtype when the o projection's form runs on tensor cores: flash
  // attention's rows and a mixed step's decode rows apart alike, since one o GEMM reads them.
  const bool half = kernels_.o.HalfInput(GemmForm(p.tokens));
  const kernels::DecodeAttentionConfig& shape = kernels_.attn_cfg[0][0];
  const CUdeviceptr row_elems = static_cast<CUdeviceptr>(shape.num_heads) * shape.head_dim;
  const CUdeviceptr q_row_bytes = row_elems * 4;
  const CUdeviceptr attn_row_bytes = row_elems * (half ? kernels::ElemSize(kernels_.act_dtype) : 4);
  // The decode kernel over `rows` rows from token row `row0` and sequence `seq0` on: views
  // into the step's buffers (decode mode: the rows are sequences seq0.., a token each).
  auto decode_attention = [&](bool ragged, int64_t row0, int64_t seq0, int64_t rows) {
    const CUdeviceptr r0 = static_cast<CUdeviceptr>(row0), s0 = static_cast<CUdeviceptr>(seq0);
    const kernels::DecodeAttentionArgs args{
        .q = buffers_.q.ptr() + r0 * q_row_bytes,
        .k_pool = kv_.k[layer].ptr(),
        .v_pool = kv_.v[layer].ptr(),
        .block_tables = p.block_tables + s0 * static_cast<CUdeviceptr>(p.max_blocks) * 4,
        .seq_lens = p.seq_lens + s0 * 4,
        .query_start = ragged ? p.query_start : 0,
        .positions = ragged ? p.positions : 0,
        .out = attn + r0 * attn_row_bytes,
        .partial_out = p.split ? buffers_.partial.ptr() : 0,
        .partial_lse = p.split ? buffers_.lse.ptr() : 0,
        .split_counters = p.split ? buffers_.split_counters.ptr() : 0,
        .max_blocks_per_seq = static_cast<uint32_t>(p.max_blocks),
        .num_seqs = static_cast<uint32_t>(ragged ? p.seqs : rows),
        .num_rows = static_cast<uint32_t>(rows),
        .scale = scale,
        .partition = static_cast<uint32_t>(p.partition)};
    return LaunchSlot(
        cache_, half ? kernels_.attn_half[ragged][p.split] : kernels_.attn[ragged][p.split],
        kernels::DecodeAttentionLaunch(kernels_.attn_shape[ragged][p.split],
                                       static_cast<int>(config_.num_kv_heads), rows, p.num_splits),
        args);
  };
  if (!p.flash) return decode_attention(p.ragged, 0, 0, p.tokens);
  // Flash attention takes the sequences before the decode rows (DeviceStep::decode_rows).
  const int64_t flash_rows = p.tokens - p.decode_rows, flash_seqs = p.seqs - p.decode_rows;
  absl::Status s = LaunchSlot(
      cache_, half ? kernels_.flash_half : kernels_.flash,
      kernels::FlashAttentionLaunch(kernels_.flash_cfg, flash_rows, flash_seqs),
      kernels::FlashAttentionArgs{.q = buffers_.q.ptr(),
                                  .k_pool = kv_.k[layer].ptr(),
                                  .v_pool = kv_.v[layer].ptr(),
                                  .block_tables = p.block_tables,
                                  .query_start = p.query_start,
                                  .positions = p.positions,
                                  .out = attn,
                                  .max_blocks_per_seq = static_cast<uint32_t>(p.max_blocks),
                                  .num_seqs = static_cast<uint32_t>(flash_seqs),
                                  .num_rows = static_cast<uint32_t>(flash_rows),
                                  .scale = scale});
  if (!s.ok() || p.decode_rows == 0) return s;
  return decode_attention(false, flash_rows, flash_seqs, p.decode_rows);
}

absl::Status DeviceForwardOps::SiluMul() {
  if (kernels_.fused_gate_up && kernels_.gate_up.Swiglu(GemmForm(step_.tokens))) {
    return absl::OkStatus();  // the gate/up GEMM wrote kMlp (Linear)
  }
  const uint32_t n = static_cast<uint32_t>(step_.tokens * config_.intermediate_size);
  const bool half = kernels_.down.HalfInput(GemmForm(step_.tokens));
  return LaunchSlot(cache_, half ? kernels_.silu_half : kernels_.silu,
                    kernels::SiluMulLaunch(kernels_.silu_cfg, n),
                    kernels::SiluMulArgs{.gate = Buffer(Act::kGate),
                                         .up = kernels_.fused_gate_up ? 0 : Buffer(Act::kUp),
                                         .out = Buffer(Act::kMlp),
                                         .n = n});
}

}  // namespace ptxserve::cuda
