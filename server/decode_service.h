// ptxserve.v1.DecodeService on the gRPC callback API: one reactor per call. A stream
// reactor converts and validates the request, enqueues it in the engine, and writes
// the engine's outputs as they come: one write in flight at a time, the next one
// started by OnWriteDone or, when the reactor was idle, by the engine's notification
// (run on a Dispatcher thread, never on the engine thread).
#pragma once

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

namespace ptxserve::server {

// A loaded model and its running engine: what the service needs to serve.
struct ServedModel {
  std::unique_ptr<Tokenizer> tokenizer;  // before engine: the engine refers to it
  std::unique_ptr<Engine> engine;        // started
  RequestLimits limits;
  v1::ModelInfo info;
  // GPU backends: their kernel and transfer counters (any thread); empty on the CPU.
  std::function<KernelStats()> kernel_stats;
  // The chat template; empty when the model has none (chat requests are then refused).
  ChatRenderer render_chat;
  int64_t created_unix_seconds = 0;  // when it was loaded (the OpenAI model list's "created")
};

class DecodeServiceImpl final : public v1::DecodeService::CallbackService {
 public:
  // `metrics` and `dispatcher` must outlive the service. An empty `api_key` disables
  // authentication.
  DecodeServiceImpl(ServerMetrics* metrics, Dispatcher* dispatcher, std::string api_key);

  // Serving starts once a model is set; until then calls get UNAVAILABLE.
  void SetModel(std::shared_ptr<ServedModel> model);
  std::shared_ptr<ServedModel> model() const;
  // New calls get UNAVAILABLE from now on.
  void StartDraining() { draining_.store(true); }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const v1::GenerateRequest* req) override;
  grpc::ServerWriteReactor<v1::GenerateBatchResponse>* GenerateBatch(
      grpc::CallbackServerContext* ctx, const v1::GenerateBatchRequest* req) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const v1::GetModelInfoRequest* req,
                                         v1::ModelInfo* resp) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* req,
                                     v1::TokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const v1::DetokenizeRequest* req,
                                       v1::DetokenizeResponse* resp) override;

 private:
  template <typename Resp>
  friend class StreamReactor;
  // OK, or the status a new call is refused with (auth, not ready, draining).
  grpc::Status Admit(grpc::CallbackServerContext* ctx, std::shared_ptr<ServedModel>* model);
  std::string NextRequestId();

  ServerMetrics* metrics_;
  Dispatcher* dispatcher_;
  const std::string api_key_;
  const std::string boot_tag_;  // random per process: request ids unique across restarts
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  mutable absl::Mutex mu_;
  std::shared_ptr<ServedModel> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ptxserve::server
