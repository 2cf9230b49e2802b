#include "server/decode_service.h"

#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/auth.h"
#include "server/status_util.h"

namespace ptxserve::server {
namespace {

void Fill(EngineOutput&& out, const Tokenizer& tok, v1::GenerateResponse* resp) {
  ToProto(out, tok, resp);
}
void Fill(EngineOutput&& out, const Tokenizer& tok, v1::GenerateBatchResponse* resp) {
  resp->set_index(out.index);
  ToProto(out, tok, resp->mutable_response());
}

}  // namespace

// One Generate or GenerateBatch call. Threading: the constructor runs on a gRPC thread;
// Pump runs either on a Dispatcher thread (after the engine's notification) or in
// OnWriteDone, never both at once: the stream notifies only after a PopAll found nothing,
// which happens only when no write is in flight.
template <typename Resp>
class StreamReactor final : public grpc::ServerWriteReactor<Resp>, public Pumpable {
 public:
  StreamReactor(DecodeServiceImpl* svc, grpc::CallbackServerContext* ctx,
                absl::StatusOr<std::vector<EngineRequest>> (*convert)(const ServedModel&,
                                                                      const void*,
                                                                      const std::string&),
                const void* request, size_t request_bytes, int num_prompts)
      : svc_(svc) {
    std::shared_ptr<ServedModel> model;
    if (grpc::Status st = svc->Admit(ctx, &model); !st.ok()) {
      svc_->metrics_->CountServerOutcome(st.error_code() == grpc::StatusCode::UNAUTHENTICATED
                                             ? kOutcomeUnauthenticated
                                             : kOutcomeRejected,
                                         num_prompts);
      this->Finish(st);
      return;
    }
    absl::StatusOr<std::vector<EngineRequest>> reqs = absl::InvalidArgumentError("");
    if (absl::Status size = CheckRequestSize(request_bytes, model->limits); !size.ok()) {
      reqs = size;
    } else {
      reqs = convert(*model, request, svc->NextRequestId());
    }
    if (!reqs.ok()) {
      svc_->metrics_->CountServerOutcome(kOutcomeInvalid, num_prompts);
      this->Finish(ToGrpcStatus(reqs.status()));
      return;
    }
    remaining_ = static_cast<int>(reqs->size());
    engine_ = model;
    stream_ = std::make_shared<ResultStream>([this] { svc_->dispatcher_->Post(this); });
    // From here on outputs may arrive (and Pump run) before the constructor returns;
    // gRPC buffers reactions started before the reactor is bound.
    auto ids = model->engine->Enqueue(*std::move(reqs), stream_);
    if (!ids.ok()) {
      svc_->metrics_->CountServerOutcome(ids.status().code() == absl::StatusCode::kInvalidArgument
                                             ? kOutcomeInvalid
                                             : kOutcomeRejected,
                                         num_prompts);
      stream_.reset();
      this->Finish(ToGrpcStatus(ids.status()));
      return;
    }
    absl::MutexLock lock(&ids_mu_);
    ids_ = *std::move(ids);
  }

  void Pump() override {
    if (next_ == pending_.size()) {
      next_ = 0;
      if (!stream_->PopAll(&pending_)) return;  // armed: the next output calls Post
    }
    EngineOutput& out = pending_[next_++];
    resp_.Clear();
    if (out.final()) {
      --remaining_;
      if (status_.ok()) status_ = ServerFailure(out);
    }
    Fill(std::move(out), *engine_->tokenizer, &resp_);
    if (remaining_ == 0) {
      this->StartWriteAndFinish(&resp_, grpc::WriteOptions(), ToGrpcStatus(status_));
    } else {
      this->StartWrite(&resp_);
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      // The client is gone: stop generating for it and end the call.
      CancelAll();
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke"));
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
  void CancelAll() {
    if (!engine_) return;
    absl::MutexLock lock(&ids_mu_);
    for (uint64_t id : ids_) engine_->engine->Cancel(id);
  }

  DecodeServiceImpl* svc_;
  std::shared_ptr<ServedModel> engine_;  // keeps the engine alive while the call lives
  std::shared_ptr<ResultStream> stream_;
  absl::Mutex ids_mu_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(ids_mu_);
  // Touched only by the single writer (see the class comment).
  std::vector<EngineOutput> pending_;
  size_t next_ = 0;
  int remaining_ = 0;
  absl::Status status_;
  Resp resp_;
};

DecodeServiceImpl::DecodeServiceImpl(ServerMetrics* metrics, Dispatcher* dispatcher,
                                     std::string api_key)
    : metrics_(metrics),
      dispatcher_(dispatcher),
      api_key_(std::move(api_key)),
      boot_tag_(absl::StrFormat("%08x", absl::Uniform<uint32_t>(absl::BitGen()))) {}

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

grpc::Status DecodeServiceImpl::Admit(grpc::CallbackServerContext* ctx,
                                      std::shared_ptr<ServedModel>* model) {
  if (!api_key_.empty()) {
    const auto& md = ctx->client_metadata();
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

grpc::ServerWriteReactor<v1::GenerateResponse>* DecodeServiceImpl::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) {
  auto convert = +[](const ServedModel& m, const void* r,
                     const std::string& id) -> absl::StatusOr<std::vector<EngineRequest>> {
    auto one = ToEngineRequest(*static_cast<const v1::GenerateRequest*>(r), *m.tokenizer, m.limits,
                               "", id, &m.render_chat);
    if (!one.ok()) return one.status();
    std::vector<EngineRequest> v;
    v.push_back(*std::move(one));
    return v;
  };
  return new StreamReactor<v1::GenerateResponse>(this, ctx, convert, req, req->ByteSizeLong(), 1);
}

grpc::ServerWriteReactor<v1::GenerateBatchResponse>* DecodeServiceImpl::GenerateBatch(
    grpc::CallbackServerContext* ctx, const v1::GenerateBatchRequest* req) {
  auto convert = +[](const ServedModel& m, const void* r,
                     const std::string& id) -> absl::StatusOr<std::vector<EngineRequest>> {
    return ToEngineRequests(*static_cast<const v1::GenerateBatchRequest*>(r), *m.tokenizer,
                            m.limits, id, &m.render_chat);
  };
  return new StreamReactor<v1::GenerateBatchResponse>(this, ctx, convert, req, req->ByteSizeLong(),
                                                      std::max(req->requests_size(), 1));
}

grpc::ServerUnaryReactor* DecodeServiceImpl::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const v1::GetModelInfoRequest* /*req*/,
                                                          v1::ModelInfo* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<ServedModel> model;
  grpc::Status st = Admit(ctx, &model);
  if (st.ok()) *resp = model->info;
  reactor->Finish(st);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeServiceImpl::Tokenize(grpc::CallbackServerContext* ctx,
                                                      const v1::TokenizeRequest* req,
                                                      v1::TokenizeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<ServedModel> model;
  if (grpc::Status st = Admit(ctx, &model); !st.ok()) {
    reactor->Finish(st);
    return reactor;
  }
  absl::StatusOr<std::vector<int32_t>> ids = absl::InvalidArgumentError("input is empty");
  const Tokenizer& tok = *model->tokenizer;
  if (req->has_chat()) {
    auto text = RenderChat(req->chat(), &model->render_chat);
    if (!text.ok()) {
      ids = text.status();
    } else {
      ids = tok.Encode(*text, req->has_add_special_tokens() && req->add_special_tokens());
    }
  } else if (req->input_case() == v1::TokenizeRequest::kText) {
    ids = tok.Encode(req->text(), !req->has_add_special_tokens() || req->add_special_tokens());
  }
  if (!ids.ok()) {
    reactor->Finish(ToGrpcStatus(ids.status()));
    return reactor;
  }
  for (int32_t id : *ids) {
    resp->add_ids(id);
    resp->add_tokens(tok.IdToToken(id));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeServiceImpl::Detokenize(grpc::CallbackServerContext* ctx,
                                                        const v1::DetokenizeRequest* req,
                                                        v1::DetokenizeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<ServedModel> model;
  grpc::Status st = Admit(ctx, &model);
  for (int i = 0; st.ok() && i < req->ids_size(); ++i) {
    if (req->ids(i) < 0 || req->ids(i) >= model->limits.vocab_size) {
      st = grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("ids[", i, "] = ", req->ids(i), " is outside the vocabulary [0, ",
                       model->limits.vocab_size, ")"));
    }
  }
  if (st.ok()) {
    const std::vector<int32_t> ids(req->ids().begin(), req->ids().end());
    resp->set_text(model->tokenizer->Decode(ids, !req->keep_special_tokens()));
  }
  reactor->Finish(st);
  return reactor;
}

}  // namespace ptxserve::server
