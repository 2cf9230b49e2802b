// Every construct of the supported Jinja2 subset, one case each, from
// interpreter_cases.json. The expectations there were produced by jinja2 itself in
// Hugging Face's environment (update_cases.py), so they are the reference semantics.
#include <fstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using Json = nlohmann::ordered_json;

struct Case {
  std::string name;
  std::string source;
  Json context;
  std::optional<std::string> expected;  // nullopt: jinja2 raises, so must we
  std::string jinja_error;
};
// The case's name, not its bytes (pointers, padding), in test names and failure messages.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> LoadCases() {
  std::ifstream in(std::string(PTXSERVE_SOURCE_DIR) + "/tests/chat/interpreter_cases.json");
  std::vector<Case> cases;
  if (!in) return cases;
  for (const Json& c : Json::parse(in)) {
    Case k{c["name"], c["template"], c["context"], std::nullopt, ""};
    if (c.contains("expected")) k.expected = c["expected"].get<std::string>();
    if (c.contains("error")) k.jinja_error = c["error"].get<std::string>();
    cases.push_back(std::move(k));
  }
  return cases;
}

class InterpreterTest : public ::testing::TestWithParam<Case> {};

TEST_P(InterpreterTest, MatchesJinja2) {
  const Case& c = GetParam();
  auto tmpl = ChatTemplate::Compile(c.source, "case " + c.name);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplate::RenderOptions options;
  options.now = [] { return std::chrono::system_clock::from_time_t(1721995200); };
  auto out = tmpl->Render(c.context, options);
  if (c.expected) {
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, *c.expected);
  } else {
    EXPECT_FALSE(out.ok()) << "jinja2 raised \"" << c.jinja_error << "\" but we rendered \"" << *out
                           << "\"";
    if (!out.ok()) {
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(InterpreterCasesTest, CasesFileIsPresent) { EXPECT_GT(LoadCases().size(), 50u); }

INSTANTIATE_TEST_SUITE_P(Cases, InterpreterTest, ::testing::ValuesIn(LoadCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace ptxserve
