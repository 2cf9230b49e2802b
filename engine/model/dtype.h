// Element types of model tensors and KV caches, and scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace ptxserve {

enum class DType : uint8_t { kF32, kF16, kBF16 };

// Bytes per element.
constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
// "f32", "f16", "bf16".
std::string_view DTypeName(DType t);
// Parses "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16"; false when unknown.
bool ParseDType(std::string_view s, DType* out);

// IEEE half <-> float, round to nearest even; handles subnormals, inf and NaN.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

inline float BF16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Converts n elements of type `t` at `src` into floats.
void ConvertToFloat(DType t, const void* src, size_t n, float* dst);
// Converts n floats into type `t` at `dst`.
void ConvertFromFloat(DType t, const float* src, size_t n, void* dst);

}  // namespace ptxserve
