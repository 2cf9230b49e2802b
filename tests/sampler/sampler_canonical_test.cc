// The host sampler against the canonical algorithm (kernels/sampling.h), as transcribed
// literally in canonical_reference.h: the fast paths (AVX2 weights, k-heap and
// nth_element top-k, threshold-search top-p, blocked draw) pick the reference's id on
// random rows of every kind, including uniforms aimed at the boundaries between kept
// ids; and the draws follow the integer weights: exact support, chi-square frequencies.
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampler.h"
#include "gtest/gtest.h"
#include "tests/sampler/canonical_reference.h"

namespace ptxserve {
namespace {

using testing::CanonicalResult;
using testing::CanonicalSample;
using testing::CaseMaker;

void ExpectHostEqualsReference(int vocab, int n, uint64_t seed) {
  SCOPED_TRACE(absl::StrCat("vocab ", vocab));
  CaseMaker maker(seed);
  RowDrawer drawer;
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> l = maker.Logits(vocab, i);
    SamplingParams p = maker.Params(vocab);
    if (i % 3 == 0) p.top_k = 600 + maker.Index(vocab);  // past the heap limit
    double u = maker.Uniform();
    if (i % 2 == 1) {
      const CanonicalResult ref = CanonicalSample(l, p, 0.0);
      if (!ref.greedy) u = maker.BoundaryUniform(ref);
    }
    const int32_t want = CanonicalSample(l, p, u).token;
    const int32_t got = drawer.Draw(l, p, u);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << "row " << i << " kind " << i % CaseMaker::kKinds << " T=" << p.temperature
                    << " top_k=" << p.top_k << " top_p=" << p.top_p << " min_p=" << p.min_p
                    << " u=" << u << ": host " << got << ", reference " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(SamplerCanonicalTest, HostEqualsTheReference) {
  for (int vocab : {1, 3, 8, 17, 100, 257}) ExpectHostEqualsReference(vocab, 400, vocab);
  for (int vocab : {1000, 3001}) ExpectHostEqualsReference(vocab, 200, vocab);
  ExpectHostEqualsReference(32000, 40, 32000);
}

// Seeded Sample equals the reference with the seed's uniforms.
TEST(SamplerCanonicalTest, SeededSampleUsesTheRngStream) {
  CaseMaker maker(5);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.seed = 31;
  SequenceSampler s(p, 0);
  Xoshiro256 rng(31);
  for (int step = 0; step < 200; ++step) {
    const std::vector<float> l = maker.Logits(300, step);
    EXPECT_EQ(s.Sample(l).token, CanonicalSample(l, p, rng.Uniform()).token) << step;
  }
}

// Draws with top-k, top-p and min-p together: the support is exactly the kept set, and
// the frequencies follow q_i / K (Pearson chi-square).
TEST(SamplerCanonicalTest, SupportAndFrequenciesFollowTheIntegerWeights) {
  std::vector<float> l(60);
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = static_cast<float>((i * 37) % 60) / 12.0f;  // distinct, spread over [0, 5)
  }
  struct Case {
    int32_t top_k;
    float top_p, min_p;
  };
  for (const Case& c :
       {Case{30, 1.0f, 0.0f}, Case{0, 0.8f, 0.0f}, Case{0, 1.0f, 0.1f}, Case{25, 0.9f, 0.08f}}) {
    SamplingParams p;
    p.temperature = 1.3f;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    SCOPED_TRACE(absl::StrCat("top_k ", c.top_k, " top_p ", c.top_p, " min_p ", c.min_p));
    const CanonicalResult ref = CanonicalSample(l, p, 0.0);
    ASSERT_GT(ref.kept.size(), 5u);
    ASSERT_LT(ref.kept.size(), l.size()) << "the filters must remove something";
    const int n = 40000;
    SequenceSampler s(p, 99);
    std::map<int32_t, int> counts;
    for (int i = 0; i < n; ++i) ++counts[s.Sample(l).token];
    std::set<int32_t> support, want;
    for (const auto& [id, k] : counts) support.insert(id);
    double chi = 0.0;
    double min_expected = n;
    for (const auto& [id, q] : ref.kept) {
      want.insert(id);
      const double expected = n * static_cast<double>(q) / static_cast<double>(ref.total);
      min_expected = std::min(min_expected, expected);
      const double observed = counts.count(id) != 0 ? counts[id] : 0;
      chi += (observed - expected) * (observed - expected) / expected;
    }
    ASSERT_GT(min_expected, 20.0) << "every kept id must be likely to show up";
    EXPECT_EQ(support, want);
    // df = kept - 1 <= 60: P(chi2 > df + 8 sqrt(2 df)) is below 1e-6.
    const double df = static_cast<double>(ref.kept.size() - 1);
    EXPECT_LT(chi, df + 8.0 * std::sqrt(2.0 * df)) << "df " << df;
  }
}

}  // namespace
}  // namespace ptxserve
