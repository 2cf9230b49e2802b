// A test fixture: a Llama model directory rewritten with wider rows that computes the same
// function, so formats whose blocks are wider than the test model's rows (q4_k's and
// q6_k's 256-element super-blocks; TinyStories' rows are 128 and 384 wide) can be measured
// on it. Not a product feature: the padded model is the original plus zeros.
//
// Why the function is the same, for the original's weights W and the padded ones W':
// - Hidden state: the embedding's added columns are zero and every matrix writing the
//   residual stream (o_proj, down_proj) has zero added rows, so the added dimensions of
//   the residual stream stay 0 in every layer.
// - RMSNorm over hidden' > hidden dimensions with rms_norm_eps' = eps * hidden / hidden':
//   sum / hidden' + eps' = (hidden / hidden') * (sum / hidden + eps), so each normalized
//   value is sqrt(hidden' / hidden) times the original's; each norm weight is multiplied
//   by sqrt(hidden / hidden') to undo it. With hidden' = 4 hidden that is 1/2 and every
//   scaling is by a power of two, exact in f32: the padded model's activations are the
//   original's bit for bit (measured on the CPU backend, f32, q8_0 and q4_0 logits
//   identical). With hidden' = 2 hidden the weights times 1/sqrt(2) round: f32 still
//   agrees to ~3e-7 of the largest logit, but the q8_0 model's prefill logits moved by ~1e-2
//   of it (8-bit activation rounding is not continuous), so use a power-of-4 ratio.
// - Attention: head_dim is kept, so RoPE rotates the same pairs with the same
//   frequencies. The original heads keep their rows (the first heads * head_dim of
//   q_proj, the first kv_heads * head_dim of k/v_proj) and the added heads come after, with
//   the same heads / kv_heads group, so original query head h still reads kv head
//   h / group. An added query head has q = 0 and k = 0: its scores are all 0, its softmax
//   is uniform over values that are all 0, and o_proj's columns for it are zero.
// - MLP: added gate/up rows are zero, silu(0) * 0 = 0, and down_proj's added columns are
//   zero anyway.
// - The LM head (or the tied embedding) has zero added columns: the logits are the same.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ptxserve::cli_test {

struct PaddedSizes {
  int64_t hidden = 0;
  int64_t heads = 0;     // query heads; head_dim is kept
  int64_t kv_heads = 0;  // heads / kv_heads must equal the original's group size
  int64_t intermediate = 0;
};

// Writes `to` (a directory, created) as model `from` (a Hugging Face Llama directory of
// f32, f16 or bf16 tensors) padded to `sizes`: config.json with the new sizes, head_dim and
// rms_norm_eps, model.safetensors in f32, and the other files (tokenizer) copied.
absl::Status WriteZeroPaddedModel(const std::string& from, const std::string& to,
                                  const PaddedSizes& sizes);

}  // namespace ptxserve::cli_test
