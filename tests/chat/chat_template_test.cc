// ChatTemplate's contract: compile errors name the origin, line and construct; render
// errors carry raise_exception's message; renders are repeatable from many threads.
#include "engine/chat/chat_template.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

absl::Status CompileStatus(std::string_view source) {
  return ChatTemplate::Compile(source, "tokenizer_config.json").status();
}

void ExpectCompileError(std::string_view source, const std::string& message) {
  const absl::Status s = CompileStatus(source);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << source;
  EXPECT_EQ(s.message(), message) << source;
}

TEST(ChatTemplateCompileTest, UnsupportedConstructsNameOriginLineAndConstruct) {
  ExpectCompileError("a\nb\n{{ x|wordwrap }}",
                     "chat template (tokenizer_config.json) line 3: unsupported filter 'wordwrap'");
  ExpectCompileError("{% if x is odd %}\n{% if y is escaped %}{% endif %}{% endif %}",
                     "chat template (tokenizer_config.json) line 2: unsupported test 'escaped'");
  ExpectCompileError("\n{% include 'other.jinja' %}",
                     "chat template (tokenizer_config.json) line 2: unsupported tag 'include'");
  ExpectCompileError(
      "{% for x in y recursive %}{% endfor %}",
      "chat template (tokenizer_config.json) line 1: unsupported construct: recursive for loop");
  ExpectCompileError("{% raw %}{{ x }}{% endraw %}",
                     "chat template (tokenizer_config.json) line 1: unsupported tag 'raw'");
  ExpectCompileError("{% call foo() %}{% endcall %}",
                     "chat template (tokenizer_config.json) line 1: unsupported tag 'call'");
  ExpectCompileError(
      "{{ '{}'.format(x) }}",
      "chat template (tokenizer_config.json) line 1: unsupported method '.format()'");
  ExpectCompileError("{% for m in ms %}{{ loop.cycle('a', 'b') }}{% endfor %}",
                     "chat template (tokenizer_config.json) line 1: unsupported method '.cycle()'");
  ExpectCompileError(
      "{% set j = joiner(', ') %}",
      "chat template (tokenizer_config.json) line 1: unsupported function 'joiner()'");
  ExpectCompileError("{{ f(*args) }}",
                     "chat template (tokenizer_config.json) line 1: unsupported construct: "
                     "*args/**kwargs in a call");
}

TEST(ChatTemplateCompileTest, SyntaxErrorsNameTheLine) {
  EXPECT_THAT(CompileStatus("{% if x %}\nno end").message(),
              HasSubstr("line 2: unexpected end of template"));
  EXPECT_THAT(CompileStatus("{{ 'open }}").message(),
              HasSubstr("line 1: unterminated string literal"));
  EXPECT_THAT(CompileStatus("x\n{# never closed").message(),
              HasSubstr("line 2: missing end of comment tag"));
  EXPECT_THAT(CompileStatus("{% endfor %}").message(), HasSubstr("line 1: unexpected 'endfor'"));
  EXPECT_THAT(CompileStatus("{% break %}").message(), HasSubstr("'break' outside of a loop"));
  EXPECT_THAT(CompileStatus("{{ a + }}").message(),
              HasSubstr("line 1: unexpected end of print statement"));
  EXPECT_THAT(CompileStatus("{{ a ) }}").message(), HasSubstr("line 1: unexpected ')'"));
  EXPECT_THAT(CompileStatus("{{ x $ y }}").message(), HasSubstr("unexpected char '$'"));
  EXPECT_THAT(CompileStatus("{% set x %}").message(), HasSubstr("expected 'endset'"));
}

absl::StatusOr<std::string> Render(std::string_view source,
                                   const OrderedJson& context = OrderedJson::object()) {
  auto tmpl = ChatTemplate::Compile(source, "test");
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(context);
}

TEST(ChatTemplateRenderTest, RaiseExceptionIsInvalidArgumentWithTheMessageAndLine) {
  const auto out = Render(
      "{% if messages[0].role == 'system' %}\n{{ raise_exception('System role not supported') }}{% "
      "endif %}",
      {{"messages", {{{"role", "system"}, {"content", "x"}}}}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "chat template (test) line 2: System role not supported");
}

TEST(ChatTemplateRenderTest, RuntimeErrorsAreInvalidArgument) {
  EXPECT_THAT(Render("{{ foo.bar }}").status().message(), HasSubstr("'foo' is undefined"));
  EXPECT_THAT(Render("\n\n{{ 'a' + 1 }}").status().message(),
              HasSubstr("line 3: can only concatenate str (not \"int\") to str"));
  EXPECT_THAT(Render("{{ x() }}", {{"x", 1}}).status().message(),
              HasSubstr("'int' object is not callable"));
  EXPECT_THAT(Render("{{ 'x'.zzz(1) }}").status().message(),
              HasSubstr("'str object' has no attribute 'zzz'"));
  EXPECT_EQ(Render("{{ x }}", OrderedJson::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateRenderTest, ContextKeyOrderIsKeptWithOrderedJson) {
  const OrderedJson ordered = OrderedJson::parse(R"({"t": {"z": 1, "a": 2}})");
  EXPECT_EQ(*Render("{{ t|tojson }}", ordered), R"({"z": 1, "a": 2})");
  auto tmpl = ChatTemplate::Compile("{{ t|tojson }}", "test");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(*tmpl->Render(Json::parse(R"({"t": {"z": 1, "a": 2}})")), R"({"a": 2, "z": 1})");
}

TEST(ChatTemplateRenderTest, StrftimeNowUsesTheClockHook) {
  auto tmpl = ChatTemplate::Compile("{{ strftime_now('%Y-%m-%d') }}", "test");
  ASSERT_TRUE(tmpl.ok());
  ChatTemplate::RenderOptions options;
  options.now = [] {
    return std::chrono::system_clock::from_time_t(86400 * 365 + 43200);
  };  // 1971-01-01 12:00 UTC
  auto out = tmpl->Render(OrderedJson::object(), options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ::testing::MatchesRegex("1971-01-0[12]|1970-12-31"));  // local time zone
  auto real = tmpl->Render(OrderedJson::object());
  ASSERT_TRUE(real.ok());
  EXPECT_EQ(real->size(), 10u);
}

TEST(ChatTemplateRenderTest, CopiesShareTheProgramAndRenderConcurrently) {
  auto compiled = ChatTemplate::Compile(
      "{% for m in messages %}{{ loop.index }}:{{ m.content|trim }}{% if not loop.last %}, {% "
      "endif %}{% endfor %}",
      "test");
  ASSERT_TRUE(compiled.ok());
  const ChatTemplate copy = *compiled;
  OrderedJson messages = OrderedJson::array();
  std::string expected;
  for (int i = 0; i < 50; ++i) {
    messages.push_back({{"role", "user"}, {"content", " m" + std::to_string(i) + " "}});
    expected += (i ? ", " : "") + std::to_string(i + 1) + ":m" + std::to_string(i);
  }
  const OrderedJson context = {{"messages", messages}};
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const ChatTemplate& tmpl = t % 2 ? copy : *compiled;
      for (int i = 0; i < 50; ++i) {
        auto out = tmpl.Render(context);
        if (!out.ok() || *out != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(copy.origin(), "test");
}

TEST(ChatTemplateContextTest, BuildsWhatApplyChatTemplatePasses) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  const Json context =
      ChatTemplateContext(messages, true, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(context["messages"], messages);
  EXPECT_EQ(context["add_generation_prompt"], true);
  EXPECT_EQ(context["bos_token"], "<s>");
  EXPECT_EQ(context["eos_token"], "</s>");
  EXPECT_TRUE(context["tools"].is_null());
  EXPECT_TRUE(context["documents"].is_null());
  EXPECT_FALSE(context.contains("pad_token"));

  auto tmpl = ChatTemplate::Compile(
      "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{% if "
      "add_generation_prompt %}>{% endif %}"
      "{{ tools is defined }}{{ tools is none }}",
      "test");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(*tmpl->Render(context), "<s>[hi]>TrueTrue");
  const OrderedJson ordered = ChatTemplateContext(OrderedJson(messages), false, {});
  EXPECT_EQ(*tmpl->Render(ordered), "[hi]TrueTrue");
}

}  // namespace
}  // namespace ptxserve
