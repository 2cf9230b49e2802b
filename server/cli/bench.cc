// `ptxserve bench`: a closed-loop load generator. N workers each run one streaming
// request at a time until M requests are done; it reports request and token
// throughput, time to first token, inter-token latency and end-to-end latency
// percentiles, and errors, as a table and optionally as JSON.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "nlohmann/json.hpp"
#include "server/cli/cli_util.h"
#include "server/cli/client_flags.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"
#include "server/client.h"
#include "server/status_util.h"

ABSL_DECLARE_FLAG(int32_t, max_tokens);
ABSL_DECLARE_FLAG(double, temperature);

ABSL_FLAG(int32_t, concurrency, 16, "bench: requests in flight at once");
ABSL_FLAG(int32_t, requests, 64, "bench: requests in total");
ABSL_FLAG(int32_t, prompt_len, 32, "bench: prompt tokens per request (random ids)");
ABSL_FLAG(std::string, json, "", "bench: also write the results as JSON to this file");

namespace ptxserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  bool ok = false;
  std::string error;  // gRPC code name
  double ttft = 0;    // seconds
  double latency = 0;
  int64_t tokens = 0;
  std::vector<double> itl;  // per token after the first
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
  size_t n = 0;
};

Percentiles Summarize(std::vector<double> v) {
  Percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    // Nearest rank.
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

nlohmann::json ToJson(const Percentiles& p) {
  return {{"p50_ms", p.p50 * 1e3},
          {"p90_ms", p.p90 * 1e3},
          {"p99_ms", p.p99 * 1e3},
          {"mean_ms", p.mean * 1e3},
          {"count", p.n}};
}

}  // namespace

int RunBench(int argc, char** argv) {
  ShowFlagsInHelp(
      {"server/cli/bench.cc", "server/cli/client_flags.cc", "server/cli/sampling_flags.cc"});
  ParseSubcommandFlags(argc, argv,
                       "ptxserve bench --target HOST:PORT --concurrency N --requests M "
                       "--prompt-len P --max-tokens T [--temperature T] [--json FILE]");
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const int total = std::max(1, absl::GetFlag(FLAGS_requests));
  const int prompt_len = std::max(1, absl::GetFlag(FLAGS_prompt_len));
  const int max_tokens = std::max(1, absl::GetFlag(FLAGS_max_tokens));
  auto options = ClientOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "bench: %s\n", options.status().ToString().c_str());
    return 2;
  }
  server::DecodeClient client(*options);
  v1::ModelInfo info;
  if (grpc::Status st = client.GetModelInfo(&info); !st.ok()) {
    std::fprintf(stderr, "bench: GetModelInfo: %s: %s\n", server::GrpcCodeName(st.error_code()),
                 st.error_message().c_str());
    return 1;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const double timeout = absl::GetFlag(FLAGS_timeout);

  std::vector<Sample> samples(total);
  std::atomic<int> next{0};
  const Clock::time_point start = Clock::now();
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      v1::GenerateRequest req;
      req.set_request_id("bench-" + std::to_string(i));
      // Random prompt ids (deterministic per request), avoiding the low special ids.
      uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(i) + 1;
      for (int t = 0; t < prompt_len; ++t) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const int64_t lo = std::min<int64_t>(3, info.vocab_size() - 1);
        req.mutable_token_ids()->add_ids(
            static_cast<int32_t>(lo + static_cast<int64_t>(x % (info.vocab_size() - lo))));
      }
      req.mutable_sampling()->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
      req.mutable_sampling()->set_seed(seed + static_cast<uint64_t>(i));
      req.mutable_stopping()->set_max_new_tokens(max_tokens);
      req.mutable_stopping()->set_ignore_eos(true);
      Sample& s = samples[i];
      const Clock::time_point t0 = Clock::now();
      Clock::time_point prev = t0;
      grpc::Status st = client.Generate(
          req,
          [&](const v1::GenerateResponse& r) {
            const Clock::time_point now = Clock::now();
            const int n = r.token_ids_size();
            if (n > 0) {
              if (s.tokens == 0) {
                s.ttft = std::chrono::duration<double>(now - t0).count();
                // Tokens that arrived merged with the first share its arrival time.
                for (int k = 1; k < n; ++k) s.itl.push_back(0);
              } else {
                const double gap = std::chrono::duration<double>(now - prev).count() / n;
                for (int k = 0; k < n; ++k) s.itl.push_back(gap);
              }
              s.tokens += n;
              prev = now;
            }
            return true;
          },
          timeout > 0 ? absl::Seconds(timeout) : absl::InfiniteDuration());
      s.latency = std::chrono::duration<double>(Clock::now() - t0).count();
      s.ok = st.ok();
      if (!st.ok()) s.error = server::GrpcCodeName(st.error_code());
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < std::min(concurrency, total); ++w) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl, lat;
  int64_t tokens = 0;
  int ok = 0;
  std::map<std::string, int> errors;
  for (const Sample& s : samples) {
    tokens += s.tokens;
    if (!s.ok) {
      ++errors[s.error];
      continue;
    }
    ++ok;
    if (s.tokens > 0) ttft.push_back(s.ttft);
    lat.push_back(s.latency);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
  }
  const Percentiles pt = Summarize(ttft), pi = Summarize(itl), pl = Summarize(lat);

  std::printf(
      "ptxserve bench: %s (%s on %s), concurrency %d, %d requests, prompt %d, max tokens %d\n",
      options->target.c_str(), info.name().c_str(), info.backend().c_str(), concurrency, total,
      prompt_len, max_tokens);
  std::printf("  duration          %10.3f s\n", wall);
  std::printf("  requests          %10d ok, %d errors\n", ok, total - ok);
  std::printf("  request rate      %10.2f req/s\n", ok / wall);
  std::printf("  token throughput  %10.1f tokens/s (generated)\n", tokens / wall);
  std::printf("  %-16s %10s %10s %10s %10s\n", "latency (ms)", "p50", "p90", "p99", "mean");
  auto row = [](const char* name, const Percentiles& p) {
    std::printf("  %-16s %10.3f %10.3f %10.3f %10.3f\n", name, p.p50 * 1e3, p.p90 * 1e3,
                p.p99 * 1e3, p.mean * 1e3);
  };
  row("TTFT", pt);
  row("inter-token", pi);
  row("end-to-end", pl);
  for (const auto& [code, n] : errors) std::printf("  error %-20s %d\n", code.c_str(), n);

  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    nlohmann::json j = {{"target", options->target},
                        {"model", info.name()},
                        {"backend", info.backend()},
                        {"concurrency", concurrency},
                        {"requests", total},
                        {"prompt_len", prompt_len},
                        {"max_tokens", max_tokens},
                        {"duration_s", wall},
                        {"ok", ok},
                        {"errors", errors},
                        {"request_throughput", ok / wall},
                        {"token_throughput", tokens / wall},
                        {"generated_tokens", tokens},
                        {"ttft", ToJson(pt)},
                        {"inter_token_latency", ToJson(pi)},
                        {"latency", ToJson(pl)}};
    std::ofstream f(json_path);
    if (!f) {
      std::fprintf(stderr, "bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
    f << j.dump(2) << "\n";
  }
  return ok == total ? 0 : 1;
}

}  // namespace ptxserve::cli
