// grpc.health.v1.Health, implemented here (not gRPC's default service) so that the
// status is NOT_SERVING from the very first call until the server says otherwise.
// Known services: "" (the whole server) and "ptxserve.v1.DecodeService"; both always
// share one status.
#pragma once

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ptxserve::server {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService();
  ~HealthService() override;

  // Sets the status of every known service; Watch streams get the change.
  void SetServing(bool serving);
  bool serving() const;
  // Ends every Watch stream (OK) and makes new ones end at once. Before server shutdown.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req) override;

 private:
  class Watcher;
  static bool Known(const std::string& service);
  void Remove(Watcher* w);

  mutable absl::Mutex mu_;
  ServingStatus status_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ptxserve::server
