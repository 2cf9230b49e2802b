// The serving engine's own cost per step, outside the backend: scheduling (building the
// StepBatch, block allocation), and the engine's bookkeeping around a step (sampling,
// stop checks, handing outputs to the result streams). The backend is a stand-in that
// only writes logits, so what is measured is everything the engine adds.
//
//   build/bench/serve_bench
//   build/bench/serve_bench --benchmark_filter=Schedule
//
// Both run with prefix caching off and on (caching:0/1): on, every block that fills is
// hashed and offered to the cache, and freed blocks stay cached.
//
// Counters: sched_us = Scheduler::Schedule + Commit per step; overhead_us = the
// engine's time per step outside Backend::Step (what ptxserve_step_overhead_seconds
// measures in production); sample_us_per_seq = its sampling + streaming part per
// sequence.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

constexpr int32_t kVocab = 2048;  // the shared tinystories model's
constexpr int32_t kContext = 512;

// One letter per token; ids 0/1 special.
class LetterTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override {
    return std::vector<int32_t>{};
  }
  std::string Decode(std::span<const int32_t>, bool) const override { return ""; }
  std::string TokenBytes(int32_t id, bool skip) const override {
    if (id < 2) return skip ? "" : "<s>";
    return std::string(1, static_cast<char>('a' + id % 26));
  }
  bool StripsLeadingSpace() const override { return false; }
  int32_t vocab_size() const override { return kVocab; }
  int32_t bos_id() const override { return 0; }
  int32_t eos_id() const override { return 1; }
  bool IsSpecial(int32_t id) const override { return id < 2; }
  std::string IdToToken(int32_t) const override { return ""; }
  int32_t TokenToId(std::string_view) const override { return -1; }
};

// Writes varied logits (so sampling does real work) and nothing else.
class LogitsOnlyBackend : public Backend {
 public:
  explicit LogitsOnlyBackend(KvCacheConfig kv) : kv_(kv) {
    config_.vocab_size = kVocab;
    config_.max_position_embeddings = kContext;
    config_.architecture = "LogitsOnly";
    row_.resize(kVocab);
    uint64_t x = 88172645463325252ULL;
    for (auto& v : row_) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = static_cast<float>(x % 1000) / 100.0f;
    }
    row_[1] = -100.0f;  // no EOS
  }
  absl::Status Step(const StepBatch& b, std::vector<float>* logits) override {
    logits->resize(b.logits_rows.size() * kVocab);
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      std::copy(row_.begin(), row_.end(), logits->begin() + r * kVocab);
      (*logits)[r * kVocab + (b.token_ids[b.logits_rows[r]] * 7 + 3) % kVocab] += 5.0f;
    }
    return absl::OkStatus();
  }
  const ModelConfig& config() const override { return config_; }
  const KvCacheConfig& kv_config() const override { return kv_; }
  std::string name() const override { return "logits-only"; }

 private:
  ModelConfig config_;
  KvCacheConfig kv_;
  std::vector<float> row_;
};

// Scheduler alone: `batch` sequences with prompts of their own decoding at contexts of
// 100..400 tokens.
void BM_Schedule(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  KvBlockManager kv(batch * (kContext / 16 + 1), 16, state.range(1) != 0, 1);
  Scheduler sched({batch, 4096, 512}, &kv);
  std::vector<SchedSequence> seqs(batch);
  for (int i = 0; i < batch; ++i) {
    seqs[i].id = i + 1;
    seqs[i].arrival = i + 1;
    seqs[i].tokens.assign(100 + (i * 37) % 300, 5 + i);
    seqs[i].tokens.reserve(kContext);
    sched.Add(&seqs[i]);
  }
  StepPlan plan;
  sched.Schedule(&plan);  // prefill everything once
  sched.Commit(plan);
  for (auto& s : seqs) s.tokens.push_back(7);
  int steps = 0;
  for (auto _ : state) {
    sched.Schedule(&plan);
    sched.Commit(plan);
    for (const auto& e : plan.entries) e.seq->tokens.push_back(7);
    benchmark::DoNotOptimize(plan.batch.token_ids.data());
    if (++steps == 100) {  // keep contexts bounded: roll every sequence back
      state.PauseTiming();
      for (auto& s : seqs) {
        sched.Remove(&s);
        s.tokens.resize(100 + (s.id * 37) % 300);
        s.num_computed = 0;
        sched.Add(&s);
      }
      sched.Schedule(&plan);
      sched.Commit(plan);
      for (auto& s : seqs) s.tokens.push_back(7);
      steps = 0;
      state.ResumeTiming();
    }
  }
  state.counters["seqs"] = batch;
}
BENCHMARK(BM_Schedule)
    ->ArgsProduct({{1, 16, 64}, {0, 1}})
    ->ArgNames({"batch", "caching"})
    ->Unit(benchmark::kMicrosecond);

struct Totals : EngineObserver {
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> seqs{0};
  std::atomic<double> sched{0}, sample{0};
  void OnStep(const StepObservation& s) override {
    steps.fetch_add(1);
    seqs.fetch_add(s.num_seqs);
    sched.store(sched.load() + s.scheduler_seconds);  // one writer: the engine thread
    sample.store(sample.load() + s.sampling_seconds);
  }
};

// The whole engine with `batch` live sequences: per-step time outside the backend.
void BM_EngineOverhead(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const bool sampled = state.range(1) != 0;
  LetterTokenizer tok;
  Totals totals;
  EngineConfig cfg;
  cfg.max_batch_size = batch;
  cfg.max_batch_tokens = 4096;
  cfg.prefix_caching = state.range(2) != 0;
  auto backend = std::make_unique<LogitsOnlyBackend>(KvCacheConfig{batch * 33, 16});
  Engine engine(std::move(backend), tok, cfg, &totals);
  if (!engine.Start().ok()) {
    state.SkipWithError("engine start failed");
    return;
  }
  int64_t tokens = 0;
  for (auto _ : state) {
    // One round: `batch` requests of 400 tokens, consumed by a fast reader.
    std::vector<EngineRequest> reqs(batch);
    for (int i = 0; i < batch; ++i) {
      reqs[i].index = i;
      reqs[i].prompt.assign(32, 5 + i);
      reqs[i].sampling.temperature = sampled ? 0.8f : 0.0f;
      reqs[i].sampling.top_p = sampled ? 0.95f : 1.0f;
      reqs[i].sampling.seed = i;
      reqs[i].stopping.max_new_tokens = 400;
      reqs[i].stopping.ignore_eos = true;
    }
    auto stream = std::make_shared<ResultStream>();
    if (!engine.Enqueue(std::move(reqs), stream).ok()) {
      state.SkipWithError("enqueue failed");
      return;
    }
    int done = 0;
    std::vector<EngineOutput> outs;
    while (done < batch && stream->WaitPopAll(&outs)) {
      for (const auto& o : outs) {
        tokens += static_cast<int64_t>(o.token_ids.size());
        done += o.final();
      }
    }
  }
  const double steps = static_cast<double>(totals.steps.load());
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["avg_batch"] = static_cast<double>(totals.seqs.load()) / steps;
  state.counters["sched_us"] = totals.sched.load() / steps * 1e6;
  state.counters["overhead_us"] = (totals.sched.load() + totals.sample.load()) / steps * 1e6;
  state.counters["sample_us_per_seq"] =
      totals.sample.load() / static_cast<double>(totals.seqs.load()) * 1e6;
}
BENCHMARK(BM_EngineOverhead)
    ->ArgsProduct({{1, 16, 64}, {0, 1}, {0, 1}})
    ->ArgNames({"batch", "sampled", "caching"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ptxserve

BENCHMARK_MAIN();
