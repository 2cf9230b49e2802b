// The bf16 GEMM for prefill-sized batches on CPUs with AVX512-BF16 (gemm_bf16.h).
//
// gemm_avx512.cc widens each bf16 weight to f32 and spends one f32 FMA per product. vdpbf16ps
// multiplies 32 bf16 pairs per instruction (two per f32 lane) for the cost of one 512-bit FMA,
// so with x rounded to bf16 it does twice the work per instruction; llama.cpp does the same on
// this hardware (its vec_dot_type for BF16 weights is BF16). x is rounded once per GEMM into a
// packed copy, shared by the threads; the weights are read as stored.
//
// A tile is kMR rows of x times kNR weight rows: kMR * kNR accumulators of 16 lanes, each
// lane summing the products at k = 32s + 2l and 32s + 2l + 1 over the steps s, so every
// 64-byte load (32 k of one x row or one weight row) is used whole, with no shuffles in the
// loop; the 16 lanes are summed once at the end. x rows come from the packed copy (K rounded
// up to 32, zeros after K, so its loads need no tail handling; a weight row's last partial
// step is a masked load, zeros past K). The masked loads (those of the weights' last step and
// of x's last 32 while it is packed) read nothing for masked-off lanes, which cannot fault
// even past the end of a mapping, so no tail is copied (gemm_bf16_test's guard-page test).
//
// The x tile stays put while the weights stream past it: for each panel of weight rows that
// fits L2 (kL2PanelBytes), each x tile (24 KiB at K = 2048, in L1) runs against all the
// panel's weight rows, 4 at a time in ForEachTile's far-apart order. So per 24 vdpbf16ps the
// 6 x loads hit L1 and only the 4 weight loads come from L2. Measured on this Zen 5 (one core,
// CPU time, 512 x 2048 x 2048 and 512 x 8192 x 2048; under load, best of 4): about 280 GFLOP/s
// against 220-235 with the weight tile kept in L1 and 48-row x blocks streaming past it (the
// gemm_avx512.cc order), 255 with 128 KiB panels, 210 with 8 x 3 tiles; a vdpbf16ps loop
// without loads reaches ~400. Packed x rows are one 64-byte line longer than needed: at
// K = 2^n their starts would otherwise share L1 sets (5-25% slower, under load).
//
// Compiled for AVX512-BF16 between PTXSERVE_TARGET_BEGIN and _END (isa_target.h); the driver
// (GemmBf16Dot: buffer, threads) follows the end.
#include "engine/cpu/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa_target.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

PTXSERVE_TARGET_BEGIN("avx512f,avx512vl,avx512bw,avx512bf16")

namespace ptxserve::cpu {
namespace {

constexpr int kMR = 6;         // x rows per tile
constexpr int kNR = 4;         // weight rows per tile: 24 accumulators, 4 weight registers
constexpr int64_t kStep = 32;  // k per vdpbf16ps
constexpr int64_t kL2PanelBytes = 256 << 10;  // weight rows every x tile runs against in turn

inline __m512bh AsBf16(__m512i v) { return (__m512bh)v; }  // the same 64 bytes

// y[i * ldy + j * col_step] = xp_i . w_j (+ bias[j * col_step]) for packed x rows xp + i * kp
// and weight rows w + j * col_step * K.
template <int MR, int NR>
void MicroKernel(const uint16_t* xp, int64_t kp, const uint16_t* w, const float* bias, int64_t K,
                 int64_t col_step, int64_t ldy, float* y) {
  constexpr int kAcc = (NR + 3) / 4 * 4;  // whole Hsum4s of 4 outputs
  const uint16_t* wr[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) wr[j] = w + j * col_step * K;
  __m512 acc[MR][kAcc];  // columns >= NR stay zero and fold away
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < kAcc; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + kStep <= K; k += kStep) {
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = AsBf16(_mm512_loadu_si512(wr[j] + k));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = AsBf16(_mm512_loadu_si512(xp + i * kp + k));
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  if (k < K) {
    const __mmask32 mask = (__mmask32{1} << (K - k)) - 1;
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = AsBf16(_mm512_maskz_loadu_epi16(mask, wr[j] + k));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = AsBf16(_mm512_loadu_si512(xp + i * kp + k));
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int q = 0; q < kAcc; q += 4) {
      __m256 half[4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        half[c] = _mm256_add_ps(
            _mm512_castps512_ps256(acc[i][q + c]),
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][q + c]), 1)));
      }
      alignas(16) float sums[4];
      _mm_store_ps(sums, simd::Hsum4(half[0], half[1], half[2], half[3]));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const int j = q + c;
        if (j < NR)
          y[i * ldy + j * col_step] = bias != nullptr ? sums[c] + bias[j * col_step] : sums[c];
      }
    }
  }
}

using KernelFn = void (*)(const uint16_t*, int64_t, const uint16_t*, const float*, int64_t, int64_t,
                          int64_t, float*);

// MicroKernel<mr, nr> at [(mr - 1) * kNR + nr - 1].
template <int... I>
constexpr std::array<KernelFn, sizeof...(I)> KernelTable(std::integer_sequence<int, I...>) {
  return {&MicroKernel<I / kNR + 1, I % kNR + 1>...};
}

// Rows [m_begin, m_end) of x (K apart) rounded to bf16 into xp, kp apart (kp >= K rounded up to
// 32, a multiple of 32), zeros after K. vcvtne2ps2bf16 rounds to nearest even and takes denormals
// as zero.
void PackXBf16(const float* x, int64_t K, int64_t kp, int64_t m_begin, int64_t m_end,
               uint16_t* xp) {
  for (int64_t m = m_begin; m < m_end; ++m) {
    const float* row = x + m * K;
    uint16_t* out = xp + m * kp;
    for (int64_t k = 0; k < kp; k += kStep) {
      const int64_t left = K - k;
      const __mmask16 lo = left >= 16 ? 0xFFFF : left > 0 ? (__mmask16{1} << left) - 1 : 0;
      const __mmask16 hi = left >= 32 ? 0xFFFF : left > 16 ? (__mmask16{1} << (left - 16)) - 1 : 0;
      const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + k + 16),
                                             _mm512_maskz_loadu_ps(lo, row + k));
      _mm512_storeu_si512(out + k, (__m512i)b);
    }
  }
}

// y[m * ldy + n] = xp_m . w_n (+ bias[n]) for m < M, n in [n_begin, n_end).
void PanelBf16(const uint16_t* xp, int64_t kp, const uint16_t* w, const float* bias, int64_t M,
               int64_t ldy, int64_t K, int64_t n_begin, int64_t n_end, float* y) {
  static constexpr auto kKernels = KernelTable(std::make_integer_sequence<int, kMR * kNR>());
  const int64_t panel_rows = std::max<int64_t>(kNR, kL2PanelBytes / (K * 2) / kNR * kNR);
  for (int64_t panel = n_begin; panel < n_end; panel += panel_rows) {
    const int64_t panel_end = std::min(n_end, panel + panel_rows);
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const uint16_t* x_tile = xp + m0 * kp;
      float* y_tile = y + m0 * ldy;
      ForEachTile(std::min<int64_t>(kMR, M - m0), panel, panel_end, kNR, kMR, kMR,
                  [&](int64_t n, int nr, int64_t col_step, int64_t, int mr) {
                    kKernels[(mr - 1) * kNR + nr - 1](x_tile, kp, w + n * K,
                                                      bias != nullptr ? bias + n : nullptr, K,
                                                      col_step, ldy, y_tile + n);
                  });
    }
  }
}

}  // namespace
}  // namespace ptxserve::cpu

PTXSERVE_TARGET_END()

namespace ptxserve::cpu {

void GemmBf16Dot(const float* x, const uint16_t* w, const float* bias, int64_t M, int64_t N,
                 int64_t K, float* y) {
  if (M <= 0 || N <= 0) return;
  const int64_t kp = (K + kStep - 1) / kStep * kStep + kStep;  // + 64 bytes: see the top
  thread_local std::vector<uint16_t> packed;
  packed.resize(static_cast<size_t>(M * kp));
  uint16_t* xp = packed.data();
  ThreadPool& pool = ThreadPool::Default();
  pool.ParallelFor(
      M, [&](int64_t m_begin, int64_t m_end) { PackXBf16(x, K, kp, m_begin, m_end, xp); });
  pool.ParallelFor(N, [&](int64_t n_begin, int64_t n_end) {
    PanelBf16(xp, kp, w, bias, M, N, K, n_begin, n_end, y);
  });
}

}  // namespace ptxserve::cpu
