#include "server/metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "prometheus/text_serializer.h"
#include "server/process_metrics.h"

namespace ptxserve::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Registry;

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

// A metric family, and the one series without labels of a family that has no others.
Family<Counter>& CounterFamily(Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
Family<Gauge>& GaugeFamily(Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
Counter& NewCounter(Registry& r, const std::string& name, const std::string& help) {
  return CounterFamily(r, name, help).Add({});
}
Gauge& NewGauge(Registry& r, const std::string& name, const std::string& help) {
  return GaugeFamily(r, name, help).Add({});
}
Histogram& NewHistogram(Registry& r, const std::string& name, const std::string& help,
                        const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
}

template <typename T>
void AddDelta(T& counter, int64_t now, int64_t before) {
  if (now > before) counter.Increment(static_cast<double>(now - before));
}

}  // namespace

ServerMetrics::ServerMetrics(const std::string& version, const std::string& backend)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_total_(CounterFamily(*registry_, "ptxserve_requests_total",
                                    "Requests by outcome: length, stop, eos, cancelled, error "
                                    "(engine); invalid, rejected, unauthenticated, malformed "
                                    "(refused by the server, once per call)")),
      requests_running_(NewGauge(*registry_, "ptxserve_requests_running",
                                 "Sequences in the batch (prefilling or decoding)")),
      requests_waiting_(NewGauge(*registry_, "ptxserve_requests_waiting",
                                 "Requests queued or preempted, not in the batch")),
      prompt_tokens_total_(NewCounter(*registry_, "ptxserve_prompt_tokens_total",
                                      "Prompt tokens of admitted requests (once per prompt however "
                                      "many samples it has)")),
      generated_tokens_total_(NewCounter(*registry_, "ptxserve_generated_tokens_total",
                                         "Tokens generated and streamed")),
      ttft_(NewHistogram(*registry_, "ptxserve_time_to_first_token_seconds",
                         "From a request's arrival to its first generated token",
                         LatencyBuckets())),
      inter_token_(NewHistogram(*registry_, "ptxserve_inter_token_latency_seconds",
                                "Between consecutive generated tokens of one request",
                                StepBuckets())),
      request_duration_(NewHistogram(*registry_, "ptxserve_request_duration_seconds",
                                     "From a request's arrival to its end, any outcome",
                                     LatencyBuckets())),
      queue_time_(NewHistogram(*registry_, "ptxserve_queue_time_seconds",
                               "From a request's arrival to its first step in the batch",
                               LatencyBuckets())),
      step_duration_(NewHistogram(*registry_, "ptxserve_step_duration_seconds",
                                  "Backend time of one decode step", StepBuckets())),
      step_overhead_(NewHistogram(*registry_, "ptxserve_step_overhead_seconds",
                                  "Engine time of one step outside the backend: scheduling, "
                                  "sampling, stop checks, handing results over",
                                  OverheadBuckets())),
      batch_size_(
          NewHistogram(*registry_, "ptxserve_batch_size", "Sequences per step", CountBuckets())),
      batch_tokens_(NewHistogram(*registry_, "ptxserve_batch_tokens",
                                 "Token rows per step (decodes plus prefill chunks)",
                                 TokenBuckets())),
      kv_blocks_used_(NewGauge(*registry_, "ptxserve_kv_cache_blocks_used",
                               "KV cache blocks held by live sequences")),
      kv_capacity_blocks_(
          NewGauge(*registry_, "ptxserve_kv_cache_capacity_blocks", "KV cache blocks in the pool")),
      kv_usage_(NewGauge(*registry_, "ptxserve_kv_cache_usage_ratio",
                         "Share of the KV cache blocks held by live sequences, 0 to 1 "
                         "(vLLM's kv_cache_usage_perc)")),
      kv_blocks_cached_(NewGauge(*registry_, "ptxserve_kv_cache_blocks_cached",
                                 "Free KV blocks still holding K/V the prefix cache can reuse")),
      prefix_query_tokens_(NewCounter(*registry_, "ptxserve_prefix_cache_query_tokens_total",
                                      "Prompt tokens looked up in the prefix cache")),
      prefix_hit_tokens_(NewCounter(*registry_, "ptxserve_prefix_cache_hit_tokens_total",
                                    "Prompt tokens whose K/V the prefix cache held")),
      prefix_evictions_(NewCounter(*registry_, "ptxserve_prefix_cache_evictions_total",
                                   "Cached KV blocks reused for other contents")),
      request_prompt_tokens_(NewHistogram(*registry_, "ptxserve_request_prompt_tokens",
                                          "Prompt tokens of each finished request (once per prompt "
                                          "however many samples it has)",
                                          LengthBuckets())),
      request_generation_tokens_(NewHistogram(*registry_, "ptxserve_request_generation_tokens",
                                              "Tokens generated by each finished request",
                                              LengthBuckets())),
      preemptions_total_(NewCounter(*registry_, "ptxserve_preemptions_total",
                                    "Running sequences whose KV blocks were taken back")),
      step_failures_total_(
          NewCounter(*registry_, "ptxserve_step_failures_total", "Backend steps that failed")),
      engine_failed_(NewGauge(*registry_, "ptxserve_engine_failed",
                              "1 when the engine gave up and serves nothing")),
      health_serving_(NewGauge(*registry_, "ptxserve_health_serving",
                               "1 while grpc.health.v1 reports SERVING for the server, else 0 "
                               "(loading, failed, stalled or draining)")),
      kernel_launches_(CounterFamily(*registry_, "ptxserve_kernel_launches_total",
                                     "GPU kernel launches by kernel")),
      kernel_cache_hits_(NewCounter(*registry_, "ptxserve_kernel_cache_hits_total",
                                    "Kernel lookups served from the kernel cache")),
      kernel_cache_misses_(NewCounter(*registry_, "ptxserve_kernel_cache_misses_total",
                                      "Kernel lookups that generated and loaded PTX")),
      kernel_compile_seconds_(NewHistogram(*registry_, "ptxserve_kernel_compile_seconds",
                                           "PTX generation plus JIT load of one kernel",
                                           LatencyBuckets())),
      transfer_bytes_(CounterFamily(*registry_, "ptxserve_transfer_bytes_total",
                                    "Bytes copied between host and device")),
      transfers_(
          CounterFamily(*registry_, "ptxserve_transfers_total", "Copies between host and device")),
      h2d_bytes_(transfer_bytes_.Add({{"direction", "h2d"}})),
      d2h_bytes_(transfer_bytes_.Add({{"direction", "d2h"}})),
      h2d_transfers_(transfers_.Add({{"direction", "h2d"}})),
      d2h_transfers_(transfers_.Add({{"direction", "d2h"}})),
      graph_captures_(NewCounter(*registry_, "ptxserve_cuda_graph_captures_total",
                                 "CUDA graphs captured for decode-only step shapes")),
      graph_replays_(NewCounter(*registry_, "ptxserve_cuda_graph_replays_total",
                                "Decode steps run as one CUDA graph launch")),
      graphs_live_(NewGauge(*registry_, "ptxserve_cuda_graphs", "CUDA graphs held by the backend")),
      device_memory_(GaugeFamily(*registry_, "ptxserve_device_memory_bytes",
                                 "GPU memory held by the backend, by kind (weights, kv_cache)")),
      build_info_(GaugeFamily(*registry_, "ptxserve_build_info",
                              "Build information: version, backend and the served model")),
      version_(version) {
  SetServedModel(backend, "", "");
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

void ServerMetrics::SetServedModel(const std::string& backend, const std::string& model,
                                   const std::string& weights) {
  absl::MutexLock lock(&mu_);
  if (build_info_series_ != nullptr) build_info_.Remove(build_info_series_);
  build_info_series_ = &build_info_.Add(
      {{"version", version_}, {"backend", backend}, {"model_name", model}, {"weights", weights}});
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
