// Test fixtures for the CPU backend: random-weight Models built in memory and a small
// driver that turns per-sequence token chunks into StepBatches the way a scheduler would.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_block_manager.h"
#include "engine/model/model.h"
#include "engine/step_batch.h"

namespace ptxserve::testing {

struct RandomModelSpec {
  int64_t vocab = 97;
  int64_t hidden = 64;
  int64_t intermediate = 96;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 32;
  bool attention_bias = false;
  bool tied = false;
  DType dtype = DType::kF32;  // dtype of every tensor
  RopeStyle rope_style = RopeStyle::kRotateHalf;
  RopeScaling rope_scaling;
  uint64_t seed = 1;

  std::string Name() const;  // for parameterised test names
};
// A spec by its name, not its bytes (padding), in test names and failure messages.
inline void PrintTo(const RandomModelSpec& s, std::ostream* os) { *os << s.Name(); }

// A Model whose tensors point into buffers owned by model.storage. Linear weights are
// uniform with variance ~1/fan_in, norms ~1, biases small, so activations stay O(1).
Model MakeRandomModel(const RandomModelSpec& spec);

// Rewrites one tensor: fills `bytes` with its new contents and sets its dtype or quant (its
// data and nbytes still describe the old contents when called).
using TensorConversion = std::function<void(Tensor& t, std::vector<uint8_t>& bytes)>;
// A copy of `m` whose tensors `convert` rewrote, the new bytes owned by the copy's storage
// (which keeps `m`'s alive too): the embedding, the LM head and the linear weights, and with
// `vectors_too` the norms and biases. A tied LM head stays the embedding's bytes.
Model ConvertTensors(const Model& m, bool vectors_too, const TensorConversion& convert);
// A copy of `m` whose block-quantized (and f16/bf16) matrices are decoded to f32: the model a
// quantized file stands for.
Model DequantizedModel(const Model& m);

// A sequence as a scheduler tracks it.
struct Seq {
  std::vector<int32_t> tokens;  // prompt + generated so far
  int64_t cached = 0;           // tokens whose K/V are in the cache
  std::vector<int32_t> table;   // block table
};

// Builds a StepBatch feeding seqs[i] its next counts[i] tokens (blocks from `blocks`),
// and marks them cached. Logits rows: every row when all_rows, else the last row of
// each sequence. Aborts the test (ADD_FAILURE + empty batch) when blocks run out.
StepBatch MakeBatch(const std::vector<Seq*>& seqs, const std::vector<int64_t>& counts,
                    KvBlockManager* blocks, bool all_rows);

// max |a - b| / max |b|: a row-wise relative error that tolerates near-zero entries.
double RelErr(const float* a, const float* b, int64_t n);
double RelErr(const float* a, const double* b, int64_t n);

int32_t ArgMax(const float* v, int64_t n);

}  // namespace ptxserve::testing
