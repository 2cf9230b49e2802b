// The penalties kernel (kernels/penalties.h) on the PTX emulator against the host's own
// SequenceSampler::ApplyPenalties, bit for bit: random rows with ties, NaN, +-inf, signed
// zeros and denormals; histories from prompts and generated tokens with counts 1..many,
// ids 0, vocab - 1 and past the vocab; each penalty kind alone and together, negative
// presence / frequency, repetition below and above 1; rows without entries copied as they
// are. And ptxas at sm_80 / sm_90 when ptxas is installed.
#include "kernels/penalties.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

static_assert(sizeof(PenaltyEntry) == sizeof(PenaltyEntryWords));

// One row: its logits, the sampler holding its history, and the entries sent.
struct Row {
  std::vector<float> logits;
  std::unique_ptr<SequenceSampler> sampler;
  std::vector<PenaltyEntry> entries;
};

std::vector<float> RandomRow(std::mt19937& rng, int vocab) {
  std::vector<float> l(vocab);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::uniform_int_distribution<int> kind(0, 39);
  for (int i = 0; i < vocab; ++i) {
    switch (kind(rng)) {
      case 0:
        l[i] = kNan;
        break;
      case 1:
        l[i] = -kInf;
        break;
      case 2:
        l[i] = kInf;
        break;
      case 3:
        l[i] = 0.0f;
        break;
      case 4:
        l[i] = -0.0f;
        break;
      case 5:
        l[i] = 1e-40f;
        break;  // denormal
      case 6:
        l[i] = -3e-39f;
        break;  // denormal
      case 7:
        l[i] = 1.5f;
        break;  // ties
      default:
        l[i] = u(rng);
    }
  }
  return l;
}

// A sampler with `p` and a random history: a prompt (ids 0, vocab - 1, one past the vocab
// and random ones) and generated tokens, some repeated many times.
std::unique_ptr<SequenceSampler> RandomHistory(std::mt19937& rng, const SamplingParams& p,
                                               int vocab) {
  auto s = std::make_unique<SequenceSampler>(p, 1);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> prompt = {0, vocab - 1, vocab + 3, -2};
  for (int i = 0; i < 6; ++i) prompt.push_back(id(rng));
  s->AddPromptTokens(prompt);
  const int32_t hot = id(rng);
  std::uniform_int_distribution<int> n(0, 40);
  const int generated = n(rng);
  for (int t = 0; t < generated; ++t) {
    s->Accept(t % 3 == 0 ? hot : (t % 7 == 0 ? vocab - 1 : (t % 11 == 0 ? 0 : id(rng))));
  }
  return s;
}

// Runs the kernel over `rows` (one vocab); returns the penalised rows, concatenated.
std::vector<float> RunKernel(EmuHarness& h, const PenaltiesConfig& cfg, std::vector<Row>& rows) {
  const int vocab = static_cast<int>(rows.front().logits.size());
  std::vector<float> logits, rep, pres, freq;
  std::vector<int32_t> offsets = {0};
  std::vector<PenaltyEntryWords> entries;
  for (Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    const SamplingParams& p = r.sampler->params();
    rep.push_back(p.repetition_penalty);
    pres.push_back(p.presence_penalty);
    freq.push_back(p.frequency_penalty);
    r.entries.clear();
    r.sampler->PenaltyEntries(vocab, &r.entries);
    for (const PenaltyEntry& e : r.entries) entries.push_back({e.id, e.count, e.repeated});
    offsets.push_back(static_cast<int32_t>(entries.size()));
  }
  if (entries.empty()) entries.push_back({});  // a valid pointer; no row reads it
  const uint64_t d_out = h.Alloc(logits.size() * 4);
  absl::StatusOr<std::string> ptx = GeneratePenalties(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return {};
  const absl::Status st =
      h.Run(*ptx, kPenaltiesEntry, PenaltiesLaunch(cfg, static_cast<int64_t>(rows.size())),
            {Ptr(h.Upload(logits)), Ptr(d_out), Ptr(h.Upload(offsets)), Ptr(h.Upload(entries)),
             Ptr(h.Upload(rep)), Ptr(h.Upload(pres)), Ptr(h.Upload(freq)),
             U32(static_cast<uint32_t>(vocab)), U32(static_cast<uint32_t>(rows.size()))});
  EXPECT_TRUE(st.ok()) << st;
  return h.Download<float>(d_out, logits.size());
}

// got == want bit for bit, except that any NaN matches any NaN (payloads may differ).
bool SameFloat(float got, float want) {
  if (std::isnan(want)) return std::isnan(got);
  uint32_t a, b;
  std::memcpy(&a, &got, 4);
  std::memcpy(&b, &want, 4);
  return a == b;
}

// Returns how many elements the penalties changed (on the host).
int CheckRows(EmuHarness& h, const PenaltiesConfig& cfg, std::vector<Row>& rows,
              const std::string& what) {
  const std::vector<float> got = RunKernel(h, cfg, rows);
  const size_t vocab = rows.front().logits.size();
  EXPECT_EQ(got.size(), rows.size() * vocab) << what;
  if (got.size() != rows.size() * vocab) return 0;
  int changed = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<float> want = rows[r].logits;
    rows[r].sampler->ApplyPenalties(want);
    int misses = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const float g = got[r * vocab + i];
      changed += !SameFloat(want[i], rows[r].logits[i]);
      if (!SameFloat(g, want[i]) && ++misses <= 5) {
        ADD_FAILURE() << what << " row " << r << " id " << i << ": got " << g << " want " << want[i]
                      << " (raw " << rows[r].logits[i] << ")";
      }
    }
  }
  return changed;
}

SamplingParams Penalties(float rep, float pres, float freq) {
  SamplingParams p;
  p.repetition_penalty = rep;
  p.presence_penalty = pres;
  p.frequency_penalty = freq;
  return p;
}

TEST(PenaltiesKernel, RandomRowsMatchTheHostBitForBit) {
  EmuHarness h;
  std::mt19937 rng(77);
  const SamplingParams kinds[] = {
      Penalties(1.3f, 0.0f, 0.0f),  Penalties(0.7f, 0.0f, 0.0f),  Penalties(1.0f, 0.5f, 0.0f),
      Penalties(1.0f, 0.0f, 0.35f), Penalties(1.0f, -0.4f, 0.0f), Penalties(1.0f, 0.0f, -1.1f),
      Penalties(1.7f, 0.9f, 0.13f), Penalties(0.9f, -0.3f, 2.0f), Penalties(1.0f, 0.0f, 0.0f),
      Penalties(1.1f, 1e-3f, 3e7f),
  };
  int changed = 0;
  for (int vocab : {1, 7, 33, 256, 1000, 2051}) {
    for (int threads : {32, 256}) {
      PenaltiesConfig cfg;
      cfg.threads = threads;
      std::vector<Row> rows;
      for (const SamplingParams& p : kinds) {
        Row& r = rows.emplace_back();
        r.logits = RandomRow(rng, vocab);
        r.sampler = RandomHistory(rng, p, vocab);
      }
      changed += CheckRows(h, cfg, rows, absl::StrCat("vocab ", vocab, " threads ", threads));
    }
  }
  EXPECT_GT(changed, 1000) << "the penalties rewrote too few elements to test anything";
}

// A history longer than the block: entries loop past the thread count.
TEST(PenaltiesKernel, LongHistoriesAndLargeVocab) {
  EmuHarness h;
  std::mt19937 rng(5);
  const int vocab = 32000;
  std::vector<Row> rows;
  for (const SamplingParams& p :
       {Penalties(1.2f, 0.4f, 0.1f), Penalties(1.0f, 0.2f, 0.6f), Penalties(1.0f, 0.0f, 0.0f)}) {
    Row& r = rows.emplace_back();
    r.logits = RandomRow(rng, vocab);
    r.sampler = std::make_unique<SequenceSampler>(p, 1);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 700; ++i) prompt.push_back(static_cast<int32_t>(rng() % vocab));
    r.sampler->AddPromptTokens(prompt);
    for (int t = 0; t < 900; ++t) r.sampler->Accept(static_cast<int32_t>(rng() % 600));
  }
  PenaltiesConfig cfg;
  cfg.threads = 64;
  EXPECT_GT(CheckRows(h, cfg, rows, "vocab 32000"), 500);
  EXPECT_GT(rows[0].entries.size(), 64u * 4);
  EXPECT_TRUE(rows[2].entries.empty());
}

// Rows past num_rows (a larger grid) write nothing; a row without entries is a copy.
TEST(PenaltiesKernel, RowsPastNumRowsUntouchedAndEmptyListsCopy) {
  EmuHarness h;
  PenaltiesConfig cfg;
  const std::vector<float> logits = {1, -2, 3, 4, 5, 6};  // 2 rows of 3
  const std::vector<int32_t> offsets = {0, 0, 1};
  const std::vector<PenaltyEntryWords> entries = {{0, 1, 1}};
  const std::vector<float> rep = {2.0f, 2.0f}, pres = {1.0f, 1.0f}, freq = {0.5f, 0.5f};
  const uint64_t d_out = h.Alloc(6 * 4);
  LaunchDims dims = PenaltiesLaunch(cfg, 2);
  ASSERT_EQ(dims.grid[0], 2u);
  ASSERT_EQ(dims.block[0], 256u);
  ASSERT_TRUE(
      h.Run(*GeneratePenalties(cfg), kPenaltiesEntry, dims,
            {Ptr(h.Upload(logits)), Ptr(d_out), Ptr(h.Upload(offsets)), Ptr(h.Upload(entries)),
             Ptr(h.Upload(rep)), Ptr(h.Upload(pres)), Ptr(h.Upload(freq)), U32(3), U32(1)})
          .ok());
  const std::vector<uint32_t> words = h.Download<uint32_t>(d_out, 6);
  for (int i = 0; i < 3; ++i) {
    float x;
    std::memcpy(&x, &words[i], 4);
    EXPECT_EQ(x, logits[i]) << i;  // row 0 has no entries
  }
  for (int w = 3; w < 6; ++w) EXPECT_EQ(words[w], 0xffffffffu) << w;  // poison kept
}

TEST(PenaltiesKernel, RegistryAndConfig) {
  absl::StatusOr<std::string> byname =
      GeneratePtxByName("penalties", {{"threads", "128"}, {"sm", "90"}});
  ASSERT_TRUE(byname.ok()) << byname.status();
  EXPECT_NE(byname->find("penalties:t128:sm90"), std::string::npos);
  // IEEE ops only: nothing ptxas may contract or approximate.
  EXPECT_NE(byname->find("div.rn.f32"), std::string::npos);
  EXPECT_EQ(byname->find("div.approx"), std::string::npos);
  EXPECT_EQ(byname->find("div.full"), std::string::npos);
  EXPECT_EQ(byname->find("mul.f32"), std::string::npos);
  EXPECT_EQ(byname->find("sub.f32"), std::string::npos);
  EXPECT_EQ(byname->find(".ftz"), std::string::npos);
  EXPECT_FALSE(GeneratePtxByName("penalties", {{"threads", "48"}}).ok());
}

TEST(PenaltiesKernel, PtxasAssemblesWithoutSpills) {
  const std::string ptxas = FindPtxas();
  if (ptxas.empty()) {
    if (InCi()) FAIL() << "CI=true but ptxas is missing";
    GTEST_SKIP() << "ptxas not found (PATH, /usr/local/cuda/bin): PTX not assembled";
  }
  for (ptx::Target target : {ptx::Target{80, 78}, ptx::Target{90, 78}, ptx::Target{80, 70}}) {
    std::vector<PtxModule> modules;
    for (int threads : {32, 256, 1024}) {
      PenaltiesConfig c;
      c.threads = threads;
      c.target = target;
      absl::StatusOr<std::string> ptx = GeneratePenalties(c);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      modules.push_back({c.Key(), *ptx});
    }
    const PtxasResult r = AssembleAll(ptxas, modules, target.SmName());
    ASSERT_TRUE(r.ok) << r.log;
    ASSERT_EQ(r.entries.size(), modules.size());
    for (const PtxasEntryInfo& e : r.entries) {
      std::printf("%-40s registers %3d spill stores %d loads %d\n", e.label.c_str(), e.registers,
                  e.spill_stores, e.spill_loads);
      EXPECT_GT(e.registers, 0) << e.label;
      EXPECT_EQ(e.spill_stores, 0) << e.label;
      EXPECT_EQ(e.spill_loads, 0) << e.label;
    }
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
