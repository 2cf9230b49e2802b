#include "engine/chat/chat_template.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/chat/ast.h"
#include "engine/chat/builtins.h"
#include "engine/chat/evaluator.h"
#include "engine/chat/json_value.h"
#include "engine/chat/lexer.h"
#include "engine/chat/parser.h"

namespace ptxserve {
namespace chat {

struct Program {
  Body body;
};

}  // namespace chat

namespace {

std::string Where(const std::string& origin, int line) {
  std::string where = "chat template (" + origin + ")";
  if (line > 0) absl::StrAppend(&where, " line ", line);
  return where;
}

template <typename Json>
Json MakeContext(const Json& messages, bool add_generation_prompt,
                 const std::map<std::string, std::string>& special_tokens) {
  Json context = Json::object();
  context["messages"] = messages;
  // apply_chat_template always passes tools= and documents= (None when not given), so
  // templates see them defined.
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [name, text] : special_tokens) context[name] = text;
  return context;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source, std::string origin) {
  auto program = std::make_shared<chat::Program>();
  try {
    program->body = chat::Parse(chat::Lex(source));
  } catch (const chat::SyntaxError& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(origin, e.line()), ": ", e.what()));
  }
  return ChatTemplate(std::move(program), std::move(origin));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  return Render(nlohmann::ordered_json(context), RenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  return Render(context, RenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderOptions& options) const {
  if (!context.is_object()) {
    return absl::InvalidArgumentError(Where(origin_, 0) + ": the context must be a JSON object");
  }
  chat::Scope globals(nullptr);
  chat::AddGlobals(globals);
  chat::Scope vars(&globals);
  for (auto it = context.begin(); it != context.end(); ++it) {
    vars.Set(it.key(), chat::ValueFromJson(it.value()));
  }
  chat::Clock clock = options.now;
  if (!clock) clock = [] { return std::chrono::system_clock::now(); };
  std::string out;
  try {
    chat::Evaluator(std::move(clock), &out).Run(program_->body, vars);
  } catch (const chat::TemplateError& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(origin_, e.line()), ": ", e.what()));
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const nlohmann::json& config, std::string_view name) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json: expected a JSON object");
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer_config.json: chat_template must be a string or a list of "
                     "{\"name\", \"template\"} objects, got ",
                     it->type_name()));
  }
  std::vector<std::string> names;
  std::optional<std::string> found;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    const auto n = entry.is_object() ? entry.find("name") : entry.end();
    const auto t = entry.is_object() ? entry.find("template") : entry.end();
    if (!entry.is_object() || n == entry.end() || !n->is_string() || t == entry.end() ||
        !t->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: chat_template[", i,
                       "] must be an object with string \"name\" and \"template\""));
    }
    names.push_back(n->get<std::string>());
    if (names.back() == name && !found) found = t->get<std::string>();
  }
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer_config.json: chat_template has no template named '",
                     std::string(name), "' (available: ", absl::StrJoin(names, ", "), ")"));
  }
  return found;
}

nlohmann::json ChatTemplateContext(const nlohmann::json& messages, bool add_generation_prompt,
                                   const std::map<std::string, std::string>& special_tokens) {
  return MakeContext(messages, add_generation_prompt, special_tokens);
}

nlohmann::ordered_json ChatTemplateContext(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const std::map<std::string, std::string>& special_tokens) {
  return MakeContext(messages, add_generation_prompt, special_tokens);
}

}  // namespace ptxserve
