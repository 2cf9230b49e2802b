// The q4_k/q6_k integer GEMM (gemm_quant_k.cc), internal to engine/cpu: gemm_quant.cc rounds
// x to 8 bits per block of 32 (its QuantizeActivations) and hands the codes over.
#pragma once

#include <cstdint>

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

}  // namespace ptxserve::cpu
