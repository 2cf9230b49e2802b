// The bf16 GEMM on AVX512-BF16's dot products (gemm_bf16.cc), internal to engine/cpu: what
// gemm.cc's dispatch and the tests need.
#pragma once

#include <cstdint>

#include "engine/cpu/isa.h"
#include "engine/model/dtype.h"

namespace ptxserve::cpu {

// From this many rows of x on (prefill chunks), bf16 weights take the dot-product kernel where
// GemmIsa() >= Isa::kAvx512Bf16; fewer rows (decode, batches up to 15) are bound by the weights'
// bandwidth and keep gemm.cc's exact f32 kernel.
constexpr int64_t kBf16DotMinRows = 16;

inline bool UsesBf16Dot(DType wt, int64_t M) {
  return wt == DType::kBF16 && M >= kBf16DotMinRows && GemmIsa() >= Isa::kAvx512Bf16;
}

// y[m * N + n] = x[m] . w[n] (+ bias[n]) for m < M, n < N, w [N, K] bf16 as stored, on the
// engine's thread pool, with x rounded to bf16 (to nearest, ties to even; values under 2^-126 to
// zero) into one packed copy per call, then f32 sums of the exact bf16 x bf16 products:
// vdpbf16ps adds two products per f32 lane (lane l of a 32-k step: k = 2l and 2l + 1), 16 lanes
// per output over K, then the lanes summed. So each output differs from the exact sum
// S = sum_k x[m, k] * w[n, k] by at most
//   2^-8 * sum_k |x[m, k] * w[n, k]|               (x's rounding: half a bf16 unit, 8 bits)
//   + gamma(2 * ceil(K / 32) + 5) * sum_k |xb[m, k] * w[n, k]| (+ |bias[n]| * 2^-24)
//   + 2^-126 * (sum_k (|xb[m, k]| + |w[n, k]|) + K + 48)  (denormals flushed to zero)
// with xb the rounded x, gamma(n) = n * 2^-24 / (1 - n * 2^-24): a lane's chain of 2 roundings
// per 32 k, one to fold 16 lanes to 8, three to sum 8, one for the bias. vdpbf16ps treats
// denormal inputs as zero and flushes denormal results (at most K + 47 roundings in all), hence
// the last term, negligible unless x or w hold values near 2^-126. Only when
// DetectIsa() >= Isa::kAvx512Bf16.
void GemmBf16Dot(const float* x, const uint16_t* w, const float* bias, int64_t M, int64_t N,
                 int64_t K, float* y);

}  // namespace ptxserve::cpu
