// Prometheus metrics (prefix ptxserve_, names as in DESIGN.md). Histograms are fed by
// the engine's observer callbacks as things happen; counters and gauges are refreshed
// from Engine::Stats() on every scrape, so they are exact and cost the engine nothing.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "engine/engine_stats.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ptxserve::server {

// requests_total{outcome} values decided by the server before the engine sees a request.
inline constexpr const char* kOutcomeInvalid = "invalid";    // INVALID_ARGUMENT
inline constexpr const char* kOutcomeRejected = "rejected";  // queue full / unavailable
inline constexpr const char* kOutcomeUnauthenticated = "unauthenticated";
inline constexpr const char* kOutcomeMalformed = "malformed";  // a message gRPC could not parse

class ServerMetrics : public EngineObserver {
 public:
  // `version` and `backend` label build_info.
  ServerMetrics(const std::string& version, const std::string& backend);

  // Where counters and gauges come from at scrape time; returns nullopt while no engine
  // runs (the values then stay as they are).
  void SetStatsSource(std::function<std::optional<EngineStats>()> source);
  // Relabels build_info with the backend actually serving (e.g. after --backend=auto) and
  // the served model's name.
  void SetServedModel(const std::string& backend, const std::string& model,
                      const std::string& weights);
  // One kernel compilation (PTX generation + JIT load) of a GPU backend.
  void ObserveKernelCompile(double seconds) { kernel_compile_seconds_.Observe(seconds); }
  // The health service's status for the whole server (ptxserve_health_serving 1 / 0).
  void SetServing(bool serving) { health_serving_.Set(serving ? 1 : 0); }
  // Counts a call refused before its requests reached the engine (once per call, however
  // many prompts it carried).
  void CountServerOutcome(const char* outcome);

  // The text exposition format, as /metrics serves it (refreshed from the stats source).
  std::string Serialize();

  // EngineObserver (engine thread).
  void OnStep(const StepObservation& step) override;
  void OnScheduled(double queue_seconds, int32_t prompt_tokens) override;
  void OnFirstToken(double ttft_seconds) override;
  void OnInterToken(double seconds) override;
  void OnFinished(const RequestObservation& request) override;

 private:
  void Refresh();
  prometheus::Counter& Outcome(const std::string& outcome);

  std::shared_ptr<prometheus::Registry> registry_;

  // Serving.
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Gauge& requests_running_;
  prometheus::Gauge& requests_waiting_;
  prometheus::Counter& prompt_tokens_total_;
  prometheus::Counter& generated_tokens_total_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& inter_token_;
  prometheus::Histogram& request_duration_;
  prometheus::Histogram& queue_time_;
  prometheus::Histogram& step_duration_;
  prometheus::Histogram& step_overhead_;
  prometheus::Histogram& batch_size_;
  prometheus::Histogram& batch_tokens_;
  prometheus::Gauge& kv_blocks_used_;
  prometheus::Gauge& kv_capacity_blocks_;
  prometheus::Gauge& kv_usage_;
  prometheus::Gauge& kv_blocks_cached_;
  prometheus::Counter& prefix_query_tokens_;
  prometheus::Counter& prefix_hit_tokens_;
  prometheus::Counter& prefix_evictions_;
  prometheus::Histogram& request_prompt_tokens_;
  prometheus::Histogram& request_generation_tokens_;
  prometheus::Counter& preemptions_total_;
  prometheus::Counter& step_failures_total_;
  prometheus::Gauge& engine_failed_;
  prometheus::Gauge& health_serving_;
  // Kernels (fed by GPU backends through EngineStats::kernels).
  prometheus::Family<prometheus::Counter>& kernel_launches_;
  prometheus::Counter& kernel_cache_hits_;
  prometheus::Counter& kernel_cache_misses_;
  prometheus::Histogram& kernel_compile_seconds_;
  prometheus::Family<prometheus::Counter>& transfer_bytes_;
  prometheus::Family<prometheus::Counter>& transfers_;
  prometheus::Counter& h2d_bytes_;
  prometheus::Counter& d2h_bytes_;
  prometheus::Counter& h2d_transfers_;
  prometheus::Counter& d2h_transfers_;
  prometheus::Counter& graph_captures_;
  prometheus::Counter& graph_replays_;
  prometheus::Gauge& graphs_live_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  const std::string version_;

  absl::Mutex mu_;
  std::function<std::optional<EngineStats>()> source_ ABSL_GUARDED_BY(mu_);
  EngineStats last_ ABSL_GUARDED_BY(mu_);  // counters already exported
  prometheus::Gauge* build_info_series_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace ptxserve::server
