// AWQ's and GPTQ's packed 4-bit tensors <-> the int4_g128 row blocks of quant.h. Both
// store, for a linear layer with `in` inputs and `out` outputs (HF's weight [out, in]),
// groups of 128 consecutive inputs sharing a scale and a zero per output:
//   AWQ  (AutoAWQ "gemm"): qweight int32 [in, out/8]: word [i][c] holds outputs 8c..8c+7
//        of input i, output 8c + j in nibble kAwqNibbleOf[j] (AutoAWQ's interleaved
//        order); qzeros int32 [in/128, out/8] in the same order; scales f16 [in/128, out].
//   GPTQ (AutoGPTQ):       qweight int32 [in/8, out]: word [r][n] holds inputs 8r..8r+7
//        of output n, input 8r + j in nibble j; qzeros int32 [in/128, out/8], output
//        8c + j in nibble j of word [g][c], storing zero - 1 in the classic "gptq" format
//        (so the read zero is nibble + 1, 1..16) and the zero in "gptq_v2"; scales as AWQ.
// value(n, i) = scale[g][n] * (q - zero[g][n]) with g = i / 128, in both.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace ptxserve {

enum class Int4Packing : uint8_t { kAwq, kGptq };

// Nibble position of output 8c + j within an AWQ word (AutoAWQ packs order 0,2,4,6,1,3,5,7).
inline constexpr std::array<int, 8> kAwqNibbleOf = {0, 4, 1, 5, 2, 6, 3, 7};

// The packed tensors of one layer, row-major as in the checkpoint (int32 words are
// little-endian; scales are f16 bits).
struct PackedInt4 {
  std::vector<int32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
};

// Shapes of the packed tensors for a layer of `in` x `out` (in % 128 == 0, out % 8 == 0).
std::vector<int64_t> QweightShape(Int4Packing p, int64_t in, int64_t out);
std::vector<int64_t> QzerosShape(int64_t in, int64_t out);
std::vector<int64_t> ScalesShape(int64_t in, int64_t out);

// Repacks into `out` rows of in / 128 int4_g128 blocks (QuantRowBytes(kInt4G128, in) bytes
// per row) at `blocks`. The inputs may be unaligned (they point into a mapped file); their
// sizes must match the shapes above. zero_minus_one: GPTQ's classic format (ignored for AWQ).
void Int4ToBlocks(Int4Packing p, const uint8_t* qweight, const uint8_t* qzeros,
                  const uint8_t* scales, int64_t in, int64_t out, bool zero_minus_one,
                  uint8_t* blocks);

// The inverse, for `quantize`: every block's zero must be 1..16 with zero_minus_one and
// 0..15 otherwise (quant.cc's encoder gives 1..15), and its spare byte is dropped.
PackedInt4 BlocksToInt4(Int4Packing p, const uint8_t* blocks, int64_t in, int64_t out,
                        bool zero_minus_one);

}  // namespace ptxserve
