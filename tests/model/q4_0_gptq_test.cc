// GPTQ into q4_0 blocks (q4_0_gptq.h) on small synthetic layers: its blocks decode as the
// q4_0 layout says (checked by a decoder written here from the spec), keep the scales the
// importance-weighted search picks for the original rows, cut the output error on the
// calibration inputs well below the reference encoder's and the weighted search's alone,
// and change nothing when the inputs are uncorrelated (no error to feed forward).
#include "engine/model/q4_0_gptq.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model/dtype.h"
#include "engine/model/quant.h"
#include "engine/model/weighted_quant.h"
#include "gtest/gtest.h"
#include "tests/model/synthetic_layer.h"

namespace ptxserve {
namespace {

constexpr int64_t kBlockBytes = 18;  // f16 scale + 16 bytes of nibbles

using Layer = testing::SyntheticLayer;
using testing::DirectOutputError;
using testing::InputsOf;

// Correlated inputs with every 11th channel 4 times larger.
Layer RandomLayer(int64_t rows, int64_t in, int64_t out, unsigned seed) {
  return testing::MakeSyntheticLayer(
      rows, in, out, 6, [](int64_t i) { return i % 11 == 0 ? 4.0f : 1.0f; }, seed);
}

// q4_0 per its layout, independently of quant.cc: per block of 32 an f16 scale d, then 16
// bytes whose low nibbles are elements 0..15 and high nibbles 16..31, each d * (q - 8).
std::vector<float> DecodeQ4_0(const std::vector<uint8_t>& blocks, int64_t out, int64_t in) {
  std::vector<float> v(static_cast<size_t>(out * in));
  for (int64_t b = 0; b < out * in / 32; ++b) {
    const uint8_t* p = blocks.data() + b * kBlockBytes;
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = HalfToFloat(dh);
    for (int j = 0; j < 16; ++j) {
      v[b * 32 + j] = d * static_cast<float>((p[2 + j] & 0xF) - 8);
      v[b * 32 + j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
    }
  }
  return v;
}

// Rows encoded by the importance-weighted search alone, importance the inputs' mean square.
std::vector<uint8_t> WeightedRows(const Layer& l, const LayerInputs& inputs) {
  std::vector<float> importance(l.in);
  for (int64_t i = 0; i < l.in; ++i) importance[i] = static_cast<float>(inputs.MeanSquare(i));
  std::vector<uint8_t> b(static_cast<size_t>(l.out * l.in / 32 * kBlockBytes));
  for (int64_t n = 0; n < l.out; ++n) {
    EXPECT_TRUE(QuantizeRowQ4_0Weighted(l.w.data() + n * l.in, l.in, importance.data(),
                                        b.data() + n * l.in / 32 * kBlockBytes)
                    .ok());
  }
  return b;
}

TEST(Q4_0GptqTest, BlocksDecodePerTheLayoutAndKeepTheWeightedSearchsScales) {
  const Layer l = RandomLayer(300, 128, 8, 1);
  const LayerInputs inputs = InputsOf(l);
  auto blocks = QuantizeQ4_0Gptq(l.w.data(), l.out, l.in, inputs);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  ASSERT_EQ(blocks->size(), static_cast<size_t>(l.out * l.in / 32 * kBlockBytes));
  std::vector<float> library(l.w.size());
  for (int64_t n = 0; n < l.out; ++n) {
    DequantizeRow(QuantType::kQ4_0, blocks->data() + n * l.in / 32 * kBlockBytes, l.in,
                  library.data() + n * l.in);
  }
  EXPECT_EQ(DecodeQ4_0(*blocks, l.out, l.in), library);
  const std::vector<uint8_t> weighted = WeightedRows(l, inputs);
  size_t codes_changed = 0;
  for (size_t b = 0; b < weighted.size(); b += kBlockBytes) {
    EXPECT_EQ((*blocks)[b], weighted[b]) << "block " << b / kBlockBytes;
    EXPECT_EQ((*blocks)[b + 1], weighted[b + 1]) << "block " << b / kBlockBytes;
    for (size_t i = 2; i < kBlockBytes; ++i) codes_changed += (*blocks)[b + i] != weighted[b + i];
  }
  EXPECT_GT(codes_changed, 0u);
}

TEST(Q4_0GptqTest, OutputErrorOnItsCalibrationInputsIsBelowBothEncodersWithoutFeedback) {
  for (unsigned seed : {2u, 3u, 4u}) {
    const Layer l = RandomLayer(400, 256, 16, seed);
    const LayerInputs inputs = InputsOf(l);
    auto blocks = QuantizeQ4_0Gptq(l.w.data(), l.out, l.in, inputs);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    std::vector<uint8_t> reference(blocks->size());
    for (int64_t n = 0; n < l.out; ++n) {
      ASSERT_TRUE(QuantizeRow(QuantType::kQ4_0, l.w.data() + n * l.in, l.in,
                              reference.data() + n * l.in / 32 * kBlockBytes)
                      .ok());
    }
    const double gptq = DirectOutputError(l, DecodeQ4_0(*blocks, l.out, l.in));
    const double rtn = DirectOutputError(l, DecodeQ4_0(reference, l.out, l.in));
    const double weighted = DirectOutputError(l, DecodeQ4_0(WeightedRows(l, inputs), l.out, l.in));
    std::printf(
        "[ q4_0 gptq ] seed %u: output error %.4g, weighted scales alone %.4g, "
        "reference %.4g (%.1f%%)\n",
        seed, gptq, weighted, rtn, 100 * gptq / rtn);
    EXPECT_LT(gptq, 0.8 * weighted);
    EXPECT_LT(gptq, 0.8 * rtn);
  }
}

TEST(Q4_0GptqTest, UncorrelatedInputsLeaveNothingToFeedForward) {
  // Rows that are scaled unit vectors: X^T X is diagonal, so every input's error stays
  // its own and the blocks are the weighted search's.
  Layer l = RandomLayer(1, 64, 8, 5);
  l.rows = 64;
  l.x.assign(64 * 64, 0.0f);
  for (int64_t i = 0; i < 64; ++i) l.x[i * 64 + i] = 1.0f + static_cast<float>(i % 5);
  const LayerInputs inputs = InputsOf(l);
  auto blocks = QuantizeQ4_0Gptq(l.w.data(), l.out, l.in, inputs);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, WeightedRows(l, inputs));
}

TEST(Q4_0GptqTest, BadShapesAndRowsAreRefused) {
  Layer l = RandomLayer(10, 64, 4, 6);
  auto wide = QuantizeQ4_0Gptq(l.w.data(), l.out, l.in, LayerInputs(96));
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wide.status().message().find("96 wide"), std::string::npos) << wide.status();
  l.w[2 * 64 + 7] = NAN;
  auto nan = QuantizeQ4_0Gptq(l.w.data(), l.out, l.in, InputsOf(l));
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("row 2: q4_0: element 7"), std::string::npos)
      << nan.status();
}

}  // namespace
}  // namespace ptxserve
