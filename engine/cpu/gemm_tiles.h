// What gemm.cc, gemm_avx512.cc and gemm_quant.cc share (internal to engine/cpu): the
// order of a panel's tiles and the pick of a tile kernel for its shape, the f32 GEMM's serial
// panel, which the block-quantized GEMM runs over rows it has widened to f32, and the quantized
// GEMM's entry point, which Gemm dispatches to.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/cpu/ops.h"

namespace ptxserve::cpu {

// The AVX2 kernels' tile (gemm.cc, gemm_quant.cc, gemm_quant_k.cc): 3 x rows by 4 weight rows
// (3x4 accumulators + 4 loads in 16 ymm registers), the x rows in blocks of 48 that reuse the
// same weight rows from L1; and below kSerialWork MACs threads cost more than they save.
constexpr int kNR = 4;
constexpr int kMR = 3;
constexpr int64_t kMBlock = 48;
constexpr int64_t kSerialWork = 1 << 15;

// y[m * ldy + n] = x[m] . w[n] (+ bias[n]) for m < M, n < N, on the calling thread, with
// exactly the sums Gemm computes for f32 weights.
void GemmF32Serial(const float* x, const float* w, const float* bias, int64_t M, int64_t N,
                   int64_t K, int64_t ldy, float* y);

// The order the GEMM kernels (gemm.cc, gemm_avx512.cc, gemm_quant.cc) walk weight rows [n_begin,
// n_end) against M rows of x: tiles of up to nr_max weight rows taken `stride` apart
// (rows r, r + S, r + 2S, ...: each a separate sequential stream, which the hardware
// prefetchers follow at full speed, where adjacent rows read in lockstep measured at half
// the bandwidth) times up to mr_max rows of x, the x rows in blocks of m_block that reuse
// the tile's weight rows from L1. Calls tile(n, nr, col_step, m0, mr) for the weight rows
// n + j * col_step (j < nr) and x rows [m0, m0 + mr).
template <class Tile>
void ForEachTile(int64_t M, int64_t n_begin, int64_t n_end, int nr_max, int mr_max, int64_t m_block,
                 const Tile& tile) {
  const int64_t stride = (n_end - n_begin) / nr_max;  // distance between a tile's weight rows
  const int64_t rest = n_end - n_begin - stride * nr_max;
  auto rows = [&](int64_t n, int nr, int64_t col_step, int64_t m_begin, int64_t m_end) {
    for (int64_t m0 = m_begin; m0 < m_end; m0 += mr_max) {
      tile(n, nr, col_step, m0, static_cast<int>(std::min<int64_t>(mr_max, m_end - m0)));
    }
  };
  for (int64_t m_block_begin = 0; m_block_begin < M; m_block_begin += m_block) {
    const int64_t m_end = std::min(M, m_block_begin + m_block);
    for (int64_t r = 0; r < stride; ++r) rows(n_begin + r, nr_max, stride, m_block_begin, m_end);
    if (rest > 0) {
      rows(n_begin + stride * nr_max, static_cast<int>(rest), 1, m_block_begin, m_end);
    }
  }
}

// The tile kernel for mr x rows by nr weight rows (ForEachTile's mr <= kMR, nr <= kNR):
// the AVX2 tile kernels (gemm.cc's, gemm_quant.cc's, gemm_quant_k.cc's) are
// templates over their shape, so that their loops unroll and the MR x NR accumulators live in
// registers, and this maps the run-time shape onto those instances. `instance` is a lambda
// []<int MR, int NR>() { return Kernel<MR, NR, ...>; } giving the instance for a shape (all
// of one function-pointer type).
template <class Instance>
auto PickTile(int mr, int nr, const Instance& instance) {
  static_assert(kMR == 3 && kNR == 4, "PickTile's cases are kMR x kNR");
  auto with_mr = [&]<int MR>() {
    switch (nr) {
      case 1:
        return instance.template operator()<MR, 1>();
      case 2:
        return instance.template operator()<MR, 2>();
      case 3:
        return instance.template operator()<MR, 3>();
      default:
        return instance.template operator()<MR, 4>();
    }
  };
  switch (mr) {
    case 1:
      return with_mr.template operator()<1>();
    case 2:
      return with_mr.template operator()<2>();
    default:
      return with_mr.template operator()<3>();
  }
}

// The f32/f16/bf16 (wt) GEMM panel for CPUs with AVX-512 F and VL (gemm_avx512.cc):
// y[m * ldy + n] = x[m] . w[n] (+ bias[n]) for m < M, n in [n_begin, n_end), with
// exactly the sums of gemm.cc's AVX2 kernel, bit for bit. Only when DetectIsa() says so.
void GemmPanelAvx512(const float* x, const float* w, DType wt, const float* bias, int64_t M,
                     int64_t ldy, int64_t K, int64_t n_begin, int64_t n_end, float* y);
void GemmPanelAvx512(const float* x, const uint16_t* w, DType wt, const float* bias, int64_t M,
                     int64_t ldy, int64_t K, int64_t n_begin, int64_t n_end, float* y);

// x rounded per block of 32 to int8 codes q and an f32 scale d (x ~ d * q), as the
// AVX512-VNNI integer kernel reads it (gemm_quant.cc makes it): row m's block b has its
// codes, stored as q + 128 (0..255), at codes + (m * blocks + b) * 32 and its d at
// scales[m * blocks + b].
struct QuantizedX {
  const uint8_t* codes;
  const float* scales;
  int64_t blocks;  // blocks per row: K / 32
};

// The q8_0/q4_0 integer kernel's panel for CPUs with AVX512-VNNI (gemm_quant_vnni.cc):
// y[m * ldy + n] = sum over blocks of (the block's integer dot product) * (d_w * d_x)
// (+ bias[n]) for m < M, n in [n_begin, n_end), with exactly the sums of gemm_quant.cc's
// AVX2 integer kernel, bit for bit. Only when DetectIsa() >= Isa::kAvx512Vnni.
void IntegerPanelAvx512Vnni(QuantType t, const QuantizedX& x, const uint8_t* w, int64_t row_bytes,
                            const float* bias, int64_t M, int64_t ldy, int64_t n_begin,
                            int64_t n_end, float* y);

// The ways to multiply by blocks (gemm_quant.cc): widening codes to f32 weights in
// registers (q8_0, q4_0, fp8_e4m3, int4_g128), widening a few rows at a time into an f32
// buffer for gemm.cc's kernel (every format), both exact; or integer dot products against
// x rounded to 8 bits (q8_0, q4_0; q4_k, q6_k in gemm_quant_k.cc). kChosen takes
// ChooseBlockKernel's; tests and benchmarks name one (a format without the one named widens rows).
enum class BlockKernel { kChosen, kWidening, kWidenedRows, kInteger };

// The kernel Gemm uses for M rows of x against `t` blocks (never kChosen), under GemmIsa().
BlockKernel ChooseBlockKernel(QuantType t, int64_t M);

// Gemm for w.quant != kNone (gemm_quant.cc).
void GemmQuantized(const float* x, WeightMatrix w, const float* bias, int64_t M, int64_t N,
                   int64_t K, float* y, BlockKernel kernel = BlockKernel::kChosen);

}  // namespace ptxserve::cpu
