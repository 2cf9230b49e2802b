// The chat-template interpreter construct by construct, with Jinja2's expected output
// written out (whitespace control, scoping, filters, tests, errors).
#include <gtest/gtest.h>

#include "engine/chat/chat_template.h"

namespace ptxserve {
namespace {

using json = nlohmann::ordered_json;

std::string R(const std::string& src, const json& ctx = json::object()) {
  auto t = ChatTemplate::Compile(src, "test");
  if (!t.ok()) return "COMPILE: " + std::string(t.status().message());
  auto out = t->Render(ctx);
  if (!out.ok()) return "RENDER: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaTest, OutputAndLiterals) {
  EXPECT_EQ(R("a{{ 1 + 2 }}b"), "a3b");
  EXPECT_EQ(R("{{ 'x' ~ 1 ~ none }}"), "x1None");
  EXPECT_EQ(R("{{ [1, 'a', true, none, 1.5] }}"), "[1, 'a', True, None, 1.5]");
  EXPECT_EQ(R("{{ {'k': \"it's\"} }}"), "{'k': \"it's\"}");
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "3 -4 1 2 3.5 1024");
  EXPECT_EQ(R("{{ 'a\\nb' }}|{{ \"\\u00e9\" }}"), "a\nb|\u00e9");
  EXPECT_EQ(R("{{ undefined_name }}|{{ x.y is defined }}", {{"x", json::object()}}), "|False");
  EXPECT_EQ(R("{{ 'yes' if flag else 'no' }}{{ 'z' if false }}", {{"flag", true}}), "yes");
}

TEST(JinjaTest, WhitespaceControlTrimAndLstripBlocks) {
  EXPECT_EQ(R("a  {{- 'b' -}}  c"), "abc");
  // trim_blocks drops the newline after a block tag; lstrip_blocks its indentation.
  EXPECT_EQ(R("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");
  EXPECT_EQ(R("  {% if true %}\nz\n  {% endif %}\n"), "z\n");
  EXPECT_EQ(R("a {% if true %}b{% endif %}"), "a b");
  EXPECT_EQ(R("{# comment #}\nq"), "q");
  EXPECT_EQ(R("{{ 'v' }}\nw"), "v\nw");  // not after an expression
}

TEST(JinjaTest, LoopsScopesAndNamespaces) {
  const json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(
      R("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
        ctx),
      "1a,2b,3c");
  EXPECT_EQ(R("{% for x in xs if x != 'b' %}{{ loop.index0 }}{{ x }}{% endfor %}", ctx), "0a1c");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx),
            "a");
  EXPECT_EQ(
      R("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% endfor %}", ctx),
      "ac");
  // A set inside a loop does not leak; a namespace attribute does.
  EXPECT_EQ(R("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set n = n + 1 %}"
              "{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}",
              ctx),
            "0 3");
  EXPECT_EQ(
      R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
      "b=1;a=2;");
  EXPECT_EQ(R("{% set block %}in{{ 1 }}{% endset %}[{{ block }}]"), "[in1]");
  EXPECT_EQ(R("{{ xs[1:] }} {{ xs[-1] }} {{ xs[::-1] | join('') }}", ctx), "['b', 'c'] c cba");
}

TEST(JinjaTest, FiltersTestsAndMethods) {
  const json msgs = {{{"role", "user"}, {"content", " hi "}}, {{"role", "tool"}, {"content", "t"}}};
  EXPECT_EQ(R("{{ m | selectattr('role', 'equalto', 'user') | list | length }}", {{"m", msgs}}),
            "1");
  EXPECT_EQ(
      R("{{ m | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}",
        {{"m", msgs}}),
      "t");
  EXPECT_EQ(R("[{{ m[0].content | trim }}] [{{ m[0]['content'].strip() }}]", {{"m", msgs}}),
            "[hi] [hi]");
  EXPECT_EQ(R("{{ 'a,b'.split(',') }} {{ 'Ab'.upper() }} {{ 'x y'.title() }} {{ "
              "'abc'.startswith('ab') }}"),
            "['a', 'b'] AB X Y True");
  EXPECT_EQ(
      R("{{ x | default('d') }} {{ '' | default('e', true) }} {{ 3 is odd }} {{ 'a' in 'cat' }}"),
      "d e True True");
  EXPECT_EQ(R("{{ v | tojson }}", {{"v", {{"a", {1, 2.5, "\u00e9\"\n"}}, {"b", nullptr}}}}),
            "{\"a\": [1, 2.5, \"\u00e9\\\"\\n\"], \"b\": null}");
  EXPECT_EQ(R("{{ v | tojson(indent=2) }}", {{"v", {{"a", {1}}}}}), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(
      R("{{ v | tojson(separators=(',', ':'), sort_keys=true) }}", {{"v", {{"b", 1}, {"a", 2}}}}),
      "{\"a\":2,\"b\":1}");
  EXPECT_EQ(R("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(R("{{ x is none }} {{ x is not none }} {{ m is mapping }} {{ s is string }}",
              {{"x", nullptr}, {"m", json::object()}, {"s", "s"}}),
            "True False True True");
  EXPECT_EQ(R("{{ 'ab' | length }} {{ ['a'] + ['b'] }} {{ 'x' * 3 }}"), "2 ['a', 'b'] xxx");
}

TEST(JinjaTest, ErrorsNameTheLine) {
  EXPECT_EQ(R("a\n{{ raise_exception('roles must alternate') }}"),
            "RENDER: line 2: roles must alternate");
  EXPECT_EQ(R("x\n{{ s | wordwrap }}"),
            "COMPILE: chat template (test) line 2: unsupported filter 'wordwrap'");
  EXPECT_EQ(R("{% macro m() %}{% endmacro %}"),
            "COMPILE: chat template (test) line 1: unsupported statement 'macro'");
  EXPECT_NE(R("{% if x %}").find("COMPILE: chat template (test) line 1: missing 'endif'"),
            std::string::npos);
  EXPECT_NE(R("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(R("{{ u.x.y }}").find("undefined"), std::string::npos);
}

TEST(ChatTemplateConfigTest, FindsTheTemplateInTokenizerConfig) {
  EXPECT_EQ(*ChatTemplateFromTokenizerConfig(json{{"chat_template", "T"}}), "T");
  EXPECT_FALSE(ChatTemplateFromTokenizerConfig(json{{"x", 1}})->has_value());
  const json named = {
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "A"}}, {{"name", "default"}, {"template", "B"}}}}};
  EXPECT_EQ(**ChatTemplateFromTokenizerConfig(named), "B");
  EXPECT_EQ(**ChatTemplateFromTokenizerConfig(named, "tool_use"), "A");
  EXPECT_FALSE(ChatTemplateFromTokenizerConfig(json{{"chat_template", 3}}).ok());
  EXPECT_FALSE(ChatTemplateFromTokenizerConfig(json{{"chat_template", {{{"name", 1}}}}}).ok());
  const json ctx = ChatTemplateContext(json::array(), true, {{"bos_token", "<s>"}});
  EXPECT_EQ(ctx["bos_token"], "<s>");
  EXPECT_TRUE(ctx["tools"].is_null());
  EXPECT_EQ(ctx["add_generation_prompt"], true);
}

}  // namespace
}  // namespace ptxserve
