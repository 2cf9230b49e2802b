// The block formats against references written here from the formats' specifications,
// reading every field bit by bit; hand-computed blocks pin the layouts; round trips
// check q8_0's and q4_0's error bounds (q4_k's and q6_k's searches: kquant_encoder_test.cc).
#include "engine/model/quant.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model/dtype.h"
#include "engine/model/model.h"
#include "engine/model/model_checks.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

// Bits [bit, bit + count) of `bytes`, bit 0 being the lowest bit of byte 0.
int Bits(const std::vector<uint8_t>& bytes, size_t offset, int bit, int count) {
  int v = 0;
  for (int i = 0; i < count; ++i) {
    const int b = bit + i;
    v |= ((bytes[offset + b / 8] >> (b % 8)) & 1) << i;
  }
  return v;
}
float Half(const std::vector<uint8_t>& b, size_t offset) {
  return HalfToFloat(static_cast<uint16_t>(Bits(b, offset, 0, 16)));
}
int Signed8(int v) { return v >= 128 ? v - 256 : v; }

// Element e of the block at `o`, straight from the specification.
float RefQ8_0(const std::vector<uint8_t>& b, size_t o, int e) {
  return Half(b, o) * static_cast<float>(Signed8(Bits(b, o + 2, 8 * e, 8)));
}
float RefQ4_0(const std::vector<uint8_t>& b, size_t o, int e) {
  const int nibble = e < 16 ? Bits(b, o + 2, 8 * e, 4) : Bits(b, o + 2, 8 * (e - 16) + 4, 4);
  return Half(b, o) * static_cast<float>(nibble - 8);
}
float RefQ4_K(const std::vector<uint8_t>& b, size_t o, int e) {
  const int j = e / 32, l = e % 32;
  const size_t s = o + 4;  // the 12 bytes of scales and mins
  int sc, m;
  if (j < 4) {
    sc = Bits(b, s, 8 * j, 6);
    m = Bits(b, s, 8 * (j + 4), 6);
  } else {
    sc = Bits(b, s, 8 * (j + 4), 4) + 16 * Bits(b, s, 8 * (j - 4) + 6, 2);
    m = Bits(b, s, 8 * (j + 4) + 4, 4) + 16 * Bits(b, s, 8 * j + 6, 2);
  }
  const int q = Bits(b, o + 16, 8 * (32 * (j / 2) + l) + 4 * (j % 2), 4);
  return Half(b, o) * static_cast<float>(sc) * static_cast<float>(q) -
         Half(b, o + 2) * static_cast<float>(m);
}
float RefQ6_K(const std::vector<uint8_t>& b, size_t o, int e) {
  const int half = e / 128, g = (e % 128) / 32, l = e % 32;
  const int low = Bits(b, o, 8 * (64 * half + 32 * (g % 2) + l) + 4 * (g / 2), 4);
  const int high = Bits(b, o + 128, 8 * (32 * half + l) + 2 * g, 2);
  const int scale = Signed8(Bits(b, o + 192, 8 * (8 * half + l / 16 + 2 * g), 8));
  return Half(b, o + 208) * static_cast<float>(scale * (low + 16 * high - 32));
}

float Ref(QuantType t, const std::vector<uint8_t>& b, size_t o, int e) {
  switch (t) {
    case QuantType::kQ8_0:
      return RefQ8_0(b, o, e);
    case QuantType::kQ4_0:
      return RefQ4_0(b, o, e);
    case QuantType::kQ4_K:
      return RefQ4_K(b, o, e);
    default:
      return RefQ6_K(b, o, e);
  }
}

std::vector<float> Dequantize(QuantType t, const std::vector<uint8_t>& b) {
  const QuantLayout& l = LayoutOf(t);
  std::vector<float> y(b.size() / l.block_bytes * l.block_elems);
  DequantizeRow(t, b.data(), static_cast<int64_t>(y.size()), y.data());
  return y;
}

void ExpectMatchesReference(QuantType t, const std::vector<uint8_t>& b) {
  const QuantLayout& l = LayoutOf(t);
  const std::vector<float> y = Dequantize(t, b);
  for (size_t i = 0; i < y.size(); ++i) {
    const float want =
        Ref(t, b, i / l.block_elems * l.block_bytes, static_cast<int>(i % l.block_elems));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i])) << QuantName(t) << " element " << i;
    } else {
      ASSERT_EQ(y[i], want) << QuantName(t) << " element " << i;
    }
  }
}

constexpr QuantType kAll[] = {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_K,
                              QuantType::kQ6_K};
constexpr QuantType kEncodable[] = {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_K,
                                    QuantType::kQ6_K};

TEST(QuantTest, CheckTensorShapeTakesBlocksOnlyWhereAllowed) {
  std::vector<uint8_t> bytes(2 * 18 * 2);
  Tensor t;
  t.name = "w";
  t.quant = QuantType::kQ4_0;
  t.shape = {2, 64};
  t.data = bytes.data();
  t.nbytes = bytes.size();
  EXPECT_TRUE(CheckTensorShape(t, {2, 64}, "w", true).ok());
  const absl::Status refused = CheckTensorShape(t, {2, 64}, "w");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.message().find("q4_0"), std::string::npos) << refused;
  t.nbytes -= 1;  // one byte short of the blocks
  EXPECT_EQ(CheckTensorShape(t, {2, 64}, "w", true).code(), absl::StatusCode::kInvalidArgument);
  t.shape = {4, 32};  // rows of one block: 4 blocks, the same bytes
  t.nbytes += 1;
  EXPECT_TRUE(CheckTensorShape(t, {4, 32}, "w", true).ok());
  t.shape = {8, 16};  // rows of half a block
  EXPECT_EQ(CheckTensorShape(t, {8, 16}, "w", true).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantTest, RowBytes) {
  EXPECT_EQ(QuantRowBytes(QuantType::kQ8_0, 64), 68);
  EXPECT_EQ(QuantRowBytes(QuantType::kQ4_0, 2048), 64 * 18);
  EXPECT_EQ(QuantRowBytes(QuantType::kQ4_K, 512), 288);
  EXPECT_EQ(QuantRowBytes(QuantType::kQ6_K, 256), 210);
}

// Random bytes everywhere, scales included: inf and NaN scales, subnormals, -0.
TEST(QuantTest, DequantizeMatchesSpecificationOnRandomBlocks) {
  std::mt19937 rng(7);
  for (QuantType t : kAll) {
    std::vector<uint8_t> b(LayoutOf(t).block_bytes * 64);
    for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
    ExpectMatchesReference(t, b);
  }
}

// Every scale and code at its extremes: zero, the largest and smallest codes, a -0
// scale, the smallest subnormal and the largest finite f16 scale.
TEST(QuantTest, DequantizeEdgeCases) {
  for (QuantType t : kAll) {
    const int bytes = LayoutOf(t).block_bytes;
    for (uint16_t scale : {0x0000, 0x8000, 0x0001, 0x7bff, 0xfbff, 0x3c00}) {
      for (uint8_t fill : {0x00, 0xff, 0x80, 0x7f}) {
        std::vector<uint8_t> b(bytes, fill);
        // Every f16 field of the layout gets `scale`.
        auto put = [&](int at) { std::memcpy(b.data() + at, &scale, 2); };
        if (t == QuantType::kQ6_K) {
          put(208);
        } else {
          put(0);
          if (t == QuantType::kQ4_K) put(2);
        }
        ExpectMatchesReference(t, b);
      }
    }
  }
  std::vector<uint8_t> zero(34, 0);
  for (float v : Dequantize(QuantType::kQ8_0, zero)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantTest, HandComputedBlocks) {
  {  // q8_0: d = 1, codes 0, 1, -1, 127, -128
    std::vector<uint8_t> b(34, 0);
    b[1] = 0x3c;
    b[3] = 1;
    b[4] = 0xff;
    b[5] = 0x7f;
    b[6] = 0x80;
    const std::vector<float> y = Dequantize(QuantType::kQ8_0, b);
    EXPECT_EQ(y[0], 0);
    EXPECT_EQ(y[1], 1);
    EXPECT_EQ(y[2], -1);
    EXPECT_EQ(y[3], 127);
    EXPECT_EQ(y[4], -128);
  }
  {  // q4_0: d = 2; byte 0 = 0x1f: element 0 = 2 * (15 - 8), element 16 = 2 * (1 - 8)
    std::vector<uint8_t> b(18, 0x88);  // every other element 0
    b[1] = 0x40;
    b[2] = 0x1f;
    b[0] = 0x00;
    const std::vector<float> y = Dequantize(QuantType::kQ4_0, b);
    EXPECT_EQ(y[0], 14);
    EXPECT_EQ(y[16], -14);
    EXPECT_EQ(y[1], 0);
    EXPECT_EQ(y[17], 0);
  }
  {  // q4_k: d = 1, dmin = 0.5; sub-block 5: scale 37 (5 | 2 << 4), min 19 (3 | 1 << 4)
    std::vector<uint8_t> b(144, 0);
    b[1] = 0x3c;
    b[3] = 0x38;
    b[4 + 1] = 0x80;        // scale 5's top bits in byte 1
    b[4 + 5] = 0x40;        // min 5's top bits in byte 5
    b[4 + 9] = 0x35;        // scale 5 low nibble 5, min 5 low nibble 3
    b[16 + 64 + 3] = 0xa0;  // sub-block 5 (high nibbles of bytes 64..95), element 3: code 10
    const std::vector<float> y = Dequantize(QuantType::kQ4_K, b);
    EXPECT_EQ(y[5 * 32 + 3], 37 * 10 - 9.5f);
    EXPECT_EQ(y[5 * 32 + 4], -9.5f);
    EXPECT_EQ(y[4 * 32 + 3], 0);  // sub-block 4 (low nibbles, scale and min 0)
  }
  {  // q6_k: d = 1, scales[2] = -3 covers elements 32..47; element 37: ql[37] low
    // nibble 7, qh[5] bits 2..3 = 2: code 39, value -3 * (39 - 32)
    std::vector<uint8_t> b(210, 0);
    b[209] = 0x3c;
    b[192 + 2] = 0xfd;
    b[37] = 0x07;
    b[128 + 5] = 0x08;
    const std::vector<float> y = Dequantize(QuantType::kQ6_K, b);
    EXPECT_EQ(y[37], -21);
    EXPECT_EQ(y[36], 96);  // code 0: -3 * -32
    EXPECT_EQ(y[101], 0);  // ql[37]'s high nibble, scale 6 = 0
    EXPECT_EQ(y[5], 0);
  }
}

TEST(QuantTest, EncodesLikeTheReferenceEncoders) {
  {  // q8_0: d = 127 / 127; -63.5 rounds half away from zero
    std::vector<float> x(32, 0);
    x[0] = 127;
    x[1] = -63.5f;
    x[2] = 0.5f;
    std::vector<uint8_t> b(34);
    ASSERT_TRUE(QuantizeRow(QuantType::kQ8_0, x.data(), 32, b.data()).ok());
    EXPECT_EQ(b[0], 0x00);
    EXPECT_EQ(b[1], 0x3c);
    EXPECT_EQ(b[2], 127);
    EXPECT_EQ(b[3], static_cast<uint8_t>(-64));
    EXPECT_EQ(b[4], 1);
  }
  {  // q4_0: the signed max -8 gives d = 1; 8 clamps to 15; 0.5 -> 9, -0.5 -> 8
    std::vector<float> x(32, 0);
    x[0] = -8;
    x[1] = 8;
    x[2] = 0.5f;
    x[16] = -0.5f;
    std::vector<uint8_t> b(18);
    ASSERT_TRUE(QuantizeRow(QuantType::kQ4_0, x.data(), 32, b.data()).ok());
    EXPECT_EQ(b[0], 0x00);
    EXPECT_EQ(b[1], 0x3c);
    EXPECT_EQ(b[2], 0x80);
    EXPECT_EQ(b[3], 0x8f);
    EXPECT_EQ(b[4], 0x89);
  }
}

TEST(QuantTest, EncoderErrors) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> b(1024);
  absl::Status s = QuantizeRow(QuantType::kQ8_0, x.data(), 48, b.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("48"), std::string::npos) << s;
  EXPECT_NE(s.message().find("32"), std::string::npos) << s;
  EXPECT_EQ(QuantizeRow(QuantType::kNone, x.data(), 32, b.data()).code(),
            absl::StatusCode::kUnimplemented);
  // Non-finite inputs are refused, naming the element; so is a scale f16 cannot hold.
  for (QuantType t : kEncodable) {
    std::vector<float> y(256, 1.0f);
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      y[37] = bad;
      s = QuantizeRow(t, y.data(), 256, b.data());
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << QuantName(t);
      EXPECT_NE(s.message().find("element 37"), std::string::npos) << s;
    }
    y[37] = 1e10f;
    EXPECT_EQ(QuantizeRow(t, y.data(), 256, b.data()).code(), absl::StatusCode::kInvalidArgument);
  }
}

// Random rows at several magnitudes (subnormal f16 scales included), plus constant and
// zero blocks, through each encoder and back.
std::vector<float> TestRow(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / 256;
    const float mag = std::ldexp(1.0f, static_cast<int>(block % 7) * 6 - 30);  // 2^-30 .. 2^6
    x[i] = block % 7 == 3 ? 0.25f : block % 7 == 5 ? 0 : u(rng) * mag;
  }
  x[3] = -x[3] * 50;  // an outlier
  return x;
}

TEST(QuantTest, RoundTripQ8_0) {
  const std::vector<float> x = TestRow(256 * 14, 1);
  std::vector<uint8_t> b(QuantRowBytes(QuantType::kQ8_0, x.size()));
  ASSERT_TRUE(QuantizeRow(QuantType::kQ8_0, x.data(), x.size(), b.data()).ok());
  const std::vector<float> y = Dequantize(QuantType::kQ8_0, b);
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[blk * 32 + i]));
    const float d = amax / 127, stored = Half(b, blk * 34);
    // Code rounding d / 2, the f16 rounding of d for up to 127 steps.
    const float bound = d / 2 + 127 * std::fabs(stored - d) + 1e-6f * amax;
    for (int i = 0; i < 32; ++i) {
      ASSERT_LE(std::fabs(y[blk * 32 + i] - x[blk * 32 + i]), bound) << blk * 32 + i;
    }
  }
}

TEST(QuantTest, RoundTripQ4_0) {
  const std::vector<float> x = TestRow(256 * 14, 2);
  std::vector<uint8_t> b(QuantRowBytes(QuantType::kQ4_0, x.size()));
  ASSERT_TRUE(QuantizeRow(QuantType::kQ4_0, x.data(), x.size(), b.data()).ok());
  const std::vector<float> y = Dequantize(QuantType::kQ4_0, b);
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[blk * 32 + i]));
    const float d = amax / 8, stored = std::fabs(Half(b, blk * 18));
    for (int i = 0; i < 32; ++i) {
      // Codes cover [-8 d, 7 d]: d / 2 from rounding, except the top half-step (7.5 d,
      // 8 d] of the side opposite the max, which clamps to 7 d: up to d.
      const float xi = x[blk * 32 + i];
      const bool clamped = std::fabs(xi) > 7.5f * d;
      const float bound = (clamped ? d : d / 2) + 8 * std::fabs(stored - d) + 1e-6f * amax;
      ASSERT_LE(std::fabs(y[blk * 32 + i] - xi), bound) << blk * 32 + i;
    }
  }
}

}  // namespace
}  // namespace ptxserve
