// The ptxserve server: gRPC (DecodeService, Health, reflection), the OpenAI-compatible
// HTTP API and the Prometheus /metrics endpoint, around an Engine that is installed once the model
// is loaded. Used by `ptxserve serve` and, in-process, by the tests.
//
// Life cycle: Start() binds the ports with health NOT_SERVING; SetModel() installs a
// started engine and health turns SERVING; a watchdog keeps health NOT_SERVING while
// the engine has failed or has stopped making progress with work queued; Shutdown()
// drains (NOT_SERVING, new calls UNAVAILABLE, running streams finish up to the drain
// timeout, then are cancelled) and stops everything.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/decode_service.h"
#include "server/dispatcher.h"
#include "server/health.h"
#include "server/http/http_server.h"
#include "server/http/openai_service.h"
#include "server/metrics.h"

namespace grpc {
class Server;
}

namespace ptxserve::server {

struct TlsConfig {
  std::string cert_pem;       // server certificate chain; empty = no TLS
  std::string key_pem;        // its private key
  std::string client_ca_pem;  // non-empty: clients must present a certificate it signed
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 50051;          // 0 = any free port (see Server::port())
  int metrics_port = 9464;   // 0 = any free port; -1 = no metrics endpoint
  std::string metrics_host;  // the metrics port's address; empty = host
  int http_port = 8000;      // the OpenAI-compatible HTTP API; 0 = any free port; -1 = none
  int http_threads = 2;      // threads serving every HTTP connection
  TlsConfig tls;
  std::string api_key;          // non-empty: calls need "authorization: Bearer <key>"
  std::string backend = "cpu";  // for build_info
  int writer_threads = 2;       // Dispatcher threads
  // A stream of work not progressing for this long marks the server NOT_SERVING.
  absl::Duration stall_timeout = absl::Seconds(30);
  absl::Duration watchdog_period = absl::Milliseconds(100);
  // The largest request message (gRPC: RESOURCE_EXHAUSTED from gRPC's receive limit)
  // or body (HTTP: 413) accepted.
  int64_t max_request_bytes = 4 << 20;
  // Reflection (grpc.reflection.v1alpha) lists and describes the services to anyone who
  // can connect, so by default it is served only when no API key is set.
  bool reflection = true;
  bool log_requests = true;  // one log line per finished request (request_log.h)
};

// Loads, on the calling thread, what SetModel needs: model, tokenizer, the backend
// options.backend names, started engine, limits and ModelInfo.
struct ModelOptions {
  std::string model_dir;
  std::string model_name;  // ModelInfo.name; empty = the directory's last component
  // "cpu", "cuda" (libcuda.so.1, device 0), "emulated" (the PTX emulator) or "auto" (cuda
  // when it comes up, else cpu).
  std::string backend = "cpu";
  // The emulated device's profile (small, a100 or h100) for backend "emulated".
  std::string emulated_device = "small";
  int32_t kv_blocks = 0;  // 0 = from kv_memory_bytes, else enough for max_batch_size
  int64_t kv_memory_bytes = 0;
  // Neither set, on a GPU: this fraction of the device memory free after weights and
  // activations goes to the KV pools (vLLM's --gpu-memory-utilization, counted after load).
  double kv_memory_fraction = 0.9;
  // GPU backends: replay decode-only steps as CUDA graphs (false: launch by launch, like
  // vLLM's --enforce-eager).
  bool cuda_graphs = true;
  int32_t block_size = 16;
  // A Jinja chat template file overriding the model's tokenizer_config.json chat_template.
  std::string chat_template_path;
  EngineConfig engine;
  int32_t default_max_new_tokens = 256;
  int32_t max_batch_prompts = 256;
  // GPU backends: called after each kernel compilation with its seconds (the
  // kernel_compile_seconds histogram).
  std::function<void(double seconds)> on_kernel_compile;
  // When set, wraps the backend before the engine gets it (fault injection, tracing).
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;
};
// Checks options.backend (cpu, cuda, emulated or auto) and options.emulated_device against
// it before anything loads: InvalidArgument naming the flag and the valid values.
absl::Status CheckBackendOptions(const ModelOptions& options);
absl::StatusOr<std::shared_ptr<ServedModel>> LoadServedModel(const ModelOptions& options,
                                                             EngineObserver* observer);

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // Shutdown(zero drain) when still running

  // Binds and starts serving (health NOT_SERVING, DecodeService UNAVAILABLE).
  absl::Status Start();
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }

  // Installs a loaded model with a started engine; health turns SERVING.
  void SetModel(std::shared_ptr<ServedModel> model);
  ServerMetrics& metrics() { return *metrics_; }
  HealthService& health() { return *health_; }
  std::shared_ptr<ServedModel> model() const { return service_->model(); }

  // Drains and stops (see the file comment). Idempotent.
  void Shutdown(absl::Duration drain_timeout);

 private:
  void Watchdog();
  // The health service's status and its gauge together.
  void SetServing(bool serving);

  ServerConfig config_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<RequestLog> request_log_;
  std::unique_ptr<DecodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<http::HttpServer> metrics_http_;  // --metrics-port: GET /metrics
  std::unique_ptr<http::OpenAiService> openai_;
  std::unique_ptr<http::HttpServer> http_;
  int http_port_ = -1;
  int port_ = 0;
  int metrics_port_ = -1;
  absl::Notification stop_watchdog_;
  std::thread watchdog_;
  bool shut_down_ = false;
};

}  // namespace ptxserve::server
