// The standard gRPC health Watch stream: it follows the server's status and ends, with
// NOT_SERVING last, when the server stops.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>

#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using grpc::health::v1::HealthCheckResponse;
using testing::TestServer;

// A Watch stream of the whole server on `t`, its first status read.
struct Watch {
  explicit Watch(const TestServer& t)
      : stub(grpc::health::v1::Health::NewStub(
            grpc::CreateChannel(t.target, grpc::InsecureChannelCredentials()))),
        reader(stub->Watch(&ctx, grpc::health::v1::HealthCheckRequest())) {
    first_read = reader->Read(&resp);
  }

  std::unique_ptr<grpc::health::v1::Health::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
  HealthCheckResponse resp;
  bool first_read = false;
};

TEST(HealthWatchTest, StreamsStatusChanges) {
  auto t = TestServer::Start();
  ASSERT_NE(t, nullptr);
  Watch w(*t);
  ASSERT_TRUE(w.first_read);
  EXPECT_EQ(w.resp.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(t->Load().ok());
  ASSERT_TRUE(w.reader->Read(&w.resp));
  EXPECT_EQ(w.resp.status(), HealthCheckResponse::SERVING);
  t->server->Shutdown(absl::Seconds(1));
  ASSERT_TRUE(w.reader->Read(&w.resp));
  EXPECT_EQ(w.resp.status(), HealthCheckResponse::NOT_SERVING);
  while (w.reader->Read(&w.resp)) {
  }
  EXPECT_TRUE(w.reader->Finish().ok()) << "the server ends Watch streams when it stops";
}

// A shutdown that arrives while the SERVING write is still in flight used to end the stream
// without the NOT_SERVING that was pending; the race is narrow, so it is run several times.
TEST(HealthWatchTest, ShutdownDuringAWriteStillSendsNotServingLast) {
  for (int i = 0; i < 8; ++i) {
    auto t = TestServer::Start();
    ASSERT_NE(t, nullptr);
    Watch w(*t);
    ASSERT_TRUE(w.first_read);
    ASSERT_TRUE(t->Load().ok());
    t->server->Shutdown(absl::Seconds(1));  // SERVING may still be on its way
    HealthCheckResponse::ServingStatus last = w.resp.status();
    while (w.reader->Read(&w.resp)) last = w.resp.status();
    EXPECT_EQ(last, HealthCheckResponse::NOT_SERVING) << "run " << i;
    EXPECT_TRUE(w.reader->Finish().ok());
  }
}

}  // namespace
}  // namespace ptxserve
