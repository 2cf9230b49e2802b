// The OpenAI front's request parsing (server/http/openai_request.h): inputs the fuzz target
// (fuzz/request_fuzzer.cc) found mishandled.
#include "server/http/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/engine/fakes.h"

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

// The request's chat_template_kwargs nested a million levels deep (a 2 MB body): copying it
// for the template recursed once per level and overflowed the HTTP thread's stack, which
// killed the server. Bodies nested deeper than kMaxJsonDepth are now refused up front.
TEST(OpenAiRequestTest, DeeplyNestedBodyIsA400NotAStackOverflow) {
  testing::FakeTokenizer tok;
  JobContext ctx = Context(&tok);
  ctx.render_chat = [](const json&, bool, const json& extra) -> absl::StatusOr<std::string> {
    json copy = extra;  // what the server's renderer does with it
    return std::string("abc");
  };
  auto body = [](int depth) {
    return absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, )",
                        R"("chat_template_kwargs": {"a": )", std::string(depth, '['),
                        std::string(depth, ']'), "}}");
  };
  auto job = ParseCompletionJob(body(1000000), /*chat=*/true, ctx);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr(absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels at byte ")));
  // The limit counts levels outside strings only, and a body at the limit passes.
  auto ok = ParseCompletionJob(body(kMaxJsonDepth - 2), /*chat=*/true, ctx);
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(
      ParseJsonObject(absl::StrCat(R"({"a": ")", std::string(100000, '['), R"(\""})")).ok());
}

// max_completion_tokens = INT64_MAX overflowed prompt + max in the context check (signed
// overflow, UBSan's report in the fuzz target): it is refused naming the field.
TEST(OpenAiRequestTest, HugeMaxTokensIsA400NamingTheField) {
  testing::FakeTokenizer tok;
  JobContext ctx = Context(&tok);
  ctx.render_chat = [](const json&, bool, const json&) -> absl::StatusOr<std::string> {
    return std::string("abc");
  };
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    const std::string body = absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}], ")",
                                          field, R"(": 9223372036854775807})");
    auto job = ParseCompletionJob(body, /*chat=*/true, ctx);
    ASSERT_FALSE(job.ok()) << body;
    EXPECT_EQ(ToApiError(job.status()).status, 400) << body;
    EXPECT_THAT(std::string(job.status().message()),
                HasSubstr("9223372036854775807 with a prompt of"))
        << body;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("exceeds the context of 32"))
        << body;
  }
}

}  // namespace
}  // namespace ptxserve::server::http
