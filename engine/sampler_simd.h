// Internal to engine/sampler*.cc: the per-token passes of the sampler, AVX2 (the project
// builds for x86-64-v3; GCC's -O2 cost model does not vectorise these by itself) with
// scalar tails that compute bit-identical values. Exp1 / Exp8 are the Exp of the
// canonical sampling algorithm (kernels/sampling.h step 2), so their arithmetic must stay
// exactly as written: no multiply feeds an add (GCC would contract it into an fma).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

namespace ptxserve::sampler_internal {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Exp (kernels/sampling.h step 2): Cephes expf for x <= 0, Cody-Waite range reduction and
// a degree-6 polynomial. Exactly 1 at 0 and exactly 0 below -87 or for NaN.
inline constexpr float kExpMin = -87.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr int32_t kRoundBits = 0x4B400000;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
// Integer weights: q = floor(w * 2^40).
inline constexpr float kQScale = 1099511627776.0f;

inline float Exp1(float x) {
  const bool under = !(x >= kExpMin);
  x = std::min(std::max(x, kExpMin), 0.0f);
  const float t = std::fma(x, kLog2e, kRound);
  const float n = t - kRound;
  const int32_t ni = std::bit_cast<int32_t>(t) - kRoundBits;  // n as an integer, [-126, 0]
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kP[i]);
  const float e = std::fma(p, r * r, r + 1.0f);
  return under ? 0.0f : e * std::bit_cast<float>((ni + 127) << 23);
}

// Exp1 lane for lane.
inline __m256 Exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(kExpMin);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_NGE_UQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_setzero_ps());
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRound));
  const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(kRound));
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(kRoundBits));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP[i]));
  const __m256 e = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256 scale =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
  return _mm256_andnot_ps(under, _mm256_mul_ps(e, scale));
}

// w = Exp((l - m) * inv_t): the softmax numerator, 1 for the best token, so min-p becomes
// "w >= min_p" and nothing overflows however small T is.
inline float Weight1(float l, float m, float inv_t) { return Exp1((l - m) * inv_t); }
inline __m256 Weight8(__m256 l, __m256 m, __m256 inv_t) {
  return Exp8(_mm256_mul_ps(_mm256_sub_ps(l, m), inv_t));
}

// floor(w * 2^40) for a weight w in [0, 1] (the product is exact in f32).
inline uint64_t Quantize(float w) { return static_cast<uint64_t>(w * kQScale); }

// Sums of Quantize in two double accumulators of 4 lanes: q is an integer below 2^41, so
// every partial sum is exact while a lane's stays below 2^53, i.e. for up to
// kMaxQuantizeAdds calls between flushes.
inline constexpr size_t kMaxQuantizeAdds = 4096;
struct QSum {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();

  void Add8(__m256 w) {
    const __m256 f = _mm256_floor_ps(_mm256_mul_ps(w, _mm256_set1_ps(kQScale)));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
  }
  // The exact sum so far; resets the accumulators.
  uint64_t Flush() {
    alignas(32) double lanes[8];
    _mm256_store_pd(lanes, a0);
    _mm256_store_pd(lanes + 4, a1);
    a0 = a1 = _mm256_setzero_pd();
    uint64_t s = 0;
    for (double x : lanes) s += static_cast<uint64_t>(x);
    return s;
  }
};

// Largest value; NaN never wins (max_ps returns its second operand when one is NaN).
// *has_nan tells whether any value was NaN.
inline float MaxOf(std::span<const float> l, bool* has_nan) {
  __m256 acc = _mm256_set1_ps(kNegInf);
  __m256 nan = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    const __m256 x = _mm256_loadu_ps(&l[i]);
    acc = _mm256_max_ps(x, acc);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float m = kNegInf;
  for (float x : lanes) m = std::max(m, x);
  bool any_nan = _mm256_movemask_ps(nan) != 0;
  for (; i < l.size(); ++i) {
    m = l[i] > m ? l[i] : m;
    any_nan |= std::isnan(l[i]);
  }
  if (has_nan != nullptr) *has_nan = any_nan;
  return m;
}

// Greedy choice: the largest logit, lowest id among equals. NaN never wins; a row of only
// -inf / NaN yields the first -inf, or 0.
inline int32_t ArgMax(std::span<const float> l) {
  const float m = MaxOf(l, nullptr);
  const __m256 mv = _mm256_set1_ps(m);
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    const unsigned mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(&l[i]), mv, _CMP_EQ_OQ));
    if (mask != 0) return static_cast<int32_t>(i + std::countr_zero(mask));
  }
  for (; i < l.size(); ++i) {
    if (l[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

// Calls visit(i), in ascending i, for each l[i] > threshold() (never for NaN), reading
// threshold() again after every visit: a one-compare-per-8 rejection scan for top-N lists.
template <typename Threshold, typename Visit>
void VisitAbove(std::span<const float> l, size_t begin, Threshold threshold, Visit visit) {
  size_t i = begin;
  for (; i + 8 <= l.size(); i += 8) {
    const __m256 thr = _mm256_set1_ps(threshold());
    unsigned mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(&l[i]), thr, _CMP_GT_OQ));
    while (mask != 0) {
      const size_t j = i + static_cast<size_t>(std::countr_zero(mask));
      mask &= mask - 1;
      if (l[j] > threshold()) visit(j);
    }
  }
  for (; i < l.size(); ++i) {
    if (l[i] > threshold()) visit(i);
  }
}

}  // namespace ptxserve::sampler_internal
