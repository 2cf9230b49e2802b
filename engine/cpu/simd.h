// AVX2/FMA helpers shared by the CPU ops (internal to engine/cpu). Every reduction
// here sums in a fixed order, so a result never depends on batch size or tiling.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ptxserve::cpu::simd {

// Mask selecting the first `rem` (0..8) lanes, for _mm256_maskload_ps tails.
inline __m256i TailMask(int64_t rem) {
  alignas(32) static constexpr int32_t kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                     0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + 8 - rem));
}

// [sum(a), sum(b), sum(c), sum(d)], each summed as ((0+1)+(2+3)) + ((4+5)+(6+7)).
inline __m128 Hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

inline float Hsum(__m256 a) {
  const __m256 z = _mm256_setzero_ps();
  return _mm_cvtss_f32(Hsum4(a, z, z, z));
}

// sum_i a[i] * b[i] with two 8-wide accumulators and a masked tail.
inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  if (i + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    i += 8;
  }
  if (i < n) {
    const __m256i m = TailMask(n - i);
    acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc1);
  }
  return Hsum(_mm256_add_ps(acc0, acc1));
}

// y[i] += a * x[i]
inline void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ptxserve::cpu::simd
