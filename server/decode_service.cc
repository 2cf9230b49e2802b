#include "server/decode_service.h"

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/util/log.h"
#include "server/auth.h"
#include "server/grpc_message.h"
#include "server/status_util.h"

namespace ptxserve::server {
namespace {

enum class Method { kGenerate, kGenerateBatch, kTokenize, kDetokenize };

std::optional<Method> FindMethod(std::string_view path) {
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"/ptxserve.v1.DecodeService/Generate", Method::kGenerate},
      {"/ptxserve.v1.DecodeService/GenerateBatch", Method::kGenerateBatch},
      {"/ptxserve.v1.DecodeService/Tokenize", Method::kTokenize},
      {"/ptxserve.v1.DecodeService/Detokenize", Method::kDetokenize},
  };
  for (const auto& [name, method] : kMethods) {
    if (name == path) return method;
  }
  return std::nullopt;
}

absl::StatusOr<v1::TokenizeResponse> Tokenize(const ServedModel& model,
                                              const v1::TokenizeRequest& req) {
  absl::StatusOr<std::vector<int32_t>> ids = absl::InvalidArgumentError("input is empty");
  const Tokenizer& tok = *model.tokenizer;
  if (req.has_chat()) {
    auto text = RenderChat(req.chat(), &model.render_chat);
    if (!text.ok()) return text.status();
    ids = tok.Encode(*text, req.has_add_special_tokens() && req.add_special_tokens());
  } else if (req.input_case() == v1::TokenizeRequest::kText) {
    ids = tok.Encode(req.text(), !req.has_add_special_tokens() || req.add_special_tokens());
  }
  if (!ids.ok()) return ids.status();
  v1::TokenizeResponse resp;
  for (int32_t id : *ids) {
    resp.add_ids(id);
    resp.add_tokens(tok.IdToToken(id));
  }
  return resp;
}

absl::StatusOr<v1::DetokenizeResponse> Detokenize(const ServedModel& model,
                                                  const v1::DetokenizeRequest& req) {
  for (int i = 0; i < req.ids_size(); ++i) {
    if (req.ids(i) < 0 || req.ids(i) >= model.limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("ids[", i, "] = ", req.ids(i),
                                                     " is outside the vocabulary [0, ",
                                                     model.limits.vocab_size, ")"));
    }
  }
  const std::vector<int32_t> ids(req.ids().begin(), req.ids().end());
  v1::DetokenizeResponse resp;
  resp.set_text(model.tokenizer->Decode(ids, !req.keep_special_tokens()));
  return resp;
}

// A client can send malformed messages as fast as it likes: one line per second at most.
void LogMalformed(const std::string& peer, const absl::Status& st) {
  static LogThrottle throttle(std::chrono::seconds(1));
  int64_t suppressed = 0;
  if (!throttle.Allow(&suppressed)) return;
  LogEvent(LogLevel::kWarning, __FILE__, __LINE__, "malformed request message",
           {{"peer", peer}, {"error", std::string(st.message())}, {"suppressed", suppressed}});
}

}  // namespace

// One call of a generic method. The constructor (a gRPC thread) refuses the call or
// starts reading its one request message; OnReadDone parses it and either answers
// (Tokenize, Detokenize) or enqueues its requests and streams the engine's outputs.
// Threading of the stream: Pump runs either on a Dispatcher thread (after the engine's
// notification) or in OnWriteDone, never both at once: the stream notifies only after
// a PopAll found nothing, which happens only when no write is in flight.
class DecodeCall final : public grpc::ServerGenericBidiReactor, public Pumpable {
 public:
  DecodeCall(DecodeServiceImpl* svc, grpc::GenericCallbackServerContext* ctx)
      : svc_(svc), peer_(ctx->peer()) {
    const std::optional<Method> method = FindMethod(ctx->method());
    if (!method) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          absl::StrCat("unknown method ", ctx->method())));
      return;
    }
    method_ = *method;
    if (grpc::Status st = svc->Admit(*ctx, &model_); !st.ok()) {
      if (generating()) {
        svc_->metrics_->CountServerOutcome(st.error_code() == grpc::StatusCode::UNAUTHENTICATED
                                               ? kOutcomeUnauthenticated
                                               : kOutcomeRejected);
      }
      Finish(st);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed without a message, or the call ended (e.g. its message
      // was over the receive limit: gRPC has answered RESOURCE_EXHAUSTED).
      Refuse(kOutcomeInvalid, absl::InvalidArgumentError("the call carried no request message"));
      return;
    }
    switch (method_) {
      case Method::kGenerate:
      case Method::kGenerateBatch:
        StartGenerating();
        return;
      case Method::kTokenize:
        Answer<v1::TokenizeRequest>(&Tokenize);
        return;
      case Method::kDetokenize:
        Answer<v1::DetokenizeRequest>(&Detokenize);
        return;
    }
  }

  void Pump() override {
    if (next_ == pending_.size()) {
      next_ = 0;
      if (!stream_->PopAll(&pending_)) return;  // armed: the next output calls Post
    }
    EngineOutput& out = pending_[next_++];
    if (out.final()) {
      --remaining_;
      if (status_.ok()) status_ = ServerFailure(out);
      svc_->request_log_->Finished(out, "grpc", peer_);
    }
    const Tokenizer& tok = *model_->tokenizer;
    if (method_ == Method::kGenerate) {
      v1::GenerateResponse resp;
      ToProto(out, tok, &resp);
      response_ = SerializeMessage(resp);
    } else {
      v1::GenerateBatchResponse resp;
      resp.set_index(out.index);
      ToProto(out, tok, resp.mutable_response());
      response_ = SerializeMessage(resp);
    }
    if (remaining_ == 0) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), ToGrpcStatus(status_));
    } else {
      StartWrite(&response_);
    }
  }

  void OnWriteDone(bool ok) override {
    if (!generating()) return;  // the one reply of a unary method; Finish follows
    if (!ok) {
      // The client is gone: stop generating for it and end the call.
      CancelAll();
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke"));
      return;
    }
    Pump();
  }

  void OnCancel() override { CancelAll(); }

  void OnDone() override {
    if (stream_) stream_->Close();
    delete this;
  }

 private:
  bool generating() const {
    return method_ == Method::kGenerate || method_ == Method::kGenerateBatch;
  }

  void Refuse(const char* outcome, const absl::Status& status) {
    svc_->metrics_->CountServerOutcome(outcome);
    Finish(ToGrpcStatus(status));
  }

  // Parses the request as a Req; a malformed message is refused (and counted).
  template <typename Req>
  bool Parse(Req* req) {
    if (absl::Status st = ParseMessage(request_, req); !st.ok()) {
      LogMalformed(peer_, st);
      Refuse(kOutcomeMalformed, st);
      return false;
    }
    return true;
  }

  // A unary method: parse, compute the one reply, send it with the final status.
  template <typename Req, typename Resp>
  void Answer(absl::StatusOr<Resp> (*compute)(const ServedModel&, const Req&)) {
    Req req;
    if (!Parse(&req)) return;
    absl::StatusOr<Resp> resp = compute(*model_, req);
    if (!resp.ok()) {
      Finish(ToGrpcStatus(resp.status()));
      return;
    }
    response_ = SerializeMessage(*resp);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void StartGenerating() {
    const ServedModel& m = *model_;
    absl::StatusOr<std::vector<EngineRequest>> reqs;
    if (method_ == Method::kGenerate) {
      v1::GenerateRequest req;
      if (!Parse(&req)) return;
      reqs = ToEngineSamples(req, *m.tokenizer, m.limits, "", svc_->NextRequestId(), 0,
                             m.limits.max_batch_prompts, &m.render_chat);
    } else {
      v1::GenerateBatchRequest req;
      if (!Parse(&req)) return;
      reqs = ToEngineRequests(req, *m.tokenizer, m.limits, svc_->NextRequestId(), &m.render_chat);
    }
    if (!reqs.ok()) {
      Refuse(kOutcomeInvalid, reqs.status());
      return;
    }
    remaining_ = static_cast<int>(reqs->size());
    stream_ = std::make_shared<ResultStream>([this] { svc_->dispatcher_->Post(this); });
    // From here on outputs may arrive (and Pump run) before this returns.
    auto ids = model_->engine->Enqueue(*std::move(reqs), stream_);
    if (!ids.ok()) {
      stream_->Close();
      Refuse(ids.status().code() == absl::StatusCode::kInvalidArgument ? kOutcomeInvalid
                                                                       : kOutcomeRejected,
             ids.status());
      return;
    }
    absl::MutexLock lock(&ids_mu_);
    ids_ = *std::move(ids);
  }

  void CancelAll() {
    if (!model_) return;
    absl::MutexLock lock(&ids_mu_);
    for (uint64_t id : ids_) model_->engine->Cancel(id);
  }

  DecodeServiceImpl* svc_;
  const std::string peer_;
  Method method_ = Method::kGenerate;
  std::shared_ptr<ServedModel> model_;  // keeps the engine alive while the call lives
  grpc::ByteBuffer request_;
  std::shared_ptr<ResultStream> stream_;
  absl::Mutex ids_mu_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(ids_mu_);
  // Touched only by the single writer (see the class comment).
  std::vector<EngineOutput> pending_;
  size_t next_ = 0;
  int remaining_ = 0;
  absl::Status status_;
  grpc::ByteBuffer response_;
};

DecodeServiceImpl::DecodeServiceImpl(ServerMetrics* metrics, Dispatcher* dispatcher,
                                     const RequestLog* request_log, std::string api_key)
    : metrics_(metrics),
      dispatcher_(dispatcher),
      request_log_(request_log),
      api_key_(std::move(api_key)),
      boot_tag_(absl::StrFormat("%08x", absl::Uniform<uint32_t>(absl::BitGen()))) {
  RouteProtobufLogs();
}

void DecodeServiceImpl::SetModel(std::shared_ptr<ServedModel> model) {
  absl::MutexLock lock(&mu_);
  model_ = std::move(model);
}

std::shared_ptr<ServedModel> DecodeServiceImpl::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

std::string DecodeServiceImpl::NextRequestId() {
  // The boot tag makes ids (and the seeds derived from them) differ across restarts.
  return absl::StrCat("ptx-", boot_tag_, "-", next_id_.fetch_add(1, std::memory_order_relaxed));
}

grpc::Status DecodeServiceImpl::Admit(const grpc::ServerContextBase& ctx,
                                      std::shared_ptr<ServedModel>* model) {
  if (!api_key_.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    const bool ok =
        it != md.end() &&
        BearerTokenMatches(std::string_view(it->second.data(), it->second.size()), api_key_);
    if (!ok) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing or wrong API key: send metadata 'authorization: Bearer <key>'");
    }
  }
  if (draining_.load()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  }
  *model = this->model();
  if (!*model) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is not loaded yet");
  }
  return grpc::Status::OK;
}

grpc::ServerGenericBidiReactor* DecodeServiceImpl::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  return new DecodeCall(this, ctx);
}

grpc::ServerUnaryReactor* DecodeServiceImpl::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const v1::GetModelInfoRequest* /*req*/,
                                                          v1::ModelInfo* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<ServedModel> model;
  grpc::Status st = Admit(*ctx, &model);
  if (st.ok()) *resp = model->info;
  reactor->Finish(st);
  return reactor;
}

}  // namespace ptxserve::server
