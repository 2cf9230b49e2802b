// Model-level references for the loader tests on the CPU backend: the logits of a prompt
// and a few greedy steps, and a model's block-quantized matrices widened to f32 (what a
// quantized model's logits are held to).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace ptxserve::test_files {

// Logits of the prompt's last token, then of each of `steps` greedy decode steps
// (EXPECT failures when the backend refuses the model).
std::vector<std::vector<float>> GreedyLogits(const Model& model, std::vector<int32_t> tokens,
                                             int steps);

// A copy of `m` whose block-quantized matrices are dequantized to f32.
Model Dequantized(const Model& m);

}  // namespace ptxserve::test_files
