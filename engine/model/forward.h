// The forward pass of a Llama-family decoder, written once over the ops a device
// implements (CTranslate2's layers over per-device ops; vLLM's llama.py over its
// layers). Each backend (engine/cpu, engine/cuda) implements ForwardOps; RunForward
// says what is computed and in which order, the device how and where.
//
// Activations are named by role (Act); a device holds each in its own layout and knows
// how many rows it has (the step's tokens, or the logits rows for kRows and kLogits).
// Weights are named by role and layer (WeightRef). A GPU device's ops only enqueue
// kernels, so one RunForward can be captured into a CUDA graph.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "engine/model/config.h"

namespace ptxserve {

// A step's activations.
enum class Act {
  kResidual,   // [tokens][hidden] the residual stream
  kNormed,     // [tokens][hidden] RMSNorm of the residual stream
  kQ,          // [tokens][heads * head_dim]
  kK,          // [tokens][kv_heads * head_dim]
  kV,          // [tokens][kv_heads * head_dim]
  kAttention,  // [tokens][heads * head_dim] attention output
  kGate,       // [tokens][intermediate]
  kUp,         // [tokens][intermediate]
  kMlp,        // [tokens][intermediate] silu(gate) * up
  kRows,       // [rows][hidden] the residual rows that become logits
  kLogits,     // [rows][vocab]
};

// A model weight by role.
enum class Weight {
  kAttnNorm,
  kQ,
  kK,
  kV,  // with their biases where the model has attention_bias
  kO,
  kMlpNorm,
  kGate,
  kUp,
  kDown,
  kFinalNorm,
  kLmHead,  // the embedding when tied
};

struct WeightRef {
  Weight role;
  int layer = -1;  // -1 for kFinalNorm and kLmHead
};

// out = in W^T (+ bias), or out += in W^T with `accumulate` (the residual add).
struct Projection {
  WeightRef weight;
  Act out;
  bool accumulate = false;
};

class ForwardOps {
 public:
  virtual ~ForwardOps() = default;

  // kResidual = the embedding rows of the step's token ids.
  virtual absl::Status Embed() = 0;
  // out = RMSNorm(in) * weight.
  virtual absl::Status RmsNorm(Act in, WeightRef weight, Act out) = 0;
  // Projections of one input, which the device may compute as one product (vLLM's merged
  // QKV and gate/up linears).
  virtual absl::Status Linear(Act in, std::initializer_list<Projection> projections) = 0;
  // kQ and kK rotated in place at the tokens' positions, then kK and kV written into
  // `layer`'s K/V cache at the tokens' slots.
  virtual absl::Status RopeAndWriteKv(int layer) = 0;
  // kAttention = causal attention of kQ over `layer`'s cached K/V (paged, GQA).
  virtual absl::Status Attention(int layer) = 0;
  // kMlp = silu(kGate) * kUp.
  virtual absl::Status SiluMul() = 0;
  // kRows = the residual stream's logits rows.
  virtual absl::Status GatherRows() = 0;
};

// Embedding, every layer, then, when `logits_rows` > 0, the final norm and the LM head
// over those rows into kLogits. Stops at the first op that fails and returns its status.
absl::Status RunForward(const ModelConfig& config, int64_t logits_rows, ForwardOps& ops);

}  // namespace ptxserve
