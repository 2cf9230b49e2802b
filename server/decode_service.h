// ptxserve.v1.DecodeService on the gRPC callback API: one reactor per call. A generating
// call converts and validates the request, enqueues it in the engine, and writes the
// engine's outputs as they come: one write in flight at a time, the next one started by
// OnWriteDone or, when the reactor was idle, by the engine's notification (run on a
// Dispatcher thread, never on the engine thread).
#pragma once

#include <grpcpp/generic/async_generic_service.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "engine/engine_stats.h"
#include "engine/tokenizer/tokenizer.h"
#include "ptxserve/v1/decode.grpc.pb.h"
#include "server/chat_renderer.h"
#include "server/convert.h"
#include "server/dispatcher.h"
#include "server/metrics.h"
#include "server/request_log.h"

namespace ptxserve::server {

// A loaded model and its running engine: what the service needs to serve.
struct ServedModel {
  std::unique_ptr<Tokenizer> tokenizer;  // before engine: the engine refers to it
  std::unique_ptr<Engine> engine;        // started
  RequestLimits limits;
  v1::ModelInfo info;
  // The backend's kernel and transfer counters (Backend::kernel_stats; any thread).
  std::function<KernelStats()> kernel_stats;
  // The chat template; empty when the model has none (chat requests are then refused).
  ChatRenderer render_chat;
  int64_t created_unix_seconds = 0;  // when it was loaded (the OpenAI model list's "created")
};

// Every method but GetModelInfo is served through the gRPC callback generic API, as raw
// bytes: a call's metadata is checked (API key, readiness) before its message is read,
// so an unauthenticated client costs no more than gRPC's flow-control window, and the
// message is parsed here, so a malformed one gets INVALID_ARGUMENT saying what is wrong
// (gRPC's typed path answers UNIMPLEMENTED with no message and logs a libprotobuf ERROR).
// GetModelInfo stays a typed callback method (its request has no fields) so that the
// service, with all its methods, is registered under its name and listed by reflection.
using DecodeServiceBase = v1::DecodeService::WithGenericMethod_Generate<
    v1::DecodeService::WithGenericMethod_GenerateBatch<
        v1::DecodeService::WithGenericMethod_Tokenize<
            v1::DecodeService::WithGenericMethod_Detokenize<
                v1::DecodeService::WithCallbackMethod_GetModelInfo<v1::DecodeService::Service>>>>>;

class DecodeServiceImpl final : public DecodeServiceBase, public grpc::CallbackGenericService {
 public:
  // `metrics`, `dispatcher` and `request_log` must outlive the service. An empty
  // `api_key` disables authentication.
  DecodeServiceImpl(ServerMetrics* metrics, Dispatcher* dispatcher, const RequestLog* request_log,
                    std::string api_key);

  // Serving starts once a model is set; until then calls get UNAVAILABLE.
  void SetModel(std::shared_ptr<ServedModel> model);
  std::shared_ptr<ServedModel> model() const;
  // New calls get UNAVAILABLE from now on.
  void StartDraining() { draining_.store(true); }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const v1::GetModelInfoRequest* req,
                                         v1::ModelInfo* resp) override;
  // The generic methods (and any method no service registered: UNIMPLEMENTED).
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  friend class DecodeCall;
  // OK, or the status a new call is refused with (auth, not ready, draining).
  grpc::Status Admit(const grpc::ServerContextBase& ctx, std::shared_ptr<ServedModel>* model);
  std::string NextRequestId();

  ServerMetrics* metrics_;
  Dispatcher* dispatcher_;
  const RequestLog* request_log_;
  const std::string api_key_;
  const std::string boot_tag_;  // random per process: request ids unique across restarts
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  mutable absl::Mutex mu_;
  std::shared_ptr<ServedModel> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ptxserve::server
