// gemm_quant.cc's integer kernel (q8_0 and q4_0 weights against x rounded to 8 bits per
// block of 32) for CPUs with AVX512-VNNI, chosen at run time (engine/cpu/isa.h).
//
// vpdpbusd adds the four products of unsigned bytes (first operand) and signed bytes
// (second) in each int32 lane to that lane. Here the weights are the signed operand, as
// they are (q8_0's codes) or made so (q4_0's nibbles minus 8), and x's codes the unsigned
// one, stored offset by 128 (QuantizedX: x + 128 in 0..255). Each weight block's
// accumulation starts from -128 times its codes summed four at a time (itself one vpdpbusd
// of 128 against them, negated), so
//   (x + 128) . w - 128 sum(w) = x . w
// lane by lane, exactly. The offset's cost is paid once per weight block and tile, shared
// by the tile's 8 rows of x, where putting the offset c on the weights (the usual way
// round: q4_0's nibbles are its codes plus 8, q8_0's codes get 128 by a flip of their top
// bit; then (w + c) . x - c sum(x) = w . x) needs x's correction (a vpdpbusd and a
// subtraction) once per x row and weight block of every tile. x's flipped codes are stored
// once per GEMM (QuantizeActivations), not flipped per tile. Tiles of few x rows, where
// the weights' side costs more, take the usual way (kMinRowsToOffsetX); same lanes.
// The lanes are the AVX2 kernel's (lane l: elements 4l..4l+3 of the block, summed
// exactly), and the f32 work after them is the AVX2 kernel's too, in the same order: the
// lanes are converted to f32 and added into 8 f32 lanes per output as
// acc = lanes * (d_w * d_x) + acc (one FMA, d_w * d_x rounded first), block after block,
// then summed across by simd::Hsum4. So the results equal the AVX2 kernel's bit for bit.
//
// As in gemm_avx512.cc, a 512-bit register holds two weight rows' 8-lane sums side by side,
// with x's 32 codes broadcast to both halves: 8 x rows x 4 weight rows per tile, 16
// accumulators of the 32 registers, and each weight block unpacked once per 8 rows of x.
//
// Compiled for AVX-512 by a target pragma after the includes, for the reasons
// gemm_avx512.cc gives; no intrinsics in lambdas below, which Clang's pragma does not reach.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512vnni")
#endif

namespace ptxserve::cpu {
namespace {

constexpr int kNR = 4;           // weight rows (streams) per tile, as in gemm_quant.cc
constexpr int kMR = 8;           // x rows per tile: 8 x 2 accumulator registers
constexpr int64_t kMBlock = 48;  // x rows whose tiles reuse the same weight rows
// Tiles of fewer x rows (decode's 1) put the offset on the weights instead: the offset on x
// costs a vpdpbusd and a subtraction per weight block pair and tile, on the weights the same
// per x row and block (and an xor for x's signed codes); a one-thread L2-resident q4_0 panel
// (256 x 2048, this Zen 5 VM) at 1 row took 9.6 us offsetting the weights, 11.2-12.0 us
// offsetting x, and at 48 rows 219-220 us offsetting x, 232 us with the weights' offset.
constexpr int kMinRowsToOffsetX = 4;

// The f16 block scales of two weight rows' blocks as f32: a's in the low 8 lanes.
__m512 ScalePair(const uint8_t* a, const uint8_t* b) {
  uint16_t ha, hb;
  std::memcpy(&ha, a, 2);
  std::memcpy(&hb, b, 2);
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hb)),
                                          _mm_set1_epi16(static_cast<int16_t>(ha))));
}

// The two formats' blocks, two rows' blocks a and b per register, a's 32 in the low half,
// in the element order of x's codes: as vpdpbusd's signed operand (LoadSigned: the codes)
// or as its unsigned one (LoadOffset: the codes plus kOffset).
struct Q8_0 {
  static constexpr int kBytes = 34;
  static constexpr int kOffset = 128;
  static __m512i LoadSigned(const uint8_t* a, const uint8_t* b) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 1);
  }
  static __m512i LoadOffset(const uint8_t* a, const uint8_t* b) {
    return _mm512_xor_si512(LoadSigned(a, b), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};
struct Q4_0 {
  static constexpr int kBytes = 18;
  static constexpr int kOffset = 8;
  // Elements 0..15 are the low nibbles of a block's 16 bytes, 16..31 the high ones: the
  // 16 bytes go to 128-bit lanes [a a b b], the odd lanes shift right by 4, and the mask
  // keeps one nibble per byte (the bits a 64-bit shift brings in from the next byte go):
  // the codes plus 8.
  static __m512i LoadOffset(const uint8_t* a, const uint8_t* b) {
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2)));
    v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  }
  // 8 comes off each nibble n without AVX512-BW's byte subtraction: n + 0x78 stays within
  // its byte (at most 0x87), and flipping its top bit then makes it n + 0xF8, n - 8 mod 256.
  static __m512i LoadSigned(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_add_epi32(LoadOffset(a, b), _mm512_set1_epi8(0x78));
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

__m256 High(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// What a tile needs: x's rows from its first, the tile's first weight row, the distance
// between its rows (weight rows and output columns), and where its outputs go.
struct TileArgs {
  QuantizedX x;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t col_step;
  const float* bias;  // bias of the first row, or nullptr
  int64_t ldy;
  float* y;
};

// y[i * ldy + j * col_step] for i < MR, j < NR. Register p of row i holds the sums of
// weight rows 2p and 2p + 1 (with NR odd, the last row twice). Loops over MR/kPairs carry
// `#pragma GCC unroll` so the accumulators stay in registers.
template <int MR, int NR, class F>
void Tile(const TileArgs& a) {
  constexpr int kPairs = (NR + 1) / 2;
  const uint8_t* wr[2 * kPairs];
#pragma GCC unroll 4
  for (int j = 0; j < 2 * kPairs; ++j) wr[j] = a.w + std::min(j, NR - 1) * a.col_step * a.row_bytes;
  __m512 acc[MR][kPairs];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int p = 0; p < kPairs; ++p) acc[i][p] = _mm512_setzero_ps();
  }
  const int64_t blocks = a.x.blocks;
  // Below kMinRowsToOffsetX rows of x the offset goes on the weights (see the top).
  constexpr bool kOffsetWeights = MR < kMinRowsToOffsetX;
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(kOffsetWeights ? F::kOffset : 128));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m512i wq[kPairs], correction[kPairs];
    __m512 dw[kPairs];
#pragma GCC unroll 2
    for (int p = 0; p < kPairs; ++p) {
      const uint8_t* wa = wr[2 * p] + blk * F::kBytes;
      const uint8_t* wb = wr[2 * p + 1] + blk * F::kBytes;
      if constexpr (kOffsetWeights) {
        wq[p] = F::LoadOffset(wa, wb);
      } else {
        wq[p] = F::LoadSigned(wa, wb);
        correction[p] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, wq[p]));
      }
      dw[p] = ScalePair(wa, wb);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const int64_t xb = i * blocks + blk;
      const __m512i xu = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x.codes + xb * 32)));
      const __m512 dx = _mm512_set1_ps(a.x.scales[xb]);
      if constexpr (kOffsetWeights) {
        const __m512i xs = _mm512_xor_si512(xu, flip);  // x's signed codes
        const __m512i x_correction = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, xs));
#pragma GCC unroll 2
        for (int p = 0; p < kPairs; ++p) {
          const __m512i dot = _mm512_dpbusd_epi32(x_correction, wq[p], xs);
          acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[p], dx), acc[i][p]);
        }
      } else {
#pragma GCC unroll 2
        for (int p = 0; p < kPairs; ++p) {
          const __m512i dot = _mm512_dpbusd_epi32(correction[p], xu, wq[p]);
          acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[p], dx), acc[i][p]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m256 z = _mm256_setzero_ps();
    alignas(16) float sums[4];
    _mm_store_ps(sums, simd::Hsum4(_mm512_castps512_ps256(acc[i][0]), High(acc[i][0]),
                                   kPairs > 1 ? _mm512_castps512_ps256(acc[i][kPairs - 1]) : z,
                                   kPairs > 1 ? High(acc[i][kPairs - 1]) : z));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      a.y[i * a.ldy + j * a.col_step] =
          a.bias != nullptr ? sums[j] + a.bias[j * a.col_step] : sums[j];
    }
  }
}

using TileFn = void (*)(const TileArgs&);

// Tile<mr, nr> at [(mr - 1) * kNR + nr - 1].
template <class F, int... I>
constexpr std::array<TileFn, sizeof...(I)> TileTable(std::integer_sequence<int, I...>) {
  return {&Tile<I / kNR + 1, I % kNR + 1, F>...};
}

template <class F>
void Panel(const QuantizedX& x, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t M,
           int64_t ldy, int64_t n_begin, int64_t n_end, float* y) {
  static constexpr auto kTiles = TileTable<F>(std::make_integer_sequence<int, kMR * kNR>());
  ForEachTile(M, n_begin, n_end, kNR, kMR, kMBlock,
              [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                const int64_t b0 = m0 * x.blocks;
                const TileArgs a{{x.codes + b0 * 32, x.scales + b0, x.blocks},
                                 w + n * row_bytes,
                                 row_bytes,
                                 col_step,
                                 bias != nullptr ? bias + n : nullptr,
                                 ldy,
                                 y + m0 * ldy + n};
                kTiles[(mr - 1) * kNR + nr - 1](a);
              });
}

}  // namespace

void IntegerPanelAvx512Vnni(QuantType t, const QuantizedX& x, const uint8_t* w, int64_t row_bytes,
                            const float* bias, int64_t M, int64_t ldy, int64_t n_begin,
                            int64_t n_end, float* y) {
  if (t == QuantType::kQ8_0) {
    Panel<Q8_0>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  } else {
    Panel<Q4_0>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  }
}

}  // namespace ptxserve::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop
