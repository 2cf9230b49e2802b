// y = x * w^T for the HF [N, K] weight layout.
//
// Decode (small M) is bound by weight bandwidth: every weight row must come from
// memory once per step, so the kernel streams weight rows and computes their dot
// products against all MR rows of x held in registers (x itself stays in L1/L2).
// A tile's NR weight rows are taken from NR far-apart places of the thread's range
// (rows r, r + S, r + 2S, ...): each is then a separate sequential stream, which the
// hardware prefetchers follow at full speed, where NR adjacent rows read in lockstep
// measured at half the bandwidth. Larger M is tiled into blocks of kMBlock rows so
// the NR weight rows in flight are reused from L1 across the block (ForEachTile). On
// CPUs with AVX-512 the same tiles run in gemm_avx512.cc's kernel, with the same sums.
//
// Each output is one 8-wide FMA chain over K followed by the same horizontal sum,
// whatever M, the tile shape or the thread count: a token's result does not depend
// on the batch it was computed in.
//
// f16 and bf16 weights are read as they are stored and widened to f32 in registers
// (F16C's vcvtph2ps; bf16 by a 16-bit shift): exact, so the products and sums are those of
// the f32 copy, in half the bytes. Except on CPUs with AVX512-BF16, where bf16 weights against
// kBf16DotMinRows or more rows of x take gemm_bf16.cc's dot products over x rounded to bf16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

// Eight weights from `p` as f32; the tail form reads only the first `n` (< 8), zeros after.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p, DType t) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 LoadTail(const float* p, int64_t n) {
  return _mm256_maskload_ps(p, simd::TailMask(n));
}
inline __m256 LoadTail(const uint16_t* p, int64_t n, DType t) {
  alignas(16) uint16_t part[8] = {};
  std::memcpy(part, p, static_cast<size_t>(n) * 2);
  return Load8(part, t);
}

// Loops over MR/NR carry `#pragma GCC unroll`: at -O2 GCC leaves them rolled and the
// accumulators then live on the stack instead of in registers (3x slower).
// The MR x NR outputs y[i * ldy + j * col_step] = x_i . w_j (+ bias[j * col_step]) for
// x rows K apart and weight rows w + j * col_step * K, of element type W (float, or
// uint16_t holding f16 or bf16 as `wt` says).
template <int MR, int NR, class W>  // NR <= 4
void MicroKernel(const float* x, const W* w, DType wt, const float* bias, int64_t K,
                 int64_t col_step, int64_t ldy, float* y) {
  auto load8 = [wt](const W* p) {
    if constexpr (std::is_same_v<W, float>) {
      (void)wt;
      return Load8(p);
    } else {
      return Load8(p, wt);
    }
  };
  auto load_tail = [wt](const W* p, int64_t n) {
    if constexpr (std::is_same_v<W, float>) {
      (void)wt;
      return LoadTail(p, n);
    } else {
      return LoadTail(p, n, wt);
    }
  };
  const W* wr[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) wr[j] = w + j * col_step * K;
  __m256 acc[MR][4];  // columns >= NR stay zero and fold away
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * K + k);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load8(wr[j] + k);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k < K) {
    const __m256i mask = simd::TailMask(K - k);
    __m256 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_maskload_ps(x + i * K + k, mask);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load_tail(wr[j] + k, K - k);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, simd::Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      y[i * ldy + j * col_step] = bias != nullptr ? sums[j] + bias[j * col_step] : sums[j];
    }
  }
}

// Rows [n_begin, n_end) of w against all M rows of x; y's rows are ldy apart.
template <class W>
void GemmPanel(const float* x, const W* w, DType wt, const float* bias, int64_t M, int64_t ldy,
               int64_t K, int64_t n_begin, int64_t n_end, float* y) {
  if (GemmIsa() >= Isa::kAvx512) {
    GemmPanelAvx512(x, w, wt, bias, M, ldy, K, n_begin, n_end, y);
    return;
  }
  ForEachTile(M, n_begin, n_end, kNR, kMR, kMBlock,
              [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                const auto kernel =
                    PickTile(mr, nr, []<int MR, int NR>() { return MicroKernel<MR, NR, W>; });
                kernel(x + m0 * K, w + n * K, wt, bias != nullptr ? bias + n : nullptr, K, col_step,
                       ldy, y + m0 * ldy + n);
              });
}

template <class W>
void GemmOf(const float* x, const W* w, DType wt, const float* bias, int64_t M, int64_t N,
            int64_t K, float* y) {
  if (M <= 0 || N <= 0) return;
  if constexpr (std::is_same_v<W, uint16_t>) {
    if (UsesBf16Dot(wt, M)) return GemmBf16Dot(x, w, bias, M, N, K, y);
  }
  if (M * N * K < kSerialWork) {
    GemmPanel(x, w, wt, bias, M, N, K, 0, N, y);
    return;
  }
  ThreadPool::Default().ParallelFor(N, [&](int64_t n_begin, int64_t n_end) {
    GemmPanel(x, w, wt, bias, M, N, K, n_begin, n_end, y);
  });
}

}  // namespace

void GemmF32Serial(const float* x, const float* w, const float* bias, int64_t M, int64_t N,
                   int64_t K, int64_t ldy, float* y) {
  GemmPanel(x, w, DType::kF32, bias, M, ldy, K, 0, N, y);
}

void Gemm(const float* x, WeightMatrix w, const float* bias, int64_t M, int64_t N, int64_t K,
          float* y) {
  if (w.quant != QuantType::kNone) {
    GemmQuantized(x, w, bias, M, N, K, y);
  } else if (w.dtype == DType::kF32) {
    GemmOf(x, static_cast<const float*>(w.data), w.dtype, bias, M, N, K, y);
  } else {
    GemmOf(x, static_cast<const uint16_t*>(w.data), w.dtype, bias, M, N, K, y);
  }
}

}  // namespace ptxserve::cpu
