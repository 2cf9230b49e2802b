// Engine internals shared by engine.cc (requests in and out, the engine thread) and
// engine_step.cc (one decode step): a live sequence and the engine's clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/stop_checker.h"

namespace ptxserve {
namespace engine_internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace engine_internal

// One sample of a request, from Enqueue until it finishes.
struct Engine::Sequence {
  SchedSequence sched;
  std::string request_id;
  int32_t index = 0;
  int32_t sample = 0;
  int32_t prompt_len = 0;
  int32_t cached_prompt_tokens = 0;
  bool want_logprobs = false;
  std::shared_ptr<ResultStream> stream;
  std::unique_ptr<SequenceSampler> sampler;
  std::unique_ptr<StopChecker> stop;
  engine_internal::Clock::time_point arrival;
  engine_internal::Clock::time_point scheduled;
  engine_internal::Clock::time_point first_token;
  engine_internal::Clock::time_point last_token;
  bool was_scheduled = false;
  int32_t generated = 0;
};

}  // namespace ptxserve
