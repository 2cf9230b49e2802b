// gemm.cc's kernel for CPUs with AVX-512 F and VL, chosen at run time (engine/cpu/isa.h).
//
// Every output must stay the same 8-lane FMA chain over K and the same horizontal sum
// as the AVX2 kernel's, so that a result does not depend on the machine. So a 512-bit
// register does not hold 16 consecutive k of one output: it holds the 8-lane chains of
// two weight rows side by side, x's 8 values broadcast to both halves. One 512-bit FMA
// then does the work of two AVX2 FMAs with the same roundings, lane for lane, and the
// 32 registers hold 8 x rows x 4 weight rows of accumulators (16 registers) where AVX2's
// 16 held 3 x 4. f16 and bf16 weights widen 16 at a time (two rows' 8) in one convert.
//
// From kPackMinRows rows of x on (prefill), x is first copied per block into tiles of 6
// rows read as one sequential stream (PackX), and each tile runs against 8 weight rows:
// 24 accumulators, each x broadcast feeding 4 FMAs. Measured on Zen 5 (M = 512, f16,
// llama-3.2-1b shapes, one core, CPU time): 5-10% faster at K = 2048 and about 30% at
// K = 8192, where the 48 unpacked x rows (32 KiB each) had outgrown L2. The tile shape
// changes no sum: every output is still its own 8-lane chain and Hsum4.
//
// Compiled for AVX-512 F and VL between PTXSERVE_TARGET_BEGIN and _END (isa_target.h says why
// that way), so the kernels below use no lambdas.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa_target.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"

PTXSERVE_TARGET_BEGIN("avx512f,avx512vl")

namespace ptxserve::cpu {
namespace {

// Weight rows per tile and x rows per block as gemm.cc's (kNR, kMBlock, gemm_tiles.h); x rows
// per tile: 8 x 2 accumulator registers.
constexpr int kWideMR = 8;
// Tiles over packed x (PackX): 6 x rows x 8 weight rows, 24 accumulator registers, so that
// each broadcast x load feeds 4 FMAs (against 2 at 8 x 4), which leaves the FMA pipes busy.
constexpr int kPackNR = 8;
constexpr int kPackMR = 6;

// 8 values at a and 8 at b in one register: a's in the low half.
__m512 Join(__m256 a, __m256 b) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}
__m256 High(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// Eight weights of row a and eight of row b as f32, a's in the low half.
__m512 LoadPair(const float* a, const float* b, DType) {
  return Join(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
}
__m512 LoadPair(const uint16_t* a, const uint16_t* b, DType t) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  if (t == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The first n (< 8) elements at p, zeros after, as 8 elements in `part`.
template <class T>
const T* Tail(const T* p, int64_t n, T* part) {
  std::memset(part, 0, 8 * sizeof(T));
  std::memcpy(part, p, static_cast<size_t>(n) * sizeof(T));
  return part;
}

// One k-step of 8: acc[i][p] += x_i[0..8) (both halves) * (w_2p[0..8) | w_2p+1[0..8)).
template <int MR, int kPairs, int kAcc, class W>
inline __attribute__((always_inline)) void Step(const float* const* xr, const W* const* wk,
                                                DType wt, __m512 (&acc)[MR][kAcc]) {
  __m512 wv[kPairs];
#pragma GCC unroll 4
  for (int p = 0; p < kPairs; ++p) wv[p] = LoadPair(wk[2 * p], wk[2 * p + 1], wt);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m256 x8 = _mm256_loadu_ps(xr[i]);
    const __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x8)));
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
  }
}

// gemm.cc's MicroKernel<MR, NR, W> (NR <= 8): y[i * ldy + j * col_step] = x_i . w_j (+ bias)
// for weight rows w + j * col_step * K and x rows either as Gemm has them (K apart) or
// packed (PackX: MR rows' 8 values at a time, one after the other). Register p of row i
// holds the chains of weight rows 2p and 2p + 1 (with NR odd, the last row twice).
template <int MR, int NR, class W, bool kPackedX>
void MicroKernel(const float* x, const W* w, DType wt, const float* bias, int64_t K,
                 int64_t col_step, int64_t ldy, float* y) {
  // x_i[k] is at x + i * row_step + k * k_step.
  constexpr int64_t kKStep = kPackedX ? MR : 1;
  const int64_t row_step = kPackedX ? 8 : K;
  constexpr int kPairs = (NR + 1) / 2;
  constexpr int kAcc = (kPairs + 1) / 2 * 2;  // whole Hsum4s of 4 chains
  const W* wr[2 * kPairs];
#pragma GCC unroll 8
  for (int j = 0; j < 2 * kPairs; ++j) wr[j] = w + std::min(j, NR - 1) * col_step * K;
  __m512 acc[MR][kAcc];  // pairs >= kPairs stay zero and fold away
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int p = 0; p < kAcc; ++p) acc[i][p] = _mm512_setzero_ps();
  }
  const float* xr[MR];
  const W* wk[2 * kPairs];
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xr[i] = x + i * row_step + k * kKStep;
#pragma GCC unroll 8
    for (int j = 0; j < 2 * kPairs; ++j) wk[j] = wr[j] + k;
    Step<MR, kPairs>(xr, wk, wt, acc);
  }
  if (k < K) {  // zeros past K, as the AVX2 kernel's masked loads give
    float x_part[MR][8];
    W w_part[2 * kPairs][8];
    for (int i = 0; i < MR; ++i) xr[i] = Tail(x + i * row_step + k * kKStep, K - k, x_part[i]);
    for (int j = 0; j < 2 * kPairs; ++j) wk[j] = Tail(wr[j] + k, K - k, w_part[j]);
    Step<MR, kPairs>(xr, wk, wt, acc);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int q = 0; q < kAcc; q += 2) {  // weight rows 2q .. 2q + 3
      alignas(16) float sums[4];
      _mm_store_ps(sums, simd::Hsum4(_mm512_castps512_ps256(acc[i][q]), High(acc[i][q]),
                                     _mm512_castps512_ps256(acc[i][q + 1]), High(acc[i][q + 1])));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const int j = 2 * q + c;
        if (j < NR)
          y[i * ldy + j * col_step] = bias != nullptr ? sums[c] + bias[j * col_step] : sums[c];
      }
    }
  }
}

template <class W>
using KernelFn = void (*)(const float*, const W*, DType, const float*, int64_t, int64_t, int64_t,
                          float*);

// MicroKernel<mr, nr> at [(mr - 1) * NR + nr - 1].
template <class W, int NR, bool kPackedX, int... I>
constexpr std::array<KernelFn<W>, sizeof...(I)> KernelTable(std::integer_sequence<int, I...>) {
  return {&MicroKernel<I / NR + 1, I % NR + 1, W, kPackedX>...};
}

// Rows [m_begin, m_begin + rows) of x (K apart) for MicroKernel's packed form, a tile of
// kPackMR rows (the last one maybe fewer) every kPackMR * Kp floats of xp (Kp: K rounded up to 8):
// a tile of mr rows holds, per 8 k, row 0's 8 values, row 1's, ..., then the next 8 k,
// zeros past K. One sequential stream per tile instead of mr streams K apart.
void PackX(const float* x, int64_t K, int64_t m_begin, int64_t rows, float* xp) {
  const int64_t kp = (K + 7) / 8 * 8;
  for (int64_t t = 0; t < rows; t += kPackMR) {
    const int64_t mr = std::min<int64_t>(kPackMR, rows - t);
    float* tile = xp + t * kp;
    for (int64_t i = 0; i < mr; ++i) {
      const float* row = x + (m_begin + t + i) * K;
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) {
        _mm256_storeu_ps(tile + k * mr + i * 8, _mm256_loadu_ps(row + k));
      }
      if (k < K) {
        float part[8];
        _mm256_storeu_ps(tile + k * mr + i * 8, _mm256_loadu_ps(Tail(row + k, K - k, part)));
      }
    }
  }
}

// From this many x rows on, Panel packs x (PackX) per block of kMBlock rows: one stream
// per tile instead of one per x row, read kPackNR weight rows at a time.
constexpr int64_t kPackMinRows = 16;
// Every x block runs against the thread's weight rows a panel at a time, so that the panel
// is still in L3 for the next block: each weight then comes from memory once per Gemm
// rather than once per block. A panel holds at least as many bytes as x, which is read
// again per panel (N = 8192, K = 2048, M = 512: 10-15% faster; K = 8192 stays one panel).
constexpr int64_t kPanelBytes = 4 << 20;

template <class W>
void Panel(const float* x, const W* w, DType wt, const float* bias, int64_t M, int64_t ldy,
           int64_t K, int64_t n_begin, int64_t n_end, float* y) {
  if (M < kPackMinRows) {
    static constexpr auto kKernels =
        KernelTable<W, kNR, false>(std::make_integer_sequence<int, kWideMR * kNR>());
    ForEachTile(M, n_begin, n_end, kNR, kWideMR, kMBlock,
                [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                  kKernels[(mr - 1) * kNR + nr - 1](x + m0 * K, w + n * K, wt,
                                                    bias != nullptr ? bias + n : nullptr, K,
                                                    col_step, ldy, y + m0 * ldy + n);
                });
    return;
  }
  static constexpr auto kKernels =
      KernelTable<W, kPackNR, true>(std::make_integer_sequence<int, kPackMR * kPackNR>());
  const int64_t kp = (K + 7) / 8 * 8;
  thread_local std::vector<float> packed;
  packed.resize(static_cast<size_t>(std::min(M, kMBlock) * kp));
  float* xp = packed.data();
  const int64_t panel_bytes = std::max(kPanelBytes, M * K * static_cast<int64_t>(sizeof(float)));
  const int64_t panel_rows = std::max<int64_t>(
      kPackNR, panel_bytes / (K * static_cast<int64_t>(sizeof(W))) / kPackNR * kPackNR);
  for (int64_t panel = n_begin; panel < n_end; panel += panel_rows) {
    const int64_t panel_end = std::min(n_end, panel + panel_rows);
    for (int64_t m_block = 0; m_block < M; m_block += kMBlock) {
      const int64_t rows = std::min(kMBlock, M - m_block);
      PackX(x, K, m_block, rows, xp);
      ForEachTile(rows, panel, panel_end, kPackNR, kPackMR, kMBlock,
                  [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                    kKernels[(mr - 1) * kPackNR + nr - 1](
                        xp + m0 * kp, w + n * K, wt, bias != nullptr ? bias + n : nullptr, K,
                        col_step, ldy, y + (m_block + m0) * ldy + n);
                  });
    }
  }
}

}  // namespace

void GemmPanelAvx512(const float* x, const float* w, DType wt, const float* bias, int64_t M,
                     int64_t ldy, int64_t K, int64_t n_begin, int64_t n_end, float* y) {
  Panel(x, w, wt, bias, M, ldy, K, n_begin, n_end, y);
}

void GemmPanelAvx512(const float* x, const uint16_t* w, DType wt, const float* bias, int64_t M,
                     int64_t ldy, int64_t K, int64_t n_begin, int64_t n_end, float* y) {
  Panel(x, w, wt, bias, M, ldy, K, n_begin, n_end, y);
}

}  // namespace ptxserve::cpu

PTXSERVE_TARGET_END()
