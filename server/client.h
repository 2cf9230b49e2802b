// A small synchronous C++ client for ptxserve: channel setup (TLS, API key), streaming
// Generate / GenerateBatch, GetModelInfo and health checks. Used by `ptxserve client`,
// `ptxserve bench` and the tests.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ptxserve/v1/decode.grpc.pb.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace ptxserve::server {

struct ClientOptions {
  std::string target;        // host:port
  std::string api_key;       // sent as "authorization: Bearer <key>" when non-empty
  bool tls = false;          // TLS with the roots below (or the system roots)
  std::string tls_ca_pem;    // trusted CA for the server's certificate
  std::string tls_cert_pem;  // client certificate and key, for mutual TLS
  std::string tls_key_pem;
  std::string tls_server_name;  // overrides the name checked in the server certificate
};

class DecodeClient {
 public:
  explicit DecodeClient(const ClientOptions& options);

  // Streams one request; on_message sees every response (return false to cancel the
  // call). Returns the call's final status. `timeout` sets the call's deadline
  // (infinite: none). `ctx` (optional) lets the caller cancel from another thread.
  grpc::Status Generate(const v1::GenerateRequest& req,
                        const std::function<bool(const v1::GenerateResponse&)>& on_message,
                        absl::Duration timeout = absl::InfiniteDuration(),
                        grpc::ClientContext* ctx = nullptr);
  grpc::Status GenerateBatch(
      const v1::GenerateBatchRequest& req,
      const std::function<bool(const v1::GenerateBatchResponse&)>& on_message,
      absl::Duration timeout = absl::InfiniteDuration(), grpc::ClientContext* ctx = nullptr);
  grpc::Status GetModelInfo(v1::ModelInfo* info, absl::Duration timeout = absl::Seconds(10));
  // grpc.health.v1.Health/Check for `service` ("" = the server).
  grpc::Status Check(const std::string& service,
                     grpc::health::v1::HealthCheckResponse::ServingStatus* status,
                     absl::Duration timeout = absl::Seconds(5));

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // Adds the API key (and the deadline) to a context the caller built.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const;

 private:
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DecodeService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace ptxserve::server
