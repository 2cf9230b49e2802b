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

// 2^x for x <= 0: the online softmax's exp2(score - running max), scores in log2 units.
// Relative error below 1.5e-7 (7.9e-8 measured over [-126, 0] in attention_test) for
// x >= -126, exactly 0 below (-inf included, which is how masked scores vanish), exactly 1
// at 0 (so a running max that did not move rescales nothing), NaN stays NaN.
// x = n + f with n = round(x), f in [-0.5, 0.5]: 2^f is a degree-6 polynomial fitted for
// relative error on that interval (2.2e-9 in exact arithmetic, so f32 rounding dominates),
// 2^n is built in the exponent bits (n >= -126 keeps it a normal float).
inline __m256 Exp2NonPositive(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-126.0f);
  const __m256 keep = _mm256_cmp_ps(x, lowest, _CMP_NLT_UQ);  // x >= -126 or NaN
  x = _mm256_max_ps(lowest, x);                               // NaN passes through
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.5370702511087727e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3399848249823702e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.61837325965321e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550329035291898e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022648462213472e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472055770002e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep);
}

// max over the 8 lanes.
inline float Hmax(__m256 a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

}  // namespace ptxserve::cpu::simd
