// Block-quantized weight formats: llama.cpp's GGML block types. A quantized tensor
// keeps its logical shape ([N, K] for a linear weight, K a multiple of the block size)
// and stores each row as K / block_elems consecutive blocks of block_bytes bytes.
// Tensor::quant says which format; kNone means Tensor::dtype describes the elements.
// Two more block formats hold Hugging Face quantized checkpoints as loaded (FP8 E4M3, and
// AWQ/GPTQ 4-bit groups, engine/model/hf_quant_source.h); they have no GGUF type.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace ptxserve {

enum class QuantType : uint8_t { kNone, kQ8_0, kQ4_0, kQ4_K, kQ6_K, kFp8E4M3, kInt4G128 };

struct QuantLayout {
  QuantType type;
  std::string_view name;  // our spelling, also --type of `ptxserve quantize`
  int block_elems;        // elements per block (0 for kNone)
  int block_bytes;        // bytes per block
  uint32_t ggml_type;     // the GGUF tensor type id, kNoGgmlType for none
};
inline constexpr uint32_t kNoGgmlType = 0xFFFFFFFF;
// One row per QuantType, in enum order. Layouts (GGML's ggml-common.h):
//   q8_0: f16 d, int8 q[32]                         value = d * q
//   q4_0: f16 d, uint8 qs[16] (low nibbles: elements 0..15, high: 16..31)
//                                                   value = d * (nibble - 8)
//   q4_k: super-block of 256: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes
//   q6_k: super-block of 256: 128 bytes ql, 64 bytes qh, int8 scales[16], f16 d
// and the Hugging Face ones:
//   fp8_e4m3:  f32 s, uint8 e4m3[32] (OCP FP8 E4M3)  value = s * e4m3
//              s is the checkpoint's per-tensor or per-output-channel scale, repeated in
//              every block of its row so a row is whole blocks like the GGML formats.
//   int4_g128: f16 s, uint8 z (0..16), uint8 0, uint8 qs[64] (element 2i in the low
//              nibble of qs[i], 2i + 1 in the high one)   value = s * (q - z)
//              AWQ's and GPTQ's groups of 128 along the input dimension, one per block.
inline constexpr std::array<QuantLayout, 7> kQuantLayouts = {{
    {QuantType::kNone, "none", 0, 0, 0},
    {QuantType::kQ8_0, "q8_0", 32, 34, 8},
    {QuantType::kQ4_0, "q4_0", 32, 18, 2},
    {QuantType::kQ4_K, "q4_k", 256, 144, 12},
    {QuantType::kQ6_K, "q6_k", 256, 210, 14},
    {QuantType::kFp8E4M3, "fp8_e4m3", 32, 36, kNoGgmlType},
    {QuantType::kInt4G128, "int4_g128", 128, 68, kNoGgmlType},
}};
static_assert([] {
  for (size_t i = 0; i < kQuantLayouts.size(); ++i) {
    if (static_cast<size_t>(kQuantLayouts[i].type) != i) return false;
  }
  return true;
}());
constexpr const QuantLayout& LayoutOf(QuantType t) { return kQuantLayouts[static_cast<size_t>(t)]; }
constexpr std::string_view QuantName(QuantType t) { return LayoutOf(t).name; }

// The OCP FP8 E4M3 value of `code` (bias 7, no infinities, S.1111.111 NaN, max 448,
// subnormals m * 2^-9): exact in f32.
float E4M3ToFloat(uint8_t code);
// The E4M3 code nearest x (ties to even), saturating at +-448; NaN becomes 0x7F.
uint8_t FloatToE4M3(float x);

// Bytes of one row of n elements of type t (n a multiple of its block_elems, t != kNone).
int64_t QuantRowBytes(QuantType t, int64_t n);

// Decodes the QuantRowBytes(t, n) bytes at `blocks` into n floats (t != kNone, n a
// multiple of the block size). Every value is the format's formula evaluated in f32,
// and each product is exact (an f16 scale times a small integer), so any code that
// widens the same way gets the same floats.
void DequantizeRow(QuantType t, const uint8_t* blocks, int64_t n, float* out);

// Encodes n floats into QuantRowBytes(t, n) bytes at `out`, the way llama.cpp's reference
// encoders do for q8_0 and q4_0 (so files match byte for byte); q4_k and q6_k by a
// weighted least-squares search over a few candidate scales per sub-block (the method of
// llama.cpp's reference encoders, quant.cc says why); fp8_e4m3 with the row's scale max |x| / 448;
// int4_g128 asymmetric per block over [min(0, lowest), max(0, highest)], as AWQ does.
// InvalidArgument when n is not a multiple of the block size, an input is not finite (naming its
// index) or a block's scale overflows f16; Unimplemented for kNone.
absl::Status QuantizeRow(QuantType t, const float* x, int64_t n, uint8_t* out);

}  // namespace ptxserve
