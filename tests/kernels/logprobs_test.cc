// The logprobs kernel (kernels/logprobs.h) on the PTX emulator against (a) a double
// reference of its documented rules, over random rows with ties, NaN, -inf, +inf,
// all -inf, odd vocab sizes and chosen ids outside the row, and (b) the host sampler's
// own log-probs (SequenceSampler::Sample with params.logprobs set); and with ptxas at
// sm_80 / sm_90 when ptxas is installed.
#include "kernels/logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampler.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// The documented tolerance: |got - want| <= kTol + kTol * |want|.
constexpr double kTol = 1e-5;

struct Row {
  std::vector<float> logits;
  int32_t chosen = 0;
  int32_t top_n = 0;
};

// Double reference of the header's rules: exact exp and log, a stable sort for ranks.
std::vector<LogprobsEntry> Reference(const Row& row, int max_top, std::vector<double>* exact) {
  const std::vector<float>& l = row.logits;
  const int vocab = static_cast<int>(l.size());
  double m = -kInf;
  for (float x : l) {
    if (!std::isnan(x)) m = std::max<double>(m, x);
  }
  double lse = m;
  if (std::isfinite(m)) {
    double s = 0;
    for (float x : l) s += std::isnan(x) ? 0.0 : std::exp(x - m);
    lse = m + std::log(s);
  }
  std::vector<LogprobsEntry> rec(1 + max_top, LogprobsEntry{-1, -kInf});
  exact->assign(1 + max_top, -kInf);
  rec[0].id = row.chosen;
  if (row.chosen >= 0 && row.chosen < vocab) {
    const float x = l[row.chosen];
    (*exact)[0] = (std::isnan(x) ? -kInf : x) - lse;
  } else {
    (*exact)[0] = kNan;
  }
  std::vector<int> order;
  for (int i = 0; i < vocab; ++i) {
    if (l[i] > -kInf) order.push_back(i);  // neither -inf nor NaN
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  const int n = std::min<int>({std::max(row.top_n, 0), max_top, static_cast<int>(order.size())});
  for (int j = 0; j < n; ++j) {
    rec[1 + j].id = order[j];
    (*exact)[1 + j] = l[order[j]] - lse;
  }
  for (size_t j = 0; j < rec.size(); ++j) rec[j].logprob = static_cast<float>((*exact)[j]);
  return rec;
}

// Runs the kernel over `rows` (all of one vocab) and returns the records.
std::vector<LogprobsEntry> RunKernel(EmuHarness& h, const LogprobsConfig& cfg,
                                     const std::vector<Row>& rows) {
  const size_t vocab = rows.front().logits.size();
  std::vector<float> logits;
  std::vector<int32_t> chosen, top_n;
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    chosen.push_back(r.chosen);
    top_n.push_back(r.top_n);
  }
  const size_t entries = rows.size() * (1 + cfg.max_top);
  const uint64_t d_out = h.Alloc(entries * sizeof(LogprobsEntry));
  absl::StatusOr<std::string> ptx = GenerateLogprobs(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return {};
  const absl::Status st =
      h.Run(*ptx, kLogprobsEntry, LogprobsLaunch(cfg, static_cast<int64_t>(rows.size())),
            {Ptr(h.Upload(logits)), Ptr(h.Upload(chosen)), Ptr(h.Upload(top_n)), Ptr(d_out),
             U32(static_cast<uint32_t>(vocab)), U32(static_cast<uint32_t>(rows.size()))});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(LogprobsRecordBytes(cfg), static_cast<int64_t>((1 + cfg.max_top) * 8));
  return h.Download<LogprobsEntry>(d_out, entries);
}

struct Stats {
  double max_abs_err = 0;      // vs the exact (double) value
  double max_abs_err_f32 = 0;  // vs that value rounded to f32: the kernel's own error
  int values = 0;
};

// Ids exactly; values within the tolerance, NaN and infinities exactly.
void ExpectRecord(const std::vector<LogprobsEntry>& want, const std::vector<double>& exact,
                  const LogprobsEntry* got, const std::string& what, Stats* stats) {
  for (size_t j = 0; j < want.size(); ++j) {
    SCOPED_TRACE(absl::StrCat(what, " entry ", j));
    EXPECT_EQ(got[j].id, want[j].id);
    const double w = exact[j];
    const double g = got[j].logprob;
    if (std::isnan(w) || std::isinf(w)) {
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << g;
      } else {
        EXPECT_EQ(g, w);
      }
      continue;
    }
    const double err = std::fabs(g - w);
    EXPECT_LE(err, kTol + kTol * std::fabs(w)) << "got " << g << " want " << w;
    stats->max_abs_err = std::max(stats->max_abs_err, err);
    stats->max_abs_err_f32 = std::max(stats->max_abs_err_f32, std::fabs(g - want[j].logprob));
    ++stats->values;
  }
}

void CheckRows(EmuHarness& h, const LogprobsConfig& cfg, const std::vector<Row>& rows,
               const std::string& what, Stats* stats) {
  const std::vector<LogprobsEntry> got = RunKernel(h, cfg, rows);
  ASSERT_EQ(got.size(), rows.size() * (1 + cfg.max_top));
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<double> exact;
    const std::vector<LogprobsEntry> want = Reference(rows[r], cfg.max_top, &exact);
    ExpectRecord(want, exact, &got[r * (1 + cfg.max_top)],
                 absl::StrCat(what, " t", cfg.threads, " top", cfg.max_top, " row ", r), stats);
  }
}

// A random row: values in [-8, 8], quantised to 1/4 when `ties`, with a fraction of
// NaN / -inf, and a random chosen id (sometimes one with a NaN or -inf logit).
Row RandomRow(std::mt19937& rng, int vocab, int top_n, bool ties, double special) {
  std::uniform_real_distribution<float> val(-8.0f, 8.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  Row r;
  r.logits.resize(vocab);
  for (float& x : r.logits) {
    x = val(rng);
    if (ties) x = std::round(x * 4.0f) / 4.0f;
    const double c = coin(rng);
    if (c < special / 2) {
      x = kNan;
    } else if (c < special) {
      x = -kInf;
    }
  }
  r.chosen = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  r.top_n = top_n;
  return r;
}

TEST(LogprobsKernel, RandomRowsMatchReference) {
  EmuHarness h;
  std::mt19937 rng(17);
  Stats stats;
  for (int threads : {32, 64, 256}) {
    for (int vocab : {1, 7, 33, 100, 257, 1000}) {
      LogprobsConfig cfg;
      cfg.threads = threads;
      std::vector<Row> rows;
      for (int top_n : {0, 1, 5, 20}) {
        rows.push_back(RandomRow(rng, vocab, top_n, /*ties=*/false, 0.0));
        rows.push_back(RandomRow(rng, vocab, top_n, /*ties=*/true, 0.0));
        rows.push_back(RandomRow(rng, vocab, top_n, /*ties=*/true, 0.3));
      }
      CheckRows(h, cfg, rows, absl::StrCat("vocab ", vocab), &stats);
    }
  }
  EXPECT_GT(stats.values, 1000);
  std::printf("random rows: %d values, max abs error %.3g (%.3g vs f32-rounded)\n", stats.values,
              stats.max_abs_err, stats.max_abs_err_f32);
}

TEST(LogprobsKernel, SpecialRows) {
  EmuHarness h;
  const int vocab = 70;
  std::vector<Row> rows;
  auto add = [&](std::vector<float> l, int32_t chosen, int32_t top_n) {
    rows.push_back(Row{std::move(l), chosen, top_n});
  };
  const std::vector<float> all_ninf(vocab, -kInf);
  add(all_ninf, 3, 20);                        // lse = -inf: chosen NaN, nothing listed
  add(std::vector<float>(vocab, kNan), 0, 5);  // all NaN: same
  std::vector<float> mixed(vocab, -kInf);
  for (int i = 0; i < vocab; i += 3) mixed[i] = kNan;
  add(mixed, 1, 20);
  std::vector<float> three(vocab, -kInf);  // fewer finite than N
  three[69] = 1.0f;
  three[5] = 1.0f;
  three[40] = -2.0f;
  three[6] = kNan;
  add(three, 69, 20);
  add(three, 6, 20);                // NaN chosen counts as -inf
  add(three, 7, 2);                 // -inf chosen
  add(three, -1, 3);                // outside the row: NaN
  add(three, 70, 3);                // outside the row: NaN
  add(three, 5, -4);                // negative N: none
  add(three, 5, 25);                // N past max_top: max_top
  std::vector<float> pinf = three;  // +inf max: lse = +inf
  pinf[10] = kInf;
  pinf[2] = kInf;
  add(pinf, 10, 20);  // +inf - +inf = NaN; finite - +inf = -inf
  add(pinf, 69, 20);
  std::vector<float> flat(vocab, 0.5f);  // every id tied: ids in order
  add(flat, 33, 20);
  std::vector<float> rising(vocab);  // ascending logits: every visit inserts
  std::iota(rising.begin(), rising.end(), -30.0f);
  add(rising, 0, 20);
  std::vector<float> falling(rising.rbegin(), rising.rend());
  add(falling, 69, 20);
  std::vector<float> wide = rising;  // far below the max: tiny exp terms
  for (float& x : wide) x *= 50.0f;
  add(wide, 1, 7);
  Stats stats;
  for (int threads : {32, 256}) {
    for (int max_top : {0, 1, 20, 32}) {
      LogprobsConfig cfg;
      cfg.threads = threads;
      cfg.max_top = max_top;
      CheckRows(h, cfg, rows, "special", &stats);
    }
  }
}

TEST(LogprobsKernel, LargeVocabRows) {
  EmuHarness h;
  std::mt19937 rng(5);
  const int vocab = 32000;
  std::vector<Row> rows;
  rows.push_back(RandomRow(rng, vocab, 20, /*ties=*/false, 0.0));
  rows.push_back(RandomRow(rng, vocab, 20, /*ties=*/true, 0.01));
  Row peaked = RandomRow(rng, vocab, 5, /*ties=*/false, 0.0);
  for (float& x : peaked.logits) x *= 0.01f;  // near-uniform: the sum is ~vocab
  rows.push_back(peaked);
  Stats stats;
  CheckRows(h, LogprobsConfig{}, rows, "vocab 32000", &stats);
  // The largest vocab the tolerance is documented for, near-uniform: sum ~131072.
  Row big = RandomRow(rng, 131072, 20, /*ties=*/true, 0.001);
  for (float& x : big.logits) x *= 0.001f;
  CheckRows(h, LogprobsConfig{}, {big}, "vocab 131072", &stats);
  std::printf("vocab 32000 / 131072: %d values, max abs error %.3g (%.3g vs f32-rounded)\n",
              stats.values, stats.max_abs_err, stats.max_abs_err_f32);
}

// Rows past num_rows (a larger grid) write nothing.
TEST(LogprobsKernel, RowsPastNumRowsUntouched) {
  EmuHarness h;
  LogprobsConfig cfg;
  cfg.max_top = 2;
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6};  // 2 rows of 3
  const std::vector<int32_t> chosen = {0, 1}, top_n = {2, 2};
  const uint64_t d_out = h.Alloc(2 * LogprobsRecordBytes(cfg));
  LaunchDims dims = LogprobsLaunch(cfg, 2);
  ASSERT_EQ(dims.grid[0], 2u);
  ASSERT_EQ(dims.block[0], 256u);
  ASSERT_TRUE(h.Run(*GenerateLogprobs(cfg), kLogprobsEntry, dims,
                    {Ptr(h.Upload(logits)), Ptr(h.Upload(chosen)), Ptr(h.Upload(top_n)), Ptr(d_out),
                     U32(3), U32(1)})
                  .ok());
  const std::vector<uint32_t> words = h.Download<uint32_t>(d_out, 12);
  EXPECT_EQ(words[0], 0u);                                             // row 0 chosen id
  EXPECT_EQ(words[2], 2u);                                             // row 0 best id
  EXPECT_EQ(words[4], 1u);                                             // row 0 second id
  for (int w = 6; w < 12; ++w) EXPECT_EQ(words[w], 0xffffffffu) << w;  // poison kept
}

// The host sampler's own log-probs (greedy, so the chosen token is its argmax).
TEST(LogprobsKernel, MatchesHostSampler) {
  EmuHarness h;
  std::mt19937 rng(23);
  Stats stats;
  for (int vocab : {5, 100, 1000, 32000}) {
    for (int n : {1, 5, 20}) {
      const bool ties = n != 5;
      Row row = RandomRow(rng, vocab, n, ties, vocab == 32000 ? 0.01 : 0.2);
      SamplingParams p;
      p.temperature = 0.0f;
      p.logprobs = n;
      SequenceSampler sampler(p, 1);
      const SampleResult host = sampler.Sample(row.logits);
      row.chosen = host.token;
      LogprobsConfig cfg;
      const std::vector<LogprobsEntry> got = RunKernel(h, cfg, {row});
      ASSERT_EQ(got.size(), 21u);
      const std::string what = absl::StrCat("vocab ", vocab, " n ", n);
      std::vector<LogprobsEntry> want(21, LogprobsEntry{-1, -kInf});
      want[0] = {host.token, host.logprob};
      for (size_t j = 0; j < host.top.size(); ++j)
        want[1 + j] = {host.top[j].id, host.top[j].logprob};
      std::vector<double> exact;
      for (const LogprobsEntry& e : want) exact.push_back(e.logprob);
      ExpectRecord(want, exact, got.data(), what, &stats);
      if (vocab >= 1000) {
        EXPECT_EQ(host.top.size(), static_cast<size_t>(n)) << what;
      }
    }
  }
  std::printf("vs host sampler: %d values, max abs error %.3g\n", stats.values, stats.max_abs_err);
}

TEST(LogprobsKernel, ConfigAndRegistry) {
  LogprobsConfig cfg;
  EXPECT_TRUE(cfg.Validate().ok());
  EXPECT_EQ(cfg.Key(), "logprobs:t256:top20:sm80_ptx78");
  EXPECT_EQ(LogprobsRecordBytes(cfg), 168);
  for (auto [threads, max_top] : {std::pair{16, 20}, {100, 20}, {2048, 20}, {256, -1}, {256, 33}}) {
    cfg.threads = threads;
    cfg.max_top = max_top;
    absl::StatusOr<std::string> ptx = GenerateLogprobs(cfg);
    EXPECT_FALSE(ptx.ok()) << threads << " " << max_top;
  }
  absl::StatusOr<std::string> byname =
      GeneratePtxByName("logprobs", {{"max_top", "5"}, {"threads", "128"}, {"sm", "90"}});
  ASSERT_TRUE(byname.ok()) << byname.status();
  EXPECT_NE(byname->find("logprobs:t128:top5:sm90_ptx78"), std::string::npos);
  EXPECT_FALSE(GeneratePtxByName("logprobs", {{"max_top", "40"}}).ok());
}

TEST(LogprobsKernel, PtxasAssemblesWithoutSpills) {
  const std::string ptxas = FindPtxas();
  if (ptxas.empty()) {
    if (InCi()) FAIL() << "CI=true but ptxas is missing";
    GTEST_SKIP() << "ptxas not found (PATH, /usr/local/cuda/bin): PTX not assembled";
  }
  for (ptx::Target target : {ptx::Target{80, 78}, ptx::Target{90, 78}, ptx::Target{80, 70}}) {
    std::vector<PtxModule> modules;
    for (int threads : {32, 256, 1024}) {
      for (int max_top : {0, 1, 20, 32}) {
        LogprobsConfig c;
        c.threads = threads;
        c.max_top = max_top;
        c.target = target;
        absl::StatusOr<std::string> ptx = GenerateLogprobs(c);
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        modules.push_back({c.Key(), *ptx});
      }
    }
    const PtxasResult r = AssembleAll(ptxas, modules, target.SmName());
    ASSERT_TRUE(r.ok) << r.log;
    ASSERT_EQ(r.entries.size(), modules.size());
    for (const PtxasEntryInfo& e : r.entries) {
      std::printf("%-40s registers %3d spill stores %d loads %d\n", e.label.c_str(), e.registers,
                  e.spill_stores, e.spill_loads);
      EXPECT_GT(e.registers, 0) << e.label;
      // 1024 threads cap a thread at 64 registers; the default 256 must not spill.
      if (e.label.find(":t1024:") == std::string::npos) {
        EXPECT_EQ(e.spill_stores, 0) << e.label;
        EXPECT_EQ(e.spill_loads, 0) << e.label;
      }
    }
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
