// What the engine publishes about itself, as plain structs: a snapshot of counters and
// gauges (Engine::Stats) and an observer that receives latency observations as they
// happen. server/ turns both into Prometheus metrics; engine/ knows nothing of them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "engine/request.h"

namespace ptxserve {

// Counters a GPU backend keeps about its kernels and transfers (cumulative). The CPU
// backend has none; the server exports the families with these values either way.
struct KernelStats {
  std::map<std::string, int64_t> launches;  // kernel name -> launches
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  int64_t h2d_transfers = 0;
  int64_t d2h_transfers = 0;
  // CUDA graphs (decode-only steps): captured, steps replayed as one graph launch, held.
  int64_t graph_captures = 0;
  int64_t graph_replays = 0;
  int64_t graphs_live = 0;
  // Device memory held by the backend (0 on the CPU): weights, and the K/V pools.
  int64_t device_weight_bytes = 0;
  int64_t device_kv_bytes = 0;
};

// The FinishReason values that end a request, in the order of EngineStats::finished.
inline constexpr std::array<FinishReason, 5> kOutcomes = {
    FinishReason::kLength, FinishReason::kStop, FinishReason::kEos, FinishReason::kCancelled,
    FinishReason::kError};
inline constexpr int kNumOutcomes = static_cast<int>(kOutcomes.size());
// Index of a finishing reason in EngineStats::finished (kNone maps to kError's slot).
constexpr int OutcomeIndex(FinishReason r) {
  for (int i = 0; i < kNumOutcomes; ++i) {
    if (kOutcomes[i] == r) return i;
  }
  return kNumOutcomes - 1;
}
static_assert(kOutcomes.back() == FinishReason::kError);

struct EngineStats {
  // Gauges.
  int32_t requests_running = 0;  // sequences admitted to the batch (prefilling or decoding)
  int32_t requests_waiting = 0;  // queued or preempted, not in the batch
  int32_t kv_blocks_used = 0;    // referenced by live sequences
  int32_t kv_blocks_cached = 0;  // free, but holding K/V the prefix cache can reuse
  int32_t kv_blocks_total = 0;   // used + cached + empty
  // Counters since start.
  std::array<int64_t, kNumOutcomes> finished{};  // by OutcomeIndex(finish reason)
  int64_t prompt_tokens_total = 0;               // prompt tokens of admitted requests (once each)
  int64_t generated_tokens_total = 0;            // tokens sampled and delivered
  int64_t preemptions_total = 0;
  // Prefix cache: tokens looked up when a sequence is admitted (its prompt; after a
  // preemption, its prompt and generated tokens again) and those found cached; cached
  // blocks whose memory was taken for other tokens.
  int64_t prefix_cache_query_tokens_total = 0;
  int64_t prefix_cache_hit_tokens_total = 0;
  int64_t prefix_cache_evictions_total = 0;
  int64_t steps_total = 0;
  int64_t step_failures_total = 0;
  KernelStats kernels;
  // Health.
  bool started = false;  // the warm-up step succeeded and the engine thread runs
  bool failed = false;   // the engine gave up (see failure); it serves nothing more
  std::string failure;
  // Seconds since the engine thread last made progress (finished a step) while work
  // was queued or running; 0 when idle. Large values mean a stuck backend.
  double stalled_seconds = 0;
};

// What one step did, for the step-duration and batch-size histograms.
struct StepObservation {
  int32_t num_seqs = 0;          // sequences in the batch
  int32_t num_tokens = 0;        // token rows (prefill chunks + decodes)
  double backend_seconds = 0;    // Backend::Step
  double scheduler_seconds = 0;  // planning the batch + bookkeeping after it, sampling excluded
  double sampling_seconds = 0;   // sampling + stop checking + handing results to the streams
};

// A finished request, for requests_total{outcome} and the duration histograms.
struct RequestObservation {
  FinishReason finish = FinishReason::kNone;
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double queue_seconds = 0;  // 0 when never scheduled
  double total_seconds = 0;
  bool scheduled = false;  // it reached the batch at least once
  // False for the later samples of a prompt (parallel sampling), whose prompt the
  // first sample already counts.
  bool first_sample = true;
};

// Receives observations on the engine thread. Implementations must be quick and must
// never block (no I/O, no waiting on other threads' work).
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // After every step.
  virtual void OnStep(const StepObservation& /*step*/) {}
  // A request entered the batch for the first time, after waiting `queue_seconds`.
  virtual void OnScheduled(double /*queue_seconds*/, int32_t /*prompt_tokens*/) {}
  // A request's first generated token, `ttft_seconds` after its arrival.
  virtual void OnFirstToken(double /*ttft_seconds*/) {}
  // A later token, `seconds` after the request's previous one.
  virtual void OnInterToken(double /*seconds*/) {}
  // A running sequence lost its KV blocks to make room (it will be recomputed).
  virtual void OnPreemption() {}
  // A request finished (any reason, cancellations included).
  virtual void OnFinished(const RequestObservation& /*request*/) {}
};

}  // namespace ptxserve
