// The OpenAI-compatible HTTP API on the same engine as gRPC, with vLLM's extra routes:
//   POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
//   GET /health (200 while SERVING, else 503), POST /tokenize, POST /detokenize.
// The API key (when set) is required on every route but /health, as
// "Authorization: Bearer <key>"; errors are OpenAI's error object.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/decode_service.h"
#include "server/http/http_types.h"
#include "server/metrics.h"
#include "server/request_log.h"

namespace ptxserve::server::http {

class OpenAiService {
 public:
  struct Hooks {
    std::function<std::shared_ptr<ServedModel>()> model;  // null until loaded
    std::function<bool()> serving;                        // health says SERVING
  };
  // `metrics` and `request_log` must outlive the service. An empty `api_key` disables
  // authentication.
  OpenAiService(ServerMetrics* metrics, const RequestLog* request_log, std::string api_key,
                Hooks hooks);

  // New generation calls get 503 from now on.
  void StartDraining() { draining_.store(true); }
  // The transport's handler.
  HttpResponse Handle(HttpRequest&& req);

 private:
  HttpResponse Completions(const HttpRequest& req, bool chat);
  HttpResponse Models();
  HttpResponse Tokenize(const ServedModel& model, const nlohmann::ordered_json& body);
  HttpResponse Detokenize(const ServedModel& model, const nlohmann::ordered_json& body);
  bool Authorized(const HttpRequest& req) const;
  // The loaded model, or UNAVAILABLE (no model yet; draining, for a generating call).
  absl::StatusOr<std::shared_ptr<ServedModel>> LoadedModel(bool generating);
  HttpResponse Refuse(const absl::Status& status);

  ServerMetrics* metrics_;
  const RequestLog* request_log_;
  const std::string api_key_;
  Hooks hooks_;
  std::atomic<bool> draining_{false};
};

}  // namespace ptxserve::server::http
