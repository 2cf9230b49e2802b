// Helpers for the in-process server tests: the model to serve, a backend decorator
// that slows, fails or stalls steps on demand, an in-process server on free ports, and
// a tiny HTTP GET for /metrics.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/model/synthetic.h"
#include "server/server.h"

namespace ptxserve::testing {

// The shared tinystories model when present, else a synthetic tiny model written once
// into the build tree (so the suite never depends on the shared directory).
inline std::string TestModelDir() {
  const std::string shared = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (std::filesystem::exists(shared + "/model.safetensors")) return shared;
  const std::string dir = std::string(PTXSERVE_BINARY_DIR) + "/tests/server/tiny-model";
  if (!std::filesystem::exists(dir + "/config.json")) {
    auto spec = SyntheticPreset("tiny");
    if (spec.ok()) (void)WriteSyntheticModel(dir, *spec, 0, DType::kF32);
  }
  return dir;
}

// Wraps a backend: optional delay per step, injected failures, or a stall until
// released. Controls are thread-safe.
class ControlledBackend : public Backend {
 public:
  explicit ControlledBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  absl::Status Step(const StepBatch& b, std::vector<float>* logits) override {
    if (absl::Status st = Control(); !st.ok()) return st;
    return inner_->Step(b, logits);
  }
  // Device sampling goes through the same controls (the emulated GPU backend).
  bool CanSampleOnDevice(const SamplingParams& p) const override {
    return inner_->CanSampleOnDevice(p);
  }
  using Backend::StepSampled;
  absl::Status StepSampled(const StepBatch& b, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids,
                           std::vector<SampleResult>* logprobs) override {
    if (absl::Status st = Control(); !st.ok()) return st;
    return inner_->StepSampled(b, rows, ids, logprobs);
  }
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheConfig& kv_config() const override { return inner_->kv_config(); }
  std::string name() const override { return inner_->name(); }
  bool usable() const override { return inner_->usable(); }

  void set_delay_us(int us) { delay_us_.store(us); }
  void set_fail_always(bool f) {
    absl::MutexLock lock(&mu_);
    fail_always_ = f;
  }
  void set_stalled(bool s) {
    absl::MutexLock lock(&mu_);
    stalled_ = s;
    cv_.SignalAll();
  }
  // Waits until a step is held by the stall (set by set_stalled or stall_at_step).
  void AwaitStalled() {
    absl::MutexLock lock(&mu_);
    while (!in_stall_) cv_.Wait(&mu_);
  }
  // Stalls from the n-th step on (counted since construction), until set_stalled(false).
  void stall_at_step(int64_t n) {
    absl::MutexLock lock(&mu_);
    stall_at_ = n;
  }
  int64_t steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  // Counts the step, holds it while stalled, fails it when asked, delays it.
  absl::Status Control() {
    {
      absl::MutexLock lock(&mu_);
      ++steps_;
      if (stall_at_ > 0 && steps_ >= stall_at_) {
        stall_at_ = 0;
        stalled_ = true;
      }
      if (stalled_) {
        in_stall_ = true;
        cv_.SignalAll();
        while (stalled_) cv_.Wait(&mu_);
        in_stall_ = false;
      }
      if (fail_always_) return absl::InternalError("injected backend failure");
    }
    const int delay = delay_us_.load();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    return absl::OkStatus();
  }

  std::unique_ptr<Backend> inner_;
  std::atomic<int> delay_us_{0};
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_always_ ABSL_GUARDED_BY(mu_) = false;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stall_at_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_stall_ ABSL_GUARDED_BY(mu_) = false;
};

// An in-process server on free ports with a loaded model behind a ControlledBackend.
struct TestServer {
  std::unique_ptr<server::Server> server;
  ControlledBackend* backend = nullptr;  // owned by the engine
  std::string target;

  // Starts the server (health NOT_SERVING); call Load() to serve.
  static std::unique_ptr<TestServer> Start(server::ServerConfig cfg = {}) {
    auto t = std::make_unique<TestServer>();
    cfg.port = 0;
    cfg.metrics_port = 0;
    if (cfg.http_port != -1) cfg.http_port = 0;
    t->server = std::make_unique<server::Server>(cfg);
    absl::Status st = t->server->Start();
    if (!st.ok()) return nullptr;
    t->target = absl::StrCat("127.0.0.1:", t->server->port());
    return t;
  }
  absl::Status Load(server::ModelOptions mo = DefaultModelOptions()) {
    mo.model_dir = TestModelDir();
    mo.wrap_backend = [this](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
      auto c = std::make_unique<ControlledBackend>(std::move(b));
      backend = c.get();
      return c;
    };
    auto m = server::LoadServedModel(mo, &server->metrics());
    if (!m.ok()) return m.status();
    server->SetModel(*std::move(m));
    return absl::OkStatus();
  }
  static server::ModelOptions DefaultModelOptions() {
    server::ModelOptions mo;
    mo.engine.max_batch_size = 64;
    mo.engine.max_batch_tokens = 1024;
    mo.engine.prefill_chunk = 256;
    mo.kv_blocks = 2048;
    return mo;
  }
  Engine& engine() { return *server->model()->engine; }
};

// Polls (bounded) until the engine holds no live request and no KV block.
inline bool WaitIdle(Engine& e) {
  for (int i = 0; i < 2000; ++i) {
    if (e.num_live() == 0 && e.Stats().kv_blocks_used == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// GET http://127.0.0.1:port/path; the body, or "" on failure.
inline std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[16384];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// The value of the sample line `name` (labels included, e.g.
// ptxserve_requests_total{outcome="cancelled"}) in a text exposition; -1 when absent.
inline double MetricValue(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const size_t after = pos + name.size();
    if (line_start && after < text.size() && text[after] == ' ') {
      return std::stod(text.substr(after + 1, text.find('\n', after) - after - 1));
    }
    pos = after;
  }
  return -1;
}

}  // namespace ptxserve::testing
