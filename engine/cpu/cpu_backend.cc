#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/ops.h"
#include "engine/kv_sizing.h"
#include "engine/model/forward.h"
#include "engine/model/model_checks.h"
#include "engine/model/rope.h"
#include "engine/step_batch_check.h"
#include "engine/util/host_memory.h"
#include "engine/util/thread_pool.h"

namespace ptxserve {
namespace {

// From this many elements (rows x elements per row) on, the row-wise ops of a step (embed,
// RMSNorm, RoPE and the KV write, SiLU, a GEMM's copy or residual add into its outputs)
// split their rows over the thread pool: a decode step's few rows cost less than waking
// the workers.
constexpr int64_t kParallelRowElements = 1 << 16;

// All of `t`'s elements as f32 (exact for every dtype and block format).
void ToFloat(const Tensor& t, float* out) {
  if (t.quant == QuantType::kNone) {
    ConvertToFloat(t.dtype, t.data, static_cast<size_t>(t.numel()), out);
  } else {
    DequantizeRow(t.quant, static_cast<const uint8_t*>(t.data), t.numel(), out);
  }
}

// Appends tensor `t` converted to f32 to `out`, after checking it is present and has
// `shape`. `what` names it when the loader left the name empty.
absl::Status AppendTensor(const Tensor& t, const std::vector<int64_t>& shape,
                          const std::string& what, std::vector<float>* out) {
  if (absl::Status s = CheckTensorShape(t, shape, what, true); !s.ok()) return s;
  const size_t n = static_cast<size_t>(t.numel());
  const size_t old = out->size();
  out->resize(old + n);
  ToFloat(t, out->data() + old);
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

// A tensor of a stacked matrix, with its expected shape and its name.
struct CpuBackend::Part {
  const Tensor& tensor;
  std::vector<int64_t> shape;
  std::string name;
};

size_t CpuBackend::Matrix::RowBytes(int64_t width) const {
  return static_cast<size_t>(quant == QuantType::kNone ? width * DTypeSize(dtype)
                                                       : QuantRowBytes(quant, width));
}

// The parts, checked, copied one after another; each run of consecutive parts stored in
// one dtype or block format is one Matrix (rows of blocks stack like rows of elements).
absl::Status CpuBackend::Stack(const Model& model, const std::vector<Part>& parts, Stacked* out) {
  auto same_format = [](const Tensor& a, const Tensor& b) {
    return a.quant == b.quant && (a.quant != QuantType::kNone || a.dtype == b.dtype);
  };
  for (const Part& p : parts) {
    if (absl::Status s = CheckTensorShape(p.tensor, p.shape, p.name, true); !s.ok()) return s;
  }
  *out = Stacked{};
  out->width = parts.front().shape.back();
  for (size_t begin = 0; begin < parts.size();) {
    size_t end = begin + 1;
    while (end < parts.size() && same_format(parts[end].tensor, parts[begin].tensor)) ++end;
    Matrix& m = out->runs.emplace_back();
    m.dtype = parts[begin].tensor.dtype;
    m.quant = parts[begin].tensor.quant;
    auto part_bytes = [&m](const Part& p) {
      return p.tensor.shape.front() * m.RowBytes(p.tensor.shape.back());
    };
    size_t total = 0;
    for (size_t i = begin; i < end; ++i) total += part_bytes(parts[i]);
    m.bytes = HugePageBuffer(total);
    size_t at = 0;
    int64_t row = 0;
    for (size_t i = begin; i < end; ++i) {
      std::memcpy(m.bytes.data() + at, parts[i].tensor.data, part_bytes(parts[i]));
      at += part_bytes(parts[i]);
      out->run_of.push_back(static_cast<int>(out->runs.size() - 1));
      out->first_row.push_back(row);
      row += parts[i].tensor.shape.front();
      model.ReleasePages(parts[i].tensor);
    }
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Copy(const Model& model, const Part& part, Matrix* out) {
  Stacked one;
  if (absl::Status s = Stack(model, {part}, &one); !s.ok()) return s;
  *out = std::move(one.runs.front());
  return absl::OkStatus();
}

size_t CpuBackend::Stacked::size() const {
  size_t n = 0;
  for (const Matrix& m : runs) n += m.bytes.size();
  return n;
}

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
  if (auto s = Copy(model, {mt.embed, {V, H}, "embed"}, &b->embed_); !s.ok()) return s;
  if (auto s = load(mt.final_norm, {H}, "final_norm", &b->final_norm_); !s.ok()) return s;
  const bool tied = c.tie_word_embeddings || mt.lm_head.data == mt.embed.data;
  if (!tied) {
    if (auto s = Copy(model, {mt.lm_head, {V, H}, "lm_head"}, &b->lm_head_); !s.ok()) return s;
  }
  const size_t pool_bytes = static_cast<size_t>(kv.num_blocks) * c.num_kv_heads * kv.block_size *
                            c.head_dim * DTypeSize(kv.dtype);
  b->layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerTensors& lt = mt.layers[i];
    Layer& l = b->layers_[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    absl::Status s = load(lt.attn_norm, {H}, p + "attn_norm", &l.attn_norm);
    if (s.ok()) {
      s = Stack(
          model,
          {{lt.wq, {QD, H}, p + "wq"}, {lt.wk, {KD, H}, p + "wk"}, {lt.wv, {KD, H}, p + "wv"}},
          &l.wqkv);
    }
    if (s.ok() && c.attention_bias) {
      s = load(lt.bq, {QD}, p + "bq", &l.bqkv);
      if (s.ok()) s = load(lt.bk, {KD}, p + "bk", &l.bqkv);
      if (s.ok()) s = load(lt.bv, {KD}, p + "bv", &l.bqkv);
    }
    if (s.ok()) s = Copy(model, {lt.wo, {H, QD}, p + "wo"}, &l.wo);
    if (s.ok()) s = load(lt.mlp_norm, {H}, p + "mlp_norm", &l.mlp_norm);
    if (s.ok()) {
      s = Stack(model, {{lt.w_gate, {I, H}, p + "w_gate"}, {lt.w_up, {I, H}, p + "w_up"}},
                &l.w_gate_up);
    }
    if (s.ok()) s = Copy(model, {lt.w_down, {H, I}, p + "w_down"}, &l.w_down);
    if (!s.ok()) return s;
    l.k_pool.assign(pool_bytes, 0);
    l.v_pool.assign(pool_bytes, 0);
  }
  b->inv_freq_.resize(c.head_dim / 2);
  RopeInvFreq(c, b->inv_freq_.data());
  return b;
}

size_t CpuBackend::weight_bytes() const {
  size_t n = embed_.bytes.size() + lm_head_.bytes.size() + final_norm_.size() * sizeof(float);
  for (const Layer& l : layers_) {
    n += (l.attn_norm.size() + l.bqkv.size() + l.mlp_norm.size()) * sizeof(float) + l.wqkv.size() +
         l.wo.bytes.size() + l.w_gate_up.size() + l.w_down.bytes.size();
  }
  return n;
}

size_t CpuBackend::step_weight_bytes() const {
  size_t n = (lm_head_.bytes.size() == 0 ? embed_ : lm_head_).bytes.size();
  for (const Layer& l : layers_) {
    n += l.wqkv.size() + l.wo.bytes.size() + l.w_gate_up.size() + l.w_down.bytes.size();
  }
  return n;
}

void CpuBackend::Reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  const ModelConfig& c = config_;
  const int64_t qkv = c.q_dim() + 2 * c.kv_dim();
  x_.resize(tokens * c.hidden_size);
  h_.resize(tokens * std::max(c.hidden_size, c.q_dim()));
  q_.resize(tokens * c.q_dim());
  k_.resize(tokens * c.kv_dim());
  v_.resize(tokens * c.kv_dim());
  gate_up_.resize(tokens * 2 * c.intermediate_size);
  act_.resize(tokens * c.intermediate_size);
  rows_.resize(tokens * c.hidden_size);
  product_.resize(tokens * std::max(qkv, c.hidden_size));
  capacity_ = tokens;
}

class CpuBackend::StepOps final : public ForwardOps {
 public:
  StepOps(CpuBackend& b, const StepBatch& batch, float* logits)
      : b_(b), c_(b.config_), batch_(batch), logits_(logits) {}

  absl::Status Embed() override {
    const int64_t H = c_.hidden_size;
    ForRows(batch_.num_tokens(), H, [&](int64_t begin, int64_t end) {
      cpu::Embed(WeightsOf(b_.embed_.bytes.data(), b_.embed_), batch_.token_ids.data() + begin,
                 end - begin, H, b_.x_.data() + begin * H);
    });
    return absl::OkStatus();
  }

  absl::Status RmsNorm(Act in, WeightRef weight, Act out) override {
    const int64_t H = c_.hidden_size;
    const float* x = ViewOf(in).data;
    float* y = ViewOf(out).data;
    ForRows(Rows(in), H, [&](int64_t begin, int64_t end) {
      cpu::RmsNorm(x + begin * H, NormOf(weight), end - begin, H,
                   static_cast<float>(c_.rms_norm_eps), y + begin * H);
    });
    return absl::OkStatus();
  }

  // Projections whose weight rows follow one another in a stored matrix (q/k/v, gate/up)
  // run as one GEMM.
  absl::Status Linear(Act in, std::initializer_list<Projection> projections) override {
    const View x = ViewOf(in);
    const int64_t m = Rows(in);
    for (const Projection* first = projections.begin(); first != projections.end();) {
      const WeightRows mat = MatrixOf(first->weight);
      int64_t n = mat.n;
      const Projection* last = first + 1;
      for (; last != projections.end(); ++last) {
        const WeightRows next = MatrixOf(last->weight);
        if (next.matrix != mat.matrix || next.w != mat.w + n * mat.matrix->RowBytes(x.stride) ||
            next.bias != (mat.bias ? mat.bias + n : nullptr)) {
          break;
        }
        n += next.n;
      }
      Gemm(x.data, m, x.stride, mat, n, first, last);
      first = last;
    }
    return absl::OkStatus();
  }

  absl::Status RopeAndWriteKv(int layer) override {
    Layer& l = b_.layers_[layer];
    const int64_t q_row = c_.q_dim(), kv_row = c_.kv_dim();
    ForRows(batch_.num_tokens(), q_row + 2 * kv_row, [&](int64_t begin, int64_t end) {
      float* q = b_.q_.data() + begin * q_row;
      float* k = b_.k_.data() + begin * kv_row;
      cpu::Rope(q, k, batch_.positions.data() + begin, end - begin, c_.num_heads, c_.num_kv_heads,
                c_.head_dim, b_.inv_freq_.data(), c_.rope_style);
      cpu::KvScatter(k, b_.v_.data() + begin * kv_row, batch_.slot_mapping.data() + begin,
                     end - begin, c_.num_kv_heads, c_.head_dim, b_.kv_.block_size, b_.kv_.dtype,
                     l.k_pool.data(), l.v_pool.data());
    });
    return absl::OkStatus();
  }

  absl::Status Attention(int layer) override {
    const Layer& l = b_.layers_[layer];
    cpu::PagedAttention(b_.q_.data(), batch_.positions.data(), batch_.query_start.data(),
                        batch_.seq_lens.data(), batch_.block_tables.data(),
                        batch_.max_blocks_per_seq, batch_.num_seqs(), c_.num_heads, c_.num_kv_heads,
                        c_.head_dim, b_.kv_.block_size, b_.kv_.dtype, l.k_pool.data(),
                        l.v_pool.data(), 1.0f / std::sqrt(static_cast<float>(c_.head_dim)),
                        ViewOf(Act::kAttention).data);
    return absl::OkStatus();
  }

  absl::Status SiluMul() override {
    const View gate = ViewOf(Act::kGate), up = ViewOf(Act::kUp), out = ViewOf(Act::kMlp);
    ForRows(batch_.num_tokens(), c_.intermediate_size, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        cpu::SiluMul(gate.data + t * gate.stride, up.data + t * up.stride, c_.intermediate_size,
                     out.data + t * out.stride);
      }
    });
    return absl::OkStatus();
  }

  absl::Status GatherRows() override {
    const int64_t H = c_.hidden_size;
    for (size_t r = 0; r < batch_.logits_rows.size(); ++r) {
      std::memcpy(b_.rows_.data() + r * H, b_.x_.data() + batch_.logits_rows[r] * H,
                  H * sizeof(float));
    }
    return absl::OkStatus();
  }

 private:
  // An activation's rows: row t at data + t * stride.
  struct View {
    float* data;
    int64_t stride;
  };
  // A weight's rows in the matrix that stores it: [n][input width] in its format, and
  // its bias.
  struct WeightRows {
    const Matrix* matrix;
    const uint8_t* w;
    const float* bias;
    int64_t n;
  };

  static cpu::WeightMatrix WeightsOf(const uint8_t* w, const Matrix& m) {
    return {w, m.dtype, m.quant};
  }

  // fn(begin, end) over rows [0, rows) of `row_elements` each: on the thread pool from
  // kParallelRowElements on, else on the calling thread. A 512-token f16 prefill spent ~5%
  // of its CPU time in these ops (SiLU's libm expf most), all on the calling thread while
  // the other cores waited. Each row's values are the same whichever thread computes them.
  static void ForRows(int64_t rows, int64_t row_elements,
                      const std::function<void(int64_t begin, int64_t end)>& fn) {
    if (rows * row_elements < kParallelRowElements) {
      fn(0, rows);
    } else {
      ThreadPool::Default().ParallelFor(rows, fn);
    }
  }

  int64_t Rows(Act a) const {
    return a == Act::kRows || a == Act::kLogits ? static_cast<int64_t>(batch_.logits_rows.size())
                                                : batch_.num_tokens();
  }

  View ViewOf(Act a) const {
    const int64_t I = c_.intermediate_size;
    switch (a) {
      case Act::kResidual:
        return {b_.x_.data(), c_.hidden_size};
      case Act::kNormed:
        return {b_.h_.data(), c_.hidden_size};
      case Act::kQ:
        return {b_.q_.data(), c_.q_dim()};
      case Act::kK:
        return {b_.k_.data(), c_.kv_dim()};
      case Act::kV:
        return {b_.v_.data(), c_.kv_dim()};
      case Act::kAttention:  // the normed input is dead by then
        return {b_.h_.data(), c_.q_dim()};
      case Act::kGate:
        return {b_.gate_up_.data(), 2 * I};
      case Act::kUp:
        return {b_.gate_up_.data() + I, 2 * I};
      case Act::kMlp:
        return {b_.act_.data(), I};
      case Act::kRows:
        return {b_.rows_.data(), c_.hidden_size};
      case Act::kLogits:
        return {logits_, c_.vocab_size};
    }
    return {nullptr, 0};
  }

  const float* NormOf(WeightRef w) const {
    switch (w.role) {
      case Weight::kAttnNorm:
        return b_.layers_[w.layer].attn_norm.data();
      case Weight::kMlpNorm:
        return b_.layers_[w.layer].mlp_norm.data();
      default:
        return b_.final_norm_.data();
    }
  }

  WeightRows MatrixOf(WeightRef w) const {
    const int64_t H = c_.hidden_size, I = c_.intermediate_size, QD = c_.q_dim(), KD = c_.kv_dim();
    // Rows `first` .. of `m`, whose rows are `width` wide.
    auto rows = [](const Matrix& m, int64_t first, int64_t width, const float* bias, int64_t n) {
      return WeightRows{&m, m.bytes.data() + first * m.RowBytes(width), bias, n};
    };
    // Part `i` of a stacked matrix.
    auto part = [&rows](const Stacked& s, int i, const float* bias, int64_t n) {
      return rows(s.runs[s.run_of[i]], s.first_row[i], s.width, bias, n);
    };
    if (w.role == Weight::kLmHead) {
      return rows(b_.lm_head_.bytes.size() == 0 ? b_.embed_ : b_.lm_head_, 0, H, nullptr,
                  c_.vocab_size);
    }
    const Layer& l = b_.layers_[w.layer];
    const float* bias = l.bqkv.empty() ? nullptr : l.bqkv.data();
    switch (w.role) {
      case Weight::kQ:
        return part(l.wqkv, 0, bias, QD);
      case Weight::kK:
        return part(l.wqkv, 1, bias ? bias + QD : nullptr, KD);
      case Weight::kV:
        return part(l.wqkv, 2, bias ? bias + QD + KD : nullptr, KD);
      case Weight::kO:
        return rows(l.wo, 0, QD, nullptr, H);
      case Weight::kGate:
        return part(l.w_gate_up, 0, nullptr, I);
      case Weight::kUp:
        return part(l.w_gate_up, 1, nullptr, I);
      default:  // kDown
        return rows(l.w_down, 0, I, nullptr, H);
    }
  }

  // out = x W^T for the `n` rows of `mat` that projections [first, last) share: straight
  // into their outputs when those are one row after another, else through product_
  // (copied into, or added onto, each output).
  void Gemm(const float* x, int64_t m, int64_t k, const WeightRows& mat, int64_t n,
            const Projection* first, const Projection* last) {
    bool direct = true;
    int64_t col = 0;
    const View base = ViewOf(first->out);
    for (const Projection* p = first; p != last; ++p) {
      const View out = ViewOf(p->out);
      direct = direct && !p->accumulate && out.stride == n && out.data == base.data + col;
      col += MatrixOf(p->weight).n;
    }
    if (direct) {
      cpu::Gemm(x, WeightsOf(mat.w, *mat.matrix), mat.bias, m, n, k, base.data);
      return;
    }
    float* product = b_.product_.data();
    cpu::Gemm(x, WeightsOf(mat.w, *mat.matrix), mat.bias, m, n, k, product);
    col = 0;
    for (const Projection* p = first; p != last; ++p) {
      const View out = ViewOf(p->out);
      const int64_t width = MatrixOf(p->weight).n;
      ForRows(m, width, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* dst = out.data + t * out.stride;
          const float* src = product + t * n + col;
          if (p->accumulate) {
            cpu::AddInPlace(dst, src, width);
          } else {
            std::memcpy(dst, src, width * sizeof(float));
          }
        }
      });
      col += width;
    }
  }

  CpuBackend& b_;
  const ModelConfig& c_;
  const StepBatch& batch_;
  float* logits_;
};

absl::Status CpuBackend::Step(const StepBatch& batch, std::vector<float>* logits) {
  if (absl::Status s = ValidateStepBatch(batch, config_, kv_); !s.ok()) return s;
  Reserve(batch.num_tokens());
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  logits->resize(rows * config_.vocab_size);
  StepOps ops(*this, batch, logits->data());
  return RunForward(config_, rows, ops);
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
