// Sampling is on the per-step critical path of every sequence, with rows of up to ~128k
// logits. So: no full sorts (top-k keeps a k-heap or uses nth_element; top-p without top-k
// sorts only the tokens above a weight threshold that already holds the mass), the
// per-token passes are AVX2 (the project builds for x86-64-v3; GCC's -O2 cost model does
// not vectorise them by itself), and scratch buffers are reused across calls. Every
// reduction sums in a fixed order and the scalar tails compute bit-identical values, so a
// seed gives the same tokens whatever the row length or the compiler's choices.
#include "engine/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kMaxLogprobs = 20;
// Ids per block of the blocked inverse-CDF walk.
constexpr size_t kBlock = 256;
// Up to this k, top-k keeps a heap of the k best while scanning; beyond, nth_element.
constexpr size_t kHeapTopK = 512;

// exp(x) for x <= 0 (Cephes expf: Cody-Waite range reduction, degree-6 polynomial;
// relative error ~2e-7). Exactly 1 at 0 and exactly 0 below -87 or for NaN, so masked
// (-inf) logits get no weight. Exp8 is the same arithmetic, lane for lane.
constexpr float kExpMin = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
constexpr int32_t kRoundBits = 0x4B400000;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

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

// w[i] = exp((l[i] - m) * inv_t): the softmax numerator, 1 for the best token, so min-p
// becomes "w >= min_p" and nothing overflows however small T is.
inline float Weight1(float l, float m, float inv_t) { return Exp1((l - m) * inv_t); }

// Weights below `floor` (min-p) become 0; floor 0 keeps them all.
void Weights(std::span<const float> l, float m, float inv_t, float floor, float* w) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 tv = _mm256_set1_ps(inv_t);
  const __m256 fv = _mm256_set1_ps(floor);
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    const __m256 e = Exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(&l[i]), mv), tv));
    _mm256_storeu_ps(w + i, _mm256_and_ps(e, _mm256_cmp_ps(e, fv, _CMP_GE_OQ)));
  }
  for (; i < l.size(); ++i) {
    const float e = Weight1(l[i], m, inv_t);
    w[i] = e >= floor ? e : 0.0f;
  }
}

// Largest value; NaN never wins (max_ps returns its second operand when one is NaN).
float MaxOf(std::span<const float> l) {
  __m256 acc = _mm256_set1_ps(kNegInf);
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) acc = _mm256_max_ps(_mm256_loadu_ps(&l[i]), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float m = kNegInf;
  for (float x : lanes) m = std::max(m, x);
  for (; i < l.size(); ++i) m = l[i] > m ? l[i] : m;
  return m;
}

// Sum of the w[i] whose key[i] >= thr (in double over 8 fixed lanes).
double SumWhereAtLeast(const float* key, const float* w, size_t n, float thr) {
  const __m256 tv = _mm256_set1_ps(thr);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 mask = _mm256_cmp_ps(_mm256_loadu_ps(key + i), tv, _CMP_GE_OQ);
    const __m256 x = _mm256_and_ps(_mm256_loadu_ps(w + i), mask);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, a0);
  _mm256_store_pd(lanes + 4, a1);
  double s = 0.0;
  for (double x : lanes) s += x;
  for (; i < n; ++i) s += key[i] >= thr ? w[i] : 0.0f;
  return s;
}

// Weights are >= 0, so keying them on themselves with threshold 0 sums them all.
double SumOf(const float* w, size_t n) { return SumWhereAtLeast(w, w, n, 0.0f); }

// Writes every i with l[i] >= lo to out[0, n), in ascending order; returns n. `out` has
// room for l.size() ids.
size_t CollectAtLeast(std::span<const float> l, float lo, int32_t* out) {
  const __m256 lov = _mm256_set1_ps(lo);
  size_t n = 0;
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    unsigned mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(&l[i]), lov, _CMP_GE_OQ));
    for (; mask != 0; mask &= mask - 1) {
      out[n++] = static_cast<int32_t>(i + static_cast<size_t>(std::countr_zero(mask)));
    }
  }
  for (; i < l.size(); ++i) {
    if (l[i] >= lo) out[n++] = static_cast<int32_t>(i);
  }
  return n;
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

// Greedy choice: the largest logit, lowest id among equals. NaN never wins; a row of only
// -inf / NaN yields the first -inf, or 0.
int32_t ArgMax(std::span<const float> l) {
  const float m = MaxOf(l);
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

// Strict weak order "a ranks before b": larger logit, then lower id.
struct Better {
  std::span<const float> l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

absl::Status Invalid(const char* field, const char* rule, float got) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling.", field, " must be ", rule, ", got ", got));
}

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  // Comparisons are written so that NaN fails them.
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return Invalid("temperature", "finite and >= 0", p.temperature);
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k must be >= 0 (0 = off), got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return Invalid("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return Invalid("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return Invalid("repetition_penalty", "finite and > 0", p.repetition_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) {
    return Invalid("presence_penalty", "finite", p.presence_penalty);
  }
  if (!std::isfinite(p.frequency_penalty)) {
    return Invalid("frequency_penalty", "finite", p.frequency_penalty);
  }
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.logprobs must be in [0, ", kMaxLogprobs, "], got ", p.logprobs));
  }
  return absl::OkStatus();
}

absl::Status ValidateStoppingCriteria(const StoppingCriteria& c, int32_t vocab_size) {
  if (c.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stopping.max_new_tokens must be >= 0, got ", c.max_new_tokens));
  }
  for (size_t i = 0; i < c.stop_token_ids.size(); ++i) {
    const int32_t id = c.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop_token_ids[", i, "] = ", id,
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
  }
  for (size_t i = 0; i < c.stop.size(); ++i) {
    if (c.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i, "] is empty"));
    }
    // The stop checker releases text up to where a stop string could begin; a stop string
    // that is valid UTF-8 can only begin on a character boundary.
    int64_t bad = -1;
    const size_t valid = Utf8ValidPrefix(c.stop[i], &bad);
    if (valid != c.stop[i].size()) {
      // bad < 0: the string ends inside a sequence that starts at `valid`.
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i,
                                                     "] is not valid UTF-8 at byte ",
                                                     bad >= 0 ? bad : static_cast<int64_t>(valid)));
    }
  }
  return absl::OkStatus();
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  // splitmix64 expands the seed so that nearby seeds give unrelated states (and the state
  // is never all zero).
  for (auto& w : s_) w = SplitMix64(seed);
}

uint64_t Xoshiro256::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

SequenceSampler::SequenceSampler(const SamplingParams& params, uint64_t fallback_seed)
    : params_(params), rng_(params.seed.value_or(fallback_seed)) {}

bool SequenceSampler::has_penalties() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

void SequenceSampler::AddPromptTokens(std::span<const int32_t> tokens) {
  if (params_.repetition_penalty == 1.0f) return;
  seen_.insert(tokens.begin(), tokens.end());
}

void SequenceSampler::Record(int32_t token) {
  ++num_generated_;
  if (params_.repetition_penalty != 1.0f) seen_.insert(token);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) ++counts_[token];
}

void SequenceSampler::ApplyPenalties(std::span<float> logits) const {
  const size_t v = logits.size();
  // Repetition first, then presence/frequency, as vLLM does. HF's rule: divide positive
  // logits, multiply negative ones, so the penalty always lowers the token.
  const float rp = params_.repetition_penalty;
  if (rp != 1.0f) {
    for (int32_t id : seen_) {
      if (id < 0 || static_cast<size_t>(id) >= v) continue;
      float& x = logits[id];
      x = x > 0.0f ? x / rp : x * rp;
    }
  }
  for (const auto& [id, count] : counts_) {
    if (id < 0 || static_cast<size_t>(id) >= v) continue;
    logits[id] -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
  }
}

std::span<const float> SequenceSampler::PenalizedCopy(std::span<const float> logits) {
  const size_t v = logits.size();
  logits_.resize(v);
  // NaN would break the strict weak ordering the selection relies on: make it -inf.
  const __m256 ninf = _mm256_set1_ps(kNegInf);
  size_t i = 0;
  for (; i + 8 <= v; i += 8) {
    const __m256 x = _mm256_loadu_ps(&logits[i]);
    _mm256_storeu_ps(&logits_[i], _mm256_blendv_ps(x, ninf, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
  for (; i < v; ++i) logits_[i] = std::isnan(logits[i]) ? kNegInf : logits[i];
  ApplyPenalties(logits_);
  return logits_;
}

void SequenceSampler::TopK(std::span<const float> l, size_t k) {
  idx_.resize(std::max(idx_.size(), k));
  if (k <= kHeapTopK) {
    // Scan once keeping the k best with the worst on top; ids arrive in ascending order, so
    // a later id only gets in with a strictly larger logit, which keeps the lower-id rule.
    auto ranks_before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    heap_.clear();
    for (size_t i = 0; i < k; ++i) heap_.emplace_back(l[i], static_cast<int32_t>(i));
    std::make_heap(heap_.begin(), heap_.end(), ranks_before);
    VisitAbove(
        l, k, [&] { return heap_.front().first; },
        [&](size_t i) {
          std::pop_heap(heap_.begin(), heap_.end(), ranks_before);
          heap_.back() = {l[i], static_cast<int32_t>(i)};
          std::push_heap(heap_.begin(), heap_.end(), ranks_before);
        });
    std::sort(heap_.begin(), heap_.end(), ranks_before);
    for (size_t j = 0; j < k; ++j) idx_[j] = heap_[j].second;
    return;
  }
  idx_.resize(l.size());
  std::iota(idx_.begin(), idx_.end(), 0);
  std::nth_element(idx_.begin(), idx_.begin() + static_cast<ptrdiff_t>(k), idx_.end(), Better{l});
  std::sort(idx_.begin(), idx_.begin() + static_cast<ptrdiff_t>(k), Better{l});
}

size_t SequenceSampler::TopPOverAll(std::span<const float> l, float m, double total) {
  const size_t v = l.size();
  const double need = params_.top_p * total;
  // Lower a logit threshold m - T * depth until the tokens at or above it hold the mass.
  // Tokens above the previous threshold are all kept, in no particular order; only the
  // band between the two thresholds is searched for where the mass is reached.
  // Below depth 87 every weight is 0, so the last threshold, -inf, holds `total`.
  constexpr float kDepths[] = {0, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 26, 32, 48, 64, 87.5f};
  float hi = std::numeric_limits<float>::infinity();
  float lo = kNegInf;
  for (float depth : kDepths) {
    const float thr = m - params_.temperature * depth;
    if (SumWhereAtLeast(l.data(), weights_.data(), v, thr) >= need) {
      lo = thr;
      break;
    }
    hi = thr;
  }
  idx_.resize(v);
  auto end = idx_.begin() + static_cast<ptrdiff_t>(CollectAtLeast(l, lo, idx_.data()));
  auto band = std::partition(idx_.begin(), end, [&](int32_t id) { return l[id] >= hi; });
  double cum = 0.0;
  for (auto it = idx_.begin(); it != band; ++it) cum += weights_[*it];
  // Narrow the band by bisecting its logit range: the upper half either already reaches
  // the mass (the lower half goes) or joins the kept set. Sort what is left.
  while (end - band > 64) {
    const float mid = lo + (hi - lo) * 0.5f;
    if (!(mid > lo && mid < hi)) break;  // float resolution (or ties) reached
    auto split = std::partition(band, end, [&](int32_t id) { return l[id] >= mid; });
    double upper = 0.0;
    for (auto it = band; it != split; ++it) upper += weights_[*it];
    if (cum + upper >= need) {
      end = split;
      lo = mid;
    } else {
      cum += upper;
      band = split;
      hi = mid;
    }
  }
  std::sort(band, end, Better{l});
  for (auto it = band; it != end; ++it) {
    cum += weights_[*it];
    if (cum >= need) return static_cast<size_t>(it - idx_.begin()) + 1;
  }
  return static_cast<size_t>(end - idx_.begin());  // rounding: keep the whole band
}

int32_t SequenceSampler::DrawAll(std::span<const float> l, double u) {
  const size_t v = l.size();
  // Blocked inverse CDF: block sums first, then a walk inside the one block the target
  // falls in.
  const size_t num_blocks = (v + kBlock - 1) / kBlock;
  block_sums_.resize(num_blocks);
  double total = 0.0;
  for (size_t b = 0; b < num_blocks; ++b) {
    block_sums_[b] = SumOf(weights_.data() + b * kBlock, std::min(kBlock, v - b * kBlock));
    total += block_sums_[b];
  }
  const double target = u * total;
  double cum = 0.0;
  int32_t last_nonzero = -1;
  for (size_t b = 0; b < num_blocks; ++b) {
    if (block_sums_[b] == 0.0) continue;
    if (cum + block_sums_[b] <= target) {
      cum += block_sums_[b];
      continue;
    }
    const size_t end = std::min(v, (b + 1) * kBlock);
    for (size_t i = b * kBlock; i < end; ++i) {
      if (weights_[i] == 0.0f) continue;
      cum += weights_[i];
      last_nonzero = static_cast<int32_t>(i);
      if (cum > target) return last_nonzero;
    }
    // The element walk rounded differently from the block sum: take the block's last
    // weighted id.
    return last_nonzero;
  }
  // Rounding left the target just past the total: the last weighted id.
  for (size_t i = v; i-- > 0;) {
    if (weights_[i] > 0.0f) return static_cast<int32_t>(i);
  }
  return ArgMax(l);
}

int32_t SequenceSampler::SampleFiltered(std::span<const float> l, double u) {
  const size_t v = l.size();
  const float m = MaxOf(l);
  // +inf logits make every finite weight 0 (and inf - inf is NaN); -inf everywhere leaves
  // nothing to draw from. Both degenerate to the greedy choice.
  if (!std::isfinite(m)) return ArgMax(l);
  const float inv_t = 1.0f / params_.temperature;
  const float min_p = params_.min_p;
  const bool use_top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < v;
  const bool use_top_p = params_.top_p < 1.0f;

  if (!use_top_k && !use_top_p) {
    weights_.resize(v);
    Weights(l, m, inv_t, min_p, weights_.data());
    return DrawAll(l, u);
  }

  // Candidates idx_[0, kept), in a deterministic order (best first for top-k).
  // Top-p alone fills weights_ for the whole row; Weight1 gives bit-identical values.
  auto weight = [&](int32_t id) { return use_top_k ? Weight1(l[id], m, inv_t) : weights_[id]; };
  size_t kept = 0;
  if (use_top_k) {
    kept = static_cast<size_t>(params_.top_k);
    TopK(l, kept);
    if (use_top_p) {
      // top-p renormalises over the top-k survivors.
      double total = 0.0;
      for (size_t j = 0; j < kept; ++j) total += weight(idx_[j]);
      const double need = params_.top_p * total;
      double cum = 0.0;
      for (size_t j = 0; j < kept; ++j) {
        cum += weight(idx_[j]);
        if (cum >= need) {
          kept = j + 1;
          break;
        }
      }
    }
  } else {
    weights_.resize(v);
    Weights(l, m, inv_t, 0.0f, weights_.data());
    kept = TopPOverAll(l, m, SumOf(weights_.data(), v));
  }
  // min-p keeps the candidates whose weight (probability relative to the best, which has
  // weight 1 and always stays) is at least min_p.
  if (min_p > 0.0f) {
    size_t n = 0;
    for (size_t j = 0; j < kept; ++j) {
      if (weight(idx_[j]) >= min_p) idx_[n++] = idx_[j];
    }
    kept = n;
  }
  double total = 0.0;
  for (size_t j = 0; j < kept; ++j) total += weight(idx_[j]);
  const double target = u * total;
  double cum = 0.0;
  for (size_t j = 0; j < kept; ++j) {
    const float w = weight(idx_[j]);
    cum += w;
    if (w > 0.0f && cum > target) return idx_[j];
  }
  // Rounding: fall back to the weakest candidate that has weight.
  for (size_t j = kept; j-- > 0;) {
    if (weight(idx_[j]) > 0.0f) return idx_[j];
  }
  return idx_[0];
}

void SequenceSampler::ComputeLogprobs(std::span<const float> raw, SampleResult* out) {
  const float m = MaxOf(raw);  // ignores NaN, which gets weight 0 below
  double lse = m;
  if (std::isfinite(m)) {
    weights_.resize(raw.size());
    Weights(raw, m, 1.0f, 0.0f, weights_.data());
    lse = m + std::log(SumOf(weights_.data(), raw.size()));
  }
  const float chosen = raw[out->token];
  out->logprob = static_cast<float>((std::isnan(chosen) ? kNegInf : chosen) - lse);

  // Top-N by insertion into a short sorted list; the scan rejects 8 ids per compare against
  // the current N-th best. Ids with logit -inf or NaN are never listed.
  const size_t n = std::min<size_t>(params_.logprobs, raw.size());
  auto& top = out->top;
  top.clear();
  top.reserve(n + 1);
  VisitAbove(
      raw, 0, [&] { return top.size() < n ? kNegInf : top.back().logprob; },
      [&](size_t i) {
        // Holds raw logits until the end; inserting after equals keeps the lower id first.
        const float x = raw[i];
        auto pos = std::upper_bound(top.begin(), top.end(), x,
                                    [](float a, const TokenLogprob& b) { return a > b.logprob; });
        top.insert(pos, TokenLogprob{static_cast<int32_t>(i), x});
        if (top.size() > n) top.pop_back();
      });
  for (auto& t : top) t.logprob = static_cast<float>(t.logprob - lse);
}

SampleResult SequenceSampler::Sample(std::span<const float> logits) {
  SampleResult out;
  // One uniform per call, greedy or not, so the stream position depends only on the step.
  const double u = rng_.Uniform();
  if (greedy()) {
    out.token = ArgMax(has_penalties() ? PenalizedCopy(logits) : logits);
  } else {
    out.token = SampleFiltered(PenalizedCopy(logits), u);
  }
  if (params_.logprobs > 0 && !logits.empty()) ComputeLogprobs(logits, &out);
  Record(out.token);
  return out;
}

}  // namespace ptxserve
