// IEEE binary16 and bfloat16 conversions for the PTX emulator (kernels/ may not use
// engine/, so this mirrors engine/model/dtype.cc). All conversions round to nearest even
// unless a rounding mode is named; subnormals, infinities and NaN are handled.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ptxserve::emu {

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline double BitsToF64(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
inline uint64_t F64ToBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

inline float HalfToF32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);  // exact, like the software path
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return BitsToF32(bits);
#endif
}

// Round to nearest even.
inline uint16_t F32ToHalf(float f) {
#if defined(__F16C__)
  if (f == f) return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);  // NaN: canonical below
#endif
  const uint32_t x = F32ToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN (NaN stays quiet NaN)
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  }
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf
  if (absx < 0x38800000u) {  // subnormal half (or zero): value / 2^-24, exact scaling
    // nearbyint rounds half to even; 1024 correctly becomes the smallest normal (0x400).
    return sign | static_cast<uint16_t>(std::nearbyint(BitsToF32(absx) * 16777216.0f));
  }
  uint32_t v = absx - 0x38000000u;  // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);   // round to nearest even
  return sign | static_cast<uint16_t>(v >> 13);
}

inline float BF16ToF32(uint16_t b) { return BitsToF32(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t u = F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace ptxserve::emu
