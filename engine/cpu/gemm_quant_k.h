// The q4_k/q6_k integer GEMM (gemm_quant_k.cc), internal to engine/cpu: gemm_quant.cc rounds
// x to 8 bits per block of 32 (its QuantizeActivations) and hands the codes over.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/model/quant.h"

namespace ptxserve::cpu {

// y[m * N + n] = x[m] . w[n] (+ bias[n]) for m < M, n < N, with t q4_k or q6_k and x given
// as int8 codes (row m's block b of 32 at x_codes + (m * K / 32 + b) * 32, |code| <= 127)
// and an f32 scale per block (x_scales[m * K / 32 + b]); K a multiple of 256. Each 32
// elements of a row are one integer dot product scaled by the weights' and x's f32 scales,
// so the result is the exact dot product of the dequantized weights with x as rounded,
// up to f32 rounding. Uses the engine's thread pool.
void GemmKQuantInteger(QuantType t, const int8_t* x_codes, const float* x_scales, const uint8_t* w,
                       const float* bias, int64_t M, int64_t N, int64_t K, float* y);

// What both ISA versions of the kernel share (gemm_quant_k.cc, gemm_quant_k_vnni.cc).

// One tile's operands: x from its first row (rows `blocks` blocks apart), the tile's first
// weight row, the distance between its rows (weight rows and output columns), and where its
// outputs go.
struct KQuantTile {
  const int8_t* x_codes;
  const float* x_scales;
  const float* x_sums;  // q4_k: dx * sum of the block's codes, per block
  int64_t blocks;       // blocks of 32 per row of x
  const uint8_t* w;
  int64_t row_bytes;
  int64_t col_step;
  const float* bias;
  int64_t ldy;
  float* y;
};

// A q4_k super-block's 8 six-bit scales and mins as bytes (quant.cc's Q4KScaleMin, four at a
// time): sub-blocks 0..3 in the low six bits of bytes 4..7 (scales) and 8..11 (mins); 4..7 in
// the nibbles of bytes 12..15 with their top two bits in the spare high bits of 4..11.
inline void Q4KScalesMins(const uint8_t* b, uint8_t* sc, uint8_t* m) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t lo[2] = {w[0] & 0x3F3F3F3F, (w[2] & 0x0F0F0F0F) | ((w[0] >> 2) & 0x30303030)};
  const uint32_t mins[2] = {w[1] & 0x3F3F3F3F,
                            ((w[2] >> 4) & 0x0F0F0F0F) | ((w[1] >> 2) & 0x30303030)};
  std::memcpy(sc, lo, 8);
  std::memcpy(m, mins, 8);
}

// x rows per tile of the AVX512-VNNI kernel (its 32 registers hold more than AVX2's 16).
constexpr int kKQuantVnniMR = 4;

// The tile of mr <= kKQuantVnniMR x rows by nr <= 4 weight rows for CPUs with AVX512-VNNI
// (gemm_quant_k_vnni.cc): each weight row's 8 lanes take the AVX2 tile's operations in its
// order, two rows per 512-bit register, so the results equal the AVX2 kernel's bit for bit.
void KQuantTileAvx512Vnni(QuantType t, int mr, int nr, const KQuantTile& a);

}  // namespace ptxserve::cpu
