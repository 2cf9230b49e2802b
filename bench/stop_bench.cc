// The stop checker's cost per generated token (StopChecker::Push, which the engine thread
// runs for every sequence at every step), with the shared model's real tokenizer streaming
// a story over and over. It should not grow with the number of stop strings:
//
//   strings_N_text    N stop strings of kMaxStopStringBytes that are windows of the streamed
//                     text ending in a byte it never has, so they never match but the text
//                     keeps running long ways into them (the worst case for the held-back
//                     window)
//   strings_N_random  N random lowercase strings of that length: partial matches stay short
//   ids_N             N stop token ids that never occur
// and the cost of building a checker at the limits (BM_StopCheckerNew).
//
//   build/bench/stop_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

constexpr char kStory[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her big red ball. One day, she saw a small dog sitting under a tree. The dog "
    "looked sad and lonely. Lily walked up to the dog and said, \"Hi, doggy! Do you want to "
    "play with me?\" The dog wagged its tail and barked happily. They played all day long. "
    "They ran and jumped and laughed together. When the sun went down, Lily's mom called her "
    "home. Lily hugged the dog and said, \"I will come back tomorrow.\" The next day, Lily "
    "went back to the park. The dog was waiting for her under the same tree. Lily was so "
    "happy to see her new friend. She gave the dog a big hug and they played with the ball "
    "again. Tim and his mom went to the store to buy some food. Tim saw a big box of candy "
    "and wanted it very much. His mom said, \"No, Tim, we need to buy healthy food first.\" "
    "Tim was sad, but he listened to his mom. They bought apples, bread and milk. When they "
    "got home, mom gave Tim a small piece of candy because he was a good boy. Tim smiled and "
    "said, \"Thank you, mom!\" He learned that being patient and kind is important. The end.";

struct Fixture {
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;  // one pass over kStory
  std::string streamed;      // the text two passes stream
};

const Fixture* GetFixture() {
  static const Fixture* f = [] {
    auto* f = new Fixture;
    auto tok = Tokenizer::FromDir(std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k");
    if (!tok.ok()) return static_cast<Fixture*>(nullptr);
    f->tok = *std::move(tok);
    f->ids = *f->tok->Encode(kStory, /*add_special_tokens=*/false);
    IncrementalDetokenizer detok(*f->tok, {});
    for (int pass = 0; pass < 2; ++pass) {
      for (int32_t id : f->ids) f->streamed += detok.Push(id);
    }
    return f;
  }();
  return f;
}

StoppingCriteria Criteria(const Fixture& f, int strings, bool from_text, int ids) {
  StoppingCriteria c;
  c.max_new_tokens = INT32_MAX;
  const size_t len = kMaxStopStringBytes;
  std::mt19937 rng(7);
  for (int i = 0; i < strings; ++i) {
    if (from_text) {
      // '#' never occurs in the story: the string never matches, however far it runs.
      const size_t at = (f.streamed.size() / 2) * i / strings;
      c.stop.push_back(f.streamed.substr(at, len - 1) + "#");
    } else {
      std::string s(len, ' ');
      for (char& ch : s) ch = static_cast<char>('a' + rng() % 26);
      c.stop.push_back(std::move(s));
    }
  }
  // Ids the story never uses, from the top of the vocabulary down.
  for (int32_t id = f.tok->vocab_size() - 1; static_cast<int>(c.stop_token_ids.size()) < ids;
       --id) {
    if (std::find(f.ids.begin(), f.ids.end(), id) == f.ids.end()) c.stop_token_ids.push_back(id);
  }
  return c;
}

void BM_StopPush(benchmark::State& state, int strings, bool from_text, int ids) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("tinystories-656k tokenizer unavailable");
  const StoppingCriteria c = Criteria(*f, strings, from_text, ids);
  StopChecker checker(c, *f->tok, /*eos_id=*/-1, {});
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    StopChecker::Step step = checker.Push(f->ids[i]);
    bytes += step.text.size();
    benchmark::DoNotOptimize(step);
    if (++i == f->ids.size()) i = 0;
  }
  if (checker.finished()) state.SkipWithError("a stop string or id matched");
  state.counters["bytes_per_token"] =
      static_cast<double>(bytes) / static_cast<double>(state.iterations());
}

// Building a checker at the limits, once per request (on the caller's thread, in
// Engine::Enqueue, not on the engine thread).
void BM_StopCheckerNew(benchmark::State& state, bool from_text) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("tinystories-656k tokenizer unavailable");
  const StoppingCriteria c =
      Criteria(*f, static_cast<int>(kMaxStopStrings), from_text, kMaxStopTokenIds);
  for (auto _ : state) {
    StopChecker checker(c, *f->tok, /*eos_id=*/-1, {});
    benchmark::DoNotOptimize(checker);
  }
}

BENCHMARK_CAPTURE(BM_StopCheckerNew, limits_text, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_StopCheckerNew, limits_random, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_StopPush, none, 0, false, 0);
BENCHMARK_CAPTURE(BM_StopPush, strings_1_text, 1, true, 0);
BENCHMARK_CAPTURE(BM_StopPush, strings_64_text, 64, true, 0);
BENCHMARK_CAPTURE(BM_StopPush, strings_1_random, 1, false, 0);
BENCHMARK_CAPTURE(BM_StopPush, strings_64_random, 64, false, 0);
BENCHMARK_CAPTURE(BM_StopPush, ids_256, 0, false, 256);
BENCHMARK_CAPTURE(BM_StopPush, strings_64_text_ids_256, 64, true, 256);

}  // namespace
}  // namespace ptxserve

BENCHMARK_MAIN();
