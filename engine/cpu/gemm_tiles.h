// What gemm.cc and gemm_quant.cc share (internal to engine/cpu): the f32 GEMM's serial
// panel, which the block-quantized GEMM runs over rows it has widened to f32, and the
// quantized GEMM's entry point, which Gemm dispatches to.
#pragma once

#include <cstdint>

#include "engine/cpu/ops.h"

namespace ptxserve::cpu {

// y[m * ldy + n] = x[m] . w[n] (+ bias[n]) for m < M, n < N, on the calling thread, with
// exactly the sums Gemm computes for f32 weights.
void GemmF32Serial(const float* x, const float* w, const float* bias, int64_t M, int64_t N,
                   int64_t K, int64_t ldy, float* y);

// The ways to multiply by blocks (gemm_quant.cc): widening codes to f32 weights in
// registers (q8_0, q4_0, fp8_e4m3, int4_g128), widening a few rows at a time into an f32
// buffer for gemm.cc's kernel (every format), both exact; or integer dot products against
// x rounded to 8 bits (q8_0, q4_0). kChosen takes ChooseBlockKernel's; tests and
// benchmarks name one (a format without the one named widens rows).
enum class BlockKernel { kChosen, kWidening, kWidenedRows, kInteger };

// The kernel Gemm uses for M rows of x against `t` blocks (never kChosen).
BlockKernel ChooseBlockKernel(QuantType t, int64_t M);

// Gemm for w.quant != kNone (gemm_quant.cc).
void GemmQuantized(const float* x, WeightMatrix w, const float* bias, int64_t M, int64_t N,
                   int64_t K, float* y, BlockKernel kernel = BlockKernel::kChosen);

}  // namespace ptxserve::cpu
