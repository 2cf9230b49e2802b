// Model-level references for the loader tests on the CPU backend: the logits of a prompt
// and a few greedy steps (the dequantized reference model is testing::DequantizedModel).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace ptxserve::test_files {

// Logits of the prompt's last token, then of each of `steps` greedy decode steps
// (EXPECT failures when the backend refuses the model).
std::vector<std::vector<float>> GreedyLogits(const Model& model, std::vector<int32_t> tokens,
                                             int steps);

// Per step, the largest |got - want| over its logits relative to the largest |want| (an
// EXPECT failure when the two have different numbers of steps).
std::vector<double> RelativeLogitDiffs(const std::vector<std::vector<float>>& got,
                                       const std::vector<std::vector<float>>& want);

}  // namespace ptxserve::test_files
