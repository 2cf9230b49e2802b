// The server's life on loopback, in-process: health before the model is loaded, a backend
// that cannot start, an engine that fails or stalls, and draining on shutdown.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/client.h"
#include "tests/server/server_test_fixture.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using grpc::health::v1::HealthCheckResponse;
using testing::HttpGet;
using testing::MetricValue;
using testing::Options;
using testing::Result;
using testing::ServerTest;
using testing::Stream;
using testing::TestServer;
using testing::TokenRequest;

TEST(ServerLifecycleTest, NotServingUntilTheModelIsLoaded) {
  auto t = TestServer::Start();
  ASSERT_NE(t, nullptr);
  server::DecodeClient c(Options(*t));
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(c.Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(MetricValue(HttpGet(t->server->metrics_port(), "/metrics"), "ptxserve_health_serving"),
            0);
  Result r = Stream(c, TokenRequest(4, 4, 1));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  v1::ModelInfo info;
  EXPECT_EQ(c.GetModelInfo(&info).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(t->Load().ok());
  ASSERT_TRUE(c.Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  EXPECT_EQ(MetricValue(HttpGet(t->server->metrics_port(), "/metrics"), "ptxserve_health_serving"),
            1);
  ASSERT_TRUE(c.Check("ptxserve.v1.DecodeService", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  EXPECT_EQ(c.Check("no.such.Service", &status).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(c.GetModelInfo(&info).ok());
  EXPECT_GT(info.vocab_size(), 0);
  EXPECT_GT(info.context_length(), 0);
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.kv_capacity_tokens(), 2048 * 16);
  EXPECT_FALSE(info.dtype().empty());
}

TEST(ServerLifecycleTest, UnknownBackendIsAClearError) {
  server::ModelOptions mo = TestServer::DefaultModelOptions();
  mo.model_dir = testing::TestModelDir();
  mo.backend = "tpu";
  auto m = server::LoadServedModel(mo, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--backend=tpu"), absl::string_view::npos);
}

TEST_F(ServerTest, ReportsNotServingWhenTheEngineFails) {
  HealthCheckResponse::ServingStatus status;
  t_->backend->set_fail_always(true);
  // The default policy (EngineConfig::max_step_failures = 1) fails the engine at the
  // first failed step: that step's request ends INTERNAL, later ones are refused.
  Result r = Stream(*client_, TokenRequest(4, 4, 1));
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_ERROR);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_FALSE(r.last.error_message().empty());
  // The watchdog notices within a period or two.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client_->Check("", &status).ok());
    if (status == HealthCheckResponse::NOT_SERVING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Stream(*client_, TokenRequest(4, 4, 9)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(MetricValue(Metrics(), "ptxserve_engine_failed"), 1);
}

class StallTest : public ServerTest {
 protected:
  StallTest() { config_.stall_timeout = absl::Milliseconds(50); }
};

TEST_F(StallTest, ReportsNotServingWhileStuckWithWorkQueued) {
  HealthCheckResponse::ServingStatus status;
  t_->backend->set_stalled(true);
  std::thread stuck([&] {
    server::DecodeClient c(Options(*t_));
    Stream(c, TokenRequest(4, 4, 1));
  });
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(client_->Check("", &status).ok());
    if (status == HealthCheckResponse::NOT_SERVING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(MetricValue(Metrics(), "ptxserve_health_serving"), 0);
  t_->backend->set_stalled(false);
  stuck.join();
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(client_->Check("", &status).ok());
    if (status == HealthCheckResponse::SERVING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, HealthCheckResponse::SERVING) << "progress again: serving again";
}

TEST_F(ServerTest, ShutdownDrainsARunningStream) {
  Result r;
  absl::Notification first;
  // The engine stalls two steps in, keeping the stream running while we look.
  t_->backend->stall_at_step(t_->backend->steps() + 3);
  std::thread stream([&] {
    server::DecodeClient c(Options(*t_));
    r.status = c.Generate(TokenRequest(4, 60, 11), [&](const v1::GenerateResponse& m) {
      r.tokens.insert(r.tokens.end(), m.token_ids().begin(), m.token_ids().end());
      if (!first.HasBeenNotified()) first.Notify();
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.last = m;
      return true;
    });
  });
  first.WaitForNotification();
  std::thread stopper([&] { t_->server->Shutdown(absl::Seconds(60)); });
  // Draining: health goes NOT_SERVING and new calls are refused while the stream runs.
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::SERVING;
  for (int i = 0; i < 1000 && status == HealthCheckResponse::SERVING; ++i) {
    if (!client_->Check("", &status).ok()) break;
    if (status == HealthCheckResponse::SERVING) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  Result refused = Stream(*client_, TokenRequest(4, 4, 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(t_->engine().num_live(), 1);
  t_->backend->AwaitStalled();
  t_->backend->set_stalled(false);
  stream.join();
  stopper.join();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 60u) << "the running stream finished";
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_LENGTH);
}

TEST_F(ServerTest, DrainTimeoutCancelsWhatIsLeft) {
  t_->backend->set_delay_us(5000);
  Result r;
  absl::Notification first;
  std::thread stream([&] {
    server::DecodeClient c(Options(*t_));
    r.status = c.Generate(TokenRequest(4, 400, 12), [&](const v1::GenerateResponse& m) {
      r.tokens.insert(r.tokens.end(), m.token_ids().begin(), m.token_ids().end());
      if (!first.HasBeenNotified()) first.Notify();
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.last = m;
      return true;
    });
  });
  first.WaitForNotification();
  t_->server->Shutdown(absl::Milliseconds(50));
  stream.join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_LT(r.tokens.size(), 400u);
  EXPECT_NE(r.last.error_message().find("drain"), std::string::npos);
}

}  // namespace
}  // namespace ptxserve
