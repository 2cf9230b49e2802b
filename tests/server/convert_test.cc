// Proto <-> engine conversion and validation, and the status-code switch.
#include "server/convert.h"

#include <gtest/gtest.h>

#include "server/status_util.h"
#include "tests/engine/fakes.h"

namespace ptxserve::server {
namespace {

RequestLimits Limits() {
  RequestLimits l;
  l.vocab_size = 64;
  l.context_length = 32;
  l.kv_capacity_tokens = 1000;
  l.default_max_new_tokens = 10;
  l.max_batch_prompts = 3;
  return l;
}

TEST(ConvertTest, DefaultsAreGreedyWithTheServerLength) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  req.set_text("abc");
  auto r = ToEngineRequest(req, tok, Limits(), "", "ptx-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{0, 2, 3, 4}));  // BOS + a b c
  EXPECT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(r->sampling.seed.has_value());
  EXPECT_EQ(r->stopping.max_new_tokens, 10);
  EXPECT_EQ(r->request_id, "ptx-1");
}

TEST(ConvertTest, DefaultLengthIsClippedToTheContext) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  for (int i = 0; i < 28; ++i) req.mutable_token_ids()->add_ids(5);
  auto r = ToEngineRequest(req, tok, Limits(), "", "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stopping.max_new_tokens, 4);
}

TEST(ConvertTest, CopiesEveryField) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  req.set_request_id("mine");
  req.mutable_token_ids()->add_ids(7);
  auto* s = req.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(5);
  s->set_top_p(0.9f);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.3f);
  s->set_frequency_penalty(0.2f);
  s->set_seed(99);
  auto* st = req.mutable_stopping();
  st->set_max_new_tokens(0);
  st->add_stop("xy");
  st->add_stop_token_ids(3);
  st->set_ignore_eos(true);
  req.set_priority(4);
  req.set_logprobs(2);
  auto r = ToEngineRequest(req, tok, Limits(), "", "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "mine");
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{7}));
  EXPECT_EQ(r->sampling.temperature, 0.7f);
  EXPECT_EQ(r->sampling.top_k, 5);
  EXPECT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r->sampling.presence_penalty, 0.3f);
  EXPECT_EQ(r->sampling.frequency_penalty, 0.2f);
  EXPECT_EQ(r->sampling.seed, 99u);
  EXPECT_EQ(r->sampling.logprobs, 2);
  EXPECT_EQ(r->stopping.max_new_tokens, 0);
  EXPECT_EQ(r->stopping.stop, (std::vector<std::string>{"xy"}));
  EXPECT_EQ(r->stopping.stop_token_ids, (std::vector<int32_t>{3}));
  EXPECT_TRUE(r->stopping.ignore_eos);
  EXPECT_EQ(r->priority, 4);
}

TEST(ConvertTest, ErrorsNameTheFieldWithThePrefix) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  req.set_text("ab1");  // the fake tokenizer rejects digits
  auto r = ToEngineRequest(req, tok, Limits(), "requests[2].", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().substr(0, 17), "requests[2].text:");
}

TEST(ConvertTest, BatchLimits) {
  testing::FakeTokenizer tok;
  v1::GenerateBatchRequest b;
  EXPECT_FALSE(ToEngineRequests(b, tok, Limits(), "id").ok());
  for (int i = 0; i < 3; ++i) b.add_requests()->mutable_token_ids()->add_ids(i + 2);
  auto ok = ToEngineRequests(b, tok, Limits(), "id");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[2].index, 2);
  EXPECT_EQ((*ok)[2].request_id, "id-2");
  b.add_requests()->mutable_token_ids()->add_ids(2);
  auto too_many = ToEngineRequests(b, tok, Limits(), "id");
  EXPECT_NE(too_many.status().message().find("at most 3"), absl::string_view::npos);
}

TEST(ConvertTest, SamplesDeriveTheirSeedsAndCountAgainstTheBatchLimit) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  req.set_text("abc");
  req.set_n(3);
  req.mutable_sampling()->set_seed(10);
  auto samples = ToEngineSamples(req, tok, Limits(), "", "id", 4, 3);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*samples)[i].index, 4);
    EXPECT_EQ((*samples)[i].sample, i);
    EXPECT_EQ((*samples)[i].request_id, "id");
    EXPECT_EQ((*samples)[i].sampling.seed, std::optional<uint64_t>(10 + i));
  }
  // Unseeded: the id's seed, + i.
  req.mutable_sampling()->clear_seed();
  samples = ToEngineSamples(req, tok, Limits(), "", "id", 0, 3);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)[2].sampling.seed, SeedFromRequestId("id") + 2);
  // n = 0 is one sample that keeps its (absent) seed.
  req.set_n(0);
  samples = ToEngineSamples(req, tok, Limits(), "", "id", 0, 3);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_FALSE((*samples)[0].sampling.seed.has_value());

  // Two prompts of 2 samples pass the limit of 3 sequences: the second is named.
  v1::GenerateBatchRequest b;
  req.set_n(2);
  *b.add_requests() = req;
  *b.add_requests() = req;
  auto batch = ToEngineRequests(b, tok, Limits(), "id");
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(batch.status().message().find("requests[1].n = 2"), absl::string_view::npos)
      << batch.status();
  b.mutable_requests(1)->set_n(1);
  batch = ToEngineRequests(b, tok, Limits(), "id");
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 3u);
  EXPECT_EQ((*batch)[1].index, 0);
  EXPECT_EQ((*batch)[1].sample, 1);
  EXPECT_EQ((*batch)[2].index, 1);
  EXPECT_EQ((*batch)[2].request_id, "id-1");
}

TEST(ConvertTest, FinalOutputCarriesUsageTimingAndError) {
  EngineOutput out;
  out.token_ids = {4, 5};
  out.text = "cd";
  out.finish = FinishReason::kError;
  out.error = absl::InternalError("boom");
  out.prompt_tokens = 3;
  out.generated_tokens = 2;
  out.ttft_seconds = 0.5;
  out.request_id = "r";
  v1::GenerateResponse resp;
  testing::FakeTokenizer tok;
  ToProto(out, tok, &resp);
  EXPECT_EQ(resp.token_ids_size(), 2);
  EXPECT_EQ(resp.text(), "cd");
  EXPECT_EQ(resp.finish_reason(), v1::FINISH_REASON_ERROR);
  EXPECT_EQ(resp.usage().prompt_tokens(), 3);
  EXPECT_EQ(resp.usage().generated_tokens(), 2);
  EXPECT_EQ(resp.timing().time_to_first_token_seconds(), 0.5);
  EXPECT_EQ(resp.error_message(), "boom");
  EXPECT_EQ(resp.request_id(), "r");

  EngineOutput mid;
  mid.token_ids = {1};
  v1::GenerateResponse m;
  ToProto(mid, tok, &m);
  EXPECT_FALSE(m.has_usage());
  EXPECT_EQ(m.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  for (FinishReason r : {FinishReason::kLength, FinishReason::kStop, FinishReason::kEos,
                         FinishReason::kCancelled, FinishReason::kError}) {
    EXPECT_EQ(FromProto(ToProto(r)), r);
  }
}

TEST(ConvertTest, LogprobsCarryTheTokenText) {
  testing::FakeTokenizer tok;
  EngineOutput out;
  out.token_ids = {5};
  out.logprobs.push_back(SampleResult{5, -0.5f, {{5, -0.5f}, {6, -1.5f}}});
  v1::GenerateResponse resp;
  ToProto(out, tok, &resp);
  ASSERT_EQ(resp.logprobs_size(), 1);
  EXPECT_EQ(resp.logprobs(0).chosen().token(), tok.TokenBytes(5, false));
  ASSERT_EQ(resp.logprobs(0).top_size(), 2);
  EXPECT_EQ(resp.logprobs(0).top(1).token(), tok.TokenBytes(6, false));
}

TEST(ConvertTest, ChatInputIsRenderedWithTheTemplate) {
  testing::FakeTokenizer tok;
  v1::GenerateRequest req;
  auto* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  auto refused = ToEngineRequest(req, tok, Limits(), "", "x");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no chat template"), std::string::npos);

  nlohmann::ordered_json seen;
  bool generation_prompt = false;
  ChatRenderer render = [&](const nlohmann::ordered_json& messages, bool add_generation_prompt,
                            const nlohmann::ordered_json&) -> absl::StatusOr<std::string> {
    seen = messages;
    generation_prompt = add_generation_prompt;
    return std::string("userhi");
  };
  auto r = ToEngineRequest(req, tok, Limits(), "", "x", &render);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(seen[0]["role"], "user");
  EXPECT_EQ(seen[0]["content"], "hi");
  EXPECT_TRUE(generation_prompt);
  EXPECT_EQ(r->prompt, *tok.Encode("userhi", /*add_special_tokens=*/false));

  req.mutable_chat()->mutable_messages(0)->set_role("");
  auto bad = ToEngineRequest(req, tok, Limits(), "requests[2].", "x", &render);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "requests[2].chat.messages[0].role is empty");
}

TEST(StatusUtilTest, MapsEveryCode) {
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kInvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kResourceExhausted), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kUnavailable), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kUnauthenticated), grpc::StatusCode::UNAUTHENTICATED);
  for (int c = 0; c <= 16; ++c) {
    EXPECT_EQ(static_cast<int>(ToGrpcCode(static_cast<absl::StatusCode>(c))), c);
  }
  grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError("field x"));
  EXPECT_EQ(s.error_message(), "field x");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
}

}  // namespace
}  // namespace ptxserve::server
