#include "engine/model/forward.h"

namespace ptxserve {
namespace {

absl::Status RunLayer(int l, ForwardOps& ops) {
  absl::Status s = ops.RmsNorm(Act::kResidual, {Weight::kAttnNorm, l}, Act::kNormed);
  if (s.ok()) {
    s = ops.Linear(
        Act::kNormed,
        {{{Weight::kQ, l}, Act::kQ}, {{Weight::kK, l}, Act::kK}, {{Weight::kV, l}, Act::kV}});
  }
  if (s.ok()) s = ops.RopeAndWriteKv(l);
  if (s.ok()) s = ops.Attention(l);
  if (s.ok()) s = ops.Linear(Act::kAttention, {{{Weight::kO, l}, Act::kResidual, true}});
  if (s.ok()) s = ops.RmsNorm(Act::kResidual, {Weight::kMlpNorm, l}, Act::kNormed);
  if (s.ok()) {
    s = ops.Linear(Act::kNormed, {{{Weight::kGate, l}, Act::kGate}, {{Weight::kUp, l}, Act::kUp}});
  }
  if (s.ok()) s = ops.SiluMul();
  if (s.ok()) s = ops.Linear(Act::kMlp, {{{Weight::kDown, l}, Act::kResidual, true}});
  return s;
}

}  // namespace

absl::Status RunForward(const ModelConfig& config, int64_t logits_rows, ForwardOps& ops) {
  if (absl::Status s = ops.Embed(); !s.ok()) return s;
  for (int l = 0; l < static_cast<int>(config.num_layers); ++l) {
    if (absl::Status s = RunLayer(l, ops); !s.ok()) return s;
  }
  if (logits_rows == 0) return absl::OkStatus();
  // Only the wanted rows reach the final norm and the LM head.
  absl::Status s = ops.GatherRows();
  if (s.ok()) s = ops.RmsNorm(Act::kRows, {Weight::kFinalNorm}, Act::kRows);
  if (s.ok()) s = ops.Linear(Act::kRows, {{{Weight::kLmHead}, Act::kLogits}});
  return s;
}

}  // namespace ptxserve
