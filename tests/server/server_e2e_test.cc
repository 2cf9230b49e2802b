// The server end to end on loopback, in-process: gRPC streaming with the C++ client,
// batching invariance across 64 concurrent streams, preemption, batch calls, request ids,
// the prefix cache and the metrics a served request leaves behind.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/client.h"
#include "tests/server/server_test_fixture.h"
#include "tests/server/test_server.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using testing::HttpGet;
using testing::MetricValue;
using testing::Options;
using testing::Result;
using testing::ServerTest;
using testing::Stream;
using testing::TestServer;
using testing::TokenRequest;
using testing::WaitIdle;

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

}  // namespace
}  // namespace ptxserve
