// Activations are [tokens][width] f32 buffers, one per Act, for the tokens of all windows
// one after another. K and V never need a cache: each window is one prefill, so a layer's
// attention reads the K/V rows its own step just computed.
#include "engine/model/calibration_forward.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/model/dtype.h"
#include "engine/model/rope.h"

namespace ptxserve {
namespace {

// The tensor's elements as f32 (empty when absent).
absl::StatusOr<std::vector<float>> Floats(const Tensor& t) {
  if (!t.present()) return std::vector<float>();
  if (t.quant != QuantType::kNone) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " is already ",
                                                   std::string(QuantName(t.quant)),
                                                   "; calibrate from an unquantized model"));
  }
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ConvertToFloat(t.dtype, t.data, v.size(), v.data());
  return v;
}

class CalibrationOps final : public ForwardOps {
 public:
  CalibrationOps(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                 std::vector<FloatLayer>& layers, LinearObserver& observer)
      : model_(model), c_(model.config), layers_(layers), observer_(observer) {
    for (const std::vector<int32_t>& w : windows) {
      starts_.push_back(static_cast<int64_t>(tokens_.size()));
      for (size_t p = 0; p < w.size(); ++p) {
        tokens_.push_back(w[p]);
        positions_.push_back(static_cast<int32_t>(p));
      }
    }
    starts_.push_back(static_cast<int64_t>(tokens_.size()));
    inv_freq_.resize(c_.head_dim / 2);
    RopeInvFreq(c_, inv_freq_.data());
  }

  absl::Status Init() {
    auto norm = Floats(model_.tensors.final_norm);
    if (!norm.ok()) return norm.status();
    final_norm_ = std::move(*norm);
    const Tensor& e = model_.tensors.embed;
    if (e.quant != QuantType::kNone) return Floats(e).status();
    const int64_t T = static_cast<int64_t>(tokens_.size());
    for (Act a : {Act::kResidual, Act::kNormed, Act::kQ, Act::kK, Act::kV, Act::kAttention,
                  Act::kGate, Act::kUp, Act::kMlp}) {
      Buffer(a).assign(static_cast<size_t>(T * Width(a)), 0.0f);
    }
    Buffer(Act::kRows).assign(static_cast<size_t>(Rows(Act::kRows) * c_.hidden_size), 0.0f);
    Buffer(Act::kLogits).assign(static_cast<size_t>(Rows(Act::kRows) * c_.vocab_size), 0.0f);
    return absl::OkStatus();
  }

  std::vector<float> TakeLogits() { return std::move(Buffer(Act::kLogits)); }

  absl::Status Embed() override {
    const Tensor& e = model_.tensors.embed;
    const int64_t H = c_.hidden_size;
    const size_t row_bytes = static_cast<size_t>(H) * DTypeSize(e.dtype);
    for (size_t t = 0; t < tokens_.size(); ++t) {
      const int32_t id = tokens_[t];
      if (id < 0 || id >= c_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "calibration token ", t, " is id ", id, ", outside the vocabulary of ", c_.vocab_size));
      }
      ConvertToFloat(e.dtype, static_cast<const uint8_t*>(e.data) + id * row_bytes, H,
                     Buffer(Act::kResidual).data() + t * H);
    }
    return absl::OkStatus();
  }

  absl::Status RmsNorm(Act in, WeightRef weight, Act out) override {
    const int64_t H = c_.hidden_size;
    const std::vector<float>& w = weight.role == Weight::kAttnNorm ? layers_[weight.layer].attn_norm
                                  : weight.role == Weight::kMlpNorm ? layers_[weight.layer].mlp_norm
                                                                    : final_norm_;
    const float* x = Buffer(in).data();
    float* y = Buffer(out).data();
    for (int64_t t = 0; t < Rows(in); ++t) {
      double ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(x[t * H + i]) * x[t * H + i];
      const float r =
          static_cast<float>(1 / std::sqrt(ss / static_cast<double>(H) + c_.rms_norm_eps));
      for (int64_t i = 0; i < H; ++i) y[t * H + i] = x[t * H + i] * r * w[i];
    }
    return absl::OkStatus();
  }

  absl::Status Linear(Act in, std::initializer_list<Projection> projections) override {
    std::vector<float>& x = Buffer(in);
    const int64_t rows = Rows(in), k = Width(in);
    const int layer = projections.begin()->weight.layer;
    if (projections.begin()->weight.role == Weight::kLmHead) return LmHead();
    std::vector<Weight> roles;
    for (const Projection& p : projections) roles.push_back(p.weight.role);
    const Probe probe(*this, layer, roles, x.data());
    if (absl::Status s = observer_.BeforeLinear(layer, roles, x.data(), rows, layers_, probe);
        !s.ok()) {
      return s;
    }
    for (const Projection& p : projections) {
      MatMul(x.data(), rows, k, layers_[layer].matrix(p.weight.role).data(),
             BiasOf(layer, p.weight.role), Width(p.out), Buffer(p.out).data(), p.accumulate);
    }
    return absl::OkStatus();
  }

  absl::Status RopeAndWriteKv(int /*layer*/) override {
    Rope(Buffer(Act::kQ).data(), Buffer(Act::kK).data());
    return absl::OkStatus();
  }

  absl::Status Attention(int /*layer*/) override {
    Attend(Buffer(Act::kQ).data(), Buffer(Act::kK).data(), Buffer(Act::kV).data(),
           Buffer(Act::kAttention).data());
    return absl::OkStatus();
  }

  absl::Status SiluMul() override {
    SiluMulInto(Buffer(Act::kGate).data(), Buffer(Act::kUp).data(), Buffer(Act::kMlp).size(),
                Buffer(Act::kMlp).data());
    return absl::OkStatus();
  }

  absl::Status GatherRows() override {
    // kNormed is free after the last layer: every token's final-normed state, for the head.
    if (absl::Status s = RmsNorm(Act::kResidual, {Weight::kFinalNorm}, Act::kNormed); !s.ok()) {
      return s;
    }
    if (absl::Status s = observer_.BeforeLmHead(Buffer(Act::kNormed).data(), Rows(Act::kNormed));
        !s.ok()) {
      return s;
    }
    const int64_t H = c_.hidden_size;
    for (size_t w = 0; w + 1 < starts_.size(); ++w) {
      const float* last = Buffer(Act::kResidual).data() + (starts_[w + 1] - 1) * H;
      std::copy(last, last + H, Buffer(Act::kRows).data() + w * H);
    }
    return absl::OkStatus();
  }

 private:
  // The block that starts at a Linear, run on that Linear's input with other weights.
  class Probe final : public BlockProbe {
   public:
    Probe(const CalibrationOps& ops, int layer, std::span<const Weight> roles, const float* x)
        : ops_(ops), layer_(layer), roles_(roles), x_(x) {}

    std::vector<float> Output(std::span<const float* const> weights) const override {
      const ModelConfig& c = ops_.c_;
      const int64_t T = static_cast<int64_t>(ops_.tokens_.size());
      const int64_t k = roles_[0] == Weight::kO      ? c.q_dim()
                        : roles_[0] == Weight::kDown ? c.intermediate_size
                                                     : c.hidden_size;
      auto product = [&](size_t i, int64_t n) {
        std::vector<float> y(static_cast<size_t>(T * n));
        ops_.MatMul(x_, T, k, weights[i], ops_.BiasOf(layer_, roles_[i]), n, y.data(), false);
        return y;
      };
      if (roles_[0] == Weight::kQ) {
        std::vector<float> q = product(0, c.q_dim()), kk = product(1, c.kv_dim()),
                           v = product(2, c.kv_dim());
        std::vector<float> out(static_cast<size_t>(T * c.q_dim()));
        ops_.Rope(q.data(), kk.data());
        ops_.Attend(q.data(), kk.data(), v.data(), out.data());
        return Following(out, c.q_dim(), ops_.layers_[layer_].wo);
      }
      if (roles_[0] == Weight::kGate) {
        std::vector<float> g = product(0, c.intermediate_size), u = product(1, c.intermediate_size);
        SiluMulInto(g.data(), u.data(), g.size(), g.data());
        return Following(g, c.intermediate_size, ops_.layers_[layer_].w_down);
      }
      return product(0, c.hidden_size);
    }

   private:
    // x [tokens, k] times the following projection w [hidden, k] (o_proj, down_proj).
    std::vector<float> Following(const std::vector<float>& x, int64_t k,
                                 const std::vector<float>& w) const {
      const int64_t T = static_cast<int64_t>(ops_.tokens_.size()), n = ops_.c_.hidden_size;
      std::vector<float> y(static_cast<size_t>(T * n));
      ops_.MatMul(x.data(), T, k, w.data(), ops_.no_bias_, n, y.data(), false);
      return y;
    }

    const CalibrationOps& ops_;
    int layer_;
    std::span<const Weight> roles_;
    const float* x_;
  };

  // y = x W^T + bias (or y += that with `accumulate`), x [rows, k], W [n, k].
  static void MatMul(const float* x, int64_t rows, int64_t k, const float* w,
                     const std::vector<float>& bias, int64_t n, float* y, bool accumulate) {
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < n; ++j) {
        float dot = bias.empty() ? 0.0f : bias[j];
        dot += Dot(x + t * k, w + j * k, k);
        y[t * n + j] = accumulate ? y[t * n + j] + dot : dot;
      }
    }
  }

  const std::vector<float>& BiasOf(int layer, Weight role) const {
    const FloatLayer& l = layers_[layer];
    return role == Weight::kQ   ? l.bq
           : role == Weight::kK ? l.bk
           : role == Weight::kV ? l.bv
                                : no_bias_;
  }

  static void SiluMulInto(const float* g, const float* u, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }

  // q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] rotated in place.
  void Rope(float* q, float* k) const {
    const int64_t D = c_.head_dim, half = D / 2;
    std::vector<float> cos_t(half), sin_t(half);
    for (size_t t = 0; t < tokens_.size(); ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = positions_[t] * static_cast<double>(inv_freq_[i]);
        cos_t[i] = static_cast<float>(std::cos(angle));
        sin_t[i] = static_cast<float>(std::sin(angle));
      }
      for (int64_t h = 0; h < c_.num_heads; ++h)
        Rotate(q + (t * c_.num_heads + h) * D, cos_t, sin_t);
      for (int64_t h = 0; h < c_.num_kv_heads; ++h) {
        Rotate(k + (t * c_.num_kv_heads + h) * D, cos_t, sin_t);
      }
    }
  }

  // Causal GQA attention of each window's queries over its own keys and values.
  void Attend(const float* q, const float* k, const float* v, float* out) const {
    const int64_t D = c_.head_dim, group = c_.num_heads / c_.num_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> p;
    for (size_t w = 0; w + 1 < starts_.size(); ++w) {
      for (int64_t t = starts_[w]; t < starts_[w + 1]; ++t) {
        for (int64_t h = 0; h < c_.num_heads; ++h) {
          const float* qh = q + (t * c_.num_heads + h) * D;
          const int64_t kvh = h / group;
          p.assign(static_cast<size_t>(t - starts_[w] + 1), 0.0f);
          float max = -INFINITY;
          for (int64_t u = starts_[w]; u <= t; ++u) {
            p[u - starts_[w]] = Dot(qh, k + (u * c_.num_kv_heads + kvh) * D, D) * scale;
            max = std::max(max, p[u - starts_[w]]);
          }
          double sum = 0;
          for (float& e : p) sum += (e = std::exp(e - max));
          float* o = out + (t * c_.num_heads + h) * D;
          std::fill(o, o + D, 0.0f);
          for (int64_t u = starts_[w]; u <= t; ++u) {
            const float pu = static_cast<float>(p[u - starts_[w]] / sum);
            const float* vu = v + (u * c_.num_kv_heads + kvh) * D;
            for (int64_t d = 0; d < D; ++d) o[d] += pu * vu[d];
          }
        }
      }
    }
  }

  static float Dot(const float* a, const float* b, int64_t n) {
    // Four partial sums let the compiler keep several multiply-adds in flight.
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
    }
    for (; i < n; ++i) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }

  void Rotate(float* x, const std::vector<float>& cos_t, const std::vector<float>& sin_t) const {
    const int64_t half = c_.head_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t ia = c_.rope_style == RopeStyle::kRotateHalf ? i : 2 * i;
      const int64_t ib = c_.rope_style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
      const float a = x[ia], b = x[ib];
      x[ia] = a * cos_t[i] - b * sin_t[i];
      x[ib] = b * cos_t[i] + a * sin_t[i];
    }
  }

  // Logits rows = kRows times the LM head (the embedding when tied), one vocabulary row
  // widened at a time so a large vocabulary is never held in f32.
  absl::Status LmHead() {
    const Tensor& t =
        model_.tensors.lm_head.present() ? model_.tensors.lm_head : model_.tensors.embed;
    if (t.quant != QuantType::kNone) return Floats(t).status();
    const int64_t H = c_.hidden_size, rows = Rows(Act::kRows);
    std::vector<float> w(H);
    for (int64_t n = 0; n < c_.vocab_size; ++n) {
      ConvertToFloat(t.dtype, static_cast<const uint8_t*>(t.data) + n * H * DTypeSize(t.dtype), H,
                     w.data());
      for (int64_t r = 0; r < rows; ++r) {
        Buffer(Act::kLogits)[r * c_.vocab_size + n] =
            Dot(Buffer(Act::kRows).data() + r * H, w.data(), H);
      }
    }
    return absl::OkStatus();
  }

  int64_t Rows(Act a) const {
    return a == Act::kRows || a == Act::kLogits ? static_cast<int64_t>(starts_.size()) - 1
                                                : static_cast<int64_t>(tokens_.size());
  }
  int64_t Width(Act a) const {
    switch (a) {
      case Act::kQ:
      case Act::kAttention:
        return c_.q_dim();
      case Act::kK:
      case Act::kV:
        return c_.kv_dim();
      case Act::kGate:
      case Act::kUp:
      case Act::kMlp:
        return c_.intermediate_size;
      case Act::kLogits:
        return c_.vocab_size;
      default:
        return c_.hidden_size;
    }
  }
  std::vector<float>& Buffer(Act a) { return buffers_[static_cast<size_t>(a)]; }

  const Model& model_;
  const ModelConfig& c_;
  std::vector<FloatLayer>& layers_;
  LinearObserver& observer_;
  std::vector<int32_t> tokens_, positions_;
  std::vector<int64_t> starts_;  // window w is tokens [starts_[w], starts_[w + 1])
  std::vector<float> inv_freq_;
  std::vector<float> final_norm_, no_bias_;
  std::vector<float> buffers_[static_cast<size_t>(Act::kLogits) + 1];
};

}  // namespace

std::vector<float>& FloatLayer::matrix(Weight role) {
  switch (role) {
    case Weight::kQ:
      return wq;
    case Weight::kK:
      return wk;
    case Weight::kV:
      return wv;
    case Weight::kO:
      return wo;
    case Weight::kGate:
      return w_gate;
    case Weight::kUp:
      return w_up;
    default:
      return w_down;
  }
}

absl::StatusOr<std::vector<FloatLayer>> FloatLayers(const Model& model) {
  std::vector<FloatLayer> layers;
  for (const LayerTensors& t : model.tensors.layers) {
    FloatLayer l;
    const std::pair<const Tensor*, std::vector<float>*> parts[] = {{&t.attn_norm, &l.attn_norm},
                                                                   {&t.wq, &l.wq},
                                                                   {&t.wk, &l.wk},
                                                                   {&t.wv, &l.wv},
                                                                   {&t.bq, &l.bq},
                                                                   {&t.bk, &l.bk},
                                                                   {&t.bv, &l.bv},
                                                                   {&t.wo, &l.wo},
                                                                   {&t.mlp_norm, &l.mlp_norm},
                                                                   {&t.w_gate, &l.w_gate},
                                                                   {&t.w_up, &l.w_up},
                                                                   {&t.w_down, &l.w_down}};
    for (const auto& [tensor, floats] : parts) {
      auto v = Floats(*tensor);
      if (!v.ok()) return v.status();
      *floats = std::move(*v);
    }
    layers.push_back(std::move(l));
  }
  return layers;
}

absl::StatusOr<std::vector<float>> RunCalibrationForward(
    const Model& model, const std::vector<std::vector<int32_t>>& windows,
    std::vector<FloatLayer>& layers, LinearObserver& observer) {
  for (size_t w = 0; w < windows.size(); ++w) {
    if (windows[w].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("calibration window ", w, " is empty"));
    }
  }
  CalibrationOps ops(model, windows, layers, observer);
  if (absl::Status s = ops.Init(); !s.ok()) return s;
  if (absl::Status s = RunForward(model.config, static_cast<int64_t>(windows.size()), ops);
      !s.ok()) {
    return s;
  }
  return ops.TakeLogits();
}

}  // namespace ptxserve
