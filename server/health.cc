#include "server/health.h"

#include <algorithm>

namespace ptxserve::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream: writes the current status, then each change. At most one write is
// in flight; changes that arrive meanwhile collapse into the latest status.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* svc, bool known) : svc_(svc), known_(known) {}

  // Sends `status` (or SERVICE_UNKNOWN for an unknown service) when it differs from
  // the last status sent. Called with the service's lock held.
  void Update(ServingStatus status) {
    absl::MutexLock lock(&mu_);
    latest_ = known_ ? status : HealthCheckResponse::SERVICE_UNKNOWN;
    MaybeWriteLocked();
  }
  // Ends the stream with OK once the latest status is written (a shutdown's NOT_SERVING
  // reaches the client even when it arrives while an earlier write is in flight).
  void End() {
    absl::MutexLock lock(&mu_);
    end_ = true;
    MaybeWriteLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) end_ = broken_ = true;
    MaybeWriteLocked();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    end_ = broken_ = true;  // nobody reads what is left
    MaybeWriteLocked();
  }
  void OnDone() override {
    svc_->Remove(this);
    delete this;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    const bool changed = !sent_ || latest_ != last_sent_;
    if (!changed || broken_) {
      if (end_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
      return;
    }
    sent_ = true;
    last_sent_ = latest_;
    resp_.set_status(latest_);
    writing_ = true;
    StartWrite(&resp_);
  }

  HealthService* svc_;
  const bool known_;
  absl::Mutex mu_;
  HealthCheckResponse resp_ ABSL_GUARDED_BY(mu_);
  ServingStatus latest_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  ServingStatus last_sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // cancelled, or a write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService() : status_(HealthCheckResponse::NOT_SERVING) {}

HealthService::~HealthService() = default;

bool HealthService::Known(const std::string& service) {
  return service.empty() || service == "ptxserve.v1.DecodeService";
}

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  const ServingStatus s = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  if (s == status_) return;
  status_ = s;
  for (Watcher* w : watchers_) w->Update(s);
}

bool HealthService::serving() const {
  absl::MutexLock lock(&mu_);
  return status_ == HealthCheckResponse::SERVING;
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  status_ = HealthCheckResponse::NOT_SERVING;
  for (Watcher* w : watchers_) {
    w->Update(status_);
    w->End();
  }
}

void HealthService::Remove(Watcher* w) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), w), watchers_.end());
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const HealthCheckRequest* req,
                                               HealthCheckResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Known(req->service())) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + req->service() + "'"));
    return reactor;
  }
  {
    absl::MutexLock lock(&mu_);
    resp->set_status(status_);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* /*ctx*/, const HealthCheckRequest* req) {
  auto* w = new Watcher(this, Known(req->service()));
  absl::MutexLock lock(&mu_);
  watchers_.push_back(w);
  w->Update(status_);
  if (shutdown_) w->End();
  return w;
}

}  // namespace ptxserve::server
