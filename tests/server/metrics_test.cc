// ServerMetrics without a server: counters follow the engine's stats at scrape time,
// histograms follow the observer, kernel families appear when a backend reports.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "server/process_metrics.h"
#include "tests/server/test_server.h"

namespace ptxserve::server {
namespace {

using testing::MetricValue;

TEST(MetricsTest, CountersFollowTheStatsSource) {
  ServerMetrics m("1.2.3", "cpu");
  EngineStats s;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 7;
  s.requests_running = 2;
  s.kv_blocks_cached = 30;
  s.prefix_cache_query_tokens_total = 1000;
  s.prefix_cache_hit_tokens_total = 640;
  s.prefix_cache_evictions_total = 5;
  s.generated_tokens_total = 10;
  s.finished[OutcomeIndex(FinishReason::kCancelled)] = 1;
  m.SetStatsSource([&]() -> std::optional<EngineStats> { return s; });
  std::string text = m.Serialize();
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_capacity_blocks"), 100);
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_blocks_used"), 7);
  EXPECT_DOUBLE_EQ(MetricValue(text, "ptxserve_kv_cache_usage_ratio"), 0.07);
  EXPECT_NE(text.find("# TYPE ptxserve_kv_cache_capacity_blocks gauge"), std::string::npos);
  EXPECT_EQ(MetricValue(text, "ptxserve_requests_running"), 2);
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_blocks_cached"), 30);
  EXPECT_EQ(MetricValue(text, "ptxserve_prefix_cache_query_tokens_total"), 1000);
  EXPECT_EQ(MetricValue(text, "ptxserve_prefix_cache_hit_tokens_total"), 640);
  EXPECT_EQ(MetricValue(text, "ptxserve_prefix_cache_evictions_total"), 5);
  EXPECT_EQ(MetricValue(text, "ptxserve_generated_tokens_total"), 10);
  EXPECT_EQ(MetricValue(text, "ptxserve_requests_total{outcome=\"cancelled\"}"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_requests_total{outcome=\"eos\"}"), 0);
  EXPECT_NE(text.find("ptxserve_build_info{backend=\"cpu\",model_name=\"\",version=\"1.2.3\","
                      "weights=\"\"} 1"),
            std::string::npos)
      << text;

  m.SetServedModel("cuda", "llama-3.2-1b", "q4_0");
  text = m.Serialize();
  EXPECT_NE(
      text.find(
          "ptxserve_build_info{backend=\"cuda\",model_name=\"llama-3.2-1b\",version=\"1.2.3\","
          "weights=\"q4_0\"} 1"),
      std::string::npos);
  EXPECT_EQ(text.find("backend=\"cpu\""), std::string::npos) << "one build_info series";

  s.generated_tokens_total = 25;
  s.kv_blocks_used = 0;
  m.CountServerOutcome(kOutcomeInvalid);
  text = m.Serialize();
  EXPECT_EQ(MetricValue(text, "ptxserve_generated_tokens_total"), 25);
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_blocks_used"), 0);
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_capacity_blocks"), 100);
  EXPECT_EQ(MetricValue(text, "ptxserve_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(MetricValue(text, "ptxserve_requests_total{outcome=\"invalid\"}"), 1);
}

TEST(MetricsTest, KernelFamiliesFilledFromKernelStats) {
  ServerMetrics m("v", "cuda");
  EngineStats s;
  m.SetStatsSource([&]() -> std::optional<EngineStats> { return s; });
  EXPECT_EQ(m.Serialize().find("ptxserve_kernel_launches_total{"), std::string::npos);
  s.kernels.launches["decode_attention"] = 5;
  s.kernels.cache_misses = 2;
  s.kernels.h2d_bytes = 4096;
  s.kernels.d2h_transfers = 3;
  const std::string text = m.Serialize();
  EXPECT_EQ(MetricValue(text, "ptxserve_kernel_launches_total{kernel=\"decode_attention\"}"), 5);
  EXPECT_EQ(MetricValue(text, "ptxserve_kernel_cache_misses_total"), 2);
  EXPECT_EQ(MetricValue(text, "ptxserve_transfer_bytes_total{direction=\"h2d\"}"), 4096);
  EXPECT_EQ(MetricValue(text, "ptxserve_transfers_total{direction=\"d2h\"}"), 3);
  EXPECT_EQ(MetricValue(text, "ptxserve_cuda_graph_replays_total"), 0);
  s.kernels.graph_captures = 2;
  s.kernels.graph_replays = 40;
  s.kernels.graphs_live = 2;
  const std::string after = m.Serialize();
  EXPECT_EQ(MetricValue(after, "ptxserve_cuda_graph_captures_total"), 2);
  EXPECT_EQ(MetricValue(after, "ptxserve_cuda_graph_replays_total"), 40);
  EXPECT_EQ(MetricValue(after, "ptxserve_cuda_graphs"), 2);
  s.kernels.graphs_live = 1;  // a gauge: it may go down
  EXPECT_EQ(MetricValue(m.Serialize(), "ptxserve_cuda_graphs"), 1);
  EXPECT_EQ(after.find("ptxserve_device_memory_bytes{"), std::string::npos) << "no GPU memory";
  s.kernels.device_weight_bytes = 2 << 20;
  s.kernels.device_kv_bytes = 64 << 20;
  const std::string gpu = m.Serialize();
  EXPECT_EQ(MetricValue(gpu, "ptxserve_device_memory_bytes{kind=\"weights\"}"), 2 << 20);
  EXPECT_EQ(MetricValue(gpu, "ptxserve_device_memory_bytes{kind=\"kv_cache\"}"), 64 << 20);
}

TEST(MetricsTest, HistogramsFollowTheObserver) {
  ServerMetrics m("v", "cpu");
  StepObservation step;
  step.num_seqs = 64;
  step.backend_seconds = 0.002;
  step.scheduler_seconds = 0.00001;
  m.OnStep(step);
  m.OnFirstToken(0.05);
  m.OnInterToken(0.003);
  RequestObservation r;
  r.total_seconds = 1.5;
  r.scheduled = true;
  r.prompt_tokens = 300;
  r.generated_tokens = 7;
  m.OnFinished(r);
  RequestObservation refused;  // never reached the batch: no lengths to count
  m.OnFinished(refused);
  m.OnScheduled(0.01, 5);
  const std::string text = m.Serialize();
  EXPECT_EQ(MetricValue(text, "ptxserve_batch_size_sum"), 64);
  EXPECT_EQ(MetricValue(text, "ptxserve_step_duration_seconds_count"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_time_to_first_token_seconds_bucket{le=\"0.05\"}"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_time_to_first_token_seconds_bucket{le=\"0.025\"}"), 0);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_duration_seconds_sum"), 1.5);
  EXPECT_EQ(MetricValue(text, "ptxserve_queue_time_seconds_count"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_inter_token_latency_seconds_count"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_prompt_tokens_count"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_prompt_tokens_sum"), 300);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_prompt_tokens_bucket{le=\"200\"}"), 0);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_prompt_tokens_bucket{le=\"500\"}"), 1);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_generation_tokens_sum"), 7);
  EXPECT_EQ(MetricValue(text, "ptxserve_request_generation_tokens_bucket{le=\"10\"}"), 1);
}

TEST(MetricsTest, ProcessMetricsAreThisProcesssOwn) {
  ServerMetrics m("v", "cpu");
  const std::string before = m.Serialize();
  EXPECT_GT(MetricValue(before, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(MetricValue(before, "process_virtual_memory_bytes"),
            MetricValue(before, "process_resident_memory_bytes"));
  EXPECT_GE(MetricValue(before, "process_cpu_seconds_total"), 0);
  EXPECT_GT(MetricValue(before, "process_max_fds"), 0);
  const double start = MetricValue(before, "process_start_time_seconds");
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_GT(start, now - 3600) << "started within the hour";
  EXPECT_LE(start, now + 1);
  // Three more open files: three more descriptors.
  FILE* files[3];
  for (FILE*& f : files) f = std::fopen("/proc/self/stat", "r");
  const double opened = MetricValue(m.Serialize(), "process_open_fds");
  for (FILE* f : files) std::fclose(f);
  EXPECT_EQ(opened - MetricValue(m.Serialize(), "process_open_fds"), 3);
}

TEST(MetricsTest, ProcStatFieldsAfterACommandWithSpacesAndParentheses) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice threads itrealvalue starttime vsize rss ...
  const std::string stat =
      "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 "
      "2048 18446744073709551615";
  const auto s = ParseProcStat(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(s->start_time_seconds, 1.7e9 + 10);
  EXPECT_DOUBLE_EQ(s->virtual_bytes, 123456789);
  EXPECT_DOUBLE_EQ(s->resident_bytes, 2048.0 * 4096);
  EXPECT_FALSE(ParseProcStat("42 (x) S 1", 100, 4096, 0).has_value());
}

}  // namespace
}  // namespace ptxserve::server
