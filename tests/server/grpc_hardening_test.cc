// The gRPC front against clients that do not play by the rules: malformed messages,
// messages without the key, oversized messages, refused batches, reflection with a key,
// a port already in use, unusable TLS files (issue findings 3, 4 and 5).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/synchronization/notification.h"
#include "server/client.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using testing::HttpGet;
using testing::MetricValue;
using testing::TestServer;

// One call of `method` with raw request bytes, read as a unary call (the refusals under
// test carry no response message; a reflection reply is one).
struct RawReply {
  grpc::Status status;
  std::string body;
};
RawReply RawCall(const std::string& target, const std::string& method, const std::string& bytes,
                 const std::string& api_key = "") {
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), [] {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    return args;
  }());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  RawReply reply;
  absl::Notification done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status st) {
    reply.status = std::move(st);
    done.Notify();
  });
  done.WaitForNotification();
  std::vector<grpc::Slice> slices;
  if (reply.status.ok() && response.Dump(&slices).ok()) {
    for (const auto& s : slices)
      reply.body.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return reply;
}

constexpr char kGenerate[] = "/ptxserve.v1.DecodeService/Generate";
constexpr char kGenerateBatch[] = "/ptxserve.v1.DecodeService/GenerateBatch";
constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

std::unique_ptr<TestServer> Serve(server::ServerConfig config) {
  auto t = TestServer::Start(std::move(config));
  if (t == nullptr || !t->Load().ok()) return nullptr;
  return t;
}

double Outcome(const TestServer& t, const std::string& outcome) {
  return MetricValue(HttpGet(t.server->metrics_port(), "/metrics"),
                     "ptxserve_requests_total{outcome=\"" + outcome + "\"}");
}

TEST(GrpcHardeningTest, MalformedMessagesAreInvalidArgumentNamingTheProblemAndCounted) {
  auto t = Serve({});
  ASSERT_NE(t, nullptr);
  RawReply garbage = RawCall(t->target, kGenerate, "\xff\xff\xff\xff");
  EXPECT_EQ(garbage.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(garbage.status.error_message().find("not a valid ptxserve.v1.GenerateRequest"),
            std::string::npos)
      << garbage.status.error_message();
  // GenerateRequest.text (field 2) holding "\xc3\x28", which is not UTF-8.
  RawReply utf8 = RawCall(t->target, kGenerate, std::string("\x12\x02\xc3\x28", 4));
  EXPECT_EQ(utf8.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(utf8.status.error_message().find("ptxserve.v1.GenerateRequest.text"), std::string::npos)
      << utf8.status.error_message();
  EXPECT_NE(utf8.status.error_message().find("invalid UTF-8"), std::string::npos);
  EXPECT_EQ(Outcome(*t, "malformed"), 2);

  RawReply unknown = RawCall(t->target, "/ptxserve.v1.DecodeService/NoSuchMethod", "");
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(unknown.status.error_message().find("NoSuchMethod"), std::string::npos);

  // The server goes on serving well-formed calls.
  server::ClientOptions o;
  o.target = t->target;
  server::DecodeClient client(o);
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  req.mutable_stopping()->set_max_new_tokens(3);
  int tokens = 0;
  grpc::Status st = client.Generate(req, [&](const v1::GenerateResponse& m) {
    tokens += m.token_ids_size();
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_GT(tokens, 0);
}

TEST(GrpcHardeningTest, TheKeyIsCheckedBeforeTheMessageIsRead) {
  server::ServerConfig config;
  config.api_key = "s3cret";
  config.max_request_bytes = 1 << 20;
  auto t = Serve(config);
  ASSERT_NE(t, nullptr);
  // GenerateRequest.text of 2 MiB: over the receive limit. Without the key the call is
  // refused before the message is read, so the answer is UNAUTHENTICATED...
  const int n = 2 << 20;
  std::string big = "\x12";
  for (int v = n; v >= 0x80; v >>= 7) big += static_cast<char>(0x80 | (v & 0x7f));
  big += static_cast<char>(n >> 21);
  big.append(n, 'a');
  EXPECT_EQ(RawCall(t->target, kGenerate, big).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // ... and with it, gRPC's receive limit (= max_request_bytes) refuses the message.
  EXPECT_EQ(RawCall(t->target, kGenerate, big, "s3cret").status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(GrpcHardeningTest, ARefusedBatchCountsOnceNotOncePerPrompt) {
  server::ServerConfig config;
  config.api_key = "s3cret";
  auto t = Serve(config);
  ASSERT_NE(t, nullptr);
  v1::GenerateBatchRequest batch;
  for (int i = 0; i < 100; ++i) batch.add_requests()->set_text("hello");
  const std::string bytes = batch.SerializeAsString();
  EXPECT_EQ(RawCall(t->target, kGenerateBatch, bytes).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Outcome(*t, "unauthenticated"), 1);
  batch.mutable_requests(50)->mutable_sampling()->set_top_p(2.0f);  // invalid
  const RawReply invalid = RawCall(t->target, kGenerateBatch, batch.SerializeAsString(), "s3cret");
  EXPECT_EQ(invalid.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(invalid.status.error_message().find("requests[50]"), std::string::npos)
      << invalid.status.error_message();
  EXPECT_EQ(Outcome(*t, "invalid"), 1);
}

TEST(GrpcHardeningTest, ReflectionIsServedOnlyWhenConfigured) {
  // ServerReflectionRequest{list_services: ""}.
  const std::string list_services("\x3a\x00", 2);
  server::ServerConfig open;
  auto with = Serve(open);
  ASSERT_NE(with, nullptr);
  RawReply listed = RawCall(with->target, kReflection, list_services);
  ASSERT_TRUE(listed.status.ok()) << listed.status.error_message();
  EXPECT_NE(listed.body.find("ptxserve.v1.DecodeService"), std::string::npos);

  server::ServerConfig closed;
  closed.api_key = "s3cret";
  closed.reflection = false;  // what serve's --reflection=auto gives with a key
  auto without = Serve(closed);
  ASSERT_NE(without, nullptr);
  EXPECT_EQ(RawCall(without->target, kReflection, list_services, "s3cret").status.error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST(GrpcHardeningTest, ASecondServerOnAPortInUseFailsToStart) {
  auto first = TestServer::Start({});
  ASSERT_NE(first, nullptr);
  server::ServerConfig config;
  config.port = first->server->port();
  config.metrics_port = -1;
  config.http_port = -1;
  server::Server second(config);
  absl::Status st = second.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("in use"), std::string::npos) << st;
}

TEST(GrpcHardeningTest, UnusableTlsFilesAreNamedNotReportedAsCannotListen) {
  server::ServerConfig config;
  config.port = 0;
  config.metrics_port = -1;
  config.http_port = -1;
  config.tls.cert_pem = "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n";
  config.tls.key_pem = "not a key";
  server::Server s(config);
  absl::Status st = s.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--tls_cert"), std::string::npos) << st;
}

}  // namespace
}  // namespace ptxserve
