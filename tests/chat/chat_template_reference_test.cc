// The chat templates of the common model families (tests/chat/templates, the texts of
// their tokenizer_config.json) rendered by ptxserve's interpreter and by Debian's
// python3-jinja2 set up as Hugging Face's apply_chat_template: byte for byte the same,
// and the same conversations refused (raise_exception) by both.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"

namespace ptxserve {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const char* kTemplateDir = PTXSERVE_SOURCE_DIR "/tests/chat/templates";

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string FixedStrftime(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 13;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  char buf[256];
  return std::string(buf, std::strftime(buf, sizeof(buf), format.c_str(), &tm));
}

json Msg(const char* role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Conversations every template is rendered with (with and without the generation
// prompt); some are refused by some templates, which both renderers must agree on.
std::vector<std::pair<std::string, json>> Conversations() {
  const std::string tricky =
      "Gr\u00fc\u00dfe, \"quoted\" 'single' {{ not code }}\n\ttab \u65e5\u672c \U0001F642  ";
  json weather_tool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Current weather", "parameters": {"type": "object", "properties":
      {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}})");
  std::vector<std::pair<std::string, json>> out = {
      {"user", {{"messages", json::array({Msg("user", "Hello!")})}}},
      {"system+user",
       {{"messages", json::array({Msg("system", "You are terse."), Msg("user", "Hi there")})}}},
      {"turns",
       {{"messages", json::array({Msg("system", "Be kind."), Msg("user", "One?"),
                                  Msg("assistant", "Two."), Msg("user", tricky)})}}},
      {"ends-with-assistant",
       {{"messages", json::array({Msg("user", "Question"), Msg("assistant", "  Answer  ")})}}},
      {"not-alternating", {{"messages", json::array({Msg("user", "a"), Msg("user", "b")})}}},
      {"tools",
       {{"messages", json::array({Msg("user", "Weather in Paris?")})},
        {"tools", json::array({weather_tool})}}},
  };
  for (auto& [name, ctx] : out) {
    ctx["bos_token"] = "<s>";
    ctx["eos_token"] = "</s>";
    if (!ctx.contains("tools")) ctx["tools"] = nullptr;
    ctx["documents"] = nullptr;
  }
  return out;
}

struct Case {
  std::string name;
  fs::path template_path;
  json context;
};

class ChatTemplateReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("python3 -c 'import jinja2' 2>/dev/null") != 0) {
      skip_ = "python3 with jinja2 (Debian's python3-jinja2) is not installed";
      return;
    }
    json list = json::array();
    for (const auto& entry : fs::directory_iterator(kTemplateDir)) {
      if (entry.path().extension() != ".jinja") continue;
      for (auto [conv, ctx] : Conversations()) {
        for (bool gen : {true, false}) {
          ctx["add_generation_prompt"] = gen;
          cases_.push_back(
              {entry.path().stem().string() + "/" + conv + (gen ? "/gen" : ""), entry.path(), ctx});
          list.push_back({{"template", entry.path().string()}, {"context", ctx}});
        }
      }
    }
    const fs::path in = fs::temp_directory_path() / "ptxserve_chat_cases.json";
    std::ofstream(in) << list.dump();
    const std::string cmd =
        "python3 " PTXSERVE_SOURCE_DIR "/tests/chat/render_reference.py " + in.string();
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[65536];
    for (size_t n; p && (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    if (!p || pclose(p) != 0) {
      skip_ = "";
      failure_ = "render_reference.py failed";
      return;
    }
    reference_ = json::parse(out);
  }

  static inline std::string skip_ = "";
  static inline std::string failure_ = "";
  static inline std::vector<Case> cases_;
  static inline json reference_;
};

TEST_F(ChatTemplateReferenceTest, EveryFamilyRendersByteIdenticallyToJinja2) {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  ASSERT_TRUE(failure_.empty()) << failure_;
  ASSERT_EQ(reference_.size(), cases_.size());
  ASSERT_GE(cases_.size(), 11u * 12u) << "expected the eleven family templates";
  int rendered = 0, refused = 0;
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    auto t = ChatTemplate::Compile(ReadFile(c.template_path), c.template_path.filename().string());
    ASSERT_TRUE(t.ok()) << c.name << ": " << t.status();
    t->set_strftime(FixedStrftime);
    auto got = t->Render(c.context);
    const json& want = reference_[i];
    if (want.contains("error")) {
      EXPECT_FALSE(got.ok()) << c.name << ": jinja2 refused (" << want["error"]
                             << ") but ptxserve rendered:\n"
                             << *got;
      ++refused;
      continue;
    }
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(*got, want["text"].get<std::string>()) << c.name;
    ++rendered;
  }
  std::printf("%d renderings identical to jinja2, %d conversations refused by both\n", rendered,
              refused);
  EXPECT_GT(refused, 0) << "some template must refuse the non-alternating conversation";
}

}  // namespace
}  // namespace ptxserve
