// RowDrawer: the canonical sampling algorithm of kernels/sampling.h on the host.
//
// The kernel finds the kept set by radix select over rank keys; here the same set comes
// from cheaper searches, which is safe because every decision is an exact function of
// integer sums: top-k keeps a k-heap (or nth_element), top-p without top-k lowers a logit
// threshold until the tokens above it hold the mass and sorts only the band where the
// cut lies. Sampling is on the per-step critical path of every sequence with rows of up
// to ~128k logits, so: no full sorts, AVX2 for the per-token passes, scratch reused.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/sampler.h"
#include "engine/sampler_simd.h"

namespace ptxserve {
namespace {

using sampler_internal::ArgMax;
using sampler_internal::kNegInf;
using sampler_internal::MaxOf;
using sampler_internal::QSum;
using sampler_internal::Quantize;
using sampler_internal::VisitAbove;
using sampler_internal::Weight1;
using sampler_internal::Weight8;

// Ids per block of the blocked inverse-CDF walk.
constexpr size_t kBlock = 256;
static_assert(kBlock / 8 <= sampler_internal::kMaxQuantizeAdds, "a block sums without flushing");
// Up to this k, top-k keeps a heap of the k best while scanning; beyond, nth_element.
constexpr size_t kHeapTopK = 512;
// Up to this k, the draw works on the k candidates alone (sorted by id); beyond, on the
// whole row's weights with the cut as a mask.
constexpr size_t kCandidateTopK = 4096;

// Strict weak order "a ranks before b": larger logit, then lower id (no NaN in `l`).
struct Better {
  std::span<const float> l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

// sampling.h step 4: the prefix holding `sum` reaches the top-p mass `need`.
bool Reaches(uint64_t sum, double need) { return static_cast<double>(sum) >= need; }
double Need(float top_p, uint64_t total) {
  return static_cast<double>(top_p) * static_cast<double>(total);
}
// sampling.h step 6.
uint64_t Target(double u, uint64_t total) {
  return std::min(static_cast<uint64_t>(u * static_cast<double>(total)), total - 1);
}

// w[i] = Weight(l[i]); block_q[b] = the sum of the integer weights of the ids in block b
// (kBlock ids) whose weight is >= floor; returns the sum of the block sums.
uint64_t Weights(std::span<const float> l, float m, float inv_t, float floor, float* w,
                 uint64_t* block_q) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 tv = _mm256_set1_ps(inv_t);
  const __m256 fv = _mm256_set1_ps(floor);
  uint64_t total = 0;
  for (size_t b = 0; b * kBlock < l.size(); ++b) {
    const size_t end = std::min(l.size(), (b + 1) * kBlock);
    QSum acc;
    size_t i = b * kBlock;
    for (; i + 8 <= end; i += 8) {
      const __m256 e = Weight8(_mm256_loadu_ps(&l[i]), mv, tv);
      _mm256_storeu_ps(w + i, e);
      acc.Add8(_mm256_and_ps(e, _mm256_cmp_ps(e, fv, _CMP_GE_OQ)));
    }
    uint64_t s = acc.Flush();
    for (; i < end; ++i) {
      w[i] = Weight1(l[i], m, inv_t);
      s += w[i] >= floor ? Quantize(w[i]) : 0;
    }
    block_q[b] = s;
    total += s;
  }
  return total;
}

// Sum of the integer weights of the ids in [begin, end) with l[i] >= thr.
uint64_t QSumAtLeast(const float* l, const float* w, size_t begin, size_t end, float thr) {
  const __m256 tv = _mm256_set1_ps(thr);
  QSum acc;
  uint64_t s = 0;
  size_t i = begin;
  for (size_t adds = 0; i + 8 <= end; i += 8) {
    const __m256 mask = _mm256_cmp_ps(_mm256_loadu_ps(l + i), tv, _CMP_GE_OQ);
    acc.Add8(_mm256_and_ps(_mm256_loadu_ps(w + i), mask));
    if (++adds == sampler_internal::kMaxQuantizeAdds) {
      s += acc.Flush();
      adds = 0;
    }
  }
  s += acc.Flush();
  for (; i < end; ++i) s += l[i] >= thr ? Quantize(w[i]) : 0;
  return s;
}

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

// Kept (sampling.h steps 4-5) for ids ranking at or above the cut (cl, cid) with w >= min_p.
inline bool Kept(float l, float w, int32_t i, float cl, int32_t cid, float min_p) {
  return (l > cl || (l == cl && i <= cid)) && w >= min_p;
}

// Sum of the integer weights of the kept ids in [begin, end).
uint64_t KeptQSum(const float* l, const float* w, size_t begin, size_t end, float cl, int32_t cid,
                  float min_p) {
  const __m256 clv = _mm256_set1_ps(cl);
  const __m256 mpv = _mm256_set1_ps(min_p);
  const __m256i cidv = _mm256_set1_epi32(cid);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  QSum acc;  // end - begin <= kBlock: no flush needed on the way
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 lv = _mm256_loadu_ps(l + i);
    const __m256 wv = _mm256_loadu_ps(w + i);
    const __m256i ids = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(i)), lane);
    const __m256 after_cut = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ids, cidv));
    const __m256 at_or_above =
        _mm256_or_ps(_mm256_cmp_ps(lv, clv, _CMP_GT_OQ),
                     _mm256_andnot_ps(after_cut, _mm256_cmp_ps(lv, clv, _CMP_EQ_OQ)));
    const __m256 keep = _mm256_and_ps(at_or_above, _mm256_cmp_ps(wv, mpv, _CMP_GE_OQ));
    acc.Add8(_mm256_and_ps(wv, keep));
  }
  uint64_t s = acc.Flush();
  for (; i < end; ++i) {
    if (Kept(l[i], w[i], static_cast<int32_t>(i), cl, cid, min_p)) s += Quantize(w[i]);
  }
  return s;
}

}  // namespace

int32_t RowDrawer::Draw(std::span<const float> logits, const SamplingParams& p, double u) {
  const size_t v = logits.size();
  if (p.temperature == 0.0f || p.top_k == 1 || v == 0) return ArgMax(logits);
  bool has_nan = false;
  const float m = MaxOf(logits, &has_nan);
  const float inv_t = 1.0f / p.temperature;
  // +inf logits make every finite weight 0 (and inf - inf is NaN), -inf everywhere leaves
  // nothing to draw from, and inv_t = inf makes the best token's (0 * inf) NaN.
  if (!std::isfinite(m) || std::isinf(inv_t)) return ArgMax(logits);
  std::span<const float> l = logits;
  if (has_nan) {
    // NaN ranks and weighs as -inf; as -inf it keeps the orders below strict and weak.
    row_.resize(v);
    for (size_t i = 0; i < v; ++i) row_[i] = std::isnan(logits[i]) ? kNegInf : logits[i];
    l = row_;
  }
  const bool use_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < v;
  const bool use_p = p.top_p < 1.0f;
  if (use_k && static_cast<size_t>(p.top_k) <= kCandidateTopK) {
    return DrawFromTopK(l, m, inv_t, p, u);
  }

  weights_.resize(v);
  block_q_.resize((v + kBlock - 1) / kBlock);
  const Cut all{kNegInf, std::numeric_limits<int32_t>::max()};
  if (!use_k && !use_p) {
    // min-p alone: the weights pass already sums the kept ids per block.
    Weights(l, m, inv_t, p.min_p, weights_.data(), block_q_.data());
    return DrawMasked(l, all, p.min_p, u, /*sums_ready=*/true);
  }
  const uint64_t total = Weights(l, m, inv_t, 0.0f, weights_.data(), block_q_.data());
  Cut cut = all;
  if (use_k) {
    const size_t k = static_cast<size_t>(p.top_k);
    TopK(l, k);
    size_t n = k;
    if (use_p) {
      uint64_t top_total = 0;
      for (size_t j = 0; j < k; ++j) top_total += Quantize(weights_[idx_[j]]);
      const double need = Need(p.top_p, top_total);
      uint64_t cum = 0;
      for (n = 0; n < k;) {
        cum += Quantize(weights_[idx_[n++]]);
        if (Reaches(cum, need)) break;
      }
    }
    cut = {l[idx_[n - 1]], idx_[n - 1]};
  } else if (use_p) {
    cut = TopPCut(l, m, p.temperature, Need(p.top_p, total));
  }
  return DrawMasked(l, cut, p.min_p, u, /*sums_ready=*/false);
}

void RowDrawer::TopK(std::span<const float> l, size_t k) {
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

int32_t RowDrawer::DrawFromTopK(std::span<const float> l, float m, float inv_t,
                                const SamplingParams& p, double u) {
  const size_t k = static_cast<size_t>(p.top_k);
  TopK(l, k);
  weights_.resize(k);
  uint64_t top_total = 0;
  for (size_t j = 0; j < k; ++j) {
    weights_[j] = Weight1(l[idx_[j]], m, inv_t);
    top_total += Quantize(weights_[j]);
  }
  size_t n = k;
  if (p.top_p < 1.0f) {
    // top-p renormalises over the top-k survivors.
    const double need = Need(p.top_p, top_total);
    uint64_t cum = 0;
    for (n = 0; n < k;) {
      cum += Quantize(weights_[n++]);
      if (Reaches(cum, need)) break;
    }
  }
  kept_.clear();
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint64_t q = Quantize(weights_[j]);
    if (weights_[j] >= p.min_p && q > 0) {
      kept_.emplace_back(idx_[j], q);
      total += q;
    }
  }
  // The draw walks the kept ids in id order (the best always has q = 2^40, so total > 0).
  std::sort(kept_.begin(), kept_.end());
  const uint64_t target = Target(u, total);
  uint64_t cum = 0;
  for (const auto& [id, q] : kept_) {
    cum += q;
    if (cum > target) return id;
  }
  return kept_.back().first;  // unreachable: cum reaches total > target
}

RowDrawer::Cut RowDrawer::TopPCut(std::span<const float> l, float m, float temperature,
                                  double need) {
  const size_t v = l.size();
  const float* w = weights_.data();
  // Lower a logit threshold m - T * depth until the tokens at or above it hold the mass.
  // Tokens above the previous threshold are all kept, in no particular order; only the
  // band between the two thresholds is searched for where the mass is reached. Below
  // depth 87 every weight is 0, so the last threshold holds the whole mass. (The
  // thresholds only steer the search: the cut depends on the integer sums alone.)
  constexpr float kDepths[] = {0, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 26, 32, 48, 64, 87.5f};
  float hi = std::numeric_limits<float>::infinity();
  float lo = kNegInf;
  for (float depth : kDepths) {
    const float thr = m - temperature * depth;
    if (Reaches(QSumAtLeast(l.data(), w, 0, v, thr), need)) {
      lo = thr;
      break;
    }
    hi = thr;
  }
  idx_.resize(v);
  auto end = idx_.begin() + static_cast<ptrdiff_t>(CollectAtLeast(l, lo, idx_.data()));
  auto band = std::partition(idx_.begin(), end, [&](int32_t id) { return l[id] >= hi; });
  uint64_t cum = 0;
  for (auto it = idx_.begin(); it != band; ++it) cum += Quantize(w[*it]);
  // Narrow the band by bisecting its logit range: the upper half either already reaches
  // the mass (the lower half goes) or joins the kept set. Sort what is left.
  while (end - band > 64) {
    const float mid = lo + (hi - lo) * 0.5f;
    if (!(mid > lo && mid < hi)) break;  // float resolution (or ties) reached
    auto split = std::partition(band, end, [&](int32_t id) { return l[id] >= mid; });
    uint64_t upper = 0;
    for (auto it = band; it != split; ++it) upper += Quantize(w[*it]);
    if (Reaches(cum + upper, need)) {
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
    cum += Quantize(w[*it]);
    if (Reaches(cum, need)) return {l[*it], *it};
  }
  // Unreachable: the whole row reaches `need` (need <= total).
  return {kNegInf, std::numeric_limits<int32_t>::max()};
}

int32_t RowDrawer::DrawMasked(std::span<const float> l, Cut cut, float min_p, double u,
                              bool sums_ready) {
  const size_t v = l.size();
  const float* w = weights_.data();
  // Blocked inverse CDF: block sums first, then a walk inside the one block the target
  // falls in.
  const size_t num_blocks = (v + kBlock - 1) / kBlock;
  uint64_t total = 0;
  for (size_t b = 0; b < num_blocks; ++b) {
    if (!sums_ready) {
      block_q_[b] = KeptQSum(l.data(), w, b * kBlock, std::min(v, (b + 1) * kBlock), cut.logit,
                             cut.id, min_p);
    }
    total += block_q_[b];
  }
  const uint64_t target = Target(u, total);  // total >= 2^40: the best token is kept
  uint64_t cum = 0;
  for (size_t b = 0; b < num_blocks; ++b) {
    if (cum + block_q_[b] <= target) {
      cum += block_q_[b];
      continue;
    }
    const size_t end = std::min(v, (b + 1) * kBlock);
    for (size_t i = b * kBlock; i < end; ++i) {
      if (!Kept(l[i], w[i], static_cast<int32_t>(i), cut.logit, cut.id, min_p)) continue;
      cum += Quantize(w[i]);
      if (cum > target) return static_cast<int32_t>(i);
    }
  }
  return ArgMax(l);  // unreachable: the block sums add up to total > target
}

}  // namespace ptxserve
