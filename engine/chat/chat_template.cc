#include "engine/chat/chat_template.h"

#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/jinja_parser.h"
#include "engine/chat/jinja_render.h"

namespace ptxserve {
namespace {

using jinja::Expr;
using jinja::Node;

// The first filter or test outside the interpreter's set, found when the template is
// compiled so that the server refuses it at load rather than at a user's request.
absl::Status CheckNames(const Expr* e) {
  if (!e) return absl::OkStatus();
  if (e->kind == Expr::Kind::kFilter && !jinja::IsKnownFilter(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", e->line, ": unsupported filter '", e->name, "'"));
  }
  if (e->kind == Expr::Kind::kTest && !jinja::IsKnownTest(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", e->line, ": unsupported test '", e->name, "'"));
  }
  for (const auto& item : e->items) {
    if (absl::Status st = CheckNames(item.get()); !st.ok()) return st;
  }
  for (const auto& [_, v] : e->kwargs) {
    if (absl::Status st = CheckNames(v.get()); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const jinja::Body& body) {
  for (const Node& n : body) {
    for (const Expr* e : {n.expr.get(), n.filter.get()}) {
      if (absl::Status st = CheckNames(e); !st.ok()) return st;
    }
    for (const auto& [cond, branch] : n.branches) {
      if (absl::Status st = CheckNames(cond.get()); !st.ok()) return st;
      if (absl::Status st = CheckNames(branch); !st.ok()) return st;
    }
    for (const jinja::Body* b : {&n.body, &n.else_body}) {
      if (absl::Status st = CheckNames(*b); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

std::string LocalTime(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source, std::string origin) {
  auto prefix = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(absl::StrCat("chat template (", origin, ") ", st.message()));
  };
  auto segments = jinja::Lex(std::string(source));
  if (!segments.ok()) return prefix(segments.status());
  auto body = jinja::Parse(*segments);
  if (!body.ok()) return prefix(body.status());
  if (absl::Status st = CheckNames(*body); !st.ok()) return prefix(st);
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(*std::move(body));
  t.origin_ = std::move(origin);
  t.strftime_ = LocalTime;
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    return absl::InvalidArgumentError("chat template context must be an object");
  jinja::RenderGlobals globals;
  globals.strftime_now = strftime_;
  try {
    return jinja::Render(*body_, jinja::Value::FromJson(context), globals);
  } catch (const jinja::TemplateError& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const nlohmann::ordered_json& config, std::string_view name) {
  if (!config.is_object()) return std::optional<std::string>();
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: chat_template must be a string or a list");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& entry = (*it)[i];
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: chat_template[", i,
                       "] must be {\"name\": ..., \"template\": ...}"));
    }
    if (entry["name"].get<std::string>() == name) {
      return std::optional<std::string>(entry["template"].get<std::string>());
    }
  }
  return std::optional<std::string>();
}

nlohmann::ordered_json ChatTemplateContext(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const std::map<std::string, std::string>& special_tokens) {
  nlohmann::ordered_json ctx = {{"messages", messages},
                                {"tools", nullptr},
                                {"documents", nullptr},
                                {"add_generation_prompt", add_generation_prompt}};
  for (const auto& [k, v] : special_tokens) ctx[k] = v;
  return ctx;
}

}  // namespace ptxserve
