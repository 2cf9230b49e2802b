// Parallel sampling over gRPC (GenerateRequest.n): each sample's tokens equal a lone
// request's with the derived seed, with prefix caching on and off; messages carry the
// sample's index; usage and the prompt-token metrics count the prompt once; n is
// validated against its range and --max-batch-prompts.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_io.h"
#include "server/client.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using testing::MetricValue;
using testing::TestServer;

constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily. She";

struct Sample {
  std::vector<int32_t> tokens;
  v1::Usage usage;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int messages_after_final = 0;
};

v1::GenerateRequest SampledRequest(int32_t n, std::optional<uint64_t> seed,
                                   const std::string& request_id = "") {
  v1::GenerateRequest req;
  req.set_text(kPrompt);
  req.set_n(n);
  req.set_request_id(request_id);
  req.mutable_sampling()->set_temperature(1.0f);
  if (seed) req.mutable_sampling()->set_seed(*seed);
  req.mutable_stopping()->set_max_new_tokens(24);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

// Runs a Generate call; the samples by sample_index.
std::map<int32_t, Sample> Generate(server::DecodeClient& client, const v1::GenerateRequest& req,
                                   grpc::Status* status = nullptr) {
  std::map<int32_t, Sample> samples;
  grpc::Status st = client.Generate(req, [&](const v1::GenerateResponse& m) {
    Sample& s = samples[m.sample_index()];
    if (s.finish != v1::FINISH_REASON_UNSPECIFIED) ++s.messages_after_final;
    s.tokens.insert(s.tokens.end(), m.token_ids().begin(), m.token_ids().end());
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      s.finish = m.finish_reason();
      s.usage = m.usage();
    }
    return true;
  });
  if (status) *status = st;
  EXPECT_TRUE(st.ok() || status) << st.error_message();
  return samples;
}

class ParallelSamplingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    t_ = TestServer::Start({});
    ASSERT_NE(t_, nullptr);
    server::ModelOptions mo = TestServer::DefaultModelOptions();
    mo.engine.prefix_caching = GetParam();
    ASSERT_TRUE(t_->Load(mo).ok());
    server::ClientOptions options;
    options.target = t_->target;
    client_ = std::make_unique<server::DecodeClient>(options);
  }
  std::string Metrics() { return testing::HttpGet(t_->server->metrics_port(), "/metrics"); }

  std::unique_ptr<TestServer> t_;
  std::unique_ptr<server::DecodeClient> client_;
};

TEST_P(ParallelSamplingTest, EachSampleEqualsALoneRequestWithTheDerivedSeed) {
  constexpr int kN = 4;
  const double prompt_before = MetricValue(Metrics(), "ptxserve_prompt_tokens_total");
  std::map<int32_t, Sample> samples = Generate(*client_, SampledRequest(kN, 1000));
  const double prompt_after = MetricValue(Metrics(), "ptxserve_prompt_tokens_total");
  ASSERT_EQ(samples.size(), static_cast<size_t>(kN));
  const int32_t prompt_tokens = samples[0].usage.prompt_tokens();
  EXPECT_GT(prompt_tokens, 8);
  EXPECT_EQ(prompt_after - prompt_before, prompt_tokens) << "the prompt counts once";

  std::vector<std::vector<int32_t>> distinct;
  for (int32_t i = 0; i < kN; ++i) {
    const Sample& s = samples[i];
    EXPECT_EQ(s.finish, v1::FINISH_REASON_LENGTH) << "sample " << i;
    EXPECT_EQ(s.messages_after_final, 0) << "sample " << i;
    EXPECT_EQ(s.tokens.size(), 24u) << "sample " << i;
    EXPECT_EQ(s.usage.generated_tokens(), 24) << "sample " << i;
    if (i > 0) {
      EXPECT_EQ(s.usage.prompt_tokens(), 0) << "only sample 0 carries the prompt's usage";
      EXPECT_EQ(s.usage.cached_prompt_tokens(), 0);
    }
    // The same tokens as a request of its own seeded 1000 + i.
    std::map<int32_t, Sample> lone = Generate(*client_, SampledRequest(0, 1000 + i));
    ASSERT_EQ(lone.size(), 1u);
    EXPECT_EQ(lone[0].tokens, s.tokens) << "sample " << i;
    EXPECT_EQ(lone[0].usage.prompt_tokens(), prompt_tokens);
    distinct.push_back(s.tokens);
  }
  EXPECT_NE(distinct[0], distinct[1]) << "the samples draw from different seeds";
  // Idle: no block referenced, cached + free = the pool.
  const std::string m = Metrics();
  EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
}

TEST_P(ParallelSamplingTest, WithoutASeedSampleIDrawsFromTheIdsSeedPlusI) {
  std::map<int32_t, Sample> samples = Generate(*client_, SampledRequest(3, std::nullopt, "req-7"));
  ASSERT_EQ(samples.size(), 3u);
  // Sample 0 is the request without n; sample i the one seeded from the id, plus i.
  EXPECT_EQ(Generate(*client_, SampledRequest(0, std::nullopt, "req-7"))[0].tokens,
            samples[0].tokens);
  const uint64_t seed = SeedFromRequestId("req-7");
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Generate(*client_, SampledRequest(1, seed + i))[0].tokens, samples[i].tokens)
        << "sample " << i;
  }
}

TEST_P(ParallelSamplingTest, BatchMessagesCarryThePromptAndTheSample) {
  v1::GenerateBatchRequest batch;
  *batch.add_requests() = SampledRequest(2, 5);
  *batch.add_requests() = SampledRequest(0, 9);
  batch.mutable_requests(1)->set_text("The dog");
  std::map<std::pair<int32_t, int32_t>, Sample> seen;
  grpc::Status st = client_->GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
    Sample& s = seen[{m.index(), m.response().sample_index()}];
    s.tokens.insert(s.tokens.end(), m.response().token_ids().begin(),
                    m.response().token_ids().end());
    if (m.response().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      s.finish = m.response().finish_reason();
      s.usage = m.response().usage();
    }
    return true;
  });
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(seen.size(), 3u);
  const auto key = [](int32_t index, int32_t sample) { return std::make_pair(index, sample); };
  for (const auto& k : {key(0, 0), key(0, 1), key(1, 0)}) {
    ASSERT_TRUE(seen.count(k)) << k.first << "/" << k.second;
    EXPECT_EQ(seen[k].finish, v1::FINISH_REASON_LENGTH);
  }
  EXPECT_EQ(seen[key(0, 0)].tokens, Generate(*client_, SampledRequest(0, 5))[0].tokens);
  EXPECT_EQ(seen[key(0, 1)].tokens, Generate(*client_, SampledRequest(0, 6))[0].tokens);
  EXPECT_GT(seen[key(0, 0)].usage.prompt_tokens(), 0);
  EXPECT_EQ(seen[key(0, 1)].usage.prompt_tokens(), 0);
  EXPECT_GT(seen[key(1, 0)].usage.prompt_tokens(), 0);
}

TEST_P(ParallelSamplingTest, NOutOfRangeOrOverTheSequenceLimitIsRefused) {
  grpc::Status st;
  Generate(*client_, SampledRequest(-1, 1), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("n must be in [0, 128], got -1"), std::string::npos)
      << st.error_message();
  Generate(*client_, SampledRequest(129, 1), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The default --max-batch-prompts (256) bounds the sequences of a call.
  v1::GenerateBatchRequest batch;
  *batch.add_requests() = SampledRequest(128, 1);
  *batch.add_requests() = SampledRequest(128, 1);
  *batch.add_requests() = SampledRequest(1, 1);
  st = client_->GenerateBatch(batch, [](const auto&) { return true; });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("requests[1].n = 128"), std::string::npos)
      << st.error_message();
  // The server goes on serving.
  EXPECT_EQ(Generate(*client_, SampledRequest(2, 1)).size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, ParallelSamplingTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "On" : "Off";
                         });

}  // namespace
}  // namespace ptxserve
