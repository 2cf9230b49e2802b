// The server end to end on loopback, in-process: gRPC streaming with the C++ client,
// batching invariance across 64 concurrent streams, cancellation and deadlines,
// validation beside a healthy stream, backpressure, health, drain, metrics.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/client.h"
#include "tests/server/test_server.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using grpc::health::v1::HealthCheckResponse;
using testing::HttpGet;
using testing::MetricValue;
using testing::TestServer;

struct Result {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::GenerateResponse last;
  int messages = 0;
};

Result Stream(server::DecodeClient& c, const v1::GenerateRequest& req,
              absl::Duration timeout = absl::InfiniteDuration()) {
  Result r;
  r.status = c.Generate(
      req,
      [&](const v1::GenerateResponse& m) {
        r.tokens.insert(r.tokens.end(), m.token_ids().begin(), m.token_ids().end());
        r.text += m.text();
        ++r.messages;
        if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.last = m;
        return true;
      },
      timeout);
  return r;
}

v1::GenerateRequest TokenRequest(int prompt_len, int max_new, uint64_t seed,
                                 float temperature = 1.0f) {
  v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("req-", seed));
  for (int i = 0; i < prompt_len; ++i) {
    req.mutable_token_ids()->add_ids(static_cast<int32_t>(3 + (seed * 131 + i * 17) % 1500));
  }
  req.mutable_sampling()->set_temperature(temperature);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_stopping()->set_max_new_tokens(max_new);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

server::ClientOptions Options(const TestServer& t) {
  server::ClientOptions o;
  o.target = t.target;
  return o;
}

// Polls (bounded) until the engine holds no live request; the KV cache is then empty.
bool WaitIdle(Engine& e) {
  for (int i = 0; i < 1000; ++i) {
    if (e.num_live() == 0 && e.Stats().kv_blocks_used == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = TestServer::Start(config_);
    ASSERT_NE(t_, nullptr);
    ASSERT_TRUE(t_->Load(model_options_).ok());
    client_ = std::make_unique<server::DecodeClient>(Options(*t_));
  }
  void TearDown() override {
    if (t_ && t_->backend) {
      t_->backend->set_stalled(false);
      t_->backend->set_delay_us(0);
    }
  }
  std::string Metrics() { return HttpGet(t_->server->metrics_port(), "/metrics"); }

  server::ServerConfig config_;
  server::ModelOptions model_options_ = TestServer::DefaultModelOptions();
  std::unique_ptr<TestServer> t_;
  std::unique_ptr<server::DecodeClient> client_;
};

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

TEST(ServerPrefixCachingTest, ModelInfoSaysWhetherItIsOnAndUsageWhatItReused) {
  for (const bool on : {true, false}) {
    auto t = TestServer::Start();
    ASSERT_NE(t, nullptr);
    server::ModelOptions mo = TestServer::DefaultModelOptions();
    mo.engine.prefix_caching = on;
    ASSERT_TRUE(t->Load(mo).ok());
    server::DecodeClient c(Options(*t));
    v1::ModelInfo info;
    ASSERT_TRUE(c.GetModelInfo(&info).ok());
    EXPECT_EQ(info.prefix_caching(), on);
    // The same 40-token prompt twice: the second reuses its two full blocks of 16.
    std::vector<std::vector<int32_t>> answers;
    for (int i = 0; i < 2; ++i) {
      Result r = Stream(c, TokenRequest(40, 4, 7, 0.0f));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.last.usage().prompt_tokens(), 40);
      EXPECT_EQ(r.last.usage().cached_prompt_tokens(), on && i == 1 ? 32 : 0);
      answers.push_back(r.tokens);
    }
    EXPECT_EQ(answers[0], answers[1]);
  }
}

TEST(ServerIdsTest, AssignedRequestIdsDifferAcrossRestarts) {
  // An unnamed, unseeded request's seed comes from its id: the first one after a restart
  // must not repeat the previous process's.
  std::vector<std::string> ids;
  for (int boot = 0; boot < 2; ++boot) {
    auto t = TestServer::Start();
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->Load().ok());
    server::DecodeClient c(Options(*t));
    v1::GenerateRequest req = TokenRequest(3, 2, 1);
    req.clear_request_id();
    Result r = Stream(c, req);
    ASSERT_TRUE(r.status.ok());
    ids.push_back(r.last.request_id());
  }
  EXPECT_TRUE(ids[0].rfind("ptx-", 0) == 0) << ids[0];
  EXPECT_NE(ids[0], ids[1]);
}

TEST_F(ServerTest, StreamsTextWithUsageAndTiming) {
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  req.mutable_stopping()->set_max_new_tokens(24);
  req.mutable_stopping()->set_ignore_eos(true);
  // The engine stalls a few steps in: the first tokens must reach the client while the
  // sequence is still generating (streamed, not sent at the end).
  t_->backend->stall_at_step(t_->backend->steps() + 4);
  Result r;
  bool first_was_partial = false;
  r.status = client_->Generate(req, [&](const v1::GenerateResponse& m) {
    if (r.messages++ == 0) {
      first_was_partial = m.finish_reason() == v1::FINISH_REASON_UNSPECIFIED &&
                          m.token_ids_size() > 0 && m.token_ids_size() < 24;
      t_->backend->AwaitStalled();  // it may arrive before the stall: release it either way
      t_->backend->set_stalled(false);
    }
    r.tokens.insert(r.tokens.end(), m.token_ids().begin(), m.token_ids().end());
    r.text += m.text();
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.last = m;
    return true;
  });
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_TRUE(first_was_partial);
  EXPECT_EQ(r.tokens.size(), 24u);
  EXPECT_GT(r.messages, 1);
  EXPECT_FALSE(r.text.empty());
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.last.usage().generated_tokens(), 24);
  EXPECT_GT(r.last.usage().prompt_tokens(), 0);
  EXPECT_GT(r.last.timing().total_seconds(), 0);
  EXPECT_GE(r.last.timing().total_seconds(), r.last.timing().time_to_first_token_seconds());
  EXPECT_FALSE(r.last.request_id().empty()) << "the server assigns an id";
  // Greedy (no sampling message): the same request gives the same text.
  Result again = Stream(*client_, req);
  EXPECT_EQ(again.tokens, r.tokens);
  EXPECT_EQ(again.text, r.text);
}

TEST_F(ServerTest, StreamedTextIsThePromptsContinuation) {
  auto tok = Tokenizer::FromDir(testing::TestModelDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // A text prompt, and token ids that end inside a word.
  v1::GenerateRequest text_req;
  text_req.set_text("The cat");
  text_req.mutable_stopping()->set_max_new_tokens(8);
  auto ids = (*tok)->Encode("Once upon a ti");
  ASSERT_TRUE(ids.ok()) << ids.status();
  v1::GenerateRequest ids_req;
  for (const int32_t id : *ids) ids_req.mutable_token_ids()->add_ids(id);
  ids_req.mutable_stopping()->set_max_new_tokens(8);
  for (const v1::GenerateRequest* req : {&text_req, &ids_req}) {
    const Result r = Stream(*client_, *req);  // greedy: no sampling message
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_FALSE(r.tokens.empty());
    std::vector<int32_t> prompt(req->token_ids().ids().begin(), req->token_ids().ids().end());
    if (req->has_text()) prompt = *(*tok)->Encode(req->text());
    EXPECT_EQ(r.text, testing::ExpectedContinuation(**tok, prompt, r.tokens)) << req->text();
  }
  if (testing::TestModelDir() == testing::kTinyStoriesDir) {
    // The model's greedy continuation; its leading space is not the text's first.
    EXPECT_TRUE(Stream(*client_, text_req).text.starts_with(" and"));
  }
}

TEST_F(ServerTest, LogprobsArePerToken) {
  v1::GenerateRequest req = TokenRequest(5, 6, 3);
  req.set_logprobs(3);
  int lp = 0;
  grpc::Status st = client_->Generate(req, [&](const v1::GenerateResponse& m) {
    EXPECT_EQ(m.logprobs_size(), m.token_ids_size());
    for (int i = 0; i < m.logprobs_size(); ++i) {
      EXPECT_EQ(m.logprobs(i).chosen().token_id(), m.token_ids(i));
      EXPECT_LE(m.logprobs(i).chosen().logprob(), 0.0f);
      EXPECT_EQ(m.logprobs(i).top_size(), 3);
    }
    lp += m.logprobs_size();
    return true;
  });
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(lp, 6);
}

TEST_F(ServerTest, SixtyFourConcurrentStreamsMatchTheirSoloRuns) {
  constexpr int kN = 64;
  std::vector<Result> alone(kN);
  for (int i = 0; i < kN; ++i) {
    alone[i] = Stream(*client_, TokenRequest(3 + i % 29, 16 + i % 9, 100 + i));
    ASSERT_TRUE(alone[i].status.ok());
  }
  // Slow each step a little so that all 64 are surely in flight together.
  t_->backend->set_delay_us(2000);
  std::vector<Result> together(kN);
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      server::DecodeClient c(Options(*t_));
      together[i] = Stream(c, TokenRequest(3 + i % 29, 16 + i % 9, 100 + i));
    });
  }
  for (auto& th : threads) th.join();
  t_->backend->set_delay_us(0);
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].last.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "stream " << i;
    EXPECT_EQ(together[i].text, alone[i].text) << "stream " << i;
  }
  ASSERT_TRUE(WaitIdle(t_->engine()));
  const std::string m = Metrics();
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
  EXPECT_EQ(MetricValue(m, "ptxserve_requests_running"), 0);
  // The batch-size histogram saw large batches.
  EXPECT_GT(MetricValue(m, "ptxserve_batch_size_sum") / MetricValue(m, "ptxserve_batch_size_count"),
            1.0);
}

class PreemptionTest : public ServerTest {
 protected:
  PreemptionTest() { model_options_.kv_blocks = 48; }  // 768 tokens for 16 x 120
};

TEST_F(PreemptionTest, MemoryPressurePreemptsWithoutChangingResults) {
  constexpr int kN = 16;
  std::vector<Result> alone(kN);
  for (int i = 0; i < kN; ++i) alone[i] = Stream(*client_, TokenRequest(20, 100, 300 + i));
  t_->backend->set_delay_us(1000);
  v1::GenerateBatchRequest batch;
  for (int i = 0; i < kN; ++i) *batch.add_requests() = TokenRequest(20, 100, 300 + i);
  std::vector<std::vector<int32_t>> tokens(kN);
  grpc::Status st = client_->GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
    auto& t = tokens.at(m.index());
    t.insert(t.end(), m.response().token_ids().begin(), m.response().token_ids().end());
    return true;
  });
  ASSERT_TRUE(st.ok()) << st.error_message();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(tokens[i], alone[i].tokens) << "stream " << i;
  ASSERT_TRUE(WaitIdle(t_->engine()));
  const std::string m = Metrics();
  EXPECT_GT(MetricValue(m, "ptxserve_preemptions_total"), 0);
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
}

TEST(EmulatedBackendTest, ServesAndFeedsTheKernelMetrics) {
  auto t = TestServer::Start();
  ASSERT_NE(t, nullptr);
  server::ModelOptions mo = TestServer::DefaultModelOptions();
  mo.backend = "emulated";  // the GPU backend on the PTX emulator
  mo.engine.max_batch_size = 4;
  mo.kv_blocks = 64;
  mo.on_kernel_compile = [&](double s) { t->server->metrics().ObserveKernelCompile(s); };
  ASSERT_TRUE(t->Load(mo).ok());
  server::DecodeClient c(Options(*t));
  v1::ModelInfo info;
  ASSERT_TRUE(c.GetModelInfo(&info).ok());
  EXPECT_EQ(info.backend(), "emulated");
  Result r = Stream(c, TokenRequest(5, 6, 1, 0.0f));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 6u);
  const std::string m = HttpGet(t->server->metrics_port(), "/metrics");
  EXPECT_NE(m.find("ptxserve_build_info{backend=\"emulated\""), std::string::npos);
  EXPECT_GT(MetricValue(m, "ptxserve_kernel_launches_total{kernel=\"gemm\"}"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_kernel_launches_total{kernel=\"decode_attention\"}"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_kernel_cache_misses_total"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_kernel_cache_hits_total"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_kernel_compile_seconds_count"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_transfer_bytes_total{direction=\"h2d\"}"), 0);
  EXPECT_GT(MetricValue(m, "ptxserve_transfers_total{direction=\"d2h\"}"), 0);
}

TEST(ServerLifecycleTest, UnknownBackendIsAClearError) {
  server::ModelOptions mo = TestServer::DefaultModelOptions();
  mo.model_dir = testing::TestModelDir();
  mo.backend = "tpu";
  auto m = server::LoadServedModel(mo, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--backend=tpu"), absl::string_view::npos);
}

TEST_F(ServerTest, BatchCallStreamsEveryPromptByIndex) {
  v1::GenerateBatchRequest batch;
  for (int i = 0; i < 5; ++i) *batch.add_requests() = TokenRequest(4 + i, 8 + i, 7 + i);
  std::vector<std::vector<int32_t>> tokens(5);
  std::vector<int> finals(5, 0);
  grpc::Status st = client_->GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
    EXPECT_GE(m.index(), 0);
    EXPECT_LT(m.index(), 5);
    auto& t = tokens.at(m.index());
    t.insert(t.end(), m.response().token_ids().begin(), m.response().token_ids().end());
    if (m.response().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) ++finals[m.index()];
    return true;
  });
  ASSERT_TRUE(st.ok()) << st.error_message();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(finals[i], 1);
    EXPECT_EQ(tokens[i], Stream(*client_, TokenRequest(4 + i, 8 + i, 7 + i)).tokens) << i;
  }
}

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
    // One running (stuck in its first step), then two waiting.
    while (t_->engine().num_live() < i + 1)
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

TEST_F(ServerTest, MetricsHaveEveryDesignedName) {
  Stream(*client_, TokenRequest(4, 4, 1));
  const std::string m = Metrics();
  for (const char* name : {"ptxserve_requests_total",
                           "ptxserve_requests_running",
                           "ptxserve_requests_waiting",
                           "ptxserve_prompt_tokens_total",
                           "ptxserve_generated_tokens_total",
                           "ptxserve_time_to_first_token_seconds",
                           "ptxserve_inter_token_latency_seconds",
                           "ptxserve_request_duration_seconds",
                           "ptxserve_queue_time_seconds",
                           "ptxserve_step_duration_seconds",
                           "ptxserve_batch_size",
                           "ptxserve_kv_cache_blocks_used",
                           "ptxserve_kv_cache_capacity_blocks",
                           "ptxserve_kv_cache_usage_ratio",
                           "ptxserve_request_prompt_tokens",
                           "ptxserve_request_generation_tokens",
                           "process_cpu_seconds_total",
                           "process_resident_memory_bytes",
                           "process_open_fds",
                           "process_start_time_seconds",
                           "ptxserve_preemptions_total",
                           "ptxserve_build_info",
                           "ptxserve_kernel_cache_hits_total",
                           "ptxserve_kernel_cache_misses_total",
                           "ptxserve_kernel_compile_seconds",
                           "ptxserve_transfer_bytes_total",
                           "ptxserve_transfers_total"}) {
    EXPECT_NE(m.find(absl::StrCat("# TYPE ", name, " ")), std::string::npos) << name;
  }
  // kernel_launches_total{kernel} has no series until a GPU backend reports launches
  // (metrics_test covers it).
  EXPECT_EQ(MetricValue(m, "ptxserve_prompt_tokens_total"), 4);
  EXPECT_EQ(MetricValue(m, "ptxserve_generated_tokens_total"), 4);
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_capacity_blocks"), 2048);
  EXPECT_NE(m.find("ptxserve_build_info{backend=\"cpu\",model_name=\"" +
                   t_->server->model()->info.name() + "\",version=\""),
            std::string::npos);
  EXPECT_EQ(MetricValue(m, "ptxserve_request_prompt_tokens_sum"), 4);
  EXPECT_EQ(MetricValue(m, "ptxserve_request_generation_tokens_sum"), 4);
  EXPECT_NE(m.find("ptxserve_time_to_first_token_seconds_bucket{le=\"600\"}"), std::string::npos);
  EXPECT_NE(m.find("ptxserve_time_to_first_token_seconds_bucket{le=\"0.001\"}"), std::string::npos);
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
