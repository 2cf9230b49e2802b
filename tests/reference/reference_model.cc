#include "tests/reference/reference_model.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/model/dtype.h"

namespace ptxserve::reference {
namespace {

using Vec = std::vector<double>;

absl::Status Read(const Tensor& t, int64_t numel, const std::string& what, Vec* out) {
  if (!t.present())
    return absl::InvalidArgumentError(absl::StrCat("reference: ", what, " missing"));
  if (t.numel() != numel || t.nbytes < static_cast<size_t>(numel) * DTypeSize(t.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference: ", what, " has ", t.numel(), " elements, expected ", numel));
  }
  out->resize(numel);
  const auto* h = static_cast<const uint16_t*>(t.data);
  for (int64_t i = 0; i < numel; ++i) {
    switch (t.dtype) {
      case DType::kF32:
        (*out)[i] = static_cast<const float*>(t.data)[i];
        break;
      case DType::kF16:
        (*out)[i] = HalfToFloat(h[i]);
        break;
      case DType::kBF16:
        (*out)[i] = BF16ToFloat(h[i]);
        break;
    }
  }
  return absl::OkStatus();
}

// out[n] = sum_k in[k] * w[n * K + k] (+ b[n])
Vec Linear(const Vec& in, const Vec& w, const Vec& b, int64_t N) {
  const int64_t K = static_cast<int64_t>(in.size());
  Vec out(N);
  for (int64_t n = 0; n < N; ++n) {
    double s = b.empty() ? 0.0 : b[n];
    for (int64_t k = 0; k < K; ++k) s += in[k] * w[n * K + k];
    out[n] = s;
  }
  return out;
}

Vec RmsNormD(const Vec& x, const Vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
  return out;
}

// Rotates every head of `x` ([heads * head_dim]) for position `pos`.
void RotateD(Vec& x, int64_t heads, int64_t hd, const Vec& inv_freq, int64_t pos, RopeStyle style) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    double* v = x.data() + h * hd;
    for (int64_t i = 0; i < half; ++i) {
      const double c = std::cos(static_cast<double>(pos) * inv_freq[i]);
      const double s = std::sin(static_cast<double>(pos) * inv_freq[i]);
      const int64_t a = style == RopeStyle::kRotateHalf ? i : 2 * i;
      const int64_t b = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
      const double xa = v[a], xb = v[b];
      v[a] = xa * c - xb * s;
      v[b] = xb * c + xa * s;
    }
  }
}

}  // namespace

absl::StatusOr<ReferenceModel> ReferenceModel::Create(const Model& model) {
  ReferenceModel r;
  const ModelConfig& c = model.config;
  r.config_ = c;
  const ModelTensors& mt = model.tensors;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t QD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  absl::Status s = Read(mt.embed, V * H, "embed", &r.embed_);
  if (s.ok()) s = Read(mt.final_norm, H, "final_norm", &r.final_norm_);
  if (s.ok()) {
    s = Read(c.tie_word_embeddings ? mt.embed : mt.lm_head, V * H, "lm_head", &r.lm_head_);
  }
  if (s.ok() && static_cast<int64_t>(mt.layers.size()) != c.num_layers) {
    s = absl::InvalidArgumentError("reference: layer count differs from config");
  }
  r.layers_.resize(mt.layers.size());
  for (size_t i = 0; s.ok() && i < mt.layers.size(); ++i) {
    const LayerTensors& lt = mt.layers[i];
    Layer& l = r.layers_[i];
    const std::string p = absl::StrCat("layer ", i, " ");
    s = Read(lt.attn_norm, H, p + "attn_norm", &l.attn_norm);
    if (s.ok()) s = Read(lt.wq, QD * H, p + "wq", &l.wq);
    if (s.ok()) s = Read(lt.wk, KD * H, p + "wk", &l.wk);
    if (s.ok()) s = Read(lt.wv, KD * H, p + "wv", &l.wv);
    if (s.ok() && c.attention_bias) {
      s = Read(lt.bq, QD, p + "bq", &l.bq);
      if (s.ok()) s = Read(lt.bk, KD, p + "bk", &l.bk);
      if (s.ok()) s = Read(lt.bv, KD, p + "bv", &l.bv);
    }
    if (s.ok()) s = Read(lt.wo, H * QD, p + "wo", &l.wo);
    if (s.ok()) s = Read(lt.mlp_norm, H, p + "mlp_norm", &l.mlp_norm);
    if (s.ok()) s = Read(lt.w_gate, I * H, p + "w_gate", &l.w_gate);
    if (s.ok()) s = Read(lt.w_up, I * H, p + "w_up", &l.w_up);
    if (s.ok()) s = Read(lt.w_down, H * I, p + "w_down", &l.w_down);
  }
  if (!s.ok()) return s;

  // inv_freq as transformers computes it (default, linear, llama3), in double.
  const RopeScaling& rs = c.rope_scaling;
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    double f =
        std::pow(c.rope_theta, -static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
    if (rs.type == RopeScaling::Type::kLinear) f /= rs.factor;
    if (rs.type == RopeScaling::Type::kLlama3) {
      const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
      const double wavelen = 2 * std::numbers::pi / f;
      const double scaled = wavelen > old_ctx / rs.low_freq_factor ? f / rs.factor : f;
      const double smooth =
          (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      const bool medium =
          !(wavelen < old_ctx / rs.high_freq_factor) && !(wavelen > old_ctx / rs.low_freq_factor);
      f = medium ? (1 - smooth) * scaled / rs.factor + smooth * scaled : scaled;
    }
    r.inv_freq_.push_back(f);
  }
  return r;
}

std::vector<std::vector<double>> ReferenceModel::Hidden(const std::vector<int32_t>& tokens) const {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t group = c.num_heads / c.num_kv_heads;
  std::vector<Vec> x(T);
  for (int64_t t = 0; t < T; ++t)
    x[t].assign(embed_.begin() + tokens[t] * H, embed_.begin() + (tokens[t] + 1) * H);

  for (const Layer& l : layers_) {
    std::vector<Vec> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const Vec h = RmsNormD(x[t], l.attn_norm, c.rms_norm_eps);
      q[t] = Linear(h, l.wq, l.bq, c.num_heads * hd);
      k[t] = Linear(h, l.wk, l.bk, c.num_kv_heads * hd);
      v[t] = Linear(h, l.wv, l.bv, c.num_kv_heads * hd);
      RotateD(q[t], c.num_heads, hd, inv_freq_, t, c.rope_style);
      RotateD(k[t], c.num_kv_heads, hd, inv_freq_, t, c.rope_style);
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec attn(c.num_heads * hd, 0.0);
      for (int64_t h = 0; h < c.num_heads; ++h) {
        const int64_t kvh = h / group;
        Vec score(t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += q[t][h * hd + d] * k[j][kvh * hd + d];
          score[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (double& s : score) sum += (s = std::exp(s - mx));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) attn[h * hd + d] += score[j] / sum * v[j][kvh * hd + d];
        }
      }
      const Vec o = Linear(attn, l.wo, {}, H);
      for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
    }
    for (int64_t t = 0; t < T; ++t) {
      const Vec h = RmsNormD(x[t], l.mlp_norm, c.rms_norm_eps);
      const Vec g = Linear(h, l.w_gate, {}, I);
      const Vec u = Linear(h, l.w_up, {}, I);
      Vec a(I);
      for (int64_t i = 0; i < I; ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = Linear(a, l.w_down, {}, H);
      for (int64_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  for (Vec& row : x) row = RmsNormD(row, final_norm_, c.rms_norm_eps);
  return x;
}

std::vector<double> ReferenceModel::Logits(const std::vector<double>& hidden) const {
  return Linear(hidden, lm_head_, {}, config_.vocab_size);
}

std::vector<std::vector<double>> ReferenceModel::Forward(const std::vector<int32_t>& tokens) const {
  std::vector<Vec> out;
  for (const Vec& h : Hidden(tokens)) out.push_back(Logits(h));
  return out;
}

std::vector<double> ReferenceModel::ForwardLast(const std::vector<int32_t>& tokens) const {
  return Logits(Hidden(tokens).back());
}

std::vector<int32_t> ReferenceModel::GreedyGenerate(const std::vector<int32_t>& prompt,
                                                    int steps) const {
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(ArgMax(ForwardLast(seq)));
    seq.push_back(out.back());
  }
  return out;
}

int32_t ArgMax(const std::vector<double>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace ptxserve::reference
