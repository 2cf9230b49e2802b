// Requests the server refuses or ends early, on loopback, in-process: client cancellation
// and deadlines, validation beside a healthy stream, backpressure and the API key.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "server/client.h"
#include "tests/server/server_test_fixture.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using grpc::health::v1::HealthCheckResponse;
using testing::MetricValue;
using testing::Options;
using testing::Result;
using testing::ServerTest;
using testing::Stream;
using testing::TokenRequest;
using testing::WaitIdle;

TEST_F(ServerTest, ClientCancellationFreesTheSequence) {
  t_->backend->set_delay_us(3000);
  const double before = MetricValue(Metrics(), "ptxserve_requests_total{outcome=\"cancelled\"}");
  grpc::ClientContext ctx;
  int received = 0;
  grpc::Status st = client_->Generate(
      TokenRequest(8, 400, 5),
      [&](const v1::GenerateResponse& m) {
        received += m.token_ids_size();
        return received < 3;  // false: the client cancels the call
      },
      absl::InfiniteDuration(), &ctx);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(WaitIdle(t_->engine()));
  const std::string m = Metrics();
  EXPECT_EQ(MetricValue(m, "ptxserve_requests_total{outcome=\"cancelled\"}"), before + 1);
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
  EXPECT_LT(MetricValue(m, "ptxserve_generated_tokens_total"), 400) << "it stopped early";
}

TEST_F(ServerTest, ExpiredDeadlineFreesTheSequence) {
  t_->backend->set_delay_us(3000);
  const double before = MetricValue(Metrics(), "ptxserve_requests_total{outcome=\"cancelled\"}");
  Result r = Stream(*client_, TokenRequest(8, 400, 6), absl::Milliseconds(150));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(WaitIdle(t_->engine()));
  const std::string m = Metrics();
  EXPECT_EQ(MetricValue(m, "ptxserve_requests_total{outcome=\"cancelled\"}"), before + 1);
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
}

struct BadCase {
  const char* name;
  std::function<void(v1::GenerateRequest*)> mutate;
  const char* field;  // must appear in the error message
};

TEST_F(ServerTest, EveryValidationErrorNamesItsFieldWhileAHealthyStreamRuns) {
  v1::ModelInfo info;
  ASSERT_TRUE(client_->GetModelInfo(&info).ok());
  const int ctx_len = info.context_length();
  const int vocab = info.vocab_size();
  const Result reference = Stream(*client_, TokenRequest(6, 120, 42));
  ASSERT_TRUE(reference.status.ok());

  // The healthy stream streams its first tokens, then the engine stalls (mid-stream)
  // until every invalid request has been answered: they run beside it for sure.
  Result healthy;
  absl::Notification started;
  t_->backend->stall_at_step(t_->backend->steps() + 3);
  std::thread beside([&] {
    server::DecodeClient c(Options(*t_));
    healthy.status = c.Generate(TokenRequest(6, 120, 42), [&](const v1::GenerateResponse& m) {
      healthy.tokens.insert(healthy.tokens.end(), m.token_ids().begin(), m.token_ids().end());
      if (!started.HasBeenNotified()) started.Notify();
      return true;
    });
  });
  started.WaitForNotification();
  const std::vector<BadCase> cases = {
      {"empty text", [](v1::GenerateRequest* r) { r->set_text(""); }, "text is empty"},
      {"no input", [](v1::GenerateRequest* r) { r->clear_input(); }, "input"},
      {"empty ids", [](v1::GenerateRequest* r) { r->mutable_token_ids()->clear_ids(); },
       "token_ids.ids is empty"},
      {"id past vocab", [&](v1::GenerateRequest* r) { r->mutable_token_ids()->set_ids(1, vocab); },
       "token_ids.ids[1]"},
      {"negative id", [](v1::GenerateRequest* r) { r->mutable_token_ids()->set_ids(0, -1); },
       "token_ids.ids[0]"},
      {"prompt longer than the context",
       [&](v1::GenerateRequest* r) {
         for (int i = 0; i < ctx_len; ++i) r->mutable_token_ids()->add_ids(5);
       },
       "context"},
      {"max_new_tokens < 0",
       [](v1::GenerateRequest* r) { r->mutable_stopping()->set_max_new_tokens(-1); },
       "stopping.max_new_tokens"},
      {"max_new_tokens past the context",
       [&](v1::GenerateRequest* r) { r->mutable_stopping()->set_max_new_tokens(ctx_len); },
       "stopping.max_new_tokens"},
      {"temperature < 0",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_temperature(-0.5f); },
       "sampling.temperature"},
      {"top_p > 1", [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5f); },
       "sampling.top_p"},
      {"top_p = 0", [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_p(0.0f); },
       "sampling.top_p"},
      {"top_k < 0", [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_k(-2); },
       "sampling.top_k"},
      {"min_p > 1", [](v1::GenerateRequest* r) { r->mutable_sampling()->set_min_p(1.5f); },
       "sampling.min_p"},
      {"min_p < 0", [](v1::GenerateRequest* r) { r->mutable_sampling()->set_min_p(-0.1f); },
       "sampling.min_p"},
      {"logprobs too many", [](v1::GenerateRequest* r) { r->set_logprobs(1000); }, "logprobs"},
      {"stop token past vocab",
       [&](v1::GenerateRequest* r) { r->mutable_stopping()->add_stop_token_ids(vocab + 5); },
       "stopping.stop_token_ids[0]"},
      {"empty stop string", [](v1::GenerateRequest* r) { r->mutable_stopping()->add_stop(""); },
       "stopping.stop[0]"},
  };
  for (const BadCase& c : cases) {
    v1::GenerateRequest req = TokenRequest(4, 8, 1);
    c.mutate(&req);
    Result r = Stream(*client_, req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_NE(r.status.error_message().find(c.field), std::string::npos)
        << c.name << ": " << r.status.error_message();
    EXPECT_TRUE(r.tokens.empty()) << c.name;
  }
  // Batch-level rows.
  v1::GenerateBatchRequest empty;
  EXPECT_EQ(client_->GenerateBatch(empty, [](const auto&) { return true; }).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateBatchRequest too_many;
  for (int i = 0; i < 257; ++i) *too_many.add_requests() = TokenRequest(2, 2, i);
  grpc::Status st = client_->GenerateBatch(too_many, [](const auto&) { return true; });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("requests has 257 prompts"), std::string::npos)
      << st.error_message();
  v1::GenerateBatchRequest one_bad;
  *one_bad.add_requests() = TokenRequest(2, 2, 1);
  *one_bad.add_requests() = TokenRequest(2, 2, 2);
  one_bad.mutable_requests(1)->mutable_sampling()->set_top_p(2.0f);
  st = client_->GenerateBatch(one_bad, [](const auto&) { return true; });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("requests[1].sampling.top_p"), std::string::npos)
      << st.error_message();

  EXPECT_EQ(t_->engine().num_live(), 1) << "only the healthy stream reached the engine";
  t_->backend->AwaitStalled();
  t_->backend->set_stalled(false);
  beside.join();
  ASSERT_TRUE(healthy.status.ok()) << healthy.status.error_message();
  EXPECT_EQ(healthy.tokens, reference.tokens) << "the healthy stream was not affected";
  EXPECT_GT(MetricValue(Metrics(), "ptxserve_requests_total{outcome=\"invalid\"}"), 0);
}

class BackpressureTest : public ServerTest {
 protected:
  BackpressureTest() {
    model_options_.engine.max_queued = 2;
    model_options_.engine.max_batch_size = 1;
  }
};

TEST_F(BackpressureTest, RefusesBeyondMaxQueuedAtOnce) {
  t_->backend->set_stalled(true);
  std::vector<std::thread> threads;
  std::vector<Result> results(3);
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      server::DecodeClient c(Options(*t_));
      results[i] = Stream(c, TokenRequest(4, 4, i));
    });
    // One running (stuck in its first step), then two waiting. The first must be in the
    // batch, not just enqueued, before the others come: else three wait and one is refused.
    while (i == 0 ? t_->engine().Stats().requests_running < 1 : t_->engine().num_live() < i + 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Result refused = Stream(*client_, TokenRequest(4, 4, 9));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("max-queued"), std::string::npos);
  t_->backend->set_stalled(false);
  for (auto& th : threads) th.join();
  for (const Result& r : results) EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_GT(MetricValue(Metrics(), "ptxserve_requests_total{outcome=\"rejected\"}"), 0);
}

class AuthTest : public ServerTest {
 protected:
  AuthTest() { config_.api_key = "s3cret"; }
};

TEST_F(AuthTest, RequiresTheBearerKeyButHealthStaysOpen) {
  Result r = Stream(*client_, TokenRequest(4, 4, 1));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::ModelInfo info;
  EXPECT_EQ(client_->GetModelInfo(&info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(client_->Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);

  server::ClientOptions wrong = Options(*t_);
  wrong.api_key = "s3cre";
  server::DecodeClient w(wrong);
  EXPECT_EQ(Stream(w, TokenRequest(4, 4, 1)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  server::ClientOptions right = Options(*t_);
  right.api_key = "s3cret";
  server::DecodeClient ok(right);
  Result good = Stream(ok, TokenRequest(4, 4, 1));
  EXPECT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.tokens.size(), 4u);
  EXPECT_TRUE(ok.GetModelInfo(&info).ok());
  EXPECT_GT(MetricValue(Metrics(), "ptxserve_requests_total{outcome=\"unauthenticated\"}"), 0);
}

}  // namespace
}  // namespace ptxserve
