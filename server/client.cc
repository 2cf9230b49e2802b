#include "server/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

namespace ptxserve::server {

DecodeClient::DecodeClient(const ClientOptions& options) : options_(options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls || !options.tls_ca_pem.empty() || !options.tls_cert_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(options.target, creds, args);
  stub_ = v1::DecodeService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

void DecodeClient::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
  if (!options_.api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.api_key);
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
  }
}

namespace {

// One server-streaming call: in `ctx` when given (the caller may cancel through it), else
// in a context of its own.
template <typename Req, typename Resp, typename Stub>
grpc::Status Stream(const DecodeClient& client, Stub* stub,
                    std::unique_ptr<grpc::ClientReader<Resp>> (Stub::*method)(grpc::ClientContext*,
                                                                              const Req&),
                    const Req& req, const std::function<bool(const Resp&)>& on_message,
                    absl::Duration timeout, grpc::ClientContext* ctx) {
  grpc::ClientContext own;
  if (!ctx) ctx = &own;
  client.Prepare(ctx, timeout);
  std::unique_ptr<grpc::ClientReader<Resp>> reader = (stub->*method)(ctx, req);
  Resp resp;
  while (reader->Read(&resp)) {
    if (!on_message(resp)) {
      ctx->TryCancel();
      while (reader->Read(&resp)) {
      }
      break;
    }
  }
  return reader->Finish();
}

}  // namespace

grpc::Status DecodeClient::Generate(
    const v1::GenerateRequest& req,
    const std::function<bool(const v1::GenerateResponse&)>& on_message, absl::Duration timeout,
    grpc::ClientContext* ctx) {
  return Stream(*this, stub_.get(), &v1::DecodeService::Stub::Generate, req, on_message, timeout,
                ctx);
}

grpc::Status DecodeClient::GenerateBatch(
    const v1::GenerateBatchRequest& req,
    const std::function<bool(const v1::GenerateBatchResponse&)>& on_message, absl::Duration timeout,
    grpc::ClientContext* ctx) {
  return Stream(*this, stub_.get(), &v1::DecodeService::Stub::GenerateBatch, req, on_message,
                timeout, ctx);
}

grpc::Status DecodeClient::GetModelInfo(v1::ModelInfo* info, absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  return stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), info);
}

grpc::Status DecodeClient::Check(const std::string& service,
                                 grpc::health::v1::HealthCheckResponse::ServingStatus* status,
                                 absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = health_->Check(&ctx, req, &resp);
  *status = resp.status();
  return st;
}

}  // namespace ptxserve::server
