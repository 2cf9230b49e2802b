#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;

SamplingParams Params(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Token -> count over n draws from a fresh sampler.
std::map<int32_t, int> Draw(const SamplingParams& p, const std::vector<float>& logits, int n,
                            uint64_t seed = 7) {
  SequenceSampler s(p, seed);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.Sample(logits).token];
  return counts;
}

std::set<int32_t> Support(const std::map<int32_t, int>& counts) {
  std::set<int32_t> ids;
  for (const auto& [id, n] : counts) ids.insert(id);
  return ids;
}

TEST(SamplerTest, GreedyIsArgMax) {
  SequenceSampler s(Params(0.0f), 1);
  const std::vector<float> l = {0.1f, 2.5f, -1.0f, 2.4f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.Sample(l).token, 1);
  EXPECT_EQ(s.num_generated(), 5);
}

TEST(SamplerTest, GreedyTieBreaksToLowestId) {
  SequenceSampler s(Params(0.0f), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 3.0f, 3.0f, 3.0f}).token, 1);
  EXPECT_EQ(s.Sample(std::vector<float>{5.0f, 5.0f}).token, 0);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  SamplingParams p = Params(5.0f);
  p.top_k = 1;
  const std::vector<float> l = {0.0f, 0.2f, 0.1f, 0.2f};
  EXPECT_EQ(Support(Draw(p, l, 200)), (std::set<int32_t>{1}));
}

TEST(SamplerTest, GreedyNeverPicksNaN) {
  SequenceSampler s(Params(0.0f), 1);
  const float nan = std::nanf("");
  EXPECT_EQ(s.Sample(std::vector<float>{nan, -1.0f, nan, -0.5f}).token, 3);
}

TEST(SamplerTest, SamplingNeverPicksNaNOrNegInf) {
  const float nan = std::nanf("");
  const float ninf = -INFINITY;
  const std::vector<float> l = {nan, 0.0f, ninf, 0.0f, nan};
  EXPECT_EQ(Support(Draw(Params(1.0f), l, 500)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, TopKKeepsExactlyTheKBest) {
  SamplingParams p = Params(1.0f);
  p.top_k = 2;
  // Flat enough that every token would show up without the filter.
  const std::vector<float> l = {0.0f, 0.3f, 0.1f, 0.25f, 0.2f, 0.05f};
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, TopKTiesResolveToLowerIds) {
  SamplingParams p = Params(1.0f);
  p.top_k = 3;
  const std::vector<float> l(10, 1.0f);
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, TopKOnLargeVocabStaysInTopK) {
  const int v = 128000;
  std::vector<float> l(v);
  uint64_t x = 12345;
  for (auto& f : l) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    f = static_cast<float>((x >> 40) % 1000) / 100.0f;
  }
  SamplingParams p = Params(1.0f);
  p.top_k = 50;
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const float kth = sorted[49];
  SequenceSampler s(p, 3);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.Sample(l).token;
    EXPECT_GE(l[t], kth);
  }
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingTheMass) {
  const auto l = LogitsFor({0.1, 0.5, 0.15, 0.25});
  SamplingParams p = Params(1.0f);
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: ids 1 and 3
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 3}));
  p.top_p = 0.85f;  // 0.75 < 0.85 <= 0.9: adds id 2
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 2, 3}));
  p.top_p = 0.4f;  // the best token alone already holds 0.5
  EXPECT_EQ(Support(Draw(p, l, 500)), (std::set<int32_t>{1}));
}

TEST(SamplerTest, TopPOverLargeFlatVocabUsesSeveralChunks) {
  // 2000 equal tokens: mass 0.30025 needs 601 of them (ties -> lowest ids), which is more
  // than the first sorted chunk.
  const std::vector<float> l(2000, 0.0f);
  SamplingParams p = Params(1.0f);
  p.top_p = 0.30025f;
  const auto counts = Draw(p, l, 3000);
  EXPECT_LE(counts.rbegin()->first, 600);
  EXPECT_GE(counts.rbegin()->first, 550);  // the upper ids are reachable
  EXPECT_EQ(counts.begin()->first, 0);
}

// Deterministic pseudo-random logits in [0, spread), not sorted by id.
std::vector<float> RandomLogits(int v, float spread, uint64_t seed) {
  std::vector<float> l(v);
  for (auto& f : l) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    f = spread * static_cast<float>(seed >> 40) / static_cast<float>(1 << 24);
  }
  return l;
}

// Ids best first (logit descending, lower id first).
std::vector<int32_t> Ranked(const std::vector<float>& l) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return ids;
}

TEST(SamplerTest, TopPOverLargeSpreadVocabMatchesExactCutoff) {
  // Thousands of distinct logits: exercises the threshold search and the band bisection.
  const std::vector<float> l = RandomLogits(20000, 12.0f, 5);
  const float top_p = 0.9f;
  const auto ranked = Ranked(l);
  double z = 0.0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  // Exact cutoff in double: the first rank whose cumulative probability reaches top_p.
  double cum = 0.0;
  size_t keep = 0;
  while (cum < top_p) cum += std::exp(static_cast<double>(l[ranked[keep++]])) / z;
  const double before = cum - std::exp(static_cast<double>(l[ranked[keep - 1]])) / z;
  ASSERT_GT(top_p - before, 1e-5) << "fixture too close to the cutoff";
  ASSERT_GT(cum - top_p, 1e-5) << "fixture too close to the cutoff";
  ASSERT_GT(keep, 1000u);
  std::vector<int> rank_of(l.size());
  for (size_t r = 0; r < ranked.size(); ++r) rank_of[ranked[r]] = static_cast<int>(r);
  // Mass of the last fifth of the kept ranks, so that the draws must reach it.
  double tail = 0.0;
  for (size_t r = keep * 4 / 5; r < keep; ++r) tail += std::exp(static_cast<double>(l[ranked[r]]));
  ASSERT_GT(tail / z * 4000, 50.0);

  SamplingParams p = Params(1.0f);
  p.top_p = top_p;
  int max_rank = 0;
  for (const auto& [id, n] : Draw(p, l, 4000)) max_rank = std::max(max_rank, rank_of[id]);
  EXPECT_LT(max_rank, static_cast<int>(keep));
  EXPECT_GE(max_rank, static_cast<int>(keep * 4 / 5));
}

TEST(SamplerTest, LargeTopKUsesTheSameSupport) {
  const std::vector<float> l = RandomLogits(3000, 2.0f, 9);
  const auto ranked = Ranked(l);
  SamplingParams p = Params(1.0f);
  p.top_k = 1000;  // above the heap limit
  std::set<int32_t> allowed(ranked.begin(), ranked.begin() + 1000);
  for (const auto& [id, n] : Draw(p, l, 3000)) EXPECT_TRUE(allowed.count(id)) << id;
}

TEST(SamplerTest, MinPWithTopPOnLargeVocab) {
  const std::vector<float> l = RandomLogits(5000, 10.0f, 3);
  const float best = *std::max_element(l.begin(), l.end());
  SamplingParams p = Params(1.0f);
  p.top_p = 0.95f;
  p.min_p = 0.05f;  // keeps logits >= best + ln 0.05 = best - 3.0
  const auto counts = Draw(p, l, 3000);
  for (const auto& [id, n] : counts) EXPECT_GE(l[id], best + std::log(0.05f) - 1e-4f) << id;
  EXPECT_GT(counts.size(), 20u);
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  // top-k 3 leaves {0.4, 0.3, 0.2} -> renormalised {0.444, 0.333, 0.222}; top-p 0.7
  // needs the first two (0.444 < 0.7 <= 0.777).
  const auto l = LogitsFor({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = Params(1.0f);
  p.top_k = 3;
  p.top_p = 0.7f;
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfBest) {
  const auto l = LogitsFor({0.05, 0.5, 0.3, 0.15});
  SamplingParams p = Params(1.0f);
  p.min_p = 0.2f;  // threshold 0.1: 0.05 goes
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 0.5f;  // threshold 0.25
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 2}));
  // Same filter on the ordered path (with top-k that removes nothing).
  p.top_k = 3;
  EXPECT_EQ(Support(Draw(p, l, 2000)), (std::set<int32_t>{1, 2}));
}

// Pearson chi-square of observed counts against softmax(logits / T).
double ChiSquare(const std::vector<float>& l, float t, const std::map<int32_t, int>& counts,
                 int n) {
  double z = 0.0;
  for (float x : l) z += std::exp(x / t);
  double chi = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double expected = n * std::exp(l[i] / t) / z;
    const auto it = counts.find(static_cast<int32_t>(i));
    const double observed = it == counts.end() ? 0.0 : it->second;
    chi += (observed - expected) * (observed - expected) / expected;
  }
  return chi;
}

TEST(SamplerTest, TemperatureMatchesSoftmax) {
  const std::vector<float> l = {1.0f, 0.5f, 0.0f, -1.0f, 0.2f};
  const int n = 20000;
  for (float t : {0.5f, 1.0f, 2.0f}) {
    const auto counts = Draw(Params(t), l, n, /*seed=*/42);
    // 4 degrees of freedom: P(chi2 > 40) ~ 4e-8; a wrong temperature gives hundreds.
    EXPECT_LT(ChiSquare(l, t, counts, n), 40.0) << "T=" << t;
    if (t != 1.0f) {
      EXPECT_GT(ChiSquare(l, 1.0f, counts, n), 100.0) << "T=" << t;
    }
  }
}

// A sampler that has generated `generated` (forced by one-hot logits) after `prompt`.
SequenceSampler WithHistory(const SamplingParams& p, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& generated, int vocab) {
  SequenceSampler s(p, 1);
  s.AddPromptTokens(prompt);
  for (int32_t id : generated) {
    std::vector<float> force(vocab, -1000.0f);
    force[id] = 1000.0f;
    EXPECT_EQ(s.Sample(force).token, id);
  }
  return s;
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 2.0f;
  const auto s = WithHistory(p, {0, 1, 99}, {2}, 5);  // 99: outside the vocab, ignored
  std::vector<float> l = {3.0f, -1.5f, 0.5f, 4.0f, -2.0f};
  s.ApplyPenalties(l);
  EXPECT_EQ(l, (std::vector<float>{1.5f, -3.0f, 0.25f, 4.0f, -2.0f}));
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesApplyToGeneratedTokensOnly) {
  SamplingParams p = Params(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const auto s = WithHistory(p, {0, 1}, {1, 3, 3, 3}, 5);
  std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  s.ApplyPenalties(l);
  // id 0: prompt only; id 1: once; id 3: three times.
  EXPECT_EQ(l, (std::vector<float>{1.0f, 1.0f - 0.5f - 0.25f, 1.0f, 1.0f - 0.5f - 0.75f, 1.0f}));
}

TEST(SamplerTest, RepetitionThenFrequency) {
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  const auto s = WithHistory(p, {}, {0}, 2);
  std::vector<float> l = {3.0f, 3.0f};
  s.ApplyPenalties(l);
  EXPECT_EQ(l, (std::vector<float>{3.0f / 2.0f - 1.0f, 3.0f}));
}

TEST(SamplerTest, GreedyUsesPenalisedLogits) {
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 4.0f;
  SequenceSampler s(p, 1);
  const int32_t prompt[] = {0};
  s.AddPromptTokens(prompt);
  EXPECT_EQ(s.Sample(std::vector<float>{2.0f, 1.0f}).token, 1);  // 2/4 < 1
}

TEST(SamplerTest, NoPenaltiesLeaveLogitsUntouched) {
  const auto s = WithHistory(Params(0.0f), {0, 1}, {2, 2}, 4);
  std::vector<float> l = {1.0f, -1.0f, 2.0f, 0.0f};
  s.ApplyPenalties(l);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -1.0f, 2.0f, 0.0f}));
}

std::vector<int32_t> Tokens(SequenceSampler& s, const std::vector<float>& l, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Sample(l).token);
  return out;
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedsDiffer) {
  const std::vector<float> l(100, 0.0f);
  SamplingParams p = Params(1.0f);
  p.seed = 1234;
  SequenceSampler a(p, 1), b(p, 2);  // explicit seed overrides the fallback
  EXPECT_EQ(Tokens(a, l, 64), Tokens(b, l, 64));
  p.seed = 1235;
  SequenceSampler c(p, 1);
  SequenceSampler d(Params(1.0f), 1234);  // fallback seed = 1234 gives the same stream
  SequenceSampler ref(Params(1.0f), 1234);
  const auto want = Tokens(ref, l, 64);
  EXPECT_NE(Tokens(c, l, 64), want);
  EXPECT_EQ(Tokens(d, l, 64), want);
}

TEST(SamplerTest, DeterminismIndependentOfOtherSamplers) {
  const std::vector<float> l = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  SamplingParams p = Params(0.8f);
  p.seed = 99;
  p.top_p = 0.95f;
  SequenceSampler alone(p, 0);
  const auto want = Tokens(alone, l, 50);

  SequenceSampler mine(p, 0);
  SequenceSampler other1(Params(1.3f), 5);
  SamplingParams greedy = Params(0.0f);
  SequenceSampler other2(greedy, 6);
  std::vector<int32_t> got;
  for (int i = 0; i < 50; ++i) {
    other1.Sample(l);
    got.push_back(mine.Sample(l).token);
    other2.Sample(l);
    other1.Sample(l);
  }
  EXPECT_EQ(got, want);
}

TEST(SamplerTest, InverseCdfWithOneDocumentedUniformPerStep) {
  // With 1000 equal logits the weights are exactly 1, so step i must pick
  // floor(u_i * 1000) where u_i is the i-th uniform of xoshiro256**(seed).
  const std::vector<float> l(1000, 0.5f);
  SamplingParams p = Params(1.0f);
  p.seed = 77;
  SequenceSampler s(p, 0);
  Xoshiro256 rng(77);
  for (int i = 0; i < 100; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(s.Sample(l).token, static_cast<int32_t>(u * 1000)) << "step " << i;
  }
  // The generator is a pure function of its seed.
  Xoshiro256 a(5), b(5);
  EXPECT_EQ(a.Next(), b.Next());
  EXPECT_NE(Xoshiro256(5).Next(), Xoshiro256(6).Next());
}

TEST(SamplerTest, LogprobsAreRawLogSoftmax) {
  SamplingParams p = Params(0.7f);
  p.logprobs = 3;
  p.repetition_penalty = 3.0f;  // must not affect the reported values
  SequenceSampler s(p, 11);
  const int32_t prompt[] = {2};
  s.AddPromptTokens(prompt);
  const std::vector<float> l = {0.5f, 2.0f, 1.0f, -1.0f, 1.0f};
  double z = 0.0;
  for (float x : l) z += std::exp(x);
  for (int step = 0; step < 20; ++step) {
    const SampleResult r = s.Sample(l);
    EXPECT_NEAR(r.logprob, l[r.token] - std::log(z), 1e-5);
    ASSERT_EQ(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].id, 1);
    EXPECT_EQ(r.top[1].id, 2);  // tie with id 4: lower id first
    EXPECT_EQ(r.top[2].id, 4);
    double mass = 0.0;
    for (size_t i = 0; i < r.top.size(); ++i) {
      EXPECT_NEAR(r.top[i].logprob, l[r.top[i].id] - std::log(z), 1e-5);
      if (i > 0) {
        EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
      }
      mass += std::exp(r.top[i].logprob);
    }
    EXPECT_LE(mass, 1.0 + 1e-6);
  }
}

TEST(SamplerTest, LogprobsCappedByVocabAndOffByDefault) {
  SamplingParams p = Params(1.0f);
  const std::vector<float> l = {0.0f, 1.0f};
  SequenceSampler off(p, 1);
  const auto r0 = off.Sample(l);
  EXPECT_TRUE(r0.top.empty());
  EXPECT_EQ(r0.logprob, 0.0f);
  p.logprobs = 20;
  SequenceSampler on(p, 1);
  const auto r1 = on.Sample(l);
  ASSERT_EQ(r1.top.size(), 2u);
  EXPECT_NEAR(std::exp(r1.top[0].logprob) + std::exp(r1.top[1].logprob), 1.0, 1e-6);
}

TEST(SamplerValidationTest, AcceptsDefaults) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  EXPECT_TRUE(ValidateStoppingCriteria(StoppingCriteria{}, 10).ok());
}

void ExpectInvalid(const SamplingParams& p, const std::string& field) {
  const absl::Status st = ValidateSamplingParams(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(st.message(), HasSubstr(field));
}

TEST(SamplerValidationTest, NamesTheField) {
  SamplingParams p;
  p.temperature = -0.1f;
  ExpectInvalid(p, "sampling.temperature");
  p = {};
  p.temperature = std::nanf("");
  ExpectInvalid(p, "sampling.temperature");
  p = {};
  p.top_p = 1.5f;
  ExpectInvalid(p, "sampling.top_p");
  EXPECT_EQ(ValidateSamplingParams(p).message(), "sampling.top_p must be in (0, 1], got 1.5");
  p.top_p = 0.0f;
  ExpectInvalid(p, "sampling.top_p");
  p = {};
  p.top_k = -1;
  ExpectInvalid(p, "sampling.top_k");
  p = {};
  p.min_p = 1.5f;
  ExpectInvalid(p, "sampling.min_p");
  p.min_p = -0.1f;
  ExpectInvalid(p, "sampling.min_p");
  p = {};
  p.repetition_penalty = 0.0f;
  ExpectInvalid(p, "sampling.repetition_penalty");
  p = {};
  p.presence_penalty = INFINITY;
  ExpectInvalid(p, "sampling.presence_penalty");
  p = {};
  p.frequency_penalty = std::nanf("");
  ExpectInvalid(p, "sampling.frequency_penalty");
  p = {};
  p.logprobs = 21;
  ExpectInvalid(p, "sampling.logprobs");
  p.logprobs = -1;
  ExpectInvalid(p, "sampling.logprobs");
  p.logprobs = 20;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.top_k = 1000000;
  p.temperature = 0.0f;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

TEST(SamplerValidationTest, StoppingCriteriaAreBounded) {
  StoppingCriteria c;
  c.stop.assign(kMaxStopStrings, "x");
  EXPECT_TRUE(ValidateStoppingCriteria(c, 10).ok());
  c.stop.push_back("y");
  absl::Status st = ValidateStoppingCriteria(c, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("stopping.stop has 65 strings, at most 64"));

  c = {};
  c.stop = {"ok", std::string(kMaxStopStringBytes + 1, 'a')};
  EXPECT_THAT(ValidateStoppingCriteria(c, 10).message(),
              HasSubstr("stopping.stop[1] is 513 bytes, at most 512"));

  c = {};
  c.stop_token_ids.assign(kMaxStopTokenIds + 1, 3);
  EXPECT_THAT(ValidateStoppingCriteria(c, 10).message(),
              HasSubstr("stopping.stop_token_ids has 257 ids, at most 256"));
}

TEST(SamplerValidationTest, StoppingNamesTheField) {
  StoppingCriteria c;
  c.max_new_tokens = -1;
  absl::Status st = ValidateStoppingCriteria(c, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("stopping.max_new_tokens"));

  c = {};
  c.stop_token_ids = {3, 10};
  st = ValidateStoppingCriteria(c, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("stopping.stop_token_ids[1] = 10"));
  c.stop_token_ids = {-1};
  EXPECT_FALSE(ValidateStoppingCriteria(c, 10).ok());

  c = {};
  c.stop = {"ok", ""};
  st = ValidateStoppingCriteria(c, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("stopping.stop[1] is empty"));

  c.stop = {"a\xE2\x82"};  // truncated euro sign
  st = ValidateStoppingCriteria(c, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("stopping.stop[0] is not valid UTF-8 at byte 1"));

  c.stop = {"\xE2\x82\xAC", "end"};
  c.max_new_tokens = 0;
  EXPECT_TRUE(ValidateStoppingCriteria(c, 10).ok());
}

}  // namespace
}  // namespace ptxserve
