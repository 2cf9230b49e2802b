// y = x * w^T for the HF [N, K] weight layout.
//
// Decode (small M) is bound by weight bandwidth: every weight row must come from
// memory once per step, so the kernel streams NR weight rows at a time and computes
// their dot products against all MR rows of x held in registers (x itself stays in
// L1/L2). Larger M is tiled into blocks of kMBlock rows so that the weight panel a
// thread is working on is reused from cache across the rows of the block.
//
// Each output is one 8-wide FMA chain over K followed by the same horizontal sum,
// whatever M, the tile shape or the thread count: a token's result does not depend
// on the batch it was computed in.
#include <immintrin.h>

#include <algorithm>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

constexpr int kNR = 4;                    // weight rows per tile when M > 1
constexpr int kNR1 = 8;                   // weight rows per tile when M == 1
constexpr int kMR = 3;                    // x rows per tile (3x4 accumulators + 4 loads = 16 ymm)
constexpr int64_t kMBlock = 48;           // x rows whose tiles reuse one weight panel
constexpr int64_t kSerialWork = 1 << 15;  // below this many MACs, threads cost more than they save

// Computes the MR x NR block y[m, n] for m < MR, n < NR; x rows are K apart, w rows K
// apart, y rows ldy apart.
template <int MR, int NR>
void MicroKernel(const float* x, const float* w, const float* bias, int64_t K, int64_t ldy,
                 float* y) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * K + k);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = _mm256_loadu_ps(w + j * K + k);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k < K) {
    const __m256i mask = simd::TailMask(K - k);
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_maskload_ps(x + i * K + k, mask);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = _mm256_maskload_ps(w + j * K + k, mask);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  const __m256 z = _mm256_setzero_ps();
  for (int i = 0; i < MR; ++i) {
    alignas(16) float sums[8];
    for (int j0 = 0; j0 < NR; j0 += 4) {
      const __m128 s =
          simd::Hsum4(acc[i][j0], j0 + 1 < NR ? acc[i][j0 + 1] : z,
                      j0 + 2 < NR ? acc[i][j0 + 2] : z, j0 + 3 < NR ? acc[i][j0 + 3] : z);
      _mm_store_ps(sums + j0, s);
    }
    float* yrow = y + i * ldy;
    for (int j = 0; j < NR; ++j) yrow[j] = bias != nullptr ? sums[j] + bias[j] : sums[j];
  }
}

using KernelFn = void (*)(const float*, const float*, const float*, int64_t, int64_t, float*);

template <int MR>
KernelFn PickNR(int nr) {
  switch (nr) {
    case 1:
      return MicroKernel<MR, 1>;
    case 2:
      return MicroKernel<MR, 2>;
    case 3:
      return MicroKernel<MR, 3>;
    case 4:
      return MicroKernel<MR, 4>;
    default:
      return nullptr;
  }
}

KernelFn PickKernel(int mr, int nr) {
  if (mr == 1 && nr > 4) {
    switch (nr) {
      case 5:
        return MicroKernel<1, 5>;
      case 6:
        return MicroKernel<1, 6>;
      case 7:
        return MicroKernel<1, 7>;
      default:
        return MicroKernel<1, 8>;
    }
  }
  switch (mr) {
    case 1:
      return PickNR<1>(nr);
    case 2:
      return PickNR<2>(nr);
    default:
      return PickNR<3>(nr);
  }
}

// Rows [n_begin, n_end) of w against all M rows of x.
void GemmPanel(const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
               int64_t n_begin, int64_t n_end, int nr_max, float* y) {
  for (int64_t m_block = 0; m_block < M; m_block += kMBlock) {
    const int64_t m_block_end = std::min(M, m_block + kMBlock);
    for (int64_t n0 = n_begin; n0 < n_end; n0 += nr_max) {
      const int nr = static_cast<int>(std::min<int64_t>(nr_max, n_end - n0));
      const float* bn = bias != nullptr ? bias + n0 : nullptr;
      for (int64_t m0 = m_block; m0 < m_block_end; m0 += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, m_block_end - m0));
        PickKernel(mr, nr)(x + m0 * K, w + n0 * K, bn, K, N, y + m0 * N + n0);
      }
    }
  }
}

}  // namespace

void Gemm(const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
          float* y) {
  if (M <= 0 || N <= 0) return;
  const int nr = M == 1 ? kNR1 : kNR;
  const int64_t tiles = (N + nr - 1) / nr;
  if (M * N * K < kSerialWork) {
    GemmPanel(x, w, bias, M, N, K, 0, N, nr, y);
    return;
  }
  // Chunks are whole tiles, so column n always sits at the same place in its tile.
  ThreadPool::Default().ParallelFor(tiles, [&](int64_t t_begin, int64_t t_end) {
    GemmPanel(x, w, bias, M, N, K, t_begin * nr, std::min(N, t_end * nr), nr, y);
  });
}

}  // namespace ptxserve::cpu
