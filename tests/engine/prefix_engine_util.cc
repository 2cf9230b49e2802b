#include "tests/engine/prefix_engine_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/engine/engine_util.h"

namespace ptxserve::testing {
namespace {

// Enqueues `reqs` at once, runs `after_enqueue` (given their ids), and reads every
// output until each request has finished.
std::vector<Collected> RunWave(
    Engine& engine, std::vector<EngineRequest> reqs,
    const std::function<void(const std::vector<uint64_t>&)>& after_enqueue = nullptr) {
  const int n = static_cast<int>(reqs.size());
  auto stream = std::make_shared<ResultStream>();
  auto ids = engine.Enqueue(std::move(reqs), stream);
  EXPECT_TRUE(ids.ok()) << ids.status();
  if (!ids.ok()) return std::vector<Collected>(n);
  if (after_enqueue) after_enqueue(*ids);
  return Drain(*stream, n);
}

void ExpectSameLogprobs(const std::vector<SampleResult>& on, const std::vector<SampleResult>& off,
                        double tol) {
  ASSERT_EQ(on.size(), off.size());
  for (size_t t = 0; t < on.size(); ++t) {
    EXPECT_EQ(on[t].token, off[t].token);
    EXPECT_LE(std::fabs(on[t].logprob - off[t].logprob), tol) << "token " << t;
    ASSERT_EQ(on[t].top.size(), off[t].top.size());
    for (size_t k = 0; k < on[t].top.size(); ++k) {
      EXPECT_EQ(on[t].top[k].id, off[t].top[k].id);
      EXPECT_LE(std::fabs(on[t].top[k].logprob - off[t].top[k].logprob), tol);
    }
  }
}

std::unique_ptr<Engine> StartEngine(const PrefixFixture& f, std::unique_ptr<Backend> backend,
                                    EngineConfig cfg) {
  auto engine = std::make_unique<Engine>(std::move(backend), *f.tokenizer, cfg);
  const absl::Status st = engine->Start();
  EXPECT_TRUE(st.ok()) << st;
  return engine;
}

}  // namespace

std::vector<int32_t> Prompt(int32_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> p(n);
  for (int32_t i = 0; i < n; ++i) {
    p[i] = static_cast<int32_t>(3 + (seed * 7919u + static_cast<uint32_t>(i) * 104729u) %
                                        static_cast<uint32_t>(vocab - 3));
  }
  return p;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<EngineRequest> WaveRequests(const PrefixFixture& f, int wave,
                                        const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<EngineRequest> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest& r = reqs[i];
    r.request_id = absl::StrCat("w", wave, "r", i);
    r.index = static_cast<int32_t>(i);
    r.prompt = prompts[i];
    r.stopping.max_new_tokens = f.max_new_tokens;
    r.stopping.ignore_eos = true;
    SamplingParams& s = r.sampling;
    s.seed = 1000 * static_cast<uint64_t>(wave) + i;
    switch (i % 3) {
      case 0:
        s.temperature = 0;
        break;
      case 1:
        s.temperature = 1;
        break;
      default:
        // Penalties count the prompt's tokens, cached or not.
        s.temperature = 0.8f;
        s.top_p = 0.9f;
        s.repetition_penalty = 1.3f;
        s.presence_penalty = 0.5f;
        s.frequency_penalty = 0.2f;
        s.logprobs = 2;
        break;
    }
  }
  return reqs;
}

std::vector<Scenario> PrefixScenarios(const PrefixFixture& f) {
  const int32_t bs = f.block_size;
  const int64_t v = f.vocab;
  using Prompts = std::vector<std::vector<int32_t>>;
  auto shared_prefix = [v](int32_t prefix_len, uint32_t seed, int n) {
    return [=](int w, const Outcome&) {
      Prompts p;
      for (int i = 0; i < n; ++i) {
        p.push_back(Cat(Prompt(prefix_len, v, seed), Prompt(3 + (i + w) % 5, v, 10 * w + i + 50)));
      }
      return p;
    };
  };
  std::vector<Scenario> s;
  s.push_back({"a shared prefix ending on a block boundary", 2, 0, shared_prefix(2 * bs, 1, 3)});
  s.push_back({"a shared prefix ending inside a block", 2, 0, shared_prefix(2 * bs + 3, 2, 3)});
  s.push_back({"whole prompts cached", 2, 0, [=](int, const Outcome&) {
                 return Prompts{Prompt(3 * bs, v, 3), Prompt(3 * bs + 2, v, 4), Prompt(bs, v, 5)};
               }});
  s.push_back({"prompts diverging inside a block", 2, 0, [=](int w, const Outcome&) {
                 const std::vector<int32_t> base = Prompt(3 * bs, v, 6);
                 if (w == 0) return Prompts{base};
                 std::vector<int32_t> inside = base, first = base;
                 inside[2 * bs + 1] = base[2 * bs + 1] == 3 ? 4 : 3;
                 first[0] = base[0] == 3 ? 4 : 3;
                 return Prompts{
                     inside, std::vector<int32_t>(base.begin(), base.begin() + 2 * bs + 2), first};
               }});
  s.push_back({"many requests with one prefix at once", 2, 0, shared_prefix(3 * bs + 1, 7, 16)});
  s.push_back(
      {"parallel samples (one prompt several times in a call)", 2, 0, [=](int w, const Outcome&) {
         const std::vector<int32_t> p = Prompt(2 * bs + 1, v, 9);
         return w == 0 ? Prompts{p, p, Prompt(bs + 1, v, 10), p} : Prompts{p, p};
       }});
  s.push_back({"multi-turn chats", 3, 0, [=](int w, const Outcome& so_far) {
                 // Each turn: the previous turn's prompt and answer, then a new message.
                 Prompts p;
                 for (int i = 0; i < 2; ++i) {
                   if (w == 0) {
                     p.push_back(Prompt(bs + 3, v, 20 + i));
                   } else {
                     const size_t prev = static_cast<size_t>(w - 1) * 2 + i;
                     p.push_back(Cat(Cat(so_far.prompts.at(prev), so_far.tokens.at(prev)),
                                     Prompt(4, v, 30 + 10 * w + i)));
                   }
                 }
                 return p;
               }});
  // Room for about three of the eight sequences at once.
  const int32_t seq_blocks = (2 * bs + 1 + 7 + f.max_new_tokens + bs - 1) / bs;
  Scenario pressure{"preemption under memory pressure", 2, 3 * seq_blocks,
                    shared_prefix(2 * bs + 1, 8, 8)};
  pressure.under_pressure = true;
  s.push_back(pressure);
  return s;
}

Outcome RunScenario(const PrefixFixture& f, const Scenario& s, bool prefix_caching) {
  EngineConfig cfg = f.config;
  cfg.prefix_caching = prefix_caching;
  std::unique_ptr<Engine> engine = StartEngine(f, f.make_backend(s.num_blocks), cfg);
  Outcome out;
  for (int w = 0; w < s.waves; ++w) {
    const std::vector<std::vector<int32_t>> prompts = s.prompts(w, out);
    std::vector<Collected> r = RunWave(*engine, WaveRequests(f, w, prompts));
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(r[i].final_out.finish, FinishReason::kLength) << "wave " << w << " request " << i;
      out.prompts.push_back(prompts[i]);
      out.tokens.push_back(std::move(r[i].tokens));
      out.logprobs.push_back(std::move(r[i].logprobs));
      out.cached_prompt_tokens.push_back(r[i].final_out.cached_prompt_tokens);
    }
  }
  out.stats = engine->Stats();
  return out;
}

void ExpectCachingChangesNothing(const PrefixFixture& f, const std::vector<Scenario>& scenarios) {
  for (const Scenario& s : scenarios) {
    SCOPED_TRACE(s.name);
    const Outcome on = RunScenario(f, s, true);
    const Outcome off = RunScenario(f, s, false);
    ASSERT_EQ(on.tokens.size(), off.tokens.size());
    for (size_t i = 0; i < on.tokens.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("request ", i));
      EXPECT_EQ(on.tokens[i].size(), static_cast<size_t>(f.max_new_tokens));
      EXPECT_EQ(on.tokens[i], off.tokens[i]);
      ExpectSameLogprobs(on.logprobs[i], off.logprobs[i], f.logprob_tolerance);
    }
    // Idle: nothing referenced, every block cached or empty.
    EXPECT_EQ(on.stats.kv_blocks_used, 0);
    EXPECT_EQ(off.stats.kv_blocks_used, 0);
    EXPECT_GT(on.stats.kv_blocks_cached, 0);
    EXPECT_LE(on.stats.kv_blocks_cached, on.stats.kv_blocks_total);
    EXPECT_GT(on.stats.prefix_cache_hit_tokens_total, 0);
    EXPECT_EQ(off.stats.kv_blocks_cached, 0);
    EXPECT_EQ(off.stats.prefix_cache_query_tokens_total, 0);
    int64_t cached_tokens = 0;
    for (int32_t c : on.cached_prompt_tokens) cached_tokens += c;
    for (int32_t c : off.cached_prompt_tokens) EXPECT_EQ(c, 0);
    if (s.under_pressure) {
      EXPECT_GT(on.stats.preemptions_total, 0);
      EXPECT_GT(off.stats.preemptions_total, 0);
      EXPECT_GT(on.stats.prefix_cache_evictions_total, 0);
      // Readmissions after a preemption look up (and may hit) again.
      EXPECT_GE(on.stats.prefix_cache_hit_tokens_total, cached_tokens);
    } else {
      EXPECT_EQ(on.stats.prefix_cache_hit_tokens_total, cached_tokens);
    }
  }
}

void ExpectInterruptedPrefillCachesOnlyComputedBlocks(const PrefixFixture& f) {
  const int32_t bs = f.block_size;
  const std::vector<int32_t> prompt = Prompt(5 * bs + 1, f.vocab, 40);
  EngineConfig cfg = f.config;
  // Chunks of two blocks: step 2 (after the warm-up) computes blocks 0-1, step 3 blocks
  // 2-3, step 4 the rest.
  cfg.prefill_chunk = 2 * bs;
  cfg.max_batch_tokens = std::max(cfg.max_batch_tokens, 2 * bs);
  cfg.max_step_failures = 2;
  cfg.prefix_caching = false;
  const std::vector<Collected> want =
      RunWave(*StartEngine(f, f.make_backend(0), cfg), WaveRequests(f, 1, {prompt}));

  cfg.prefix_caching = true;
  for (const bool cancel : {true, false}) {
    SCOPED_TRACE(cancel ? "cancelled while step 3 runs" : "step 3 fails");
    auto gated = std::make_unique<GatedBackend>(f.make_backend(0));
    GatedBackend* gate = gated.get();
    std::unique_ptr<Engine> engine = StartEngine(f, std::move(gated), cfg);
    if (cancel) {
      gate->BlockFromStep(3);
    } else {
      gate->FailStep(3);
    }
    const std::vector<Collected> first =
        RunWave(*engine, WaveRequests(f, 0, {prompt}), [&](const std::vector<uint64_t>& ids) {
          if (!cancel) return;
          gate->AwaitStepsStarted(3);
          engine->Cancel(ids[0]);
          gate->Unblock();
        });
    EXPECT_EQ(first[0].final_out.finish, cancel ? FinishReason::kCancelled : FinishReason::kError);
    EXPECT_TRUE(first[0].tokens.empty());
    // Cancelled after step 3 ran: four blocks were computed. Failed in step 3: the two of
    // step 2 only, though step 3 wrote its rows.
    const int32_t computed_blocks = cancel ? 4 : 2;
    EXPECT_EQ(engine->Stats().kv_blocks_cached, computed_blocks);
    const std::vector<Collected> again = RunWave(*engine, WaveRequests(f, 1, {prompt}));
    EXPECT_EQ(again[0].tokens, want[0].tokens);
    EXPECT_EQ(again[0].final_out.cached_prompt_tokens, computed_blocks * bs);
    const EngineStats st = engine->Stats();
    EXPECT_EQ(st.prefix_cache_hit_tokens_total, computed_blocks * bs);
    EXPECT_EQ(st.prefix_cache_query_tokens_total, 2 * static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

void ExpectParallelSamplesComputeThePromptOnce(const PrefixFixture& f) {
  const int32_t bs = f.block_size;
  const std::vector<std::vector<int32_t>> prompts(4, Prompt(5 * bs + 2, f.vocab, 60));
  EngineConfig cfg = f.config;
  cfg.prefix_caching = false;
  const std::vector<Collected> off =
      RunWave(*StartEngine(f, f.make_backend(0), cfg), WaveRequests(f, 0, prompts));
  cfg.prefix_caching = true;
  std::unique_ptr<Engine> engine = StartEngine(f, f.make_backend(0), cfg);
  const std::vector<Collected> on = RunWave(*engine, WaveRequests(f, 0, prompts));
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("sample ", i));
    EXPECT_EQ(on[i].tokens, off[i].tokens);
    // The first computes the prompt; the others start from its five full blocks.
    EXPECT_EQ(on[i].final_out.cached_prompt_tokens, i == 0 ? 0 : 5 * bs);
    EXPECT_EQ(off[i].final_out.cached_prompt_tokens, 0);
  }
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

absl::Status GatedBackend::Step(const StepBatch& batch, std::vector<float>* logits) {
  const bool fail = Enter();
  absl::Status st = inner_->Step(batch, logits);
  return fail ? absl::InternalError("injected failure after the step ran") : st;
}

absl::Status GatedBackend::StepSampled(const StepBatch& batch, const std::vector<RowSampling>& rows,
                                       std::vector<int32_t>* ids,
                                       std::vector<SampleResult>* logprobs) {
  const bool fail = Enter();
  absl::Status st = inner_->StepSampled(batch, rows, ids, logprobs);
  return fail ? absl::InternalError("injected failure after the step ran") : st;
}

bool GatedBackend::Enter() {
  absl::MutexLock lock(&mu_);
  const int64_t n = ++started_;
  mu_.Await(absl::Condition(
      +[](GatedBackend* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g->mu_) {
        return g->block_from_ == 0 || g->started_ < g->block_from_;
      },
      this));
  return n == fail_at_;
}

void GatedBackend::BlockFromStep(int64_t n) {
  absl::MutexLock lock(&mu_);
  block_from_ = n;
}

void GatedBackend::Unblock() {
  absl::MutexLock lock(&mu_);
  block_from_ = 0;
}

void GatedBackend::AwaitStepsStarted(int64_t n) {
  std::pair<GatedBackend*, int64_t> arg{this, n};
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::pair<GatedBackend*, int64_t>* a)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->first->mu_) { return a->first->started_ >= a->second; },
      &arg));
}

void GatedBackend::FailStep(int64_t n) {
  absl::MutexLock lock(&mu_);
  fail_at_ = n;
}

}  // namespace ptxserve::testing
