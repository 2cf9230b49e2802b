#include "server/metrics.h"

#include <utility>
#include <vector>

#include "engine/request.h"
#include "prometheus/text_serializer.h"
#include "server/process_metrics.h"

namespace ptxserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Latencies a user feels: from a millisecond (a cached first token) to ten minutes (a
// long generation behind a deep queue).
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10,   20,
                                                30,    60,     120,   300,  600};
  return b;
}
// Per token and per step: 100 us (tiny models, GPU) to 10 s (a huge prefill on a CPU).
const Histogram::BucketBoundaries& StepBuckets() {
  static const Histogram::BucketBoundaries b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                1,      2.5,     5,      10};
  return b;
}
// The engine's own time around a step: 1 us to 100 ms.
const Histogram::BucketBoundaries& OverheadBuckets() {
  static const Histogram::BucketBoundaries b = {1e-6,   2.5e-6, 5e-6,   1e-5,  2.5e-5,
                                                5e-5,   1e-4,   2.5e-4, 5e-4,  1e-3,
                                                2.5e-3, 5e-3,   0.01,   0.025, 0.1};
  return b;
}
const Histogram::BucketBoundaries& CountBuckets() {
  static const Histogram::BucketBoundaries b = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  return b;
}
// Request lengths in tokens, 1-2-5 steps from 1 to a million (vLLM's buckets).
const Histogram::BucketBoundaries& LengthBuckets() {
  static const Histogram::BucketBoundaries b = [] {
    Histogram::BucketBoundaries v;
    for (double decade = 1; decade <= 1e6; decade *= 10) {
      for (double step : {1, 2, 5}) {
        if (decade * step <= 1e6) v.push_back(decade * step);
      }
    }
    return v;
  }();
  return b;
}
const Histogram::BucketBoundaries& TokenBuckets() {
  static const Histogram::BucketBoundaries b = {1,   2,   4,   8,    16,   32,   64,
                                                128, 256, 512, 1024, 2048, 4096, 8192};
  return b;
}

template <typename T>
void AddDelta(T& counter, int64_t now, int64_t before) {
  if (now > before) counter.Increment(static_cast<double>(now - before));
}

}  // namespace

ServerMetrics::ServerMetrics(const std::string& version, const std::string& backend)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_total_(BuildCounter()
                          .Name("ptxserve_requests_total")
                          .Help("Requests by outcome: length, stop, eos, cancelled, error "
                                "(engine); invalid, rejected, unauthenticated, malformed (refused "
                                "by the server, once "
                                "per call)")
                          .Register(*registry_)),
      requests_running_(BuildGauge()
                            .Name("ptxserve_requests_running")
                            .Help("Sequences in the batch (prefilling or decoding)")
                            .Register(*registry_)
                            .Add({})),
      requests_waiting_(BuildGauge()
                            .Name("ptxserve_requests_waiting")
                            .Help("Requests queued or preempted, not in the batch")
                            .Register(*registry_)
                            .Add({})),
      prompt_tokens_total_(BuildCounter()
                               .Name("ptxserve_prompt_tokens_total")
                               .Help("Prompt tokens of admitted requests (once per prompt however "
                                     "many samples it has)")
                               .Register(*registry_)
                               .Add({})),
      generated_tokens_total_(BuildCounter()
                                  .Name("ptxserve_generated_tokens_total")
                                  .Help("Tokens generated and streamed")
                                  .Register(*registry_)
                                  .Add({})),
      ttft_(BuildHistogram()
                .Name("ptxserve_time_to_first_token_seconds")
                .Help("From a request's arrival to its first generated token")
                .Register(*registry_)
                .Add({}, LatencyBuckets())),
      inter_token_(BuildHistogram()
                       .Name("ptxserve_inter_token_latency_seconds")
                       .Help("Between consecutive generated tokens of one request")
                       .Register(*registry_)
                       .Add({}, StepBuckets())),
      request_duration_(BuildHistogram()
                            .Name("ptxserve_request_duration_seconds")
                            .Help("From a request's arrival to its end, any outcome")
                            .Register(*registry_)
                            .Add({}, LatencyBuckets())),
      queue_time_(BuildHistogram()
                      .Name("ptxserve_queue_time_seconds")
                      .Help("From a request's arrival to its first step in the batch")
                      .Register(*registry_)
                      .Add({}, LatencyBuckets())),
      step_duration_(BuildHistogram()
                         .Name("ptxserve_step_duration_seconds")
                         .Help("Backend time of one decode step")
                         .Register(*registry_)
                         .Add({}, StepBuckets())),
      step_overhead_(BuildHistogram()
                         .Name("ptxserve_step_overhead_seconds")
                         .Help("Engine time of one step outside the backend: scheduling, "
                               "sampling, stop checks, handing results over")
                         .Register(*registry_)
                         .Add({}, OverheadBuckets())),
      batch_size_(BuildHistogram()
                      .Name("ptxserve_batch_size")
                      .Help("Sequences per step")
                      .Register(*registry_)
                      .Add({}, CountBuckets())),
      batch_tokens_(BuildHistogram()
                        .Name("ptxserve_batch_tokens")
                        .Help("Token rows per step (decodes plus prefill chunks)")
                        .Register(*registry_)
                        .Add({}, TokenBuckets())),
      kv_blocks_used_(BuildGauge()
                          .Name("ptxserve_kv_cache_blocks_used")
                          .Help("KV cache blocks held by live sequences")
                          .Register(*registry_)
                          .Add({})),
      kv_capacity_blocks_(BuildGauge()
                              .Name("ptxserve_kv_cache_capacity_blocks")
                              .Help("KV cache blocks in the pool")
                              .Register(*registry_)
                              .Add({})),
      kv_usage_(BuildGauge()
                    .Name("ptxserve_kv_cache_usage_ratio")
                    .Help("Share of the KV cache blocks held by live sequences, 0 to 1 "
                          "(vLLM's kv_cache_usage_perc)")
                    .Register(*registry_)
                    .Add({})),
      kv_blocks_cached_(BuildGauge()
                            .Name("ptxserve_kv_cache_blocks_cached")
                            .Help("Free KV blocks still holding K/V the prefix cache can reuse")
                            .Register(*registry_)
                            .Add({})),
      prefix_query_tokens_(BuildCounter()
                               .Name("ptxserve_prefix_cache_query_tokens_total")
                               .Help("Prompt tokens looked up in the prefix cache")
                               .Register(*registry_)
                               .Add({})),
      prefix_hit_tokens_(BuildCounter()
                             .Name("ptxserve_prefix_cache_hit_tokens_total")
                             .Help("Prompt tokens whose K/V the prefix cache held")
                             .Register(*registry_)
                             .Add({})),
      prefix_evictions_(BuildCounter()
                            .Name("ptxserve_prefix_cache_evictions_total")
                            .Help("Cached KV blocks reused for other contents")
                            .Register(*registry_)
                            .Add({})),
      request_prompt_tokens_(BuildHistogram()
                                 .Name("ptxserve_request_prompt_tokens")
                                 .Help("Prompt tokens of each finished request (once per prompt "
                                       "however many samples it has)")
                                 .Register(*registry_)
                                 .Add({}, LengthBuckets())),
      request_generation_tokens_(BuildHistogram()
                                     .Name("ptxserve_request_generation_tokens")
                                     .Help("Tokens generated by each finished request")
                                     .Register(*registry_)
                                     .Add({}, LengthBuckets())),
      preemptions_total_(BuildCounter()
                             .Name("ptxserve_preemptions_total")
                             .Help("Running sequences whose KV blocks were taken back")
                             .Register(*registry_)
                             .Add({})),
      step_failures_total_(BuildCounter()
                               .Name("ptxserve_step_failures_total")
                               .Help("Backend steps that failed")
                               .Register(*registry_)
                               .Add({})),
      engine_failed_(BuildGauge()
                         .Name("ptxserve_engine_failed")
                         .Help("1 when the engine gave up and serves nothing")
                         .Register(*registry_)
                         .Add({})),
      health_serving_(BuildGauge()
                          .Name("ptxserve_health_serving")
                          .Help("1 while grpc.health.v1 reports SERVING for the server, else 0 "
                                "(loading, failed, stalled or draining)")
                          .Register(*registry_)
                          .Add({})),
      kernel_launches_(BuildCounter()
                           .Name("ptxserve_kernel_launches_total")
                           .Help("GPU kernel launches by kernel")
                           .Register(*registry_)),
      kernel_cache_hits_(BuildCounter()
                             .Name("ptxserve_kernel_cache_hits_total")
                             .Help("Kernel lookups served from the kernel cache")
                             .Register(*registry_)
                             .Add({})),
      kernel_cache_misses_(BuildCounter()
                               .Name("ptxserve_kernel_cache_misses_total")
                               .Help("Kernel lookups that generated and loaded PTX")
                               .Register(*registry_)
                               .Add({})),
      kernel_compile_seconds_(BuildHistogram()
                                  .Name("ptxserve_kernel_compile_seconds")
                                  .Help("PTX generation plus JIT load of one kernel")
                                  .Register(*registry_)
                                  .Add({}, LatencyBuckets())),
      transfer_bytes_(BuildCounter()
                          .Name("ptxserve_transfer_bytes_total")
                          .Help("Bytes copied between host and device")
                          .Register(*registry_)),
      transfers_(BuildCounter()
                     .Name("ptxserve_transfers_total")
                     .Help("Copies between host and device")
                     .Register(*registry_)),
      h2d_bytes_(transfer_bytes_.Add({{"direction", "h2d"}})),
      d2h_bytes_(transfer_bytes_.Add({{"direction", "d2h"}})),
      h2d_transfers_(transfers_.Add({{"direction", "h2d"}})),
      d2h_transfers_(transfers_.Add({{"direction", "d2h"}})),
      graph_captures_(BuildCounter()
                          .Name("ptxserve_cuda_graph_captures_total")
                          .Help("CUDA graphs captured for decode-only step shapes")
                          .Register(*registry_)
                          .Add({})),
      graph_replays_(BuildCounter()
                         .Name("ptxserve_cuda_graph_replays_total")
                         .Help("Decode steps run as one CUDA graph launch")
                         .Register(*registry_)
                         .Add({})),
      graphs_live_(BuildGauge()
                       .Name("ptxserve_cuda_graphs")
                       .Help("CUDA graphs held by the backend")
                       .Register(*registry_)
                       .Add({})),
      device_memory_(BuildGauge()
                         .Name("ptxserve_device_memory_bytes")
                         .Help("GPU memory held by the backend, by kind (weights, kv_cache)")
                         .Register(*registry_)),
      build_info_(BuildGauge()
                      .Name("ptxserve_build_info")
                      .Help("Build information: version, backend and the served model")
                      .Register(*registry_)),
      version_(version) {
  SetServedModel(backend, "");
  // Every outcome exists from the start, so rate() and absent() behave.
  for (FinishReason r : kOutcomes) Outcome(std::string(FinishReasonName(r)));
  for (const char* o :
       {kOutcomeInvalid, kOutcomeRejected, kOutcomeUnauthenticated, kOutcomeMalformed}) {
    Outcome(o);
  }
}

prometheus::Counter& ServerMetrics::Outcome(const std::string& outcome) {
  return requests_total_.Add({{"outcome", outcome}});
}

void ServerMetrics::SetServedModel(const std::string& backend, const std::string& model) {
  absl::MutexLock lock(&mu_);
  if (build_info_series_ != nullptr) build_info_.Remove(build_info_series_);
  build_info_series_ =
      &build_info_.Add({{"version", version_}, {"backend", backend}, {"model_name", model}});
  build_info_series_->Set(1);
}

void ServerMetrics::SetStatsSource(std::function<std::optional<EngineStats>()> source) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(source);
}

void ServerMetrics::CountServerOutcome(const char* outcome) { Outcome(outcome).Increment(); }

void ServerMetrics::Refresh() {
  absl::MutexLock lock(&mu_);
  if (!source_) return;
  std::optional<EngineStats> s = source_();
  if (!s) return;
  requests_running_.Set(s->requests_running);
  requests_waiting_.Set(s->requests_waiting);
  kv_blocks_used_.Set(s->kv_blocks_used);
  kv_capacity_blocks_.Set(static_cast<double>(s->kv_blocks_total));
  kv_blocks_cached_.Set(s->kv_blocks_cached);
  AddDelta(prefix_query_tokens_, s->prefix_cache_query_tokens_total,
           last_.prefix_cache_query_tokens_total);
  AddDelta(prefix_hit_tokens_, s->prefix_cache_hit_tokens_total,
           last_.prefix_cache_hit_tokens_total);
  AddDelta(prefix_evictions_, s->prefix_cache_evictions_total, last_.prefix_cache_evictions_total);
  kv_usage_.Set(s->kv_blocks_total > 0 ? static_cast<double>(s->kv_blocks_used) /
                                             static_cast<double>(s->kv_blocks_total)
                                       : 0.0);
  engine_failed_.Set(s->failed ? 1 : 0);
  for (int i = 0; i < kNumOutcomes; ++i) {
    AddDelta(Outcome(std::string(FinishReasonName(kOutcomes[i]))), s->finished[i],
             last_.finished[i]);
  }
  AddDelta(prompt_tokens_total_, s->prompt_tokens_total, last_.prompt_tokens_total);
  AddDelta(generated_tokens_total_, s->generated_tokens_total, last_.generated_tokens_total);
  AddDelta(preemptions_total_, s->preemptions_total, last_.preemptions_total);
  AddDelta(step_failures_total_, s->step_failures_total, last_.step_failures_total);
  const KernelStats& k = s->kernels;
  const KernelStats& pk = last_.kernels;
  for (const auto& [name, n] : k.launches) {
    auto it = pk.launches.find(name);
    AddDelta(kernel_launches_.Add({{"kernel", name}}), n, it == pk.launches.end() ? 0 : it->second);
  }
  AddDelta(kernel_cache_hits_, k.cache_hits, pk.cache_hits);
  AddDelta(kernel_cache_misses_, k.cache_misses, pk.cache_misses);
  AddDelta(h2d_bytes_, k.h2d_bytes, pk.h2d_bytes);
  AddDelta(d2h_bytes_, k.d2h_bytes, pk.d2h_bytes);
  AddDelta(h2d_transfers_, k.h2d_transfers, pk.h2d_transfers);
  AddDelta(d2h_transfers_, k.d2h_transfers, pk.d2h_transfers);
  AddDelta(graph_captures_, k.graph_captures, pk.graph_captures);
  AddDelta(graph_replays_, k.graph_replays, pk.graph_replays);
  graphs_live_.Set(static_cast<double>(k.graphs_live));
  // Series appear with a GPU backend only (none on the CPU, like the kernel families).
  if (k.device_weight_bytes > 0 || k.device_kv_bytes > 0) {
    device_memory_.Add({{"kind", "weights"}}).Set(static_cast<double>(k.device_weight_bytes));
    device_memory_.Add({{"kind", "kv_cache"}}).Set(static_cast<double>(k.device_kv_bytes));
  }
  last_ = *std::move(s);
}

std::string ServerMetrics::Serialize() {
  Refresh();
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : CollectProcessMetrics()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

void ServerMetrics::OnStep(const StepObservation& step) {
  step_duration_.Observe(step.backend_seconds);
  step_overhead_.Observe(step.scheduler_seconds + step.sampling_seconds);
  batch_size_.Observe(step.num_seqs);
  batch_tokens_.Observe(step.num_tokens);
}

void ServerMetrics::OnScheduled(double queue_seconds, int32_t /*prompt_tokens*/) {
  queue_time_.Observe(queue_seconds);
}

void ServerMetrics::OnFirstToken(double ttft_seconds) { ttft_.Observe(ttft_seconds); }

void ServerMetrics::OnInterToken(double seconds) { inter_token_.Observe(seconds); }

void ServerMetrics::OnFinished(const RequestObservation& request) {
  request_duration_.Observe(request.total_seconds);
  if (request.scheduled) {
    if (request.first_sample) request_prompt_tokens_.Observe(request.prompt_tokens);
    request_generation_tokens_.Observe(request.generated_tokens);
  }
}

}  // namespace ptxserve::server
