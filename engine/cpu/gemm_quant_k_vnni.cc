// gemm_quant_k.cc's q4_k/q6_k tile for CPUs with AVX512-VNNI, chosen at run time
// (engine/cpu/isa.h): a 512-bit register holds two weight rows' 8 lanes side by side (with NR
// odd, the last row twice), x's 32 codes broadcast to both halves, and every lane takes the
// AVX2 tile's f32 operations in its order, so the results equal its bit for bit:
//   - a block's lane (4 products) is one vpdpbusd of the weights' unsigned codes (q4_k's
//     nibbles; q6_k's 6-bit codes, with -32 times x's lane sum as the starting value) against
//     x's signed codes: the same int32 the AVX2 tile gets from vpmaddubsw and vpmaddwd;
//   - its scale multiplies the lane after conversion (exact: |scale * lane| < 2^24, where the
//     AVX2 tile multiplies before it), then one FMA by dx into the super-block's sums;
//   - d times those sums, q4_k's min term and the final sum of 8 lanes (simd::Hsum4) as
//     gemm_quant_k.cc does them.
// Per block, x row and two weight rows that is 4 instructions where the AVX2 tile takes 4 per
// row; and 4 rows of x per tile where AVX2's 16 registers hold 3.
//
// Compiled for AVX512-VNNI between PTXSERVE_TARGET_BEGIN and _END (isa_target.h); no
// intrinsics in lambdas below, which Clang's pragma does not reach.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "engine/cpu/gemm_quant_k.h"
#include "engine/cpu/isa_target.h"
#include "engine/cpu/simd.h"

PTXSERVE_TARGET_BEGIN("avx512f,avx512vl,avx512vnni")

namespace ptxserve::cpu {
namespace {

constexpr int kSubBlocks = 8;  // blocks of 32 per super-block of 256
constexpr int kPairs = 2;      // registers of two weight rows per tile (4 rows)

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Two 256-bit loads as one register, a's in the low half.
inline __m512i LoadPair(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// [a x 8 | b x 8] (by 64-bit halves: 32-bit ones need AVX512-DQ)
inline __m512 SetPair(float a, float b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)),
                                             _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

// x row i's block blk: its 32 codes in both halves, and its scale in every lane.
struct XBlock {
  __m512i codes;
  __m512 scale;
};
inline XBlock LoadX(const KQuantTile& a, int i, int64_t blk) {
  const int64_t xb = i * a.blocks + blk;
  return {_mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_codes + xb * 32))),
          _mm512_set1_ps(a.x_scales[xb])};
}

// sb_acc += (float(lanes) * scales) * dx, as BlockDot's cvt(lanes * scales) * dx.
inline __m512 AddBlock(__m512i lanes, __m512 scales, __m512 dx, __m512 sb_acc) {
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), scales), dx, sb_acc);
}

// Q4KScalesMins for two super-blocks a and b in registers (scalar stores read back as one
// vector miss store forwarding): *sc = [a's 8 scales, b's 8], *m the same for the mins.
inline void ScalesMinsPair(const uint8_t* a, const uint8_t* b, __m128i* sc, __m128i* m) {
  // Each super-block's first 16 bytes as dwords [d and dmin, w0, w1, w2].
  const __m128 ra = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m128 rb = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m128i w01 = _mm_castps_si128(_mm_shuffle_ps(ra, rb, _MM_SHUFFLE(2, 1, 2, 1)));
  const __m128i w2 =
      _mm_srlv_epi32(_mm_castps_si128(_mm_shuffle_ps(ra, rb, _MM_SHUFFLE(3, 3, 3, 3))),
                     _mm_setr_epi32(0, 4, 0, 4));
  // Lanes [a's scales, a's mins, b's scales, b's mins]: sub-blocks 0..3, then 4..7.
  const __m128i lo = _mm_and_si128(w01, _mm_set1_epi32(0x3F3F3F3F));
  const __m128i hi =
      _mm_or_si128(_mm_and_si128(w2, _mm_set1_epi32(0x0F0F0F0F)),
                   _mm_and_si128(_mm_srli_epi32(w01, 2), _mm_set1_epi32(0x30303030)));
  const __m128i ra8 = _mm_unpacklo_epi32(lo, hi), rb8 = _mm_unpackhi_epi32(lo, hi);
  *sc = _mm_unpacklo_epi64(ra8, rb8);
  *m = _mm_unpackhi_epi64(ra8, rb8);
}

// One super-block `sb` of NP pairs of weight rows (pair p: rows b[2p] in the low half and
// b[2p + 1]) against MR rows of x; each x block is loaded once for all pairs.
template <int MR, int NP>
inline __attribute__((always_inline)) void SuperBlockQ4K(const uint8_t* const (&b)[4], int64_t sb,
                                                         const KQuantTile& a,
                                                         __m512 (&acc)[kPairs][MR]) {
  __m512 scales[NP], sb_acc[NP][MR];
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) {
    __m128i sc, m;
    ScalesMinsPair(b[2 * p], b[2 * p + 1], &sc, &m);
    const __m512 mins = _mm512_mul_ps(SetPair(Half(b[2 * p] + 2), Half(b[2 * p + 1] + 2)),
                                      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m)));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 sums = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
          reinterpret_cast<const double*>(a.x_sums + i * a.blocks + sb * kSubBlocks))));
      acc[p][i] = _mm512_fnmadd_ps(mins, sums, acc[p][i]);
      sb_acc[p][i] = _mm512_setzero_ps();
    }
    scales[p] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc));
  }
  const __m512i low4 = _mm512_set1_epi8(0xF), zero = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int g = 0; g < kSubBlocks / 2; ++g) {
    __m512i c[NP][2];
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      const __m512i q = LoadPair(b[2 * p] + 16 + 32 * g, b[2 * p + 1] + 16 + 32 * g);
      // The high nibbles by a 32-bit shift: the bits it brings in from the next byte are
      // masked.
      c[p][0] = _mm512_and_si512(q, low4);
      c[p][1] = _mm512_and_si512(_mm512_srli_epi32(q, 4), low4);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int k = 2 * g + h;
      const __m512i index =
          _mm512_inserti64x4(_mm512_set1_epi32(k), _mm256_set1_epi32(kSubBlocks + k), 1);
      __m512 s[NP];
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) s[p] = _mm512_permutexvar_ps(index, scales[p]);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const XBlock x = LoadX(a, i, sb * kSubBlocks + k);
#pragma GCC unroll 2
        for (int p = 0; p < NP; ++p) {
          sb_acc[p][i] =
              AddBlock(_mm512_dpbusd_epi32(zero, c[p][h], x.codes), s[p], x.scale, sb_acc[p][i]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) {
    const __m512 d = SetPair(Half(b[2 * p]), Half(b[2 * p + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) acc[p][i] = _mm512_fmadd_ps(sb_acc[p][i], d, acc[p][i]);
  }
}

template <int MR, int NP>
inline __attribute__((always_inline)) void SuperBlockQ6K(const uint8_t* const (&b)[4], int64_t sb,
                                                         const KQuantTile& a,
                                                         __m512 (&acc)[kPairs][MR]) {
  // Block k's lanes 0..3 take scale 2k, lanes 4..7 scale 2k + 1: the low half's from s0,
  // the high half's from s1 (indices 16 up).
  __m512 s0[NP], s1[NP], sb_acc[NP][MR];
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) {
    s0[p] = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2 * p] + 192))));
    s1[p] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2 * p + 1] + 192))));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) sb_acc[p][i] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0xF), high2 = _mm512_set1_epi8(0x30);
  const __m512i offset = _mm512_set1_epi8(32), zero = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m512i ql0[NP], ql1[NP], qh[NP];
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      ql0[p] = LoadPair(b[2 * p] + 64 * h, b[2 * p + 1] + 64 * h);
      ql1[p] = LoadPair(b[2 * p] + 64 * h + 32, b[2 * p + 1] + 64 * h + 32);
      qh[p] = LoadPair(b[2 * p] + 128 + 32 * h, b[2 * p + 1] + 128 + 32 * h);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int k = 4 * h + j;
      // Block k's codes as gemm_quant_k.cc's, by 32-bit shifts: the bits they bring in from
      // neighbouring bytes are masked.
      __m512i q[NP];
      __m512 s[NP];
      const __m512i index = _mm512_setr_epi32(
          2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 16 + 2 * k,
          16 + 2 * k, 16 + 2 * k, 16 + 2 * k, 17 + 2 * k, 17 + 2 * k, 17 + 2 * k, 17 + 2 * k);
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) {
        const __m512i ql = j % 2 == 0 ? ql0[p] : ql1[p];
        const __m512i low = j < 2 ? ql : _mm512_srli_epi32(ql, 4);
        const __m512i high = j == 0   ? _mm512_slli_epi32(qh[p], 4)
                             : j == 1 ? _mm512_slli_epi32(qh[p], 2)
                             : j == 2 ? qh[p]
                                      : _mm512_srli_epi32(qh[p], 2);
        q[p] = _mm512_or_si512(_mm512_and_si512(low, low4), _mm512_and_si512(high, high2));
        s[p] = _mm512_permutex2var_ps(s0[p], index, s1[p]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const XBlock x = LoadX(a, i, sb * kSubBlocks + k);
        // (q - 32) . x as q . x - 32 * (x's lane sums)
        const __m512i minus32 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, x.codes));
#pragma GCC unroll 2
        for (int p = 0; p < NP; ++p) {
          sb_acc[p][i] =
              AddBlock(_mm512_dpbusd_epi32(minus32, q[p], x.codes), s[p], x.scale, sb_acc[p][i]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) {
    const __m512 d = SetPair(Half(b[2 * p] + 208), Half(b[2 * p + 1] + 208));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) acc[p][i] = _mm512_fmadd_ps(sb_acc[p][i], d, acc[p][i]);
  }
}

// The AVX2 tile's Tile and Store for MR x NR outputs, pair p holding weight rows 2p, 2p + 1.
template <int MR, int NR, QuantType T>
void Tile(const KQuantTile& a) {
  constexpr int kBytes = T == QuantType::kQ4_K ? 144 : 210;
  constexpr int kNP = (NR + 1) / 2;
  const uint8_t* wr[2 * kPairs];
#pragma GCC unroll 4
  for (int j = 0; j < 2 * kPairs; ++j) wr[j] = a.w + std::min(j, NR - 1) * a.col_step * a.row_bytes;
  __m512 acc[kPairs][MR];
#pragma GCC unroll 2
  for (int p = 0; p < kPairs; ++p) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) acc[p][i] = _mm512_setzero_ps();
  }
  const int64_t supers = a.blocks / kSubBlocks;
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* const b[4] = {wr[0] + sb * kBytes, wr[1] + sb * kBytes, wr[2] + sb * kBytes,
                                 wr[3] + sb * kBytes};
    if constexpr (T == QuantType::kQ4_K) {
      SuperBlockQ4K<MR, kNP>(b, sb, a, acc);
    } else {
      SuperBlockQ6K<MR, kNP>(b, sb, a, acc);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    __m256 rows[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 pair = acc[j / 2][i];
      rows[j] = j >= NR      ? _mm256_setzero_ps()
                : j % 2 == 0 ? _mm512_castps512_ps256(pair)
                             : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pair), 1));
    }
    alignas(16) float sums[4];
    _mm_store_ps(sums, simd::Hsum4(rows[0], rows[1], rows[2], rows[3]));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      a.y[i * a.ldy + j * a.col_step] =
          a.bias != nullptr ? sums[j] + a.bias[j * a.col_step] : sums[j];
    }
  }
}

using TileFn = void (*)(const KQuantTile&);

// Tile<mr, nr> at [(mr - 1) * 4 + nr - 1].
template <QuantType T, int... I>
constexpr std::array<TileFn, sizeof...(I)> TileTable(std::integer_sequence<int, I...>) {
  return {&Tile<I / 4 + 1, I % 4 + 1, T>...};
}

}  // namespace

void KQuantTileAvx512Vnni(QuantType t, int mr, int nr, const KQuantTile& a) {
  static constexpr auto kQ4K =
      TileTable<QuantType::kQ4_K>(std::make_integer_sequence<int, kKQuantVnniMR * 4>());
  static constexpr auto kQ6K =
      TileTable<QuantType::kQ6_K>(std::make_integer_sequence<int, kKQuantVnniMR * 4>());
  (t == QuantType::kQ4_K ? kQ4K : kQ6K)[(mr - 1) * 4 + nr - 1](a);
}

}  // namespace ptxserve::cpu

PTXSERVE_TARGET_END()
