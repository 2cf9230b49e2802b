// `ptxserve bench`: a closed-loop load generator. N workers each run one streaming
// request at a time until M requests are done; it reports request and token
// throughput, time to first token, inter-token latency and end-to-end latency
// percentiles, the share of prompt tokens the server found in its prefix cache, and
// errors, as a table and optionally as JSON. With --stop-load every request also carries
// the most stopping criteria a request may, none of which ever matches: what such requests
// cost the others (bench/noisy_neighbour.sh).
//
// Workloads: random prompts; a shared prefix (every prompt starts with the same
// --shared-prefix-len tokens, then has its own --prompt-len); multi-turn chats (--turns:
// each request is a conversation whose every turn sends the previous turn's prompt and
// answer followed by a new message).
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

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "engine/sampler.h"
#include "nlohmann/json.hpp"
#include "server/cli/cli_util.h"
#include "server/cli/client_flags.h"
#include "server/cli/common_flags.h"
#include "server/cli/sampling_flags.h"
#include "server/cli/subcommands.h"
#include "server/client.h"
#include "server/http/http_client.h"
#include "server/status_util.h"

ABSL_FLAG(int32_t, concurrency, 16, "bench: requests in flight at once");
ABSL_FLAG(int32_t, requests, 64, "bench: requests in total");
ABSL_FLAG(int32_t, prompt_len, 32,
          "bench: prompt tokens of each request's own (random ids), after the shared prefix; "
          "with --turns, of each new message");
ABSL_FLAG(int32_t, shared_prefix_len, 0,
          "bench: tokens every prompt starts with, the same for all requests (a system prompt): "
          "the shared-prefix workload");
ABSL_FLAG(int32_t, turns, 1,
          "bench: turns per request (gRPC only): turn k sends turn k-1's prompt and answer "
          "followed by --prompt-len new tokens, a multi-turn chat; --requests conversations run");
ABSL_FLAG(std::string, json, "", "bench: also write the results as JSON to this file");
ABSL_FLAG(std::string, api, "grpc",
          "bench: grpc (DecodeService.Generate at --target) or http (streamed /v1/completions "
          "of the OpenAI-compatible API at --target, plain HTTP on 127.0.0.1)");
ABSL_FLAG(bool, stop_load, false,
          "bench: every request carries the most stopping criteria allowed, none of which "
          "ever matches: 64 stop strings of 512 bytes (story words ending in U+0001) and 256 "
          "stop ids (all id 0, <unk> in SentencePiece vocabularies); gRPC only");

namespace ptxserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  bool ok = false;
  std::string error;     // gRPC code name
  bool stopped = false;  // finished by a stop string or id
  double ttft = 0;       // seconds
  double latency = 0;
  int64_t tokens = 0;
  std::vector<double> itl;      // per token after the first
  std::vector<int32_t> answer;  // gRPC only
  // From the final message's usage (gRPC only).
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
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

struct ModelSummary {
  std::string name;
  std::string backend;  // "" over HTTP (the OpenAI model list does not say)
  int64_t vocab_size = 0;
};

struct BenchRequest {
  int index = 0;
  std::vector<int32_t> prompt;
  uint64_t seed = 0;
  int max_tokens = 0;
  float temperature = 0;
  const StoppingCriteria* stop_load = nullptr;  // --stop-load's stop strings and ids
};

// One xorshift64 step: cheap numbers, the same in every run.
uint64_t XorShift(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

// Random prompt ids (deterministic per request), avoiding the low special ids.
std::vector<int32_t> RandomPrompt(uint64_t seed, int i, int len, int64_t vocab) {
  std::vector<int32_t> ids;
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(i) + 1;
  const int64_t lo = std::min<int64_t>(3, vocab - 1);
  for (int t = 0; t < len; ++t) {
    ids.push_back(static_cast<int32_t>(lo + static_cast<int64_t>(XorShift(&x) % (vocab - lo))));
  }
  return ids;
}

// --stop-load's criteria: as many stop strings and ids as a request may carry, each as
// long as allowed. The strings are common story words, so the text keeps running a few
// words into them, and end in U+0001, a control character a story model does not emit
// (the shared tinystories model cannot: its vocabulary lacks it). A model samples every
// ordinary id now and then, and with ignore_eos even BOS after EOS, so the stop ids are
// all id 0, <unk> in SentencePiece vocabularies, which a model does not generate; the
// checker's cost does not depend on the ids being distinct. bench/noisy_neighbour.sh
// checks that no request stopped.
StoppingCriteria StopLoad() {
  static constexpr const char* kWords[] = {"the",  "a",    "and",    "was", "to",    "she",
                                           "he",   "they", "little", "big", "happy", "said",
                                           "play", "with", "her",    "his", "day",   "time"};
  StoppingCriteria c;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < kMaxStopStrings; ++i) {
    std::string s;
    while (s.size() < kMaxStopStringBytes - 1) {
      s += ' ';
      s += kWords[XorShift(&x) % std::size(kWords)];
    }
    s.resize(kMaxStopStringBytes - 1);
    c.stop.push_back(s + '\x01');
  }
  c.stop_token_ids.assign(kMaxStopTokenIds, 0);
  return c;
}

// Records the arrival of `n` tokens at `now`.
void CountTokens(Sample* s, int64_t n, Clock::time_point t0, Clock::time_point* prev) {
  if (n <= 0) return;
  const Clock::time_point now = Clock::now();
  if (s->tokens == 0) {
    s->ttft = std::chrono::duration<double>(now - t0).count();
    // Tokens that arrived merged with the first share its arrival time.
    for (int64_t k = 1; k < n; ++k) s->itl.push_back(0);
  } else {
    const double gap = std::chrono::duration<double>(now - *prev).count() / n;
    for (int64_t k = 0; k < n; ++k) s->itl.push_back(gap);
  }
  s->tokens += n;
  *prev = now;
}

Sample RunGrpc(server::DecodeClient& client, const BenchRequest& b, double timeout) {
  v1::GenerateRequest req;
  req.set_request_id("bench-" + std::to_string(b.index));
  req.mutable_token_ids()->mutable_ids()->Add(b.prompt.begin(), b.prompt.end());
  req.mutable_sampling()->set_temperature(b.temperature);
  req.mutable_sampling()->set_seed(b.seed);
  req.mutable_stopping()->set_max_new_tokens(b.max_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  if (b.stop_load != nullptr) {
    for (const std::string& stop : b.stop_load->stop) req.mutable_stopping()->add_stop(stop);
    for (int32_t id : b.stop_load->stop_token_ids) req.mutable_stopping()->add_stop_token_ids(id);
  }
  Sample s;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point prev = t0;
  grpc::Status st = client.Generate(
      req,
      [&](const v1::GenerateResponse& r) {
        CountTokens(&s, r.token_ids_size(), t0, &prev);
        s.stopped |= r.finish_reason() == v1::FINISH_REASON_STOP;
        s.answer.insert(s.answer.end(), r.token_ids().begin(), r.token_ids().end());
        if (r.has_usage()) {
          s.prompt_tokens = r.usage().prompt_tokens();
          s.cached_prompt_tokens = r.usage().cached_prompt_tokens();
        }
        return true;
      },
      timeout > 0 ? absl::Seconds(timeout) : absl::InfiniteDuration());
  s.latency = std::chrono::duration<double>(Clock::now() - t0).count();
  s.ok = st.ok();
  if (!st.ok()) s.error = server::GrpcCodeName(st.error_code());
  return s;
}

absl::StatusOr<ModelSummary> HttpModelSummary(int port) {
  server::http::HttpReply r = server::http::HttpCall(port, "GET", "/v1/models");
  if (r.status != 200) return absl::UnavailableError(absl::StrCat("HTTP ", r.status, " ", r.body));
  const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) {
    return absl::UnavailableError("no model in the answer");
  }
  const nlohmann::json& m = j["data"][0];
  return ModelSummary{m.value("id", ""), "", m.value("vocab_size", int64_t{0})};
}

// One streamed /v1/completions call; tokens are counted from each chunk's usage
// (stream_options.continuous_usage_stats).
Sample RunHttp(int port, const BenchRequest& b, double timeout,
               std::unique_ptr<server::http::HttpConnection>* connection) {
  const nlohmann::json body = {
      {"prompt", b.prompt},
      {"max_tokens", b.max_tokens},
      {"temperature", b.temperature},
      {"seed", b.seed},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}};
  Sample s;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point prev = t0;
  auto& c = *connection;
  if (!c || !c->ok()) {
    c = std::make_unique<server::http::HttpConnection>(port,
                                                       timeout > 0 ? static_cast<int>(timeout) : 0);
  }
  server::http::HttpReply head;
  if (!c->Send("POST", "/v1/completions", body.dump(), "Content-Type: application/json\r\n") ||
      !c->ReadHead(&head)) {
    c.reset();
    s.error = "CONNECTION";
    return s;
  }
  if (head.status != 200) {
    c.reset();  // its error body is not read: start afresh
    s.latency = std::chrono::duration<double>(Clock::now() - t0).count();
    s.error = absl::StrCat("HTTP_", head.status);
    return s;
  }
  std::string piece, pending;
  int64_t seen = 0;
  bool done = false, failed = false;
  while (c->ReadChunk(&piece)) {
    pending += piece;
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      const auto j =
          nlohmann::json::parse(event.substr(std::min<size_t>(6, event.size())), nullptr, false);
      if (j.is_discarded() || j.contains("error")) {
        failed = true;
      } else if (j.contains("usage") && j["usage"].is_object() && !j["choices"].empty()) {
        const int64_t so_far = j["usage"].value("completion_tokens", int64_t{0});
        CountTokens(&s, so_far - seen, t0, &prev);
        seen = so_far;
      }
    }
  }
  s.latency = std::chrono::duration<double>(Clock::now() - t0).count();
  s.ok = done && !failed;
  if (!s.ok) s.error = "STREAM";
  if (head.headers["connection"] == "close") c.reset();
  return s;
}

}  // namespace

int RunBench(int argc, char** argv) {
  SetSubcommandFlags({"server/cli/bench.cc", "server/cli/client_flags.cc", "max_tokens",
                      "temperature", "seed", "api_key_file", "tls_cert", "tls_key"});
  ParseSubcommandFlags(
      argc, argv,
      "ptxserve bench [--api grpc|http] --target HOST:PORT --concurrency N "
      "--requests M --prompt-len P [--shared-prefix-len S] [--turns K] --max-tokens T "
      "[--temperature T] [--stop-load] [--json FILE]");
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const int total = std::max(1, absl::GetFlag(FLAGS_requests));
  const int prompt_len = std::max(1, absl::GetFlag(FLAGS_prompt_len));
  const int shared_prefix_len = std::max(0, absl::GetFlag(FLAGS_shared_prefix_len));
  const int turns = std::max(1, absl::GetFlag(FLAGS_turns));
  const int max_tokens = std::max(1, absl::GetFlag(FLAGS_max_tokens));
  auto options = ClientOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "bench: %s\n", options.status().ToString().c_str());
    return 2;
  }
  const bool http = absl::GetFlag(FLAGS_api) == "http";
  if (!http && absl::GetFlag(FLAGS_api) != "grpc") {
    std::fprintf(stderr, "bench: --api=%s: want grpc or http\n", absl::GetFlag(FLAGS_api).c_str());
    return 2;
  }
  if (http && turns > 1) {
    // The answer's token ids, which the next turn sends back, come only over gRPC.
    std::fprintf(stderr, "bench: --turns needs --api grpc\n");
    return 2;
  }
  std::unique_ptr<server::DecodeClient> grpc_client;
  int http_port = 0;
  ModelSummary model;
  if (http) {
    const std::string& t = options->target;
    const size_t colon = t.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(t.substr(colon + 1), &http_port)) {
      std::fprintf(stderr, "bench: --target=%s: want HOST:PORT\n", t.c_str());
      return 2;
    }
    auto m = HttpModelSummary(http_port);
    if (!m.ok()) {
      std::fprintf(stderr, "bench: GET /v1/models: %s\n", m.status().ToString().c_str());
      return 1;
    }
    model = *m;
  } else {
    grpc_client = std::make_unique<server::DecodeClient>(*options);
    v1::ModelInfo info;
    if (grpc::Status st = grpc_client->GetModelInfo(&info); !st.ok()) {
      std::fprintf(stderr, "bench: GetModelInfo: %s: %s\n", server::GrpcCodeName(st.error_code()),
                   st.error_message().c_str());
      return 1;
    }
    model = {info.name(), info.backend(), info.vocab_size()};
  }
  const bool with_stop_load = absl::GetFlag(FLAGS_stop_load);
  if (with_stop_load && http) {
    std::fprintf(stderr, "bench: --stop-load needs --api grpc\n");
    return 2;
  }
  const StoppingCriteria stop_load = with_stop_load ? StopLoad() : StoppingCriteria{};
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const double timeout = absl::GetFlag(FLAGS_timeout);
  const float temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));

  // A stream of its own (~seed): the same prefix whatever --requests, unlike every
  // request's own tokens.
  const std::vector<int32_t> shared_prefix =
      RandomPrompt(~seed, 0, shared_prefix_len, model.vocab_size);
  std::vector<Sample> samples(static_cast<size_t>(total) * turns);
  std::atomic<int> next{0};
  const Clock::time_point start = Clock::now();
  auto worker = [&] {
    std::unique_ptr<server::http::HttpConnection> connection;  // kept alive across requests
    for (int i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      std::vector<int32_t> history = shared_prefix;  // the conversation so far
      for (int turn = 0; turn < turns; ++turn) {
        BenchRequest req;
        req.index = i * turns + turn;
        req.prompt = history;
        const std::vector<int32_t> own =
            RandomPrompt(seed, req.index, prompt_len, model.vocab_size);
        req.prompt.insert(req.prompt.end(), own.begin(), own.end());
        req.seed = seed + static_cast<uint64_t>(req.index);
        req.max_tokens = max_tokens;
        req.temperature = temperature;
        if (with_stop_load) req.stop_load = &stop_load;
        Sample& s = samples[req.index];
        s = http ? RunHttp(http_port, req, timeout, &connection)
                 : RunGrpc(*grpc_client, req, timeout);
        history = std::move(req.prompt);
        history.insert(history.end(), s.answer.begin(), s.answer.end());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < std::min(concurrency, total); ++w) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl, lat;
  int64_t tokens = 0, prompt_tokens = 0, cached_prompt_tokens = 0;
  int ok = 0, stopped = 0;
  const int calls = static_cast<int>(samples.size());
  std::map<std::string, int> errors;
  for (const Sample& s : samples) {
    tokens += s.tokens;
    stopped += s.stopped;
    prompt_tokens += s.prompt_tokens;
    cached_prompt_tokens += s.cached_prompt_tokens;
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
      "ptxserve bench: %s %s (%s on %s), concurrency %d, %d requests, shared prefix %d, prompt "
      "%d, %d turns, max tokens %d\n",
      absl::GetFlag(FLAGS_api).c_str(), options->target.c_str(), model.name.c_str(),
      model.backend.c_str(), concurrency, total, shared_prefix_len, prompt_len, turns, max_tokens);
  std::printf("  duration          %10.3f s\n", wall);
  std::printf("  requests          %10d ok, %d errors\n", ok, calls - ok);
  if (with_stop_load) std::printf("  stop load         %10d stopped early\n", stopped);
  std::printf("  request rate      %10.2f req/s\n", ok / wall);
  std::printf("  token throughput  %10.1f tokens/s (generated)\n", tokens / wall);
  const double hit_rate =
      prompt_tokens > 0 ? static_cast<double>(cached_prompt_tokens) / prompt_tokens : 0.0;
  if (!http) {
    std::printf("  prefix cache      %10.1f %% of %lld prompt tokens cached\n", 100 * hit_rate,
                static_cast<long long>(prompt_tokens));
  }
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
                        {"api", absl::GetFlag(FLAGS_api)},
                        {"model", model.name},
                        {"backend", model.backend},
                        {"concurrency", concurrency},
                        {"requests", calls},
                        {"prompt_len", prompt_len},
                        {"shared_prefix_len", shared_prefix_len},
                        {"turns", turns},
                        {"max_tokens", max_tokens},
                        {"duration_s", wall},
                        {"ok", ok},
                        {"stop_load", with_stop_load},
                        {"stopped", stopped},
                        {"errors", errors},
                        {"request_throughput", ok / wall},
                        {"token_throughput", tokens / wall},
                        {"generated_tokens", tokens},
                        {"prompt_tokens", prompt_tokens},
                        {"cached_prompt_tokens", cached_prompt_tokens},
                        {"prefix_cache_hit_rate", hit_rate},
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
  return ok == calls ? 0 : 1;
}

}  // namespace ptxserve::cli
