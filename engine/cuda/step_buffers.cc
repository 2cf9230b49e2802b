#include "engine/cuda/step_buffers.h"

#include <algorithm>
#include <utility>

namespace ptxserve::cuda {

absl::Status StepBuffers::Reserve(int64_t tokens, int64_t rows, size_t meta_bytes) {
  const ModelConfig& c = config_;
  auto alloc = [&](DeviceBuffer* out, int64_t bytes, const char* what) -> absl::Status {
    absl::StatusOr<DeviceBuffer> d =
        device_->Alloc(static_cast<size_t>(std::max<int64_t>(bytes, 4)), what);
    if (!d.ok()) return d.status();
    *out = *std::move(d);
    return absl::OkStatus();
  };
  if (tokens > tokens_) {
    const int64_t t = std::max(tokens, tokens_ * 3 / 2);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    const int64_t qd = c.num_heads * head_dim_, kd = c.num_kv_heads * head_dim_;
    absl::Status s = alloc(&x, t * H * 4, "activations x");
    if (s.ok()) s = alloc(&h, t * H * 4, "activations h");
    if (s.ok()) s = alloc(&qkv, t * (qd + 2 * kd) * 4, "activations qkv");
    if (s.ok()) s = alloc(&q, t * qd * 4, "activations q");
    if (s.ok()) s = alloc(&attn, t * qd * 4, "activations attn");
    // + 256: unfused, the up half is aligned up to the next 256 bytes (up()).
    if (s.ok()) s = alloc(&gate_up, t * 2 * I * 4 + 256, "activations gate_up");
    if (s.ok()) s = alloc(&act, t * I * 4, "activations act");
    if (!s.ok()) return s;
    tokens_ = t;
  }
  if (rows > rows_) {
    const int64_t r = std::max(rows, rows_ * 3 / 2);
    absl::Status s = alloc(&rows_in, r * c.hidden_size * 4, "logits rows");
    if (s.ok()) s = alloc(&logits, r * c.vocab_size * 4, "logits");
    if (s.ok()) s = alloc(&penalized, r * c.vocab_size * 4, "penalised logits");
    if (s.ok()) s = alloc(&ids, r * 4, "sampled ids");
    if (s.ok()) s = alloc(&records, r * kLogprobsRecordBytes, "log-prob records");
    if (!s.ok()) return s;
    // Whichever comes back is larger: logits rows, or records (a vocabulary under 42).
    const int64_t per_row = std::max<int64_t>(c.vocab_size * 4, kLogprobsRecordBytes);
    absl::StatusOr<PinnedBuffer> p =
        device_->AllocPinned(static_cast<size_t>(r * per_row), "logits (host)");
    if (!p.ok()) return p.status();
    out_host = *std::move(p);
    rows_ = r;
  }
  if (meta_bytes > meta_bytes_) {
    const size_t m = std::max(meta_bytes, meta_bytes_ * 3 / 2);
    if (absl::Status s = alloc(&meta, static_cast<int64_t>(m), "step metadata"); !s.ok()) {
      return s;
    }
    absl::StatusOr<PinnedBuffer> p = device_->AllocPinned(m, "step metadata (host)");
    if (!p.ok()) return p.status();
    meta_host = *std::move(p);
    meta_bytes_ = m;
  }
  return absl::OkStatus();
}

absl::Status StepBuffers::ReserveSplits(int64_t rows, int64_t splits) {
  if (rows > split_rows_) {
    const int64_t r = std::max(rows, split_rows_ * 3 / 2);
    const size_t bytes = static_cast<size_t>(r * config_.num_heads) * 4;
    absl::StatusOr<DeviceBuffer> c = device_->Alloc(bytes, "attention split counters");
    if (!c.ok()) return c.status();
    // The kernel counts from zero and leaves zeros, so only a new buffer is cleared.
    if (absl::Status s = device_->Memset(c->ptr(), 0, bytes, "attention split counters"); !s.ok()) {
      return s;
    }
    split_counters = *std::move(c);
    split_rows_ = r;
  }
  const int64_t elems = rows * config_.num_heads * splits * head_dim_;
  if (elems <= split_elems_) return absl::OkStatus();
  const int64_t e = std::max(elems, split_elems_ * 3 / 2);
  absl::StatusOr<DeviceBuffer> p = device_->Alloc(static_cast<size_t>(e) * 4, "attention partials");
  if (!p.ok()) return p.status();
  absl::StatusOr<DeviceBuffer> l =
      device_->Alloc(static_cast<size_t>(e / head_dim_ + 1) * 4, "attention partial lse");
  if (!l.ok()) return l.status();
  partial = *std::move(p);
  lse = *std::move(l);
  split_elems_ = e;
  return absl::OkStatus();
}

absl::Status StepBuffers::ReserveGemmWorkspace(int64_t floats) {
  if (floats <= gemm_split_floats_) return absl::OkStatus();
  const int64_t f = std::max(floats, gemm_split_floats_ * 3 / 2);
  absl::StatusOr<DeviceBuffer> d = device_->Alloc(static_cast<size_t>(f) * 4, "split-K workspace");
  if (!d.ok()) return d.status();
  gemm_split = *std::move(d);
  gemm_split_floats_ = f;
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
