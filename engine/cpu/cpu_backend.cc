#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/ops.h"
#include "engine/kv_sizing.h"
#include "engine/model/model_checks.h"
#include "engine/model/rope.h"
#include "engine/step_batch_check.h"
#include "engine/util/host_memory.h"

namespace ptxserve {
namespace {

// Appends tensor `t` converted to f32 to `out`, after checking it is present and has
// `shape`. `what` names it when the loader left the name empty.
absl::Status AppendTensor(const Tensor& t, const std::vector<int64_t>& shape,
                          const std::string& what, std::vector<float>* out) {
  if (absl::Status s = CheckTensorShape(t, shape, what); !s.ok()) return s;
  const size_t n = static_cast<size_t>(t.numel());
  const size_t old = out->size();
  out->resize(old + n);
  ConvertToFloat(t.dtype, t.data, n, out->data() + old);
  return absl::OkStatus();
}

// The shape every backend needs, then a KV cache to hold something.
absl::Status CheckConfig(const ModelConfig& c, const ModelTensors& tensors,
                         const KvCacheConfig& kv) {
  if (absl::Status s = CheckModelShape(c, tensors); !s.ok()) return s;
  if (kv.num_blocks <= 0 || kv.block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache needs positive num_blocks and block_size, got %d and %d",
                        kv.num_blocks, kv.block_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Model& model,
                                                               const KvCacheConfig& kv) {
  const ModelConfig& c = model.config;
  const ModelTensors& mt = model.tensors;
  if (absl::Status s = CheckConfig(c, mt, kv); !s.ok()) return s;
  // Both pools (K and V) of every layer, allocated below: refused up front when the host
  // cannot give them, rather than an out-of-memory kill halfway through.
  const int64_t kv_bytes = 2 * c.num_layers * static_cast<int64_t>(kv.num_blocks) * c.num_kv_heads *
                           kv.block_size * c.head_dim * DTypeSize(kv.dtype);
  if (const std::optional<int64_t> avail = AvailableHostMemoryBytes(); avail && kv_bytes > *avail) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the KV cache (%d blocks of %d tokens) needs %.2f GiB of host memory, more than the "
        "%.2f GiB available (MemAvailable); lower --kv-blocks or --kv-memory",
        kv.num_blocks, kv.block_size, kv_bytes / double(1 << 30), *avail / double(1 << 30)));
  }
  std::unique_ptr<CpuBackend> b(new CpuBackend(c, kv));
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t QD = c.q_dim(), KD = c.kv_dim();

  auto load = [](const Tensor& t, std::vector<int64_t> shape, const std::string& what,
                 std::vector<float>* out) { return AppendTensor(t, shape, what, out); };
  if (auto s = load(mt.embed, {V, H}, "embed", &b->embed_); !s.ok()) return s;
  if (auto s = load(mt.final_norm, {H}, "final_norm", &b->final_norm_); !s.ok()) return s;
  const bool tied = c.tie_word_embeddings || mt.lm_head.data == mt.embed.data;
  if (!tied) {
    if (auto s = load(mt.lm_head, {V, H}, "lm_head", &b->lm_head_); !s.ok()) return s;
  }
  const size_t pool_bytes = static_cast<size_t>(kv.num_blocks) * c.num_kv_heads * kv.block_size *
                            c.head_dim * DTypeSize(kv.dtype);
  b->layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    Layer& l = b->layers_[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    absl::Status s = load(lt.attn_norm, {H}, p + "attn_norm", &l.attn_norm);
    if (s.ok()) s = load(lt.wq, {QD, H}, p + "wq", &l.wqkv);
    if (s.ok()) s = load(lt.wk, {KD, H}, p + "wk", &l.wqkv);
    if (s.ok()) s = load(lt.wv, {KD, H}, p + "wv", &l.wqkv);
    if (s.ok() && c.attention_bias) {
      s = load(lt.bq, {QD}, p + "bq", &l.bqkv);
      if (s.ok()) s = load(lt.bk, {KD}, p + "bk", &l.bqkv);
      if (s.ok()) s = load(lt.bv, {KD}, p + "bv", &l.bqkv);
    }
    if (s.ok()) s = load(lt.wo, {H, QD}, p + "wo", &l.wo);
    if (s.ok()) s = load(lt.mlp_norm, {H}, p + "mlp_norm", &l.mlp_norm);
    if (s.ok()) s = load(lt.w_gate, {I, H}, p + "w_gate", &l.w_gate_up);
    if (s.ok()) s = load(lt.w_up, {I, H}, p + "w_up", &l.w_gate_up);
    if (s.ok()) s = load(lt.w_down, {H, I}, p + "w_down", &l.w_down);
    if (!s.ok()) return s;
    l.k_pool.assign(pool_bytes, 0);
    l.v_pool.assign(pool_bytes, 0);
  }
  b->inv_freq_.resize(c.head_dim / 2);
  RopeInvFreq(c, b->inv_freq_.data());
  return b;
}

size_t CpuBackend::weight_bytes() const {
  size_t n = embed_.size() + final_norm_.size() + lm_head_.size();
  for (const Layer& l : layers_) {
    n += l.attn_norm.size() + l.wqkv.size() + l.bqkv.size() + l.wo.size() + l.mlp_norm.size() +
         l.w_gate_up.size() + l.w_down.size();
  }
  return n * sizeof(float);
}

size_t CpuBackend::step_weight_bytes() const {
  size_t n = static_cast<size_t>(config_.vocab_size * config_.hidden_size);  // LM head
  for (const Layer& l : layers_)
    n += l.wqkv.size() + l.wo.size() + l.w_gate_up.size() + l.w_down.size();
  return n * sizeof(float);
}

void CpuBackend::Reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  const ModelConfig& c = config_;
  const int64_t qkv = c.q_dim() + 2 * c.kv_dim();
  x_.resize(tokens * c.hidden_size);
  h_.resize(tokens * std::max(c.hidden_size, c.q_dim()));
  qkv_.resize(tokens * qkv);
  q_.resize(tokens * c.q_dim());
  k_.resize(tokens * c.kv_dim());
  v_.resize(tokens * c.kv_dim());
  gate_up_.resize(tokens * 2 * c.intermediate_size);
  act_.resize(tokens * c.intermediate_size);
  tmp_.resize(tokens * c.hidden_size);
  capacity_ = tokens;
}

void CpuBackend::RunLayer(Layer& l, const StepBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t QD = c.q_dim(), KD = c.kv_dim(), QKV = QD + 2 * KD;
  const float eps = static_cast<float>(c.rms_norm_eps);

  cpu::RmsNorm(x_.data(), l.attn_norm.data(), T, H, eps, h_.data());
  cpu::Gemm(h_.data(), l.wqkv.data(), l.bqkv.empty() ? nullptr : l.bqkv.data(), T, QKV, H,
            qkv_.data());
  // The fused projection's rows are [q | k | v]; RoPE and attention want each packed.
  for (int64_t t = 0; t < T; ++t) {
    const float* row = qkv_.data() + t * QKV;
    std::memcpy(q_.data() + t * QD, row, QD * sizeof(float));
    std::memcpy(k_.data() + t * KD, row + QD, KD * sizeof(float));
    std::memcpy(v_.data() + t * KD, row + QD + KD, KD * sizeof(float));
  }
  cpu::Rope(q_.data(), k_.data(), batch.positions.data(), T, c.num_heads, c.num_kv_heads,
            c.head_dim, inv_freq_.data(), c.rope_style);
  cpu::KvScatter(k_.data(), v_.data(), batch.slot_mapping.data(), T, c.num_kv_heads, c.head_dim,
                 kv_.block_size, kv_.dtype, l.k_pool.data(), l.v_pool.data());
  cpu::PagedAttention(q_.data(), batch.positions.data(), batch.query_start.data(),
                      batch.seq_lens.data(), batch.block_tables.data(), batch.max_blocks_per_seq,
                      batch.num_seqs(), c.num_heads, c.num_kv_heads, c.head_dim, kv_.block_size,
                      kv_.dtype, l.k_pool.data(), l.v_pool.data(),
                      1.0f / std::sqrt(static_cast<float>(c.head_dim)), h_.data());
  cpu::Gemm(h_.data(), l.wo.data(), nullptr, T, H, QD, tmp_.data());
  cpu::AddInPlace(x_.data(), tmp_.data(), T * H);

  cpu::RmsNorm(x_.data(), l.mlp_norm.data(), T, H, eps, h_.data());
  cpu::Gemm(h_.data(), l.w_gate_up.data(), nullptr, T, 2 * I, H, gate_up_.data());
  for (int64_t t = 0; t < T; ++t) {
    const float* gu = gate_up_.data() + t * 2 * I;
    cpu::SiluMul(gu, gu + I, I, act_.data() + t * I);
  }
  cpu::Gemm(act_.data(), l.w_down.data(), nullptr, T, H, I, tmp_.data());
  cpu::AddInPlace(x_.data(), tmp_.data(), T * H);
}

absl::Status CpuBackend::Step(const StepBatch& batch, std::vector<float>* logits) {
  if (absl::Status s = ValidateStepBatch(batch, config_, kv_); !s.ok()) return s;
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t H = c.hidden_size;
  Reserve(T);
  cpu::Embed(embed_.data(), batch.token_ids.data(), T, H, x_.data());
  for (Layer& l : layers_) RunLayer(l, batch);

  // Only the requested rows go through the final norm and the LM head.
  const int64_t R = static_cast<int64_t>(batch.logits_rows.size());
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(tmp_.data() + r * H, x_.data() + batch.logits_rows[r] * H, H * sizeof(float));
  }
  cpu::RmsNorm(tmp_.data(), final_norm_.data(), R, H, static_cast<float>(c.rms_norm_eps),
               tmp_.data());
  logits->resize(R * c.vocab_size);
  cpu::Gemm(tmp_.data(), lm_head_.empty() ? embed_.data() : lm_head_.data(), nullptr, R,
            c.vocab_size, H, logits->data());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const KvCacheConfig& kv_in) {
  KvCacheConfig kv = kv_in;
  if (kv.num_blocks <= 0) kv.num_blocks = DefaultHostKvBlocks(model.config, kv, 1);
  auto b = CpuBackend::Create(model, kv);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace ptxserve
