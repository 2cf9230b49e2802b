// The integer GEMM for llama.cpp's k-quants (q4_k, q6_k: super-blocks of 256 with a scale
// per sub-block, engine/model/quant.h), against x rounded to 8 bits per block of 32 as for
// q8_0/q4_0 (gemm_quant.cc), so ops.h's bound on that rounding holds unchanged.
//
// A q4_k sub-block is 32 elements d * sc * q - dmin * m (q 0..15, 6-bit sc and m), exactly
// one block of x: its sum is d * dx * (sc * q . xq) - dmin * m * (dx * sum xq), the integer
// dot product taking sc through vpmaddwd's multiplier, the min term one FMA per 8
// sub-blocks against x's block sums (computed once per x block). A q6_k element is
// d * sc * (q - 32) with a signed 8-bit sc per 16 elements: a block of x covers two scales,
// which vpmaddwd applies lane half by lane half (its low 128 bits hold elements 0..15).
// Per block and x row that is vpmaddubsw, vpmaddwd, one conversion and one FMA by dx
// (broadcast from memory); d multiplies a super-block's 8 sums once, and each block's
// scales come from a super-block vector by one vpshufb (ScaleOfBlock). Extracting and
// broadcasting each scale as a scalar, and d * dx per block, cost 15-25% more time per
// block with the weights in cache (q4_k 50 -> 42 us, q6_k 80 -> 60 us, 1 row of 512 x 2048,
// one thread).
// llama.cpp (ggml_vec_dot_q4_K_q8_K) rounds x per 256 with one scale and so sums whole
// super-blocks in integers; x's scale per 32 here costs an f32 FMA per block instead and
// keeps x's rounding, and its bound, that of the other integer kernels.
//
// Tiles as gemm_quant.cc's: NR weight rows far apart (separate streams) times MR rows of x;
// the helpers are forced inline, as the accumulators would otherwise live in memory. On CPUs
// with AVX512-VNNI gemm_quant_k_vnni.cc's tile runs instead, with the same results bit for bit
// (its header says how).
#include "engine/cpu/gemm_quant_k.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

constexpr int kSubBlocks = 8;  // blocks of 32 per super-block of 256

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

using TileArgs = KQuantTile;

// q4_k: f16 d, f16 dmin, 12 bytes of scales and mins (Q4KScalesMins), 128 bytes of nibbles
// (sub-blocks 2p and 2p + 1 in the low and high nibbles of bytes 32p..32p + 31).
struct Q4K {
  static constexpr QuantType kType = QuantType::kQ4_K;
  static constexpr int kBytes = 144;
  static constexpr bool kSums = true;
};

// q6_k: 128 bytes ql (low nibbles), 64 bytes qh (2 high bits each), int8 scales[16], f16 d;
// each half of 128 elements takes 64 bytes of ql, 32 of qh and 8 scales.
struct Q6K {
  static constexpr QuantType kType = QuantType::kQ6_K;
  static constexpr int kBytes = 210;
  static constexpr bool kSums = false;
};

template <int MR, int NR>
inline void Store(__m256 (&acc)[MR][4], const TileArgs& a) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, simd::Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      a.y[i * a.ldy + j * a.col_step] =
          a.bias != nullptr ? sums[j] + a.bias[j * a.col_step] : sums[j];
    }
  }
}

// Sub-block b's scale (int16 lane b of each 128-bit half of `scales`) in every int16 lane of
// that half: one vpshufb per block instead of a scalar extract and broadcast.
inline __m256i ScaleOfBlock(__m256i scales, int b) {
  return _mm256_shuffle_epi8(scales,
                             _mm256_set1_epi16(static_cast<int16_t>((2 * b + 1) << 8 | 2 * b)));
}

// sb_acc[i] += cvt((c . xq of x row i's block blk) lane by lane, times scales16) * dx: c
// unsigned (vpmaddubsw's first operand), xq signed, dx x's scale (broadcast from memory);
// the weights' d multiplies the super-block's sum once (Finish).
template <int MR>
inline __attribute__((always_inline)) void BlockDot(__m256i c, __m256i scales16, const TileArgs& a,
                                                    int64_t blk, __m256 (&sb_acc)[MR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const int64_t xb = i * a.blocks + blk;
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_codes + xb * 32));
    const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(c, xq), scales16);
    sb_acc[i] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(a.x_scales + xb), sb_acc[i]);
  }
}

// As BlockDot for signed codes q (|q| <= 32): |q| times xq with q's sign.
template <int MR>
inline __attribute__((always_inline)) void SignedBlockDot(__m256i q, __m256i scales16,
                                                          const TileArgs& a, int64_t blk,
                                                          __m256 (&sb_acc)[MR]) {
  const __m256i abs = _mm256_sign_epi8(q, q);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const int64_t xb = i * a.blocks + blk;
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_codes + xb * 32));
    const __m256i pairs = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(xq, q));
    const __m256i dot = _mm256_madd_epi16(pairs, scales16);
    sb_acc[i] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(a.x_scales + xb), sb_acc[i]);
  }
}

// acc[i] += d * sb_acc[i]: a super-block's sums times the weights' d.
template <int MR>
inline __attribute__((always_inline)) void Finish(float d, const __m256 (&sb_acc)[MR],
                                                  __m256 (&acc)[MR]) {
  const __m256 dv = _mm256_set1_ps(d);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_fmadd_ps(sb_acc[i], dv, acc[i]);
}

// One weight row's super-block `sb` against MR rows of x, into acc (8 lanes per x row).
template <int MR>
inline __attribute__((always_inline)) void SuperBlockQ4K(const uint8_t* b, int64_t sb,
                                                         const TileArgs& a, __m256 (&acc)[MR]) {
  alignas(8) uint8_t sc[kSubBlocks], m[kSubBlocks];
  Q4KScalesMins(b, sc, m);
  // The min term: dmin * m_s against dx * sum(xq) of x's block s, lane s.
  const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(Half(b + 2)),
                                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)))));
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m256 sums = _mm256_loadu_ps(a.x_sums + i * a.blocks + sb * kSubBlocks);
    acc[i] = _mm256_fnmadd_ps(mins, sums, acc[i]);
  }
  // The 8 scales as int16 in both 128-bit halves, for ScaleOfBlock.
  const __m256i scales = _mm256_broadcastsi128_si256(
      _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
  const __m256i low4 = _mm256_set1_epi8(0xF);
  __m256 sb_acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) sb_acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int p = 0; p < kSubBlocks / 2; ++p) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * p));
    const int64_t blk = sb * kSubBlocks + 2 * p;
    BlockDot<MR>(_mm256_and_si256(q, low4), ScaleOfBlock(scales, 2 * p), a, blk, sb_acc);
    BlockDot<MR>(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), ScaleOfBlock(scales, 2 * p + 1),
                 a, blk + 1, sb_acc);
  }
  Finish<MR>(Half(b), sb_acc, acc);
}

template <int MR>
inline __attribute__((always_inline)) void SuperBlockQ6K(const uint8_t* b, int64_t sb,
                                                         const TileArgs& a, __m256 (&acc)[MR]) {
  // Block k's scales are sc[2k] (elements 0..15, the low 128 bits) and sc[2k + 1]: the even
  // scales as int16 in the low half, the odd ones in the high half, for ScaleOfBlock.
  const __m128i sc8 =
      _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)),
                       _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i scales = _mm256_cvtepi8_epi16(sc8);
  const __m256i low4 = _mm256_set1_epi8(0xF), high2 = _mm256_set1_epi8(0x30);
  const __m256i offset = _mm256_set1_epi8(32);
  __m256 sb_acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) sb_acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    // Block k = 4h + j of the super-block: ql0's or ql1's low or high nibbles (j & 1, j / 2)
    // and qh's bits 2j, 2j + 1 as bits 4, 5.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, low4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), high2)),
        _mm256_or_si256(_mm256_and_si256(ql1, low4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), high2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                        _mm256_and_si256(qh, high2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), high2)),
    };
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int k = 4 * h + j;
      SignedBlockDot<MR>(_mm256_sub_epi8(q[j], offset), ScaleOfBlock(scales, k), a,
                         sb * kSubBlocks + k, sb_acc);
    }
  }
  Finish<MR>(Half(b + 208), sb_acc, acc);
}

template <int MR, int NR, class F>
void Tile(const TileArgs& a) {
  __m256 acc[MR][4];
  __m256 row_acc[4][MR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) row_acc[j][i] = _mm256_setzero_ps();
  }
  const int64_t supers = a.blocks / kSubBlocks;
  for (int64_t sb = 0; sb < supers; ++sb) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const uint8_t* b = a.w + j * a.col_step * a.row_bytes + sb * F::kBytes;
      if constexpr (F::kSums) {
        SuperBlockQ4K<MR>(b, sb, a, row_acc[j]);
      } else {
        SuperBlockQ6K<MR>(b, sb, a, row_acc[j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = j < NR ? row_acc[j][i] : _mm256_setzero_ps();
  }
  Store<MR, NR>(acc, a);
}

// dx * (sum of the block's 32 codes) for every block of x: q4_k's min term.
void BlockSums(const int8_t* codes, const float* scales, int64_t blocks, float* sums) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + b * 32));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), _mm256_set1_epi16(1));
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    const int32_t total = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_srli_epi64(s2, 32)));
    sums[b] = scales[b] * static_cast<float>(total);
  }
}

template <class F>
void Run(const int8_t* x_codes, const float* x_scales, const float* x_sums, const uint8_t* w,
         const float* bias, int64_t M, int64_t N, int64_t K, float* y) {
  const int64_t blocks = K / 32, row_bytes = K / 256 * F::kBytes;
  const bool vnni = GemmIsa() >= Isa::kAvx512Vnni;
  auto panel = [&](int64_t n_begin, int64_t n_end) {
    ForEachTile(M, n_begin, n_end, kNR, vnni ? kKQuantVnniMR : kMR, kMBlock,
                [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                  const TileArgs a{x_codes + m0 * blocks * 32,
                                   x_scales + m0 * blocks,
                                   x_sums != nullptr ? x_sums + m0 * blocks : nullptr,
                                   blocks,
                                   w + n * row_bytes,
                                   row_bytes,
                                   col_step,
                                   bias != nullptr ? bias + n : nullptr,
                                   N,
                                   y + m0 * N + n};
                  if (vnni) {
                    KQuantTileAvx512Vnni(F::kType, mr, nr, a);
                  } else {
                    PickTile(mr, nr, []<int MR, int NR>() { return Tile<MR, NR, F>; })(a);
                  }
                });
  };
  if (M * N * K < kSerialWork) {
    panel(0, N);
  } else {
    ThreadPool::Default().ParallelFor(N, panel);
  }
}

}  // namespace

void GemmKQuantInteger(QuantType t, const int8_t* x_codes, const float* x_scales, const uint8_t* w,
                       const float* bias, int64_t M, int64_t N, int64_t K, float* y) {
  if (t == QuantType::kQ6_K) {
    Run<Q6K>(x_codes, x_scales, nullptr, w, bias, M, N, K, y);
    return;
  }
  thread_local std::vector<float> sums;
  sums.resize(M * K / 32);
  BlockSums(x_codes, x_scales, M * K / 32, sums.data());
  Run<Q4K>(x_codes, x_scales, sums.data(), w, bias, M, N, K, y);
}

}  // namespace ptxserve::cpu
