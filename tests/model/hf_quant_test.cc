// The Hugging Face quantized formats against references written here from their
// specifications: every E4M3 code from the OCP FP8 formula, the fp8_e4m3 and int4_g128
// blocks read bit by bit, and AWQ's and GPTQ's nibble orders on hand-made tensors packed
// the way their libraries pack them.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/model/dtype.h"
#include "engine/model/hf_quant_layout.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

// OCP 8-bit floating point specification, E4M3: sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN; no infinities.
double RefE4M3(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

TEST(E4M3Test, AllCodesMatchTheSpecification) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double want = RefE4M3(c);
    const float got = E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;
    // Every value encodes back to its own code.
    EXPECT_EQ(FloatToE4M3(got), c) << "code " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(E4M3ToFloat(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(E4M3ToFloat(0x07), 7 * 0x1p-9f);
}

TEST(E4M3Test, EncoderRoundsToNearestEvenAndSaturates) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> exp(-12, 9);
  auto nearest = [](float x) {  // brute force over every finite code, ties to even
    int best = 0;
    double best_err = INFINITY;
    for (int c = 0; c < 256; ++c) {
      const double v = RefE4M3(c);
      if (std::isnan(v) || std::signbit(v) != std::signbit(x)) continue;
      const double err = std::abs(v - x);
      if (err < best_err || (err == best_err && (c & 1) == 0)) {
        best = c;
        best_err = err;
      }
    }
    return best;
  };
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng));
    if (std::abs(x) >= 448) continue;
    ASSERT_EQ(FloatToE4M3(x), nearest(x)) << x;
  }
  // Exact midpoints: between 1 (0x38) and 1.125 (0x39) to 1; 1.125 .. 1.25 to 1.25 (0x3A);
  // between subnormals 2^-9 and 2 * 2^-9 to the even 2 * 2^-9.
  EXPECT_EQ(FloatToE4M3(1.0625f), 0x38);
  EXPECT_EQ(FloatToE4M3(1.1875f), 0x3A);
  EXPECT_EQ(FloatToE4M3(1.5f * 0x1p-9f), 0x02);
  EXPECT_EQ(FloatToE4M3(0.5f * 0x1p-9f), 0x00);  // to zero, the even neighbour
  EXPECT_EQ(FloatToE4M3(1e9f), 0x7E);
  EXPECT_EQ(FloatToE4M3(-460.0f), 0xFE);
  EXPECT_EQ(FloatToE4M3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
}

float ReadF32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
float ReadF16(const uint8_t* p) { return HalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

TEST(Fp8BlockTest, DequantizesAsScaleTimesCodeAndEncodesWithTheRowScale) {
  std::mt19937 rng(3);
  std::vector<uint8_t> bytes(3 * 36);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (int b = 0; b < 3; ++b) {
    const float s = 0.01f * static_cast<float>(b + 1);
    std::memcpy(bytes.data() + 36 * b, &s, 4);
  }
  std::vector<float> y(96);
  DequantizeRow(QuantType::kFp8E4M3, bytes.data(), 96, y.data());
  for (int e = 0; e < 96; ++e) {
    const uint8_t* block = bytes.data() + 36 * (e / 32);
    const double want = ReadF32(block) * RefE4M3(block[4 + e % 32]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[e])) << e;
    } else {
      EXPECT_EQ(y[e], static_cast<float>(want)) << e;
    }
  }
  // Encoding: one scale max |x| / 448 in every block, each value within half an E4M3 step
  // (1/16 relative for normals, 2^-10 s below).
  std::vector<float> x(96);
  std::normal_distribution<float> normal(0, 0.05f);
  for (float& v : x) v = normal(rng);
  x[40] = -0.75f;
  ASSERT_TRUE(QuantizeRow(QuantType::kFp8E4M3, x.data(), 96, bytes.data()).ok());
  const float s = 0.75f / 448;
  for (int b = 0; b < 3; ++b) EXPECT_EQ(ReadF32(bytes.data() + 36 * b), s);
  DequantizeRow(QuantType::kFp8E4M3, bytes.data(), 96, y.data());
  EXPECT_EQ(y[40], -0.75f);
  for (int e = 0; e < 96; ++e) {
    EXPECT_LE(std::abs(y[e] - x[e]), std::max(std::abs(x[e]) / 16, s * 0x1p-10f) * 1.0001f) << e;
  }
}

TEST(Int4G128BlockTest, DequantizesAsScaleTimesCodeMinusZero) {
  std::mt19937 rng(5);
  std::vector<uint8_t> bytes(2 * 68);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (int b = 0; b < 2; ++b) {
    const uint16_t h = FloatToHalf(-0.125f * static_cast<float>(b + 1));
    std::memcpy(bytes.data() + 68 * b, &h, 2);
    bytes[68 * b + 2] = static_cast<uint8_t>(b == 0 ? 16 : 3);  // 16: a classic GPTQ zero
  }
  std::vector<float> y(256);
  DequantizeRow(QuantType::kInt4G128, bytes.data(), 256, y.data());
  for (int e = 0; e < 256; ++e) {
    const uint8_t* block = bytes.data() + 68 * (e / 128);
    const int k = e % 128;
    const int q = (block[4 + k / 2] >> (k % 2 == 0 ? 0 : 4)) & 15;
    EXPECT_EQ(y[e], ReadF16(block) * static_cast<float>(q - block[2])) << e;
  }
}

TEST(Int4G128BlockTest, EncoderKeepsEveryValueWithinHalfAStep) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.01f, 0.1f);
  std::vector<float> x(384);
  for (float& v : x) v = normal(rng);
  for (int i = 256; i < 384; ++i) x[i] = std::abs(x[i]);  // nothing below zero
  std::vector<uint8_t> bytes(3 * 68);
  ASSERT_TRUE(QuantizeRow(QuantType::kInt4G128, x.data(), 384, bytes.data()).ok());
  std::vector<float> y(384);
  DequantizeRow(QuantType::kInt4G128, bytes.data(), 384, y.data());
  for (int b = 0; b < 3; ++b) {
    const float s = ReadF16(bytes.data() + 68 * b);
    const int z = bytes[68 * b + 2];
    EXPECT_GE(z, 1) << "block " << b;  // GPTQ stores z - 1 in a nibble
    EXPECT_LE(z, 15) << "block " << b;
    EXPECT_EQ(bytes[68 * b + 3], 0);
    for (int k = 0; k < 128; ++k) {
      EXPECT_LE(std::abs(y[128 * b + k] - x[128 * b + k]), s / 2 * 1.001f) << 128 * b + k;
    }
  }
  EXPECT_FALSE(QuantizeRow(QuantType::kInt4G128, x.data(), 100, bytes.data()).ok());
}

// A layer of 256 inputs (2 groups) and 16 outputs with q(n, i), zero(g, n) and
// scale(g, n) chosen so that every element is distinguishable.
int Q(int64_t n, int64_t i) { return static_cast<int>((n * 7 + i * 3 + i / 16) % 16); }
int Zero(int64_t g, int64_t n) { return static_cast<int>((n + 5 * g) % 15) + 1; }
float Scale(int64_t g, int64_t n) { return 0.0625f * static_cast<float>(n + 1) * (g + 1); }
constexpr int64_t kIn = 256, kOut = 16;

struct HandPacked {
  std::vector<int32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
};

// AutoAWQ's pack: word [i][c] |= q(8c + order[k], i) << 4k, order = 0,2,4,6,1,3,5,7;
// zeros the same over groups.
HandPacked PackAwq() {
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  HandPacked p;
  p.qweight.assign(kIn * kOut / 8, 0);
  p.qzeros.assign(2 * kOut / 8, 0);
  for (int64_t i = 0; i < kIn; ++i) {
    for (int64_t c = 0; c < kOut / 8; ++c) {
      uint32_t w = 0, z = 0;
      for (int k = 0; k < 8; ++k) {
        w |= static_cast<uint32_t>(Q(8 * c + order[k], i)) << (4 * k);
        z |= static_cast<uint32_t>(Zero(i / 128, 8 * c + order[k])) << (4 * k);
      }
      p.qweight[i * (kOut / 8) + c] = static_cast<int32_t>(w);
      if (i % 128 == 0) p.qzeros[(i / 128) * (kOut / 8) + c] = static_cast<int32_t>(z);
    }
  }
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t n = 0; n < kOut; ++n) p.scales.push_back(FloatToHalf(Scale(g, n)));
  }
  return p;
}

// AutoGPTQ's pack: qweight word [r][n] holds inputs 8r..8r+7 of output n in nibbles 0..7;
// qzeros word [g][c] outputs 8c..8c+7 in nibbles 0..7, storing zero - 1 (classic) or zero.
HandPacked PackGptq(bool zero_minus_one) {
  HandPacked p;
  p.qweight.assign(kIn / 8 * kOut, 0);
  p.qzeros.assign(2 * kOut / 8, 0);
  for (int64_t r = 0; r < kIn / 8; ++r) {
    for (int64_t n = 0; n < kOut; ++n) {
      uint32_t w = 0;
      for (int j = 0; j < 8; ++j) w |= static_cast<uint32_t>(Q(n, 8 * r + j)) << (4 * j);
      p.qweight[r * kOut + n] = static_cast<int32_t>(w);
    }
  }
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t c = 0; c < kOut / 8; ++c) {
      uint32_t z = 0;
      for (int j = 0; j < 8; ++j) {
        z |= static_cast<uint32_t>(Zero(g, 8 * c + j) - (zero_minus_one ? 1 : 0)) << (4 * j);
      }
      p.qzeros[g * (kOut / 8) + c] = static_cast<int32_t>(z);
    }
    for (int64_t n = 0; n < kOut; ++n) p.scales.push_back(FloatToHalf(Scale(g, n)));
  }
  return p;
}

void ExpectUnpacksToTheLayer(Int4Packing packing, const HandPacked& p, bool zero_minus_one) {
  const int64_t row_bytes = QuantRowBytes(QuantType::kInt4G128, kIn);
  std::vector<uint8_t> blocks(kOut * row_bytes);
  Int4ToBlocks(packing, reinterpret_cast<const uint8_t*>(p.qweight.data()),
               reinterpret_cast<const uint8_t*>(p.qzeros.data()),
               reinterpret_cast<const uint8_t*>(p.scales.data()), kIn, kOut, zero_minus_one,
               blocks.data());
  std::vector<float> row(kIn);
  for (int64_t n = 0; n < kOut; ++n) {
    DequantizeRow(QuantType::kInt4G128, blocks.data() + n * row_bytes, kIn, row.data());
    for (int64_t i = 0; i < kIn; ++i) {
      const float want = Scale(i / 128, n) * static_cast<float>(Q(n, i) - Zero(i / 128, n));
      ASSERT_EQ(row[i], want) << "output " << n << " input " << i;
    }
  }
  // And back to the checkpoint's words, bit for bit.
  const PackedInt4 again = BlocksToInt4(packing, blocks.data(), kIn, kOut, zero_minus_one);
  EXPECT_EQ(again.qweight, p.qweight);
  EXPECT_EQ(again.qzeros, p.qzeros);
  EXPECT_EQ(again.scales, p.scales);
}

TEST(Int4LayoutTest, AwqInterleavedNibbleOrder) {
  const HandPacked p = PackAwq();
  EXPECT_EQ(QweightShape(Int4Packing::kAwq, kIn, kOut), (std::vector<int64_t>{kIn, kOut / 8}));
  // Word [0][0]: outputs 0, 2, 4, 6, 1, 3, 5, 7 of input 0 in nibbles 0..7.
  EXPECT_EQ(static_cast<uint32_t>(p.qweight[0]) & 0xF, static_cast<uint32_t>(Q(0, 0)));
  EXPECT_EQ((static_cast<uint32_t>(p.qweight[0]) >> 4) & 0xF, static_cast<uint32_t>(Q(2, 0)));
  EXPECT_EQ((static_cast<uint32_t>(p.qweight[0]) >> 16) & 0xF, static_cast<uint32_t>(Q(1, 0)));
  ExpectUnpacksToTheLayer(Int4Packing::kAwq, p, /*zero_minus_one=*/true);  // ignored for AWQ
}

TEST(Int4LayoutTest, GptqSequentialNibblesClassicAndV2Zeros) {
  EXPECT_EQ(QweightShape(Int4Packing::kGptq, kIn, kOut), (std::vector<int64_t>{kIn / 8, kOut}));
  ExpectUnpacksToTheLayer(Int4Packing::kGptq, PackGptq(true), /*zero_minus_one=*/true);
  ExpectUnpacksToTheLayer(Int4Packing::kGptq, PackGptq(false), /*zero_minus_one=*/false);
}

}  // namespace
}  // namespace ptxserve
