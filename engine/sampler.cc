// Validation, the RNG, penalties and log-probs; the draw itself is in sampler_draw.cc.
#include "engine/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/sampler_simd.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

using sampler_internal::kNegInf;
using sampler_internal::MaxOf;
using sampler_internal::VisitAbove;
using sampler_internal::Weight1;

constexpr int32_t kMaxLogprobs = 20;

// w[i] = Exp((l[i] - m) * inv_t) for the log-probs' normaliser.
void Weights(std::span<const float> l, float m, float inv_t, float* w) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 tv = _mm256_set1_ps(inv_t);
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    _mm256_storeu_ps(w + i, sampler_internal::Weight8(_mm256_loadu_ps(&l[i]), mv, tv));
  }
  for (; i < l.size(); ++i) w[i] = Weight1(l[i], m, inv_t);
}

// Sum of n weights in double over 8 fixed lanes.
double SumOf(const float* w, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(w + i);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, a0);
  _mm256_store_pd(lanes + 4, a1);
  double s = 0.0;
  for (double x : lanes) s += x;
  for (; i < n; ++i) s += w[i];
  return s;
}

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
  // Every new token is checked against every stop string and id on the engine thread: the
  // limits keep one request from slowing the whole batch.
  if (c.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop has ", c.stop.size(),
                                                   " strings, at most ", kMaxStopStrings,
                                                   " are allowed"));
  }
  if (c.stop_token_ids.size() > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop_token_ids has ",
                                                   c.stop_token_ids.size(), " ids, at most ",
                                                   kMaxStopTokenIds, " are allowed"));
  }
  for (size_t i = 0; i < c.stop.size(); ++i) {
    if (c.stop[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i, "] is ", c.stop[i].size(),
                                                     " bytes, at most ", kMaxStopStringBytes,
                                                     " are allowed"));
    }
  }
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
    // One fused multiply-add, spelled out: the device's penalties kernel does the same
    // (kernels/penalties.h), whatever contraction the compiler would choose.
    logits[id] -=
        std::fma(params_.frequency_penalty, static_cast<float>(count), params_.presence_penalty);
  }
}

void SequenceSampler::PenaltyEntries(int32_t vocab, std::vector<PenaltyEntry>* out) const {
  auto inside = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  // Generated ids are in seen_ whenever the repetition penalty is on, so seen_ then covers
  // counts_; otherwise seen_ is empty.
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : seen_) {
      if (!inside(id)) continue;
      auto it = counts_.find(id);
      out->push_back({id, it == counts_.end() ? 0 : it->second, 1});
    }
    return;
  }
  for (const auto& [id, count] : counts_) {
    if (inside(id)) out->push_back({id, count, 0});
  }
}

std::span<const float> SequenceSampler::PenalizedCopy(std::span<const float> logits) {
  logits_.assign(logits.begin(), logits.end());
  ApplyPenalties(logits_);
  return logits_;
}

void SequenceSampler::ComputeLogprobs(std::span<const float> raw, SampleResult* out) {
  const float m = MaxOf(raw, nullptr);  // ignores NaN, which gets weight 0 below
  double lse = m;
  if (std::isfinite(m)) {
    weights_.resize(raw.size());
    Weights(raw, m, 1.0f, weights_.data());
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
  out.token = drawer_.Draw(has_penalties() ? PenalizedCopy(logits) : logits, params_, u);
  if (params_.logprobs > 0 && !logits.empty()) ComputeLogprobs(logits, &out);
  Record(out.token);
  return out;
}

}  // namespace ptxserve
