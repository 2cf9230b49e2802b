// Numerics: f16/bf16 conversions (checked against hard-coded bit patterns and an
// independent enumeration of representable values), packed f16x2/bf16x2 arithmetic,
// cvt rounding modes and saturation, special-function accuracy against std::, atomics.
#include <cmath>
#include <limits>

#include "kernels/emu/fp16.h"
#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rounds |x| to a 16-bit format by enumerating its non-negative finite patterns (which are
// ordered like their values): independent of the emulator's bit-twiddling conversion.
enum class Mode { kRn, kRz, kRm, kRp };
uint32_t RefRound16(double x, Mode mode, bool bf16) {
  const uint32_t max_bits = bf16 ? 0x7f7f : 0x7bff, inf_bits = bf16 ? 0x7f80 : 0x7c00;
  const auto value = [&](uint32_t b) -> double {
    return bf16 ? BF16ToF32(static_cast<uint16_t>(b)) : HalfToF32(static_cast<uint16_t>(b));
  };
  if (std::isnan(x)) return 0xffff;  // any NaN
  const uint32_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(x)) return sign | inf_bits;
  uint32_t lo = 0;  // largest pattern with value <= a
  while (lo < max_bits && value(lo + 1) <= a) ++lo;
  const uint32_t hi = value(lo) == a ? lo : (lo == max_bits ? inf_bits : lo + 1);
  bool up;  // magnitude rounds up
  switch (mode) {
    case Mode::kRz:
      up = false;
      break;
    case Mode::kRm:
      up = sign != 0;
      break;
    case Mode::kRp:
      up = sign == 0;
      break;
    default: {
      if (lo == max_bits && hi == inf_bits) {
        const double half_ulp = (value(max_bits) - value(max_bits - 1)) / 2;
        up = a >= value(max_bits) + half_ulp;
      } else {
        const double dl = a - value(lo), dh = value(hi) - a;
        up = dh < dl || (dh == dl && (hi & 1) == 0);
      }
    }
  }
  return sign | (up ? hi : lo);
}

bool IsNaN16(uint32_t b, bool bf16) {
  return bf16 ? ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) : ((b & 0x7c00) == 0x7c00 && (b & 0x3ff));
}

TEST(EmuNumeric, HalfConversionsMatchKnownPatterns) {
  EXPECT_EQ(F32ToHalf(1.0f), 0x3c00);
  EXPECT_EQ(F32ToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToHalf(65520.0f), 0x7c00);  // halfway past the max rounds to inf
  EXPECT_EQ(F32ToHalf(6e-8f), 0x0001);     // smallest subnormal
  EXPECT_EQ(F32ToHalf(1e-8f), 0x0000);
  EXPECT_EQ(F32ToHalf(0.1f), 0x2e66);
  EXPECT_EQ(F32ToHalf(-2.5f), 0xc100);
  EXPECT_EQ(F32ToHalf(1.0f + 0x1p-11f), 0x3c00);  // tie to even
  EXPECT_EQ(F32ToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(F32ToBF16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(F32ToBF16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_TRUE(IsNaN16(F32ToHalf(kNaN), false));
  EXPECT_TRUE(IsNaN16(F32ToBF16(kNaN), true));
  for (float x : {0.1f, -3.75f, 1e-6f, 70000.0f, 1.0f + 0x1p-11f, 5e-8f, -65519.0f}) {
    EXPECT_EQ(F32ToHalf(x), RefRound16(x, Mode::kRn, false)) << x;
    EXPECT_EQ(F32ToBF16(x), RefRound16(x, Mode::kRn, true)) << x;
  }
}

TEST(EmuNumeric, HalfAndPackedArithmetic) {
  Emulator emu;
  const std::vector<std::pair<float, float>> xy = {
      {1.5f, 2.25f},        {0.1f, -0.3f},  {1000.0f, 0.001f},    {-7.0f, 3.0f},
      {60000.0f, 60000.0f}, {1e-6f, 2e-6f}, {3.14159f, 2.71828f}, {kNaN, 1.0f}};
  std::vector<float> in;
  for (auto [x, y] : xy) {
    in.push_back(x);
    in.push_back(y);
  }
  const uint32_t n = static_cast<uint32_t>(xy.size());
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 32);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "half", "half_ops"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)})
          .ok());
  const auto v = Download<float>(emu, out, n * 8);
  const auto bits = Download<uint32_t>(emu, out, n * 8);
  auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  for (uint32_t i = 0; i < n; ++i) {
    const float x = xy[i].first, y = xy[i].second;
    const float hx = HalfToF32(F32ToHalf(x)), hy = HalfToF32(F32ToHalf(y));
    const float bx = BF16ToF32(F32ToBF16(x)), by = BF16ToF32(F32ToBF16(y));
    const auto h = [](double r) { return HalfToF32(F32ToHalf(static_cast<float>(r))); };
    const auto b = [](double r) { return BF16ToF32(F32ToBF16(static_cast<float>(r))); };
    EXPECT_TRUE(same(v[8 * i + 0], hx)) << i;
    EXPECT_TRUE(same(v[8 * i + 1], bx)) << i;
    EXPECT_TRUE(same(v[8 * i + 2], h(hx + hy))) << i;
    EXPECT_TRUE(same(v[8 * i + 3], h(hy + hx))) << i;
    EXPECT_TRUE(same(v[8 * i + 4], h(double{hx} * hy))) << i;
    EXPECT_TRUE(same(v[8 * i + 5], h(double{hx} * hy + hx))) << i;
    EXPECT_TRUE(same(v[8 * i + 6], b(double{bx} * by + bx))) << i;
    EXPECT_EQ(bits[8 * i + 7], uint32_t{F32ToHalf(y)} << 16 | F32ToHalf(x)) << i;
  }
  EXPECT_EQ(v[8 * 4 + 2], kInf);  // 60000 + 60000 overflows f16
}

TEST(EmuNumeric, PackedHalfSpecialFunctions) {
  Emulator emu;
  std::vector<float> in;
  for (int i = 0; i < 32; ++i) in.push_back(-4.0f + 0.27f * i);
  const uint32_t n = static_cast<uint32_t>(in.size() / 2);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 8);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "half", "half_special"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)})
          .ok());
  const auto v = Download<uint32_t>(emu, out, 2 * n);
  for (uint32_t i = 0; i < n; ++i) {
    for (int e = 0; e < 2; ++e) {
      const double x = HalfToF32(F32ToHalf(in[2 * i + e]));
      const double ex2 = HalfToF32(static_cast<uint16_t>(v[2 * i] >> (16 * e)));
      const double th = HalfToF32(static_cast<uint16_t>(v[2 * i + 1] >> (16 * e)));
      EXPECT_LE(std::fabs(ex2 - std::exp2(x)), std::exp2(x) * 0x1p-10) << x;
      EXPECT_LE(std::fabs(th - std::tanh(x)), 0x1p-10) << x;
    }
  }
}

TEST(EmuNumeric, CvtRoundingModesAndSaturation) {
  Emulator emu;
  const std::vector<float> in = {2.5f,      -2.5f,  3.5f,     -0.5f,    1e10f,           -1e10f,
                                 300.7f,    kNaN,   65519.0f, 65520.0f, 1.0f + 0x1p-11f, 0.1f,
                                 -1.7f,     -1e-9f, kInf,     127.5f,   -129.0f,         1e-9f,
                                 -65530.0f, 3.0e38f};
  const uint32_t n = static_cast<uint32_t>(in.size());
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 64);
  ASSERT_TRUE(emu.Launch(Load(emu, "cvt"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto u = Download<uint32_t>(emu, out, n * 16);
  const auto f = Download<float>(emu, out, n * 16);
  auto sat_i32 = [](double r) -> int32_t {
    if (std::isnan(r)) return 0;
    return static_cast<int32_t>(std::clamp<double>(r, INT32_MIN, INT32_MAX));
  };
  for (uint32_t i = 0; i < n; ++i) {
    const float x = in[i];
    const uint32_t* r = &u[16 * i];
    EXPECT_EQ(static_cast<int32_t>(r[0]), sat_i32(std::nearbyint(x))) << x;
    EXPECT_EQ(static_cast<int32_t>(r[1]), sat_i32(std::trunc(x))) << x;
    EXPECT_EQ(static_cast<int32_t>(r[2]), sat_i32(std::floor(x))) << x;
    EXPECT_EQ(static_cast<int32_t>(r[3]), sat_i32(std::ceil(x))) << x;
    const double tz = std::trunc(x);
    const uint32_t u32 =
        std::isnan(x) ? 0 : static_cast<uint32_t>(std::clamp<double>(tz, 0, UINT32_MAX));
    EXPECT_EQ(r[4], u32) << x;
    const int32_t s8 =
        std::isnan(x) ? 0 : static_cast<int32_t>(std::clamp<double>(std::nearbyint(x), -128, 127));
    EXPECT_EQ(static_cast<int32_t>(r[5]), s8) << x;
    const Mode modes[4] = {Mode::kRn, Mode::kRz, Mode::kRm, Mode::kRp};
    for (int k = 0; k < 4; ++k) {
      const uint32_t want = RefRound16(x, modes[k], false);
      if (std::isnan(x)) {
        EXPECT_TRUE(IsNaN16(r[6 + k], false)) << x;
      } else {
        EXPECT_EQ(r[6 + k], want) << "f16 mode " << k << " x=" << x;
      }
    }
    if (std::isnan(x)) {
      EXPECT_TRUE(IsNaN16(r[10], true));
      EXPECT_TRUE(IsNaN16(r[11], true));
    } else {
      EXPECT_EQ(r[10], RefRound16(x, Mode::kRn, true)) << x;
      EXPECT_EQ(r[11], RefRound16(x, Mode::kRz, true)) << x;
    }
    const float* g = &f[16 * i + 12];
    const auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
    EXPECT_TRUE(same(g[0], std::nearbyint(x))) << x;
    EXPECT_TRUE(same(g[1], std::isnan(x) ? 0.0f : std::clamp(x, 0.0f, 1.0f))) << x;
    const double scaled = std::trunc(static_cast<double>(x * 1048576.0f));
    int64_t i64 = 0;
    if (!std::isnan(scaled)) {
      i64 = scaled >= 9.2233720368547758e18    ? INT64_MAX
            : scaled <= -9.2233720368547758e18 ? INT64_MIN
                                               : static_cast<int64_t>(scaled);
    }
    EXPECT_EQ(g[2], static_cast<float>(i64)) << x;
    const double d = static_cast<double>(x) + 0x1p-40;
    float rz = static_cast<float>(d);
    if (std::fabs(static_cast<double>(rz)) > std::fabs(d)) rz = std::nextafter(rz, 0.0f);
    EXPECT_TRUE(same(g[3], rz)) << x;
  }
}

TEST(EmuNumeric, SpecialFunctionsAgreeWithStd) {
  Emulator emu;
  std::vector<float> in;
  for (int i = 0; i < 64; ++i) in.push_back(-3.0f + 0.1f * i + 1e-3f);
  for (float x : {0.5f, 1.0f, 2.0f, 10.0f, 1e-3f, 123.456f}) in.push_back(x);
  const uint32_t n = static_cast<uint32_t>(in.size());
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 64);
  ASSERT_TRUE(emu.Launch(Load(emu, "math"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<float>(emu, out, n * 16);
  auto rel = [](double got, double want, double tol) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= tol * std::max(1e-30, std::fabs(want));
  };
  for (uint32_t i = 0; i < n; ++i) {
    const double x = in[i];
    const float* r = &v[16 * i];
    EXPECT_TRUE(rel(r[0], std::exp2(x), 2e-7)) << x;
    EXPECT_TRUE(rel(r[1], std::exp2(x), 2e-7)) << x;
    if (x > 0) {
      EXPECT_LE(std::fabs(r[2] - std::log2(x)), 2e-7 * std::max(1.0, std::fabs(std::log2(x)))) << x;
      EXPECT_TRUE(rel(r[5], 1 / std::sqrt(x), 2e-7)) << x;
      EXPECT_EQ(r[6], std::sqrt(in[i])) << x;  // correctly rounded
      EXPECT_TRUE(rel(r[7], std::sqrt(x), 2e-7)) << x;
    } else {
      EXPECT_TRUE(std::isnan(r[2]) || x == 0) << x;
      EXPECT_TRUE(std::isnan(r[6])) << x;
    }
    EXPECT_TRUE(rel(r[3], 1 / x, 1.2e-7)) << x;
    EXPECT_EQ(r[4], 1.0f / in[i]) << x;
    EXPECT_EQ(r[8], in[i] / 3.0f) << x;
    EXPECT_TRUE(rel(r[9], x / 3, 2.4e-7)) << x;
    EXPECT_TRUE(rel(r[10], x / 3, 2.4e-7)) << x;
    if (std::fabs(x) <= M_PI) {
      EXPECT_LE(std::fabs(r[11] - std::sin(x)), 1e-6) << x;
      EXPECT_LE(std::fabs(r[12] - std::cos(x)), 1e-6) << x;
    }
    EXPECT_LE(std::fabs(r[13] - std::tanh(x)), 1e-3) << x;
    EXPECT_EQ(r[14], std::fma(in[i], in[i], 1.0f)) << x;
    EXPECT_EQ(r[15], static_cast<float>(1.0 / x)) << x;
  }
}

TEST(EmuNumeric, AtomicsFromManyBlocks) {
  for (int threads : {1, 2}) {
    EmulatorOptions opts;
    opts.num_threads = threads;
    Emulator emu(opts);
    const FunctionHandle f = Load(emu, "atomics");
    std::vector<uint32_t> init(10, 0);
    init[2] = UINT32_MAX;
    const uint64_t acc = Upload(emu, init);
    const uint32_t blocks = 64, block = 128, total = blocks * block;
    ASSERT_TRUE(emu.Launch(f, {blocks, 1, 1}, {block, 1, 1}, 0, {Ptr(acc)}).ok());
    const auto v = Download<uint32_t>(emu, acc, 10);
    EXPECT_EQ(v[0], total);
    EXPECT_EQ(v[1], 127u * 63u);
    EXPECT_EQ(v[2], 5u);
    EXPECT_EQ(v[3], total);
    EXPECT_LT(v[4], total);
    float sum;
    std::memcpy(&sum, &v[5], 4);
    EXPECT_EQ(sum, total * 0.5f);
    const uint64_t ids = uint64_t{v[6]} | uint64_t{v[7]} << 32;
    EXPECT_EQ(ids, uint64_t{total} * (total - 1) / 2);
    EXPECT_EQ(v[8], total);
    EXPECT_EQ(v[9], total % 7);
  }
}

}  // namespace
}  // namespace ptxserve::emu::testing
