// The sampling kernel on the PTX emulator against the host sampler: both implement the
// canonical algorithm of kernels/sampling.h, so for every (row, params, uniform) the
// kernel's id must EQUAL RowDrawer::Draw's, and with a seeded SequenceSampler's uniform,
// SequenceSampler::Sample's. Thousands of rows: random logits with ties, NaN, -inf, +inf,
// signed zeros, subnormals and huge values; temperatures from 1e-38 to 3e38; top-k 0, 1,
// 2, 50, vocab - 1, vocab and past it; top-p 0.1..1; min-p 0..1; uniforms including 0 and
// 1 - 2^-53; vocab sizes that are not multiples of the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/sampler.h"
#include "gtest/gtest.h"
#include "kernels/sampling.h"
#include "tests/kernels/emu_harness.h"
#include "tests/sampler/canonical_reference.h"

namespace ptxserve::kernels::testing {
namespace {

using ptxserve::testing::CanonicalSample;
using ptxserve::testing::CaseMaker;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Row {
  SamplingParams params;
  double u = 0;
  std::vector<float> logits;
};

// Runs one launch over `rows` (all of length `vocab`) and returns the kernel's ids.
std::vector<int32_t> RunKernel(int threads, int vocab, const std::vector<Row>& rows) {
  SamplingConfig cfg;
  cfg.threads = threads;
  absl::StatusOr<std::string> ptx = GenerateSampling(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return {};
  std::vector<float> l, temp, topp, minp;
  std::vector<int32_t> topk;
  std::vector<double> uni;
  for (const Row& r : rows) {
    l.insert(l.end(), r.logits.begin(), r.logits.end());
    temp.push_back(r.params.temperature);
    topk.push_back(r.params.top_k);
    topp.push_back(r.params.top_p);
    minp.push_back(r.params.min_p);
    uni.push_back(r.u);
  }
  const int n = static_cast<int>(rows.size());
  EmuHarness h;
  const uint64_t dl = h.Upload(l), dt = h.Upload(temp), dk = h.Upload(topk);
  const uint64_t dp = h.Upload(topp), dm = h.Upload(minp), du = h.Upload(uni);
  const uint64_t dout = h.Alloc(n * 4);
  const absl::Status st = h.Run(*ptx, kSamplingEntry, SamplingLaunch(cfg, n),
                                {Ptr(dl), Ptr(dt), Ptr(dk), Ptr(dp), Ptr(dm), Ptr(du), Ptr(dout),
                                 U32(static_cast<uint32_t>(vocab)), U32(static_cast<uint32_t>(n))});
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return {};
  return h.Download<int32_t>(dout, n);
}

std::string Describe(const Row& r) {
  return absl::StrCat("T=", r.params.temperature, " top_k=", r.params.top_k,
                      " top_p=", r.params.top_p, " min_p=", r.params.min_p, " u=", r.u);
}

// `n` random rows at `vocab` on `threads`: the kernel's ids equal RowDrawer's and the
// reference's. Every other row aims its uniform at a boundary of its kept set.
void ExpectSameIds(int threads, int vocab, int n, uint64_t seed) {
  SCOPED_TRACE(absl::StrCat("threads ", threads, " vocab ", vocab));
  CaseMaker maker(seed);
  std::vector<Row> rows(n);
  for (int i = 0; i < n; ++i) {
    rows[i].logits = maker.Logits(vocab, i);
    rows[i].params = maker.Params(vocab);
    rows[i].u = maker.Uniform();
    if (i % 2 == 1) {
      const auto ref = CanonicalSample(rows[i].logits, rows[i].params, 0.0);
      if (!ref.greedy) rows[i].u = maker.BoundaryUniform(ref);
    }
  }
  const std::vector<int32_t> got = RunKernel(threads, vocab, rows);
  ASSERT_EQ(got.size(), rows.size());
  RowDrawer host;
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t want = host.Draw(rows[i].logits, rows[i].params, rows[i].u);
    const int32_t ref = CanonicalSample(rows[i].logits, rows[i].params, rows[i].u).token;
    if ((got[i] != want || want != ref) && ++mismatches <= 5) {
      ADD_FAILURE() << "row " << i << " (kind " << i % CaseMaker::kKinds << ", "
                    << Describe(rows[i]) << "): kernel " << got[i] << ", host " << want
                    << ", reference " << ref;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(KernelsEmuSampling, EqualsTheHostOnSmallVocabs) {
  // Vocab sizes around and off the thread counts, one id included.
  for (int vocab : {1, 2, 7, 31, 32, 33, 100, 255, 256, 257}) {
    ExpectSameIds(32, vocab, 150, 1000 + vocab);
  }
  for (int vocab : {5, 64, 97, 300}) ExpectSameIds(64, vocab, 150, 2000 + vocab);
  for (int vocab : {200, 1001}) ExpectSameIds(256, vocab, 100, 3000 + vocab);
}

TEST(KernelsEmuSampling, EqualsTheHostOnLargeVocabs) {
  ExpectSameIds(256, 5003, 24, 4);
  ExpectSameIds(1024, 32000, 12, 5);
}

// Targeted rows: the tie and cut rules that a random row rarely pins down.
TEST(KernelsEmuSampling, TiesCutsAndEdgeUniforms) {
  const int vocab = 40;
  std::vector<Row> rows;
  auto add = [&](std::vector<float> l, float t, int32_t k, float p, float min_p, double u) {
    Row r;
    r.logits = std::move(l);
    r.params.temperature = t;
    r.params.top_k = k;
    r.params.top_p = p;
    r.params.min_p = min_p;
    r.u = u;
    rows.push_back(std::move(r));
  };
  const double last = std::nextafter(1.0, 0.0);
  std::vector<float> flat(vocab, 1.0f);
  for (double u : {0.0, 0.5, last}) {
    add(flat, 1.0f, 3, 1.0f, 0.0f, u);    // top-k over a 40-way tie: ids 0..2
    add(flat, 1.0f, 0, 0.30f, 0.0f, u);   // top-p over a tie: the lowest ids
    add(flat, 1.0f, 0, 1.0f, 1.0f, u);    // min-p 1 keeps every tie of the best
    add(flat, 1e-38f, 0, 1.0f, 0.0f, u);  // tiny T: uniform over the tied best
    add(flat, 1e-45f, 0, 1.0f, 0.0f, u);  // 1 / T overflows: greedy
  }
  std::vector<float> zeros(vocab, 0.0f);
  for (int i = 0; i < vocab; i += 2) zeros[i] = -0.0f;  // -0 ties +0
  add(zeros, 1.0f, 5, 1.0f, 0.0f, last);
  add(zeros, 1.0f, 0, 0.2f, 0.0f, 0.7);
  std::vector<float> nan_first(vocab, -kInf);
  nan_first[0] = kNaN;
  add(nan_first, 1.0f, 0, 1.0f, 0.0f, 0.3);  // greedy fallback: first -inf, not the NaN
  std::vector<float> steps(vocab);
  for (int i = 0; i < vocab; ++i) steps[i] = static_cast<float>(i % 5);
  for (double u : {0.0, 0.25, 0.5, 0.75, last}) {
    add(steps, 0.5f, 11, 0.6f, 0.05f, u);
    add(steps, 2.0f, 0, 0.9f, 0.2f, u);
  }
  const std::vector<int32_t> got = RunKernel(32, vocab, rows);
  ASSERT_EQ(got.size(), rows.size());
  RowDrawer host;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(got[i], host.Draw(rows[i].logits, rows[i].params, rows[i].u))
        << "row " << i << ": " << Describe(rows[i]);
  }
  // Spot checks of the rules themselves (the host is tested on its own elsewhere).
  EXPECT_EQ(got[0], 0);   // top-k 3 over a tie, u = 0: id 0
  EXPECT_EQ(got[10], 2);  // same with u = 1 - 2^-53: the third tie
  EXPECT_EQ(got[4], 0);   // greedy when 1 / T is +inf
  EXPECT_EQ(got[17], 1);  // the greedy fallback skips the NaN: the first -inf
}

// With a seeded sequence: the uniform the engine would send (TakeUniform) makes the
// kernel pick what SequenceSampler::Sample picks.
TEST(KernelsEmuSampling, SeededSequenceSamplerAgrees) {
  const int vocab = 500;
  CaseMaker maker(77);
  std::vector<Row> rows;
  std::vector<int32_t> want;
  for (int i = 0; i < 60; ++i) {
    SamplingParams p = maker.Params(vocab);
    p.seed = 1000 + i;
    SequenceSampler host(p, 0), device(p, 0);
    Row r;
    r.logits = maker.Logits(vocab, i);
    r.params = p;
    r.u = device.TakeUniform();
    want.push_back(host.Sample(r.logits).token);
    rows.push_back(std::move(r));
  }
  const std::vector<int32_t> got = RunKernel(128, vocab, rows);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace ptxserve::kernels::testing
