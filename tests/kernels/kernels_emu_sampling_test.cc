// The sampling kernel on the PTX emulator against a double-precision reference of
// its documented rules (kernels/sampling.h): greedy, temperature, top-k with ties
// broken by lower id, top-p over the top-k survivors, and the id-order draw.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/sampling.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float u;
};

int32_t RefGreedy(const float* l, int n) {
  int32_t best = -1;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(l[i])) continue;
    if (best < 0 || l[i] > l[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

int32_t RefSample(const float* l, int n, const RowParams& p) {
  if (p.temperature <= 0 || p.top_k == 1) return RefGreedy(l, n);
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    if (!std::isnan(l[i])) m = std::max(m, l[i]);
  }
  if (!std::isfinite(m)) return RefGreedy(l, n);
  std::vector<double> w(n);
  for (int i = 0; i < n; ++i) w[i] = std::isnan(l[i]) ? 0.0 : std::exp((l[i] - m) / p.temperature);
  auto key = [&](int i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
  size_t kept = (p.top_k > 0 && p.top_k < n) ? static_cast<size_t>(p.top_k) : order.size();
  if (p.top_p < 1.0f) {
    double total = 0;
    for (size_t j = 0; j < kept; ++j) total += w[order[j]];
    double cum = 0;
    for (size_t j = 0; j < kept; ++j) {
      cum += w[order[j]];
      if (cum >= p.top_p * total) {
        kept = j + 1;
        break;
      }
    }
  }
  std::vector<bool> in(n, false);
  double total = 0;
  for (size_t j = 0; j < kept; ++j) {
    in[order[j]] = true;
    total += w[order[j]];
  }
  const double target = p.u * total;
  double cum = 0;
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (!in[i] || w[i] <= 0) continue;
    cum += w[i];
    last = i;
    if (cum > target) return i;
  }
  return last;
}

TEST(KernelsEmuSampling, MatchesReferenceRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(9);
  for (int threads : {32, 256}) {
    for (int vocab : {100, 2048, 5003}) {
      SCOPED_TRACE(absl::StrCat("threads ", threads, " vocab ", vocab));
      std::vector<RowParams> params = {
          {0.0f, 0, 1.0f, 0.5f},   {1.0f, 1, 1.0f, 0.7f},   {0.8f, 5, 1.0f, 0.3f},
          {1.0f, 0, 0.9f, 0.61f},  {1.2f, 50, 0.5f, 0.05f}, {2.0f, 0, 1.0f, 0.42f},
          {0.5f, 3, 1.0f, 0.99f},  {1.0f, 0, 0.3f, 0.2f},   {1.0f, 7, 1.0f, 0.5f},
          {1.0f, 0, 1.0f, 0.999f}, {0.7f, 0, 1.0f, 0.0f},   {1.0f, 20, 0.8f, 0.77f},
      };
      const int rows = static_cast<int>(params.size());
      std::vector<float> l = RandomFloats(rng, rows * vocab, -4, 4);
      // Row 6: five-way tie at the top with top_k = 3 keeps the three lowest ids.
      for (int i : {7, 3, 90, 40, 11}) l[6 * vocab + (i % vocab)] = 10.0f;
      // Row 8: NaNs scattered among the candidates (they weigh and rank nothing).
      for (int i = 0; i < vocab; i += 7) l[8 * vocab + i] = nan;
      // Row 9: no finite maximum (an +inf) falls back to greedy.
      l[9 * vocab + vocab / 2] = inf;
      std::vector<float> temp, topp, uni;
      std::vector<int32_t> topk;
      for (const RowParams& p : params) {
        temp.push_back(p.temperature);
        topk.push_back(p.top_k);
        topp.push_back(p.top_p);
        uni.push_back(p.u);
      }
      SamplingConfig cfg;
      cfg.threads = threads;
      absl::StatusOr<std::string> ptx = GenerateSampling(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      EmuHarness h;
      const uint64_t dl = h.Upload(l), dt = h.Upload(temp), dk = h.Upload(topk);
      const uint64_t dp = h.Upload(topp), du = h.Upload(uni), dout = h.Alloc(rows * 4);
      const absl::Status st =
          h.Run(*ptx, kSamplingEntry, SamplingLaunch(cfg, rows),
                {Ptr(dl), Ptr(dt), Ptr(dk), Ptr(dp), Ptr(du), Ptr(dout), U32(vocab), U32(rows)});
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<int32_t> got = h.Download<int32_t>(dout, rows);
      for (int r = 0; r < rows; ++r) {
        EXPECT_EQ(got[r], RefSample(&l[r * vocab], vocab, params[r])) << "row " << r;
      }
      // The tie row can only pick among ids 3, 7, 11 (the three lowest of the five).
      EXPECT_TRUE(got[6] == 3 || got[6] == 7 || got[6] == 11) << got[6];
    }
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
