// ChatTemplateFromTokenizerConfig: the "chat_template" field as a string, as a list of
// named templates, absent, and malformed.
#include "engine/chat/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(TokenizerConfigTest, StringTemplate) {
  auto t = ChatTemplateFromTokenizerConfig(
      Json::parse(R"({"chat_template": "{{ x }}", "bos_token": "<s>"})"));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "{{ x }}");
}

TEST(TokenizerConfigTest, NamedTemplates) {
  const Json config = Json::parse(R"({"chat_template": [
      {"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T"},
      {"name": "rag", "template": "R"}]})");
  EXPECT_EQ(**ChatTemplateFromTokenizerConfig(config), "D");
  EXPECT_EQ(**ChatTemplateFromTokenizerConfig(config, "tool_use"), "T");
  EXPECT_EQ(**ChatTemplateFromTokenizerConfig(config, "rag"), "R");
  const auto missing = ChatTemplateFromTokenizerConfig(config, "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'nope' (available: default, tool_use, rag)"));
}

TEST(TokenizerConfigTest, AbsentOrNull) {
  auto absent = ChatTemplateFromTokenizerConfig(Json::parse(R"({"bos_token": "<s>"})"));
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
  auto null = ChatTemplateFromTokenizerConfig(Json::parse(R"({"chat_template": null})"));
  ASSERT_TRUE(null.ok());
  EXPECT_FALSE(null->has_value());
}

TEST(TokenizerConfigTest, MalformedNamesTheField) {
  for (const char* text :
       {R"({"chat_template": 5})", R"({"chat_template": {"name": "x"}})",
        R"({"chat_template": [{"name": "default"}]})",
        R"({"chat_template": [{"name": 1, "template": "x"}]})", R"({"chat_template": ["x"]})"}) {
    const auto t = ChatTemplateFromTokenizerConfig(Json::parse(text));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(t.status().message(), HasSubstr("chat_template")) << text;
  }
  EXPECT_EQ(ChatTemplateFromTokenizerConfig(Json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      ChatTemplateFromTokenizerConfig(Json::parse(R"({"chat_template": [1]})")).status().message(),
      HasSubstr("chat_template[0]"));
}

}  // namespace
}  // namespace ptxserve
