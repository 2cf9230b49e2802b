// Prefix caching through the whole engine on any backend: scenarios of requests run in
// waves (each wave enqueued at once and finished before the next, so earlier waves fill
// the cache), run once with caching on and once off, must give the same tokens and
// log-probs. Shared by the fake, CPU and emulated backends' tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve::testing {

// A backend under test and how to run engines over it.
struct PrefixFixture {
  // A fresh backend with a pool of `num_blocks` blocks (0: the fixture's default).
  std::function<std::unique_ptr<Backend>(int32_t num_blocks)> make_backend;
  const Tokenizer* tokenizer = nullptr;
  int32_t block_size = 4;
  int64_t vocab = 0;
  int32_t max_new_tokens = 8;
  EngineConfig config;  // prefix_caching is set per run
  // Largest |difference| between the two runs' log-probs (0: bit-identical).
  double logprob_tolerance = 0;
};

struct Outcome {
  // Per request, in wave order then index order.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<SampleResult>> logprobs;
  std::vector<int32_t> cached_prompt_tokens;
  EngineStats stats;  // when the last wave finished
};

struct Scenario {
  std::string name;
  int waves = 2;
  int32_t num_blocks = 0;  // 0: the fixture's default pool
  // The prompts of wave w, given what the earlier waves produced.
  std::function<std::vector<std::vector<int32_t>>(int w, const Outcome& so_far)> prompts;
  // Sized so that sequences are preempted, with and without caching.
  bool under_pressure = false;
};

// Deterministic prompt ids in [3, vocab).
std::vector<int32_t> Prompt(int32_t n, int64_t vocab, uint32_t seed);
// `a` followed by `b`.
std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b);

// The requests of a wave: request i is greedy, seeded, or seeded with penalties and
// log-probs, by i % 3; seeds depend on (wave, i) only.
std::vector<EngineRequest> WaveRequests(const PrefixFixture& f, int wave,
                                        const std::vector<std::vector<int32_t>>& prompts);

// The scenarios the issue lists (shared prefixes on and off block boundaries, fully
// cached prompts, divergence inside a block, many requests with one prefix at once,
// parallel samples, multi-turn, preemption under memory pressure), sized for the
// fixture's block size.
std::vector<Scenario> PrefixScenarios(const PrefixFixture& f);

// Runs `s` through a fresh engine with caching on or off.
Outcome RunScenario(const PrefixFixture& f, const Scenario& s, bool prefix_caching);

// Runs each scenario on and off: same tokens and log-probs; when idle no block is
// referenced; caching on hits, caching off caches nothing.
void ExpectCachingChangesNothing(const PrefixFixture& f, const std::vector<Scenario>& scenarios);

// A request cancelled, or failed by its step, in the middle of its prefill leaves only
// the blocks it finished computing cached: a rerun of its prompt hits exactly those, and
// its tokens equal those of a run with caching off.
void ExpectInterruptedPrefillCachesOnlyComputedBlocks(const PrefixFixture& f);

// A prompt several times in one call (parallel samples): the first computes it, the others
// wait for it and start from its cached full blocks; tokens equal those with caching off.
void ExpectParallelSamplesComputeThePromptOnce(const PrefixFixture& f);

// Wraps a backend with test controls: steps can be held or failed at a given number.
class GatedBackend : public Backend {
 public:
  explicit GatedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  absl::Status Step(const StepBatch& batch, std::vector<float>* logits) override;
  bool CanSampleOnDevice(const SamplingParams& params) const override {
    return inner_->CanSampleOnDevice(params);
  }
  absl::Status StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids, std::vector<SampleResult>* logprobs) override;
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheConfig& kv_config() const override { return inner_->kv_config(); }
  std::string name() const override { return inner_->name(); }
  bool usable() const override { return inner_->usable(); }

  // Step n (1 = the warm-up) and later ones wait before running until Unblock.
  void BlockFromStep(int64_t n);
  void Unblock();
  void AwaitStepsStarted(int64_t n);
  // Step n runs, then reports a failure (its K/V rows are written but must not count).
  void FailStep(int64_t n);

 private:
  // Counts the step and waits while it is held; true when it is to fail.
  bool Enter();

  std::unique_ptr<Backend> inner_;
  absl::Mutex mu_;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t block_from_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fail_at_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ptxserve::testing
