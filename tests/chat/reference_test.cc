// Every model family's real chat template, rendered by us and by jinja2 (through
// render_reference.py, Hugging Face's exact environment) over the same conversations:
// outputs must be byte-identical, and where jinja2 raises (the templates' own checks,
// e.g. non-alternating roles) we must fail too.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kNow = 1721995200;  // 2024-07-26 12:00 UTC, for strftime_now

const std::vector<std::string> kFamilies = {
    "llama-2-chat", "llama-3-instruct", "llama-3.1-instruct", "llama-3.2-instruct", "mistral-v0.1",
    "mistral-v0.2", "mistral-v0.3",     "qwen2.5-instruct",   "gemma-it",           "phi-3-mini",
    "zephyr",
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char kTools[] = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Get the current weather", "parameters": {"type": "object", "properties": {
  "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}])";

const char kToolConversation[] = R"([
  {"role": "system", "content": "You can check the weather."},
  {"role": "user", "content": "What's the weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
  {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21.5}"},
  {"role": "assistant", "content": "It is 21.5 °C in Paris."},
  {"role": "user", "content": "Thanks!"}])";

Json WithoutSystem(Json messages) {
  messages.erase(messages.begin());
  return messages;
}

struct Conversation {
  std::string name;
  Json messages;
  Json extra;  // more context variables (tools, builtin_tools, ...)
};

std::vector<Conversation> Conversations() {
  std::vector<Conversation> convs = {
      {"user_only", Json::parse(R"([{"role": "user", "content": "Hello!"}])"), Json::object()},
      {"system_user", Json::parse(R"([{"role": "system", "content": "You are a helpful assistant."},
                       {"role": "user", "content": "What is 2+2?"}])"),
       Json::object()},
      {"multi_turn",
       Json::parse(
           R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello! How can I help?"},
                       {"role": "user", "content": "Tell me a joke."}])"),
       Json::object()},
      {"no_system_ends_with_assistant",
       Json::parse(R"([{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"},
                       {"role": "user", "content": "Three"}, {"role": "assistant", "content": " Four "}])"),
       Json::object()},
      {"unicode_quotes_newlines",
       Json::parse(R"([{"role": "system", "content": "  Réponds en français 🇫🇷\n"},
                       {"role": "user", "content": "  Привет, \"мир\"! It's\n\ttabbed\n\nand spaced  "},
                       {"role": "assistant", "content": "こんにちは\u2028{{ not a tag }} {% neither %}\u00a0"},
                       {"role": "user", "content": "<tag> & 'quotes' \\ backslash \u0001"}])"),
       Json::object()},
      {"non_alternating",
       Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"),
       Json::object()},
      {"system_then_assistant",
       Json::parse(
           R"([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])"),
       Json::object()},
      {"empty", Json::array(), Json::object()},
      {"tools", Json::parse(kToolConversation), Json{{"tools", Json::parse(kTools)}}},
      {"tools_in_system_prompt", WithoutSystem(Json::parse(kToolConversation)),
       Json{{"tools", Json::parse(kTools)},
            {"tools_in_user_message", false},
            {"date_string", "01 Jan 2025"}}},
      {"builtin_tools", Json::parse(R"([{"role": "user", "content": "Search the weather"},
                       {"role": "assistant", "tool_calls": [{"id": "call00001", "type": "function",
                        "function": {"name": "brave_search", "arguments": {"query": "weather"}}}]},
                       {"role": "ipython", "content": {"result": "sunny"}}])"),
       Json{{"builtin_tools", {"brave_search", "wolfram_alpha", "code_interpreter"}}}},
  };
  // The same conversations without their system message, for the families that reject one.
  for (const char* name : {"multi_turn", "unicode_quotes_newlines"}) {
    for (size_t i = 0; i < convs.size(); ++i) {
      if (convs[i].name == name)
        convs.push_back({convs[i].name + "_no_system", WithoutSystem(convs[i].messages), {}});
    }
  }
  return convs;
}

std::map<std::string, std::string> SpecialTokens(const std::string& family) {
  if (family.rfind("llama-3", 0) == 0) {
    return {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  }
  if (family.rfind("qwen", 0) == 0)
    return {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}};
  if (family.rfind("gemma", 0) == 0)
    return {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"pad_token", "<pad>"}};
  return {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
}

bool JinjaAvailable(std::string* reason) {
  const std::string python = PTXSERVE_PYTHON3;
  if (python.empty() || python.find("NOTFOUND") != std::string::npos) {
    *reason = "python3 was not found at configure time";
    return false;
  }
  if (std::system((python + " -c 'import jinja2' >/dev/null 2>&1").c_str()) != 0) {
    *reason = python + " cannot import jinja2 (apt-get install python3-jinja2)";
    return false;
  }
  return true;
}

// The families' own error paths that must raise in both renderers.
bool ExpectedToRaise(const std::string& family, const std::string& conversation) {
  if (conversation == "non_alternating") {
    return family == "llama-2-chat" || family.rfind("mistral", 0) == 0 || family == "gemma-it";
  }
  return family == "gemma-it" && conversation == "system_user";
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, ByteIdenticalToJinja2) {
  std::string reason;
  if (!JinjaAvailable(&reason)) GTEST_SKIP() << reason;
  const std::string family = GetParam();
  const std::string source =
      ReadFile(std::string(PTXSERVE_SOURCE_DIR) + "/tests/chat/templates/" + family + ".jinja");
  ASSERT_FALSE(source.empty()) << family;
  auto tmpl = ChatTemplate::Compile(source, family);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();

  struct Case {
    std::string name;
    Json context;
  };
  std::vector<Case> cases;
  for (const Conversation& conv : Conversations()) {
    for (bool gen : {false, true}) {
      Json context = ChatTemplateContext(conv.messages, gen, SpecialTokens(family));
      for (auto it = conv.extra.begin(); it != conv.extra.end(); ++it)
        context[it.key()] = it.value();
      cases.push_back({conv.name + (gen ? "+gen" : ""), std::move(context)});
    }
  }
  Json request = Json::array();
  for (const Case& c : cases)
    request.push_back({{"template", source}, {"context", c.context}, {"now", kNow}});
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/chat_ref_" + family + ".in.json",
                    out = dir + "/chat_ref_" + family + ".out.json";
  std::ofstream(in) << request.dump();
  const std::string cmd = std::string(PTXSERVE_PYTHON3) + " " + PTXSERVE_SOURCE_DIR +
                          "/tests/chat/render_reference.py < " + in + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json results = Json::parse(ReadFile(out));
  ASSERT_EQ(results.size(), cases.size());

  ChatTemplate::RenderOptions options;
  options.now = [] { return std::chrono::system_clock::from_time_t(kNow); };
  int identical = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(family + " / " + cases[i].name);
    const Json& ref = results[i];
    const auto ours = tmpl->Render(cases[i].context, options);
    const std::string base = cases[i].name.substr(0, cases[i].name.find('+'));
    if (ExpectedToRaise(family, base)) {
      EXPECT_TRUE(ref.contains("error")) << "jinja2 rendered " << ref.dump();
    }
    if (ref.contains("error")) {
      EXPECT_FALSE(ours.ok()) << "jinja2 raised " << ref["error"] << " but we rendered:\n" << *ours;
      continue;
    }
    ASSERT_TRUE(ours.ok()) << ours.status() << "\njinja2 rendered:\n"
                           << ref["output"].get<std::string>();
    EXPECT_EQ(*ours, ref["output"].get<std::string>());
    identical += *ours == ref["output"].get<std::string>();
  }
  EXPECT_GE(identical, 8) << family << ": too few conversations render without error to compare";
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceTest, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-' || c == '.') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ptxserve
