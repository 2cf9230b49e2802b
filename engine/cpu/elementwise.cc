// Element-wise reference ops: memory-bound loops the compiler vectorises.
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"

namespace ptxserve::cpu {

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void Embed(const float* table, const int32_t* ids, int64_t tokens, int64_t dim, float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(out + t * dim, table + static_cast<int64_t>(ids[t]) * dim, dim * sizeof(float));
  }
}

}  // namespace ptxserve::cpu
