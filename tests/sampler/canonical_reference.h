// A slow, literal transcription of the canonical sampling algorithm (kernels/sampling.h)
// for tests: full sort by rank key, scalar arithmetic, no shortcuts. It also reports the
// kept set and its integer weights, so a test can aim the uniform at the boundary between
// two kept ids (where a single unit of difference in any weight changes the token).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace ptxserve::testing {

struct CanonicalResult {
  int32_t token = 0;
  bool greedy = false;
  std::vector<std::pair<int32_t, uint64_t>> kept;  // ids with q > 0 in id order, and q
  uint64_t total = 0;                              // K
};

// Exp of step 2, statement by statement (no multiply feeds an add).
inline float CanonicalExp(float x) {
  const bool under = !(x >= -87.0f);
  x = std::min(std::max(x, -87.0f), 0.0f);
  const float t = std::fma(x, 1.44269504088896341f, 12582912.0f);
  const float n = t - 12582912.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000;
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  const float c[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  float p = c[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, c[i]);
  const float rr = r * r;
  const float r1 = r + 1.0f;
  const float e = std::fma(p, rr, r1);
  return under ? 0.0f : e * std::bit_cast<float>((ni + 127) << 23);
}

inline uint64_t CanonicalKey(float l, int32_t id) {
  uint32_t bits = std::bit_cast<uint32_t>(l + 0.0f);  // -0 as +0
  uint32_t ord = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  if (std::isnan(l)) ord = 0x007fffffu;  // as -inf
  return (uint64_t{ord} << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

inline CanonicalResult CanonicalSample(std::span<const float> l, const SamplingParams& p,
                                       double u) {
  CanonicalResult res;
  const int32_t v = static_cast<int32_t>(l.size());
  float m = -INFINITY;
  for (float x : l) {
    if (!std::isnan(x)) m = std::max(m, x);
  }
  const float inv_t = p.temperature == 0.0f ? INFINITY : 1.0f / p.temperature;
  if (p.temperature == 0.0f || p.top_k == 1 || !std::isfinite(m) || std::isinf(inv_t)) {
    res.greedy = true;
    res.token = 0;
    for (int32_t i = 0; i < v; ++i) {
      if (l[i] == m) {
        res.token = i;
        break;
      }
    }
    return res;
  }
  std::vector<float> w(v);
  std::vector<uint64_t> q(v);
  for (int32_t i = 0; i < v; ++i) {
    const float d = l[i] - m;
    w[i] = CanonicalExp(d * inv_t);
    const float scaled = w[i] * 1099511627776.0f;
    q[i] = static_cast<uint64_t>(std::floor(scaled));
  }
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return CanonicalKey(l[a], a) > CanonicalKey(l[b], b); });
  int32_t n = v;
  if (p.top_k > 0 && p.top_k < v) n = p.top_k;
  if (p.top_p < 1.0f) {
    uint64_t s = 0;
    for (int32_t j = 0; j < n; ++j) s += q[order[j]];
    const double need = static_cast<double>(p.top_p) * static_cast<double>(s);
    uint64_t cum = 0;
    for (int32_t j = 0; j < n; ++j) {
      cum += q[order[j]];
      if (static_cast<double>(cum) >= need) {
        n = j + 1;
        break;
      }
    }
  }
  std::vector<bool> kept(v, false);
  for (int32_t j = 0; j < n; ++j) kept[order[j]] = w[order[j]] >= p.min_p;
  for (int32_t i = 0; i < v; ++i) {
    if (kept[i] && q[i] > 0) {
      res.kept.emplace_back(i, q[i]);
      res.total += q[i];
    }
  }
  const uint64_t target =
      std::min(static_cast<uint64_t>(u * static_cast<double>(res.total)), res.total - 1);
  uint64_t cum = 0;
  for (const auto& [id, qi] : res.kept) {
    cum += qi;
    if (cum > target) {
      res.token = id;
      break;
    }
  }
  return res;
}

// A uniform whose target (step 6) is `target` (or the nearest reachable one) for kept
// total `total`.
inline double UniformForTarget(uint64_t target, uint64_t total) {
  auto target_of = [&](double u) {
    return std::min(static_cast<uint64_t>(u * static_cast<double>(total)), total - 1);
  };
  double u = static_cast<double>(target) / static_cast<double>(total);
  u = std::min(u, std::nextafter(1.0, 0.0));
  for (int i = 0; i < 64 && target_of(u) < target && u < std::nextafter(1.0, 0.0); ++i) {
    u = std::nextafter(u, 1.0);
  }
  for (int i = 0; i < 64 && target_of(u) > target && u > 0.0; ++i) u = std::nextafter(u, 0.0);
  return u;
}

// Random sampling cases: logit rows of 12 kinds (plain, ties, NaN, -inf, signed zeros,
// huge values, subnormals, one dominant token, all equal, no finite maximum, NaN with
// -inf and ties, wide spread), parameters across their ranges and edge uniforms.
class CaseMaker {
 public:
  explicit CaseMaker(uint64_t seed) : rng_(seed) {}

  static constexpr int kKinds = 12;
  std::vector<float> Logits(int vocab, int kind) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> l(vocab);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float spread = Pick<float>({0.3f, 1.0f, 3.0f, 10.0f});
    for (float& x : l) x = normal(rng_) * spread;
    switch (kind % kKinds) {
      case 0:  // plain
        break;
      case 1:  // coarse values: many exact ties, across the top too
        for (float& x : l) x = std::round(x * 2.0f) / 2.0f;
        break;
      case 2:  // NaN sprinkled
        for (float& x : l) x = Chance(0.15) ? kNaN : x;
        break;
      case 3:  // -inf sprinkled (masked tokens)
        for (float& x : l) x = Chance(0.3) ? -kInf : x;
        break;
      case 4:  // signed zeros and a few levels: ties between -0 and +0
        for (float& x : l) x = Pick<float>({-0.0f, 0.0f, -1.0f, 1.0f, 0.5f});
        break;
      case 5:  // huge magnitudes: l - m overflows to -inf
        for (float& x : l) x = Pick<float>({3e38f, -3e38f, 1e30f, 0.0f, -1e38f});
        break;
      case 6:  // subnormal logits
        for (float& x : l) x = x * 1e-39f;
        break;
      case 7:  // one dominant token
        l[Index(vocab)] += 25.0f;
        break;
      case 8:  // all equal
        std::fill(l.begin(), l.end(), 0.25f);
        break;
      case 9: {  // degenerate: no finite maximum
        const int which = static_cast<int>(rng_() % 4);
        for (float& x : l) {
          x = which == 0   ? -kInf
              : which == 1 ? kNaN
              : which == 2 ? (Chance(0.5) ? kNaN : -kInf)
                           : x;
        }
        if (which == 3) l[Index(vocab)] = kInf;
        break;
      }
      case 10:  // NaN and -inf together with ties
        for (float& x : l) {
          x = Chance(0.2) ? kNaN : (Chance(0.2) ? -kInf : std::round(x));
        }
        break;
      case 11:  // wide spread: many weights below 2^-40
        for (float& x : l) x *= 20.0f;
        break;
    }
    return l;
  }

  SamplingParams Params(int vocab) {
    SamplingParams p;
    p.temperature = Pick<float>(
        {0.0f, 1e-38f, 1e-6f, 0.05f, 0.3f, 0.7f, 1.0f, 1.0f, 1.5f, 3.0f, 100.0f, 1e30f, 3e38f});
    p.top_k = Pick<int32_t>({0, 0, 1, 2, 50, vocab - 1, vocab, vocab + 7, 1 + Index(vocab)});
    p.top_k = std::max(p.top_k, 0);
    p.top_p = Pick<float>({1.0f, 1.0f, 0.1f, 0.3f, 0.5f, 0.8f, 0.9f, 0.95f, 0.99f, 0.9999999f});
    p.min_p = Pick<float>({0.0f, 0.0f, 0.0f, 0.01f, 0.05f, 0.1f, 0.3f, 0.5f, 1.0f});
    return p;
  }

  double Uniform() {
    switch (rng_() % 6) {
      case 0:
        return 0.0;
      case 1:
        return std::nextafter(1.0, 0.0);  // 1 - 2^-53
      default:
        return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    }
  }

  // Aims the uniform at a boundary of the kept set: the target is the running sum through
  // a random kept id, or one less, so one unit of weight anywhere before it matters.
  double BoundaryUniform(const CanonicalResult& ref) {
    const size_t j = static_cast<size_t>(Index(static_cast<int>(ref.kept.size())));
    uint64_t through = 0;
    for (size_t i = 0; i <= j; ++i) through += ref.kept[i].second;
    const bool below = (rng_() & 1) != 0 || through >= ref.total;
    return UniformForTarget(below ? through - 1 : through, ref.total);
  }

  int Index(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

 private:
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  T Pick(std::initializer_list<T> xs) {
    return *(xs.begin() + rng_() % xs.size());
  }

  std::mt19937_64 rng_;
};

}  // namespace ptxserve::testing
