#include "engine/model/dtype.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ptxserve {
namespace {

// The hardware conversions (F16C, part of x86-64-v3) are the reference for IEEE half.
uint16_t HwHalf(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
float HwFloat(uint16_t h) { return _cvtsh_ss(h); }

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool HalfIsNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

void ExpectSameHalf(float f, uint16_t got) {
  const uint16_t want = HwHalf(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(HalfIsNaN(got)) << std::hex << Bits(f) << " -> " << got;
    EXPECT_EQ(got & 0x8000u, want & 0x8000u) << std::hex << Bits(f);
  } else {
    EXPECT_EQ(got, want) << std::hex << "float bits 0x" << Bits(f);
  }
}

TEST(DTypeTest, HalfToFloatMatchesHardwareForEveryHalf) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const float want = HwFloat(static_cast<uint16_t>(h));
    if (HalfIsNaN(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
    } else {
      ASSERT_EQ(Bits(got), Bits(want)) << std::hex << h;
    }
  }
}

TEST(DTypeTest, FloatToHalfMatchesHardwareAtEveryBoundary) {
  // Every half value, its neighbours, and the exact midpoints (ties) between
  // consecutive halves and 1 ulp either side of them.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float v = HalfToFloat(static_cast<uint16_t>(h | sign));
      const float next = HalfToFloat(static_cast<uint16_t>((h + 1) | sign));
      const float mid = (v + next) / 2;  // exact: one more bit than half precision
      for (float f : {v, std::nextafter(v, 0.0f), std::nextafter(v, 2 * next), mid,
                      std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * next)}) {
        ExpectSameHalf(f, FloatToHalf(f));
      }
    }
  }
  // A stride through all float bit patterns (NaNs, infinities, float subnormals included).
  for (uint64_t u = 0; u <= 0xffffffffull; u += 7919) {
    const float f = FromBits(static_cast<uint32_t>(u));
    ExpectSameHalf(f, FloatToHalf(f));
  }
}

TEST(DTypeTest, HalfSpecialValuesAndTies) {
  struct Case {
    float f;
    uint16_t h;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {std::ldexp(1.0f, -24), 0x0001},         // smallest subnormal
      {std::ldexp(1023.0f, -24), 0x03ff},      // largest subnormal
      {std::ldexp(1.0f, -14), 0x0400},         // smallest normal
      {std::ldexp(1.0f, -25), 0x0000},         // tie between 0 and 2^-24: even
      {std::ldexp(3.0f, -25), 0x0002},         // tie between 1 and 2 ulps: even
      {-std::ldexp(1.0f, -26), 0x8000},        // underflow keeps the sign
      {std::ldexp(1023.5f, -24), 0x0400},      // tie rounds up into the normals
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie: even mantissa 0
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie: even mantissa 2
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},  // just above the tie
      {65504.0f, 0x7bff},                                              // max half
      {65519.0f, 0x7bff},                                              // below the overflow tie
      {65520.0f, 0x7c00},  // the overflow tie rounds to inf
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      {std::numeric_limits<float>::max(), 0x7c00},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToHalf(c.f), c.h) << c.f;
    EXPECT_EQ(Bits(HalfToFloat(c.h)), Bits(HwFloat(c.h))) << std::hex << c.h;
  }
  EXPECT_TRUE(HalfIsNaN(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(HalfIsNaN(FloatToHalf(FromBits(0x7f800001u))));  // payload only in low bits
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xfc01)));
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)));
}

TEST(DTypeTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto x = static_cast<uint16_t>(h);
    if (HalfIsNaN(x)) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(x)), x) << std::hex << h;
  }
}

// Round to nearest, ties to even, computed from the distances to the two candidates.
uint16_t ReferenceBF16(float f) {
  const uint32_t u = Bits(f);
  const uint32_t lo = u & 0xffff0000u;  // toward zero
  const uint32_t hi = lo + 0x10000u;    // away from zero (may become inf)
  const double x = std::fabs(static_cast<double>(f));
  const double dlo = std::fabs(static_cast<double>(FromBits(lo)));
  // Past the largest finite bf16 the "next" value is 2^128 (IEEE overflow rule).
  const double dhi = (hi & 0x7f800000u) == 0x7f800000u
                         ? std::ldexp(1.0, 128)
                         : std::fabs(static_cast<double>(FromBits(hi)));
  const double down = x - dlo;
  const double up = dhi - x;
  if (down < up) return static_cast<uint16_t>(lo >> 16);
  if (up < down) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) == 0 ? lo >> 16 : hi >> 16);
}

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(FloatToBF16(FromBits(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(FloatToBF16(FromBits(0x3f807fffu)), 0x3f80);  // just below
  EXPECT_EQ(FloatToBF16(FromBits(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(FloatToBF16(FromBits(0xff7fffffu)), 0xff80);
  EXPECT_EQ(FloatToBF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBF16(FromBits(0x00008000u)), 0x0000);  // subnormal tie to even zero
  EXPECT_EQ(FloatToBF16(FromBits(0x00018000u)), 0x0002);
  // A NaN whose payload lies only in the low half must not become infinity.
  const uint16_t nan = FloatToBF16(FromBits(0x7f800001u));
  EXPECT_TRUE(std::isnan(BF16ToFloat(nan))) << std::hex << nan;
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::signbit(BF16ToFloat(FloatToBF16(-std::numeric_limits<float>::quiet_NaN()))));

  for (uint32_t b = 0; b <= 0xffff; ++b) {  // every bf16 survives the round trip
    const float f = BF16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBF16(f), b) << std::hex << b;
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBF16(f), ReferenceBF16(f)) << std::hex << Bits(f);
  }
}

TEST(DTypeTest, ArrayConversionsRoundTrip) {
  const std::vector<float> src = {0.0f, -1.5f, 3.25f, 65504.0f, std::ldexp(1.0f, -24), -7.0f};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    std::vector<uint8_t> buf(src.size() * DTypeSize(t));
    ConvertFromFloat(t, src.data(), src.size(), buf.data());
    std::vector<float> back(src.size());
    ConvertToFloat(t, buf.data(), src.size(), back.data());
    for (size_t i = 0; i < src.size(); ++i) {
      if (t == DType::kBF16) {
        EXPECT_EQ(back[i], BF16ToFloat(FloatToBF16(src[i])));
      } else {
        EXPECT_EQ(back[i], src[i]);  // all exact in f16
      }
    }
    // Empty conversions touch nothing, even with null pointers.
    ConvertToFloat(t, nullptr, 0, nullptr);
    ConvertFromFloat(t, nullptr, 0, nullptr);
  }
}

TEST(DTypeTest, NamesAndParsing) {
  DType t = DType::kF32;
  EXPECT_TRUE(ParseDType("bfloat16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_TRUE(ParseDType("F16", &t));
  EXPECT_EQ(t, DType::kF16);
  EXPECT_TRUE(ParseDType("f32", &t));
  EXPECT_EQ(t, DType::kF32);
  EXPECT_FALSE(ParseDType("int8", &t));
  EXPECT_EQ(t, DType::kF32);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
}

}  // namespace
}  // namespace ptxserve
