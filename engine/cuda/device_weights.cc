// Weight upload: shape checks, the padded head layout, dtype unification per role and the
// chunked copy through pinned staging memory.
#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model_checks.h"
#include "engine/model/rope.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {
namespace {

DType ToDType(kernels::ElemType t) {
  switch (t) {
    case kernels::ElemType::kF16:
      return DType::kF16;
    case kernels::ElemType::kBF16:
      return DType::kBF16;
    case kernels::ElemType::kF32:
      break;
  }
  return DType::kF32;
}

// The tensor's elements as `dt` bytes (a copy; converted when the file dtype differs).
std::vector<uint8_t> AsDType(const Tensor& t, DType dt) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint8_t> out(n * DTypeSize(dt));
  if (t.dtype == dt) {
    std::memcpy(out.data(), t.data, out.size());
  } else {
    std::vector<float> f(n);
    ConvertToFloat(t.dtype, t.data, n, f.data());
    ConvertFromFloat(dt, f.data(), n, out.data());
  }
  return out;
}

// [heads * d][row_bytes] -> [heads * dp][row_bytes]: row j of a head moves to pad[j],
// the rest stays zero.
std::vector<uint8_t> PadRows(const std::vector<uint8_t>& src, int64_t heads, int64_t d, int64_t dp,
                             const std::vector<int64_t>& pad, size_t row_bytes) {
  std::vector<uint8_t> out(static_cast<size_t>(heads * dp) * row_bytes, 0);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < d; ++j) {
      std::memcpy(out.data() + (h * dp + pad[j]) * row_bytes, src.data() + (h * d + j) * row_bytes,
                  row_bytes);
    }
  }
  return out;
}

// [rows][heads * d] -> [rows][heads * dp] by the same column map.
std::vector<uint8_t> PadCols(const std::vector<uint8_t>& src, int64_t rows, int64_t heads,
                             int64_t d, int64_t dp, const std::vector<int64_t>& pad, size_t es) {
  std::vector<uint8_t> out(static_cast<size_t>(rows * heads * dp) * es, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < d; ++j) {
        std::memcpy(out.data() + ((r * heads + h) * dp + pad[j]) * es,
                    src.data() + ((r * heads + h) * d + j) * es, es);
      }
    }
  }
  return out;
}

// Copies host bytes to the device through one pinned staging buffer, chunk by chunk
// (pageable sources are not safe for async copies on every driver), logging progress.
class Uploader {
 public:
  Uploader(Device* device, bool log) : device_(device), log_(log) {}

  absl::Status Init(size_t total) {
    total_ = total;
    const size_t cap = std::min<size_t>(std::max<size_t>(total, 1), size_t{32} << 20);
    absl::StatusOr<PinnedBuffer> p = device_->AllocPinned(cap, "weight upload staging");
    if (!p.ok()) return p.status();
    staging_ = *std::move(p);
    return absl::OkStatus();
  }

  // A new device buffer holding `n` bytes from `src`.
  absl::StatusOr<DeviceBuffer> Upload(const void* src, size_t n, const std::string& what) {
    absl::StatusOr<DeviceBuffer> buf = device_->Alloc(n, what);
    if (!buf.ok()) return buf.status();
    const auto* p = static_cast<const uint8_t*>(src);
    for (size_t off = 0; off < n; off += staging_.size()) {
      const size_t k = std::min(staging_.size(), n - off);
      std::memcpy(staging_.data(), p + off, k);
      if (absl::Status st = device_->CopyToDevice(buf->ptr() + off, staging_.data(), k, what);
          !st.ok()) {
        return st;
      }
      // The staging buffer is refilled next: wait for this copy.
      if (absl::Status st = device_->Synchronize(what); !st.ok()) return st;
    }
    done_ += n;
    if (log_ && total_ > 0 && done_ * 10 / total_ != (done_ - n) * 10 / total_) {
      PTX_LOG(INFO) << "weights on " << device_->info().name << ": " << (done_ >> 20) << " / "
                    << (total_ >> 20) << " MiB";
    }
    return buf;
  }
  absl::StatusOr<DeviceBuffer> Upload(const std::vector<uint8_t>& v, const std::string& what) {
    return Upload(v.data(), v.size(), what);
  }
  absl::StatusOr<DeviceBuffer> UploadF32(const std::vector<float>& v, const std::string& what) {
    return Upload(v.data(), v.size() * sizeof(float), what);
  }

 private:
  Device* device_;
  bool log_;
  PinnedBuffer staging_;
  size_t total_ = 0, done_ = 0;
};

}  // namespace

PaddedHeads PadHeads(const ModelConfig& c) {
  PaddedHeads h;
  h.dim = c.head_dim;
  h.padded = PaddedHeadDim(h.dim);
  h.index.resize(h.dim);
  for (int64_t j = 0; j < h.dim; ++j) {
    const bool second_half = c.rope_style == RopeStyle::kRotateHalf && j >= h.dim / 2;
    h.index[j] = second_half ? h.padded / 2 + (j - h.dim / 2) : j;
  }
  return h;
}

absl::StatusOr<DeviceWeights> UploadWeights(const Model& model, const PaddedHeads& heads,
                                            Device& device, bool log_progress) {
  const ModelConfig& c = model.config;
  const ModelTensors& mt = model.tensors;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t NH = c.num_heads, KVH = c.num_kv_heads, d = heads.dim, dp = heads.padded;
  const std::vector<int64_t>& pad = heads.index;
  DeviceWeights w;

  // Types and shapes first: nothing is allocated for a model that cannot load.
  absl::Status s = CheckNoQuantizedTensors(mt, "the GPU backend");
  if (s.ok()) s = CheckTensorShape(mt.embed, {V, H}, "embed");
  if (s.ok()) s = CheckTensorShape(mt.final_norm, {H}, "final_norm");
  const bool tied = c.tie_word_embeddings || mt.lm_head.data == mt.embed.data;
  if (s.ok() && !tied) s = CheckTensorShape(mt.lm_head, {V, H}, "lm_head");
  for (int64_t i = 0; s.ok() && i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    s = CheckTensorShape(lt.attn_norm, {H}, p + "attn_norm");
    if (s.ok()) s = CheckTensorShape(lt.wq, {NH * d, H}, p + "wq");
    if (s.ok()) s = CheckTensorShape(lt.wk, {KVH * d, H}, p + "wk");
    if (s.ok()) s = CheckTensorShape(lt.wv, {KVH * d, H}, p + "wv");
    if (s.ok() && c.attention_bias) {
      s = CheckTensorShape(lt.bq, {NH * d}, p + "bq");
      if (s.ok()) s = CheckTensorShape(lt.bk, {KVH * d}, p + "bk");
      if (s.ok()) s = CheckTensorShape(lt.bv, {KVH * d}, p + "bv");
    }
    if (s.ok()) s = CheckTensorShape(lt.wo, {H, NH * d}, p + "wo");
    if (s.ok()) s = CheckTensorShape(lt.mlp_norm, {H}, p + "mlp_norm");
    if (s.ok()) s = CheckTensorShape(lt.w_gate, {I, H}, p + "w_gate");
    if (s.ok()) s = CheckTensorShape(lt.w_up, {I, H}, p + "w_up");
    if (s.ok()) s = CheckTensorShape(lt.w_down, {H, I}, p + "w_down");
  }
  if (!s.ok()) return s;

  const LayerTensors& l0 = mt.layers[0];
  w.types.embed = ToElemType(mt.embed.dtype);
  w.types.lm_head = tied ? w.types.embed : ToElemType(mt.lm_head.dtype);
  w.types.q = ToElemType(l0.wq.dtype);
  w.types.k = ToElemType(l0.wk.dtype);
  w.types.v = ToElemType(l0.wv.dtype);
  w.types.o = ToElemType(l0.wo.dtype);
  w.types.gate_up = ToElemType(l0.w_gate.dtype);
  w.types.down = ToElemType(l0.w_down.dtype);

  const auto es = [](kernels::ElemType t) { return static_cast<size_t>(kernels::ElemSize(t)); };
  size_t total = V * H * es(w.types.embed) + (tied ? 0 : V * H * es(w.types.lm_head)) + H * 4;
  const size_t layer_bytes = 2 * H * 4 + NH * dp * H * (es(w.types.q) + es(w.types.o)) +
                             KVH * dp * H * (es(w.types.k) + es(w.types.v)) +
                             2 * I * H * es(w.types.gate_up) + H * I * es(w.types.down) +
                             (c.attention_bias ? (NH + 2 * KVH) * dp * 4 : 0);
  total += layer_bytes * c.num_layers;
  w.step_bytes = V * H * es(w.types.lm_head) + (layer_bytes - 2 * H * 4) * c.num_layers;
  Uploader up(&device, log_progress);
  if (absl::Status st = up.Init(total); !st.ok()) return st;
  if (log_progress) {
    PTX_LOG(INFO) << "uploading " << (total >> 20) << " MiB of weights to " << device.info().name;
  }

  auto upload_as = [&](const Tensor& t, kernels::ElemType et, const std::string& what,
                       DeviceBuffer* out) -> absl::Status {
    absl::StatusOr<DeviceBuffer> b =
        t.dtype == ToDType(et) ? up.Upload(t.data, static_cast<size_t>(t.numel()) * es(et), what)
                               : up.Upload(AsDType(t, ToDType(et)), what);
    if (!b.ok()) return b.status();
    *out = *std::move(b);
    return absl::OkStatus();
  };
  auto put = [](absl::StatusOr<DeviceBuffer> b, DeviceBuffer* out) -> absl::Status {
    if (!b.ok()) return b.status();
    *out = *std::move(b);
    return absl::OkStatus();
  };
  const bool padded = dp != d;
  // q/k/v projections (and their biases) into the padded head layout.
  auto upload_heads = [&](const Tensor& t, kernels::ElemType et, int64_t heads,
                          const std::string& what, DeviceBuffer* out) -> absl::Status {
    if (!padded) return upload_as(t, et, what, out);
    return put(up.Upload(PadRows(AsDType(t, ToDType(et)), heads, d, dp, pad, H * es(et)), what),
               out);
  };
  auto upload_bias = [&](const Tensor& t, int64_t heads, const std::string& what,
                         DeviceBuffer* out) -> absl::Status {
    std::vector<uint8_t> b = AsDType(t, DType::kF32);
    if (padded) b = PadRows(b, heads, d, dp, pad, 4);
    return put(up.Upload(b, what), out);
  };

  if (s = upload_as(mt.embed, w.types.embed, "embed", &w.embed); !s.ok()) return s;
  if (s = upload_as(mt.final_norm, kernels::ElemType::kF32, "final_norm", &w.final_norm); !s.ok()) {
    return s;
  }
  if (!tied) {
    if (s = upload_as(mt.lm_head, w.types.lm_head, "lm_head", &w.lm_head); !s.ok()) return s;
  }
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    DeviceWeights::Layer& l = w.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    s = upload_as(lt.attn_norm, kernels::ElemType::kF32, p + "attn_norm", &l.attn_norm);
    if (s.ok()) s = upload_heads(lt.wq, w.types.q, NH, p + "wq", &l.wq);
    if (s.ok()) s = upload_heads(lt.wk, w.types.k, KVH, p + "wk", &l.wk);
    if (s.ok()) s = upload_heads(lt.wv, w.types.v, KVH, p + "wv", &l.wv);
    if (s.ok() && c.attention_bias) {
      s = upload_bias(lt.bq, NH, p + "bq", &l.bq);
      if (s.ok()) s = upload_bias(lt.bk, KVH, p + "bk", &l.bk);
      if (s.ok()) s = upload_bias(lt.bv, KVH, p + "bv", &l.bv);
    }
    if (s.ok()) {
      if (padded) {
        s = put(
            up.Upload(PadCols(AsDType(lt.wo, ToDType(w.types.o)), H, NH, d, dp, pad, es(w.types.o)),
                      p + "wo"),
            &l.wo);
      } else {
        s = upload_as(lt.wo, w.types.o, p + "wo", &l.wo);
      }
    }
    if (s.ok()) s = upload_as(lt.mlp_norm, kernels::ElemType::kF32, p + "mlp_norm", &l.mlp_norm);
    if (s.ok()) {
      // gate and up stacked into one [2I, H] matrix: one GEMM feeds the fused silu_mul.
      std::vector<uint8_t> gu = AsDType(lt.w_gate, ToDType(w.types.gate_up));
      std::vector<uint8_t> u = AsDType(lt.w_up, ToDType(w.types.gate_up));
      gu.insert(gu.end(), u.begin(), u.end());
      s = put(up.Upload(gu, p + "w_gate_up"), &l.w_gate_up);
    }
    if (s.ok()) s = upload_as(lt.w_down, w.types.down, p + "w_down", &l.w_down);
    if (!s.ok()) return s;
  }

  // RoPE frequencies in the padded layout: pair i keeps inv_freq[i]; padding pairs
  // rotate zeros, so their frequency does not matter.
  std::vector<float> inv(d / 2);
  RopeInvFreq(c, inv.data());
  std::vector<float> inv_p(dp / 2, 0.0f);
  std::copy(inv.begin(), inv.end(), inv_p.begin());
  if (s = put(up.UploadF32(inv_p, "rope inv_freq"), &w.inv_freq); !s.ok()) return s;
  w.bytes = total;
  return w;
}

}  // namespace ptxserve::cuda
