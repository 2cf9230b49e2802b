// An independent, deliberately plain Llama forward pass in double precision, used by
// tests as ground truth for the backends. No batching, no paging, no KV cache, and
// no code shared with engine/cpu (only the scalar dtype conversions): every call
// recomputes the whole sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/model.h"

namespace ptxserve::reference {

class ReferenceModel {
 public:
  // Copies every tensor of `model` (any dtype) into f64. InvalidArgument names a
  // missing or mis-sized tensor. The Model need not outlive the result.
  static absl::StatusOr<ReferenceModel> Create(const Model& model);

  // Logits of every position of `tokens`: [tokens.size()][vocab].
  std::vector<std::vector<double>> Forward(const std::vector<int32_t>& tokens) const;
  // Logits of the last position only.
  std::vector<double> ForwardLast(const std::vector<int32_t>& tokens) const;
  // Appends `steps` argmax tokens to `prompt` one at a time (a full forward each) and
  // returns the new tokens. Ties go to the lowest id.
  std::vector<int32_t> GreedyGenerate(const std::vector<int32_t>& prompt, int steps) const;

  const ModelConfig& config() const { return config_; }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, bq, bk, bv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  // Final-normed hidden states [tokens][hidden].
  std::vector<std::vector<double>> Hidden(const std::vector<int32_t>& tokens) const;
  std::vector<double> Logits(const std::vector<double>& hidden) const;

  ModelConfig config_;
  std::vector<double> embed_, final_norm_, lm_head_;
  std::vector<double> inv_freq_;
  std::vector<Layer> layers_;
};

// Index of the largest value (lowest index on ties).
int32_t ArgMax(const std::vector<double>& v);

}  // namespace ptxserve::reference
