// Weight upload: shape checks, the padded head layout, dtype unification per role, block
// weights as stored, and the chunked copy through pinned staging memory.
#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model_checks.h"
#include "engine/model/quant.h"
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

// The tensor's storage as a message names it: its block format, else its element type.
std::string FormatOf(const Tensor& t) {
  return std::string(t.quant == QuantType::kNone ? DTypeName(t.dtype) : QuantName(t.quant));
}

// The block format the quantized GEMV reads `t` in (nullopt: plain elements), or an error
// naming a format it does not decode.
absl::StatusOr<std::optional<kernels::BlockFormat>> BlocksOf(const Tensor& t) {
  switch (t.quant) {
    case QuantType::kNone:
      return std::nullopt;
    case QuantType::kQ8_0:
      return kernels::BlockFormat::kQ8_0;
    case QuantType::kQ4_0:
      return kernels::BlockFormat::kQ4_0;
    case QuantType::kFp8E4M3:
      return kernels::BlockFormat::kFp8E4M3;
    case QuantType::kInt4G128:
      return kernels::BlockFormat::kInt4G128;
    case QuantType::kQ4_K:
    case QuantType::kQ6_K:
      break;
  }
  return absl::UnimplementedError(absl::StrCat("tensor ", t.name, " is ", FormatOf(t),
                                               "; the GPU backend serves f32/f16/bf16 and "
                                               "q8_0/q4_0/fp8_e4m3/int4_g128 weights"));
}

// The tensor's elements as f32 (blocks decoded, element types widened).
std::vector<uint8_t> Dequantized(const Tensor& t) {
  const int64_t row = t.shape.back(), row_bytes = QuantRowBytes(t.quant, row);
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * 4);
  for (int64_t r = 0; r * row < t.numel(); ++r) {
    DequantizeRow(t.quant, static_cast<const uint8_t*>(t.data) + r * row_bytes, row,
                  reinterpret_cast<float*>(out.data()) + r * row);
  }
  return out;
}

// A block tensor's bytes as stored.
std::vector<uint8_t> BlockBytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.shape.front() * QuantRowBytes(t.quant, t.shape.back()));
}

// Zero bytes up to a multiple of 16: the quantized GEMV reads whole 16-byte units
// (kernels/gemm_quant.h).
std::vector<uint8_t> PadTo16(std::vector<uint8_t> v) {
  v.resize((v.size() + 15) / 16 * 16, 0);
  return v;
}

// The matrices' rows one after another: one weight the GEMM reads as a single product.
// Rows are bytes, so element and block rows stack alike.
std::vector<uint8_t> Stack(std::vector<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out = std::move(parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) out.insert(out.end(), parts[i].begin(), parts[i].end());
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

  // Formats, then shapes: nothing is allocated for a model that cannot load, and a block
  // format the GPU cannot read is named before any shape rule of its blocks.
  const bool tied = c.tie_word_embeddings || mt.lm_head.data == mt.embed.data;
  // Block formats by role: layer 0's, which every layer must share (blocks are uploaded as
  // stored, never converted); gate and up are stacked into one matrix, so they share one.
  const LayerTensors& l0 = mt.layers[0];
  auto role_blocks = [&](const Tensor LayerTensors::*role,
                         std::optional<kernels::BlockFormat>* out) -> absl::Status {
    absl::StatusOr<std::optional<kernels::BlockFormat>> b0 = BlocksOf(l0.*role);
    if (!b0.ok()) return b0.status();
    for (const LayerTensors& lt : mt.layers) {
      const Tensor& t = lt.*role;
      if (absl::StatusOr<std::optional<kernels::BlockFormat>> b = BlocksOf(t); !b.ok()) {
        return b.status();
      }
      if (t.quant != (l0.*role).quant) {
        return absl::UnimplementedError(absl::StrCat(
            "tensor ", t.name, " is ", FormatOf(t), " but ", (l0.*role).name, " is ",
            FormatOf(l0.*role), "; the GPU backend takes one block format per weight"));
      }
    }
    *out = *b0;
    return absl::OkStatus();
  };
  const bool padded = dp != d;
  absl::Status s = role_blocks(&LayerTensors::wq, &w.types.q_blocks);
  if (s.ok()) s = role_blocks(&LayerTensors::wk, &w.types.k_blocks);
  if (s.ok()) s = role_blocks(&LayerTensors::wv, &w.types.v_blocks);
  if (s.ok()) s = role_blocks(&LayerTensors::wo, &w.types.o_blocks);
  if (s.ok()) s = role_blocks(&LayerTensors::w_gate, &w.types.gate_up_blocks);
  std::optional<kernels::BlockFormat> up_blocks;
  if (s.ok()) s = role_blocks(&LayerTensors::w_up, &up_blocks);
  if (s.ok() && up_blocks != w.types.gate_up_blocks) {
    s = absl::UnimplementedError(absl::StrCat("tensor ", l0.w_up.name, " is ", FormatOf(l0.w_up),
                                              " but ", l0.w_gate.name, " is ", FormatOf(l0.w_gate),
                                              "; the GPU backend stacks them into one matrix"));
  }
  if (s.ok()) s = role_blocks(&LayerTensors::w_down, &w.types.down_blocks);
  // The embedding gather and the LM head read blocks as stored, so a tied head is the
  // embedding's one buffer.
  const Tensor& head = tied ? mt.embed : mt.lm_head;
  if (s.ok()) {
    absl::StatusOr<std::optional<kernels::BlockFormat>> b = BlocksOf(mt.embed);
    s = b.status();
    if (s.ok()) w.types.embed_blocks = *b;
  }
  if (s.ok()) {
    absl::StatusOr<std::optional<kernels::BlockFormat>> b = BlocksOf(head);
    s = b.status();
    if (s.ok()) w.types.lm_head_blocks = *b;
  }
  if (!s.ok()) return s;
  s = CheckTensorShape(mt.embed, {V, H}, "embed", /*blocks_ok=*/true);
  if (s.ok()) s = CheckTensorShape(mt.final_norm, {H}, "final_norm");
  if (s.ok() && !tied) s = CheckTensorShape(mt.lm_head, {V, H}, "lm_head", /*blocks_ok=*/true);
  for (int64_t i = 0; s.ok() && i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    s = CheckTensorShape(lt.attn_norm, {H}, p + "attn_norm");
    if (s.ok()) s = CheckTensorShape(lt.wq, {NH * d, H}, p + "wq", /*blocks_ok=*/true);
    if (s.ok()) s = CheckTensorShape(lt.wk, {KVH * d, H}, p + "wk", /*blocks_ok=*/true);
    if (s.ok()) s = CheckTensorShape(lt.wv, {KVH * d, H}, p + "wv", /*blocks_ok=*/true);
    if (s.ok() && c.attention_bias) {
      s = CheckTensorShape(lt.bq, {NH * d}, p + "bq");
      if (s.ok()) s = CheckTensorShape(lt.bk, {KVH * d}, p + "bk");
      if (s.ok()) s = CheckTensorShape(lt.bv, {KVH * d}, p + "bv");
    }
    if (s.ok()) s = CheckTensorShape(lt.wo, {H, NH * d}, p + "wo", /*blocks_ok=*/true);
    if (s.ok()) s = CheckTensorShape(lt.mlp_norm, {H}, p + "mlp_norm");
    if (s.ok()) s = CheckTensorShape(lt.w_gate, {I, H}, p + "w_gate", /*blocks_ok=*/true);
    if (s.ok()) s = CheckTensorShape(lt.w_up, {I, H}, p + "w_up", /*blocks_ok=*/true);
    if (s.ok()) s = CheckTensorShape(lt.w_down, {H, I}, p + "w_down", /*blocks_ok=*/true);
  }
  if (!s.ok()) return s;

  // o's columns are padded per head, and a block (32 or 128) cannot be split: with padded heads a
  // block o is uploaded decoded to f32 instead.
  const bool o_decoded = padded && w.types.o_blocks.has_value();
  if (o_decoded) w.types.o_blocks.reset();

  const auto elem_type = [](const Tensor& t) {
    return t.quant == QuantType::kNone ? ToElemType(t.dtype) : kernels::ElemType::kF32;
  };
  w.types.embed = elem_type(mt.embed);
  w.types.lm_head = tied ? w.types.embed : elem_type(mt.lm_head);
  w.types.q = elem_type(l0.wq);
  w.types.k = elem_type(l0.wk);
  w.types.v = elem_type(l0.wv);
  // q, k and v are one stacked matrix, so one type: a model whose three differ (rare) has
  // them as f32, decoded and widened exactly, as the CPU backend computes with them.
  if (w.types.k != w.types.q || w.types.v != w.types.q || w.types.k_blocks != w.types.q_blocks ||
      w.types.v_blocks != w.types.q_blocks) {
    w.types.q = w.types.k = w.types.v = kernels::ElemType::kF32;
    w.types.q_blocks = w.types.k_blocks = w.types.v_blocks = std::nullopt;
  }
  w.types.o = elem_type(l0.wo);
  w.types.gate_up = elem_type(l0.w_gate);
  w.types.down = elem_type(l0.w_down);

  const auto es = [](kernels::ElemType t) { return static_cast<size_t>(kernels::ElemSize(t)); };
  // A role's device bytes: rows of `cols` elements or of their blocks.
  const auto bytes = [&](kernels::ElemType t, const std::optional<kernels::BlockFormat>& b,
                         int64_t rows, int64_t cols) {
    return static_cast<size_t>(b ? rows * (cols / kernels::BlockElems(*b)) * kernels::BlockBytes(*b)
                                 : rows * cols * static_cast<int64_t>(es(t)));
  };
  const WeightTypes& ty = w.types;
  const size_t head_bytes = bytes(ty.lm_head, ty.lm_head_blocks, V, H);
  size_t total = bytes(ty.embed, ty.embed_blocks, V, H) + (tied ? 0 : head_bytes) + H * 4;
  const size_t layer_bytes =
      2 * H * 4 + bytes(ty.q, ty.q_blocks, NH * dp, H) + bytes(ty.o, ty.o_blocks, H, NH * dp) +
      bytes(ty.k, ty.k_blocks, KVH * dp, H) + bytes(ty.v, ty.v_blocks, KVH * dp, H) +
      bytes(ty.gate_up, ty.gate_up_blocks, 2 * I, H) + bytes(ty.down, ty.down_blocks, H, I) +
      (c.attention_bias ? (NH + 2 * KVH) * dp * 4 : 0);
  total += layer_bytes * c.num_layers;
  w.step_bytes = head_bytes + (layer_bytes - 2 * H * 4) * c.num_layers;
  Uploader up(&device, log_progress);
  if (absl::Status st = up.Init(total); !st.ok()) return st;
  if (log_progress) {
    PTX_LOG(INFO) << "uploading " << (total >> 20) << " MiB of weights to " << device.info().name;
  }

  auto put = [](absl::StatusOr<DeviceBuffer> b, DeviceBuffer* out) -> absl::Status {
    if (!b.ok()) return b.status();
    *out = *std::move(b);
    return absl::OkStatus();
  };
  // The tensor in `et` (blocks decoded to f32 when `et` is f32), or its blocks as stored.
  auto upload_as = [&](const Tensor& t, kernels::ElemType et, const std::string& what,
                       DeviceBuffer* out) -> absl::Status {
    if (t.quant != QuantType::kNone) return put(up.Upload(Dequantized(t), what), out);
    if (t.dtype == ToDType(et)) {
      return put(up.Upload(t.data, static_cast<size_t>(t.numel()) * es(et), what), out);
    }
    return put(up.Upload(AsDType(t, ToDType(et)), what), out);
  };
  auto upload_blocks = [&](std::vector<uint8_t> b, const std::string& what,
                           DeviceBuffer* out) -> absl::Status {
    return put(up.Upload(PadTo16(std::move(b)), what), out);
  };
  // A q/k/v projection's rows (or a bias's, as one-element f32 rows) in the padded head
  // layout and the stacked type: block rows move whole, like element rows.
  auto head_rows = [&](const Tensor& t, int64_t heads) {
    std::vector<uint8_t> b;
    size_t row_bytes = H * es(ty.q);
    if (ty.q_blocks) {
      b = BlockBytes(t);
      row_bytes = QuantRowBytes(t.quant, H);
    } else {
      b = t.quant != QuantType::kNone ? Dequantized(t) : AsDType(t, ToDType(ty.q));
    }
    return padded ? PadRows(b, heads, d, dp, pad, row_bytes) : b;
  };
  auto bias_rows = [&](const Tensor& t, int64_t heads) {
    std::vector<uint8_t> b = AsDType(t, DType::kF32);
    return padded ? PadRows(b, heads, d, dp, pad, 4) : b;
  };

  s = ty.embed_blocks ? upload_blocks(BlockBytes(mt.embed), "embed", &w.embed)
                      : upload_as(mt.embed, w.types.embed, "embed", &w.embed);
  if (!s.ok()) return s;
  if (s = upload_as(mt.final_norm, kernels::ElemType::kF32, "final_norm", &w.final_norm); !s.ok()) {
    return s;
  }
  if (!tied) {
    s = ty.lm_head_blocks ? upload_blocks(BlockBytes(mt.lm_head), "lm_head", &w.lm_head)
                          : upload_as(mt.lm_head, w.types.lm_head, "lm_head", &w.lm_head);
    if (!s.ok()) return s;
  }
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    DeviceWeights::Layer& l = w.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    s = upload_as(lt.attn_norm, kernels::ElemType::kF32, p + "attn_norm", &l.attn_norm);
    if (s.ok()) {
      std::vector<uint8_t> qkv =
          Stack({head_rows(lt.wq, NH), head_rows(lt.wk, KVH), head_rows(lt.wv, KVH)});
      s = ty.q_blocks ? upload_blocks(std::move(qkv), p + "wqkv", &l.wqkv)
                      : put(up.Upload(qkv, p + "wqkv"), &l.wqkv);
    }
    if (s.ok() && c.attention_bias) {
      s = put(up.Upload(Stack({bias_rows(lt.bq, NH), bias_rows(lt.bk, KVH), bias_rows(lt.bv, KVH)}),
                        p + "bqkv"),
              &l.bqkv);
    }
    if (s.ok()) {
      if (ty.o_blocks) {
        s = upload_blocks(BlockBytes(lt.wo), p + "wo", &l.wo);
      } else if (padded) {
        const std::vector<uint8_t> o =
            o_decoded ? Dequantized(lt.wo) : AsDType(lt.wo, ToDType(w.types.o));
        s = put(up.Upload(PadCols(o, H, NH, d, dp, pad, es(w.types.o)), p + "wo"), &l.wo);
      } else {
        s = upload_as(lt.wo, w.types.o, p + "wo", &l.wo);
      }
    }
    if (s.ok()) s = upload_as(lt.mlp_norm, kernels::ElemType::kF32, p + "mlp_norm", &l.mlp_norm);
    if (s.ok()) {
      // gate and up stacked into one [2I, H] matrix: one GEMM feeds the fused silu_mul.
      const bool blocks = ty.gate_up_blocks.has_value();
      std::vector<uint8_t> gu =
          blocks ? BlockBytes(lt.w_gate) : AsDType(lt.w_gate, ToDType(w.types.gate_up));
      const std::vector<uint8_t> u =
          blocks ? BlockBytes(lt.w_up) : AsDType(lt.w_up, ToDType(w.types.gate_up));
      gu.insert(gu.end(), u.begin(), u.end());
      s = blocks ? upload_blocks(std::move(gu), p + "w_gate_up", &l.w_gate_up)
                 : put(up.Upload(gu, p + "w_gate_up"), &l.w_gate_up);
    }
    if (s.ok()) {
      s = ty.down_blocks ? upload_blocks(BlockBytes(lt.w_down), p + "w_down", &l.w_down)
                         : upload_as(lt.w_down, w.types.down, p + "w_down", &l.w_down);
    }
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
  w.layer_bytes = layer_bytes;
  return w;
}

}  // namespace ptxserve::cuda
