// Element types of model tensors and KV caches, and scalar conversions between them.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ptxserve {

enum class DType : uint8_t { kF32, kF16, kBF16 };

// The spellings of a dtype: ours, PyTorch's (config.json "torch_dtype") and the
// safetensors header's. One row per DType, in enum order.
struct DTypeSpelling {
  DType dtype;
  std::string_view name;         // "bf16"
  std::string_view torch;        // "bfloat16"
  std::string_view safetensors;  // "BF16"
};
inline constexpr std::array<DTypeSpelling, 3> kDTypeSpellings = {{
    {DType::kF32, "f32", "float32", "F32"},
    {DType::kF16, "f16", "float16", "F16"},
    {DType::kBF16, "bf16", "bfloat16", "BF16"},
}};
static_assert([] {
  for (size_t i = 0; i < kDTypeSpellings.size(); ++i) {
    if (static_cast<size_t>(kDTypeSpellings[i].dtype) != i) return false;
  }
  return true;
}());
constexpr const DTypeSpelling& SpellingOf(DType t) {
  return kDTypeSpellings[static_cast<size_t>(t)];
}

// Bytes per element.
constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
// "f32", "f16", "bf16".
constexpr std::string_view DTypeName(DType t) { return SpellingOf(t).name; }
// Parses any of a dtype's three spellings ("bf16", "bfloat16", "BF16"); false when unknown.
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
