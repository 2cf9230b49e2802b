// Both methods run inside the calibration forward's BeforeLinear, where a projection's
// inputs are at hand: GPTQ replaces the projections by their quantized values before they
// are multiplied (so later layers see quantized inputs); AWQ rescales weights and inputs
// so the forward stays the unquantized model's, and rounds everything at the end.
#include "engine/model/hf_quant_calibrate.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "engine/model/calibration_forward.h"
#include "engine/model/hf_quant_awq.h"
#include "engine/model/hf_quant_calibration.h"
#include "engine/model/hf_quant_gptq.h"
#include "engine/model/q4_0_gptq.h"
#include "engine/model/quant.h"
#include "engine/model/weighted_quant.h"

namespace ptxserve {
namespace {

constexpr Weight kProjections[] = {Weight::kQ,    Weight::kK,  Weight::kV,   Weight::kO,
                                   Weight::kGate, Weight::kUp, Weight::kDown};

const Tensor& TensorOf(const Model& model, int layer, Weight role) {
  const LayerTensors& l = model.tensors.layers[layer];
  switch (role) {
    case Weight::kQ:
      return l.wq;
    case Weight::kK:
      return l.wk;
    case Weight::kV:
      return l.wv;
    case Weight::kO:
      return l.wo;
    case Weight::kGate:
      return l.w_gate;
    case Weight::kUp:
      return l.w_up;
    default:
      return l.w_down;
  }
}

// Calibration rows of `x` into the statistics of one layer input.
LayerInputs InputsOf(const float* x, int64_t rows, int64_t width) {
  LayerInputs in(width);
  in.Add(x, rows, width);
  return in;
}

// GPTQ into `type`'s blocks: int4_g128 (hf_quant_gptq.h) or q4_0 (q4_0_gptq.h).
class GptqObserver final : public LinearObserver {
 public:
  GptqObserver(const Model& model, QuantType type, CalibratedInt4* out)
      : model_(model), type_(type), out_(out) {}

  absl::Status BeforeLinear(int layer, std::span<const Weight> roles, float* x, int64_t rows,
                            std::vector<FloatLayer>& layers, const BlockProbe& /*probe*/) override {
    const int64_t width = TensorOf(model_, layer, roles[0]).shape[1];
    const LayerInputs inputs = InputsOf(x, rows, width);
    for (Weight role : roles) {
      if (absl::Status s =
              Quantize(TensorOf(model_, layer, role), layers[layer].matrix(role), inputs);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // A q4_0 GGUF stores the LM head (the embedding when tied) in q4_0 too: its rows get the
  // importance-weighted scales of the head's inputs (llama.cpp's imatrix for the output
  // matrix), not GPTQ, whose rows fitted to the head's inputs made the tied embedding a
  // worse lookup table (TinyStories: perplexity 24.40 against 23.68).
  absl::Status BeforeLmHead(const float* x, int64_t rows) override {
    if (type_ != QuantType::kQ4_0) return absl::OkStatus();
    const Tensor& t =
        model_.config.tie_word_embeddings ? model_.tensors.embed : model_.tensors.lm_head;
    if (t.quant != QuantType::kNone) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " is already ",
                                                     std::string(QuantName(t.quant)),
                                                     "; calibrate from an unquantized model"));
    }
    const int64_t n = t.shape[0], width = t.shape[1];
    std::vector<float> w(static_cast<size_t>(t.numel()));
    ConvertToFloat(t.dtype, t.data, w.size(), w.data());
    const LayerInputs inputs = InputsOf(x, rows, width);
    std::vector<float> importance(static_cast<size_t>(width));
    for (int64_t i = 0; i < width; ++i) importance[i] = static_cast<float>(inputs.MeanSquare(i));
    const int64_t row_bytes = QuantRowBytes(type_, width);
    std::vector<uint8_t> blocks(static_cast<size_t>(n * row_bytes));
    for (int64_t r = 0; r < n; ++r) {
      if (absl::Status s = QuantizeRowQ4_0Weighted(w.data() + r * width, width, importance.data(),
                                                   blocks.data() + r * row_bytes);
          !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t.name, ": row ", r, ": ", s.message()));
      }
    }
    return Keep(t, w, std::move(blocks), inputs).status();
  }

 private:
  // Tensor t's f32 values `w` ([out, in]) replaced by their GPTQ blocks' values, the blocks
  // kept under t's name.
  absl::Status Quantize(const Tensor& t, std::vector<float>& w, const LayerInputs& inputs) {
    const int64_t n = t.shape[0], width = t.shape[1];
    auto blocks = type_ == QuantType::kQ4_0 ? QuantizeQ4_0Gptq(w.data(), n, width, inputs)
                                            : QuantizeInt4Gptq(w.data(), n, width, inputs);
    if (!blocks.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": ", blocks.status().message()));
    }
    auto values = Keep(t, w, std::move(*blocks), inputs);
    if (!values.ok()) return values.status();
    w = std::move(*values);
    return absl::OkStatus();
  }

  // Keeps `blocks` as t's, adds their output error and the reference encoder's on `inputs`
  // for t's values `w`, and returns the values the blocks decode to.
  absl::StatusOr<std::vector<float>> Keep(const Tensor& t, const std::vector<float>& w,
                                          std::vector<uint8_t> blocks, const LayerInputs& inputs) {
    const int64_t n = t.shape[0], width = t.shape[1];
    const int64_t row_bytes = QuantRowBytes(type_, width);
    std::vector<uint8_t> rtn(static_cast<size_t>(n * row_bytes));
    for (int64_t r = 0; r < n; ++r) {
      if (absl::Status s =
              QuantizeRow(type_, w.data() + r * width, width, rtn.data() + r * row_bytes);
          !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t.name, ": row ", r, ": ", s.message()));
      }
    }
    std::vector<float> values = Decode(blocks, n, width);
    out_->rtn_error += OutputError(inputs, w.data(), Decode(rtn, n, width).data(), n);
    out_->error += OutputError(inputs, w.data(), values.data(), n);
    out_->blocks[t.name] = std::move(blocks);
    return values;
  }

  std::vector<float> Decode(const std::vector<uint8_t>& blocks, int64_t n, int64_t width) const {
    std::vector<float> v(static_cast<size_t>(n * width));
    const int64_t row_bytes = QuantRowBytes(type_, width);
    for (int64_t r = 0; r < n; ++r) {
      DequantizeRow(type_, blocks.data() + r * row_bytes, width, v.data() + r * width);
    }
    return v;
  }

  const Model& model_;
  QuantType type_;
  CalibratedInt4* out_;
};

class AwqObserver final : public LinearObserver {
 public:
  AwqObserver(const Model& model, bool clip, CalibratedInt4* out)
      : model_(model), clip_(clip), out_(out) {}

  absl::Status BeforeLinear(int layer, std::span<const Weight> roles, float* x, int64_t rows,
                            std::vector<FloatLayer>& layers, const BlockProbe& probe) override {
    const ModelConfig& c = model_.config;
    const int64_t width = TensorOf(model_, layer, roles[0]).shape[1];
    const LayerInputs inputs = InputsOf(x, rows, width);
    FloatLayer& l = layers[layer];
    std::vector<int64_t> slot_of;
    if (roles[0] == Weight::kO) {
      // Attention output channel (head h, dim d) is a mix of v_proj's row (h / group, d).
      const int64_t group = c.num_heads / c.num_kv_heads;
      for (int64_t ch = 0; ch < width; ++ch) {
        slot_of.push_back((ch / c.head_dim) / group * c.head_dim + ch % c.head_dim);
      }
    }
    std::vector<AwqMatrix> matrices;
    for (Weight role : roles) {
      matrices.push_back({l.matrix(role).data(), TensorOf(model_, layer, role).shape[0]});
    }
    // q/k/v and gate/up are judged by the attention block's and the MLP's output (after
    // o_proj and down_proj), as AutoAWQ does: a linear error in q or k is not what the
    // softmax makes of it, and an error o_proj or down_proj maps to little matters little
    // (perplexity 24.63 against 24.86 when judged before them).
    AwqObjective objective = LinearOutputError(inputs, matrices);
    // o_proj and down_proj are judged by their own output, which X^T X gives in out * in^2
    // per candidate and a product with the rows in rows * out * in: the cheaper one (the
    // rows, for a wide down_proj calibrated on fewer tokens than its inputs).
    if (roles[0] == Weight::kQ || roles[0] == Weight::kGate || rows < width) {
      std::vector<const float*> unquantized;
      for (const AwqMatrix& m : matrices) unquantized.push_back(m.w);
      objective = [&probe, ref = probe.Output(unquantized)](
                      const std::vector<std::vector<float>>& restored) {
        std::vector<const float*> weights;
        for (const std::vector<float>& w : restored) weights.push_back(w.data());
        const std::vector<float> got = probe.Output(weights);
        double error = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double d = static_cast<double>(got[i]) - ref[i];
          error += d * d;
        }
        return error;
      };
    }
    auto found = SearchAwqScales(inputs, matrices, slot_of, AwqAlphaGrid(), objective);
    if (!found.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", TensorOf(model_, layer, roles[0]).name, ": ", found.status().message()));
    }
    out_->error += found->error;
    out_->rtn_error += found->rtn_error;
    const std::vector<float>& s = found->scale;
    for (Weight role : roles) {
      std::vector<float>& w = l.matrix(role);
      for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % width];
      // AutoAWQ leaves q and k unclipped: their error reaches the output through softmax.
      if (!clip_ || role == Weight::kQ || role == Weight::kK) continue;
      auto clip = ClipAwqGroups(w.data(), TensorOf(model_, layer, role).shape[0], width, inputs, s);
      if (!clip.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", TensorOf(model_, layer, role).name, ": ", clip.status().message()));
      }
    }
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t ch = 0; ch < width; ++ch) x[t * width + ch] /= s[ch];
    }
    // The op that produced x divides its output channel (slot) by the channel's scale.
    const int64_t slots = roles[0] == Weight::kO ? c.kv_dim() : width;
    std::vector<float> slot_scale(slots);
    for (int64_t ch = 0; ch < width; ++ch) slot_scale[slot_of.empty() ? ch : slot_of[ch]] = s[ch];
    switch (roles[0]) {
      case Weight::kO:
        DivideRows(&l.wv, slot_scale);
        DivideRows(&l.bv, slot_scale);
        break;
      case Weight::kDown:
        DivideRows(&l.w_up, slot_scale);
        break;
      default:  // q/k/v and gate/up read an RMSNorm's output
        DivideRows(roles[0] == Weight::kQ ? &l.attn_norm : &l.mlp_norm, slot_scale);
        break;
    }
    return absl::OkStatus();
  }

 private:
  // Row r of the [rows, m.size() / rows] matrix (a vector when m has one entry per row)
  // divided by scale[r]; nothing for an empty m (no bias).
  static void DivideRows(std::vector<float>* m, const std::vector<float>& scale) {
    if (m->empty()) return;
    const size_t cols = m->size() / scale.size();
    for (size_t i = 0; i < m->size(); ++i) (*m)[i] /= scale[i / cols];
  }

  const Model& model_;
  bool clip_;
  CalibratedInt4* out_;
};

}  // namespace

absl::Status ApplyAwq(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                      bool clip, std::vector<FloatLayer>* layers, CalibratedInt4* errors) {
  if (windows.empty()) return absl::InvalidArgumentError("no calibration tokens");
  for (const std::vector<int32_t>& w : windows) errors->tokens += static_cast<int64_t>(w.size());
  AwqObserver awq(model, clip, errors);
  return RunCalibrationForward(model, windows, *layers, awq).status();
}

absl::StatusOr<CalibratedInt4> CalibrateInt4(const Model& model, HfQuantization::Method method,
                                             const std::vector<std::vector<int32_t>>& windows,
                                             AwqRounding awq_rounding) {
  if (method != HfQuantization::Method::kAwq && method != HfQuantization::Method::kGptq) {
    return absl::InvalidArgumentError(absl::StrCat("calibration is for awq and gptq, not ",
                                                   std::string(HfQuantMethodName(method))));
  }
  if (windows.empty()) return absl::InvalidArgumentError("no calibration tokens");
  for (size_t l = 0; l < model.tensors.layers.size(); ++l) {
    for (Weight role : kProjections) {
      const Tensor& t = TensorOf(model, static_cast<int>(l), role);
      if (t.shape.size() != 2 || t.shape[1] % 128 != 0 || t.shape[0] % 8 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", t.name,
            ": 4-bit groups need inputs a multiple of 128 and outputs a multiple of 8"));
      }
    }
  }
  auto layers = FloatLayers(model);
  if (!layers.ok()) return layers.status();
  CalibratedInt4 out;
  if (method == HfQuantization::Method::kGptq) {
    for (const std::vector<int32_t>& w : windows) out.tokens += static_cast<int64_t>(w.size());
    GptqObserver gptq(model, QuantType::kInt4G128, &out);
    if (auto logits = RunCalibrationForward(model, windows, *layers, gptq); !logits.ok()) {
      return logits.status();
    }
    return out;
  }

  if (absl::Status s = ApplyAwq(model, windows, /*clip=*/true, &*layers, &out); !s.ok()) return s;
  if (awq_rounding == AwqRounding::kGptq) {
    // The scaled model computes what the original did (but for clipping), so gptq's pass
    // runs on it as on any model: layer after layer, each Linear's inputs (already divided
    // by s) through the projections quantized before it. Its errors are not added: `error`
    // stays the scale search's, comparable between the two roundings.
    CalibratedInt4 fed;
    GptqObserver gptq(model, QuantType::kInt4G128, &fed);
    if (auto logits = RunCalibrationForward(model, windows, *layers, gptq); !logits.ok()) {
      return logits.status();
    }
    out.blocks = std::move(fed.blocks);
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    FloatLayer& l = (*layers)[i];
    const LayerTensors& t = model.tensors.layers[i];
    for (Weight role : kProjections) {
      if (awq_rounding == AwqRounding::kGptq) break;  // the blocks are gptq's
      const Tensor& tensor = TensorOf(model, static_cast<int>(i), role);
      std::vector<uint8_t>& blocks = out.blocks[tensor.name];
      if (absl::Status s = QuantizeInt4Rows(l.matrix(role).data(), tensor.shape[0], tensor.shape[1],
                                            &blocks, nullptr);
          !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, ": ", s.message()));
      }
    }
    out.folded[t.attn_norm.name] = std::move(l.attn_norm);
    out.folded[t.mlp_norm.name] = std::move(l.mlp_norm);
    if (t.bv.present()) out.folded[t.bv.name] = std::move(l.bv);
  }
  return out;
}

absl::StatusOr<CalibratedInt4> CalibrateQ4_0(const Model& model,
                                             const std::vector<std::vector<int32_t>>& windows) {
  if (windows.empty()) return absl::InvalidArgumentError("no calibration tokens");
  auto layers = FloatLayers(model);
  if (!layers.ok()) return layers.status();
  CalibratedInt4 out;
  for (const std::vector<int32_t>& w : windows) out.tokens += static_cast<int64_t>(w.size());
  GptqObserver gptq(model, QuantType::kQ4_0, &out);
  if (auto logits = RunCalibrationForward(model, windows, *layers, gptq); !logits.ok()) {
    return logits.status();
  }
  return out;
}

}  // namespace ptxserve
