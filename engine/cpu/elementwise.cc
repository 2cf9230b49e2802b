// Element-wise reference ops: memory-bound loops the compiler vectorises.
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"

namespace ptxserve::cpu {

void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    float* yr = out + t * dim;
    const float inv = 1.0f / std::sqrt(simd::Dot(xr, xr, dim) / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void Embed(WeightMatrix table, const int32_t* ids, int64_t tokens, int64_t dim, float* out) {
  const bool blocks = table.quant != QuantType::kNone;
  const size_t row_bytes = blocks ? static_cast<size_t>(QuantRowBytes(table.quant, dim))
                                  : static_cast<size_t>(dim) * DTypeSize(table.dtype);
  for (int64_t t = 0; t < tokens; ++t) {
    const uint8_t* row = static_cast<const uint8_t*>(table.data) + ids[t] * row_bytes;
    if (blocks) {
      DequantizeRow(table.quant, row, dim, out + t * dim);
    } else {
      ConvertToFloat(table.dtype, row, static_cast<size_t>(dim), out + t * dim);
    }
  }
}

}  // namespace ptxserve::cpu
