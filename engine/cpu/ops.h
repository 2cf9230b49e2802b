// Reference CPU operators: f32 math with f32 accumulation. They are the numerical
// reference for the generated GPU kernels, so each states its exact layout.
// All pointers are row-major and non-aliasing unless said otherwise.
#pragma once

#include <cstdint>

#include "engine/model/config.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"

namespace ptxserve::cpu {

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w   for t < rows; out may alias x.
void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out);

// A weight matrix as it is stored: [N, K] (the HF linear layout) elements of `dtype`, or
// when `quant` is not kNone, N rows of K / block_elems blocks (engine/model/quant.h).
struct WeightMatrix {
  const void* data;
  DType dtype;
  QuantType quant = QuantType::kNone;
};

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] when bias != nullptr), for m < M, n < N,
// f32 products and sums whatever w's dtype (f16/bf16 widen exactly), except bf16 w against
// 16 or more rows of x where GemmIsa() >= Isa::kAvx512Bf16: there x is rounded to bf16 first
// (gemm_bf16.h), which moves each output by at most 2^-8 * sum_k |x[m, k] * w[n, k]| beyond
// f32 rounding. Uses the engine's thread pool.
// Block-quantized w (K a multiple of the block size) gives the result of the f32 GEMM
// over DequantizeRow's rows, bit for bit, except where gemm_quant.cc's integer kernel
// runs (q8_0, q4_0, q4_k and q6_k, as ChooseBlockKernel says): there x is rounded to 8 bits
// per block of 32 first, which moves each output by at most
//   sum over blocks b of (amax_b(x[m]) / 254) * sum_{k in b} |w[n, k]|
// beyond f32 rounding (for q4_k, of its scale * code and min terms summed apart: gemm_quant_k.cc).
void Gemm(const float* x, WeightMatrix w, const float* bias, int64_t M, int64_t N, int64_t K,
          float* y);
inline void Gemm(const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                 float* y) {
  Gemm(x, WeightMatrix{w, DType::kF32}, bias, M, N, K, y);
}

// Rotates q [tokens, num_heads, head_dim] and k [tokens, num_kv_heads, head_dim] in
// place at positions[t], using `style` pairing and inv_freq (head_dim/2 entries,
// RopeInvFreq in engine/model/rope.h).
void Rope(float* q, float* k, const int32_t* positions, int64_t tokens, int64_t num_heads,
          int64_t num_kv_heads, int64_t head_dim, const float* inv_freq, RopeStyle style);

// KV pools: [num_blocks][num_kv_heads][block_size][head_dim] of `dtype` elements.
// Writes k[t] and v[t] ([tokens, num_kv_heads, head_dim] f32) at slot_mapping[t].
void KvScatter(const float* k, const float* v, const int64_t* slot_mapping, int64_t tokens,
               int64_t num_kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
               void* k_pool, void* v_pool);

// Paged GQA attention for a ragged batch (StepBatch layout): each token row of
// sequence s attends causally to positions <= its own over the blocks in
// block_tables[s]. q: [tokens, num_heads, head_dim]; out: same shape. scale = 1/sqrt(hd).
// One pass with an online softmax in f32 (attention.cc): within ~1e-6 relative of exact
// attention over the same cache; a row's result depends only on its query, position and
// the cache (bitwise equal in a prefill chunk and alone as a decode row).
void PagedAttention(const float* q, const int32_t* positions, const int32_t* query_start,
                    const int32_t* seq_lens, const int32_t* block_tables,
                    int32_t max_blocks_per_seq, int32_t num_seqs, int64_t num_heads,
                    int64_t num_kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
                    const void* k_pool, const void* v_pool, float scale, float* out);

// out[i] = silu(gate[i]) * up[i]; gate_up is [rows, 2, inter] (gate then up) when fused,
// here given as two arrays. out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// x[i] += y[i]
void AddInPlace(float* x, const float* y, int64_t n);

// Gathers rows ids[t] of table [vocab, dim] into out [tokens, dim] as f32 (quantized
// rows are dequantized).
void Embed(WeightMatrix table, const int32_t* ids, int64_t tokens, int64_t dim, float* out);

}  // namespace ptxserve::cpu
