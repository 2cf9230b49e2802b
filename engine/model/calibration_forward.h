// The forward pass calibration runs (`ptxserve quantize --calibration`): RunForward over
// f32 copies of a model's layer weights that the calibrating encoder may rewrite as it
// goes, with every Linear's input shown to it first. It lives beside the model because
// neither engine/model nor server/ may reach the CPU backend's ops (README "Layout"), and
// the Backend interface neither exposes a layer's inputs nor lets its weights change; it
// is a plain f32 reference (one window per sequence, dense causal attention), fast enough
// for a few hundred calibration tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"

namespace ptxserve {

// One layer's weights in f32, HF layouts ([out, in] matrices; biases empty without
// attention_bias).
struct FloatLayer {
  std::vector<float> attn_norm, wq, wk, wv, bq, bk, bv, wo, mlp_norm, w_gate, w_up, w_down;

  // The matrix of a projection role (kQ .. kDown).
  std::vector<float>& matrix(Weight role);
};

// f32 copies of every layer's weights. InvalidArgument naming the tensor when one is
// block-quantized (calibration starts from an unquantized model).
absl::StatusOr<std::vector<FloatLayer>> FloatLayers(const Model& model);

// What the part of a layer that starts at a Linear computes from the Linear's input, with
// its projections' weights replaced: for q/k/v the attention block's output (RoPE, causal
// attention, then o_proj with its current weights), for gate/up the MLP's (silu(gate) * up,
// then down_proj), for o and down x W^T. The blocks end where AutoAWQ's module2inspect
// does (self_attn, mlp), so an error is weighed by what the following projection makes of
// it. Rows as the input's.
class BlockProbe {
 public:
  virtual ~BlockProbe() = default;
  // `weights`: the projections' [out, in] matrices in the order BeforeLinear shows them.
  virtual std::vector<float> Output(std::span<const float* const> weights) const = 0;
};

// Sees each layer Linear's input before it is multiplied.
class LinearObserver {
 public:
  virtual ~LinearObserver() = default;
  // `x`: `rows` rows of the projections' input, contiguous (every token of every window).
  // The observer may rewrite `layers` (the projections it is shown, to quantize them, or
  // an earlier op's weights) and `x` (to keep x W^T unchanged when it folds a scale into
  // the op that produced x); the forward then multiplies the rows as they are. `probe`
  // runs the block on `x` as it is when called, with other weights.
  virtual absl::Status BeforeLinear(int layer, std::span<const Weight> roles, float* x,
                                    int64_t rows, std::vector<FloatLayer>& layers,
                                    const BlockProbe& probe) = 0;
  // The LM head's input, every token's final-normed hidden state (`rows` rows of
  // hidden_size), shown once after the last layer: the forward itself runs the head on
  // each window's last token only. Nothing by default.
  virtual absl::Status BeforeLmHead(const float* /*x*/, int64_t /*rows*/) {
    return absl::OkStatus();
  }
};

// Runs `model` with `layers` over each window (a sequence from position 0), all windows in
// one batch, calling `observer` before every Linear of every layer, and returns each
// window's last-token logits ([windows][vocab]). InvalidArgument for an empty window or a
// token id outside the vocabulary.
absl::StatusOr<std::vector<float>> RunCalibrationForward(
    const Model& model, const std::vector<std::vector<int32_t>>& windows,
    std::vector<FloatLayer>& layers, LinearObserver& observer);

}  // namespace ptxserve
