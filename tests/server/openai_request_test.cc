// The OpenAI front's request parsing (server/http/openai_request.h): inputs the fuzz target
// (fuzz/request_fuzzer.cc) found mishandled.
#include "server/http/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/server/fakes.h"

namespace ptxserve::server::http {
namespace {

using ::testing::HasSubstr;

JobContext Context(const Tokenizer* tok) {
  JobContext ctx;
  ctx.tokenizer = tok;
  ctx.limits.vocab_size = tok->vocab_size();
  ctx.limits.context_length = 32;
  ctx.limits.kv_capacity_tokens = 1000;
  ctx.model_name = "m";
  ctx.id = "cmpl-1";
  return ctx;
}

TEST(OpenAiRequestTest, NumberBeyondDoubleIsA400) {
  // nlohmann throws out_of_range, not parse_error, for it: it escaped the parser's catch and
  // became a 500 from the HTTP server's last-resort handler.
  testing::FakeTokenizer tok;
  for (const char* body :
       {R"({"prompt": "abc", "temperature": 1e309})", R"({"messages": -1e999})", R"([1e400])"}) {
    auto job = ParseCompletionJob(body, /*chat=*/false, Context(&tok));
    ASSERT_FALSE(job.ok()) << body;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("Invalid JSON body")) << body;
    EXPECT_EQ(ToApiError(job.status()).status, 400) << body;
  }
}

}  // namespace
}  // namespace ptxserve::server::http
