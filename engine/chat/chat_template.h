// Chat templates: the Jinja2 template in a model's tokenizer_config.json (or a file given
// to the server) that turns a conversation into the prompt text, rendered as Hugging
// Face's apply_chat_template does (trim_blocks, lstrip_blocks, loopcontrols, the globals
// raise_exception and strftime_now, tojson without ASCII escaping). No C++ Jinja library
// is packaged in Debian, so engine/chat holds an interpreter of the subset these
// templates use (jinja_*.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptxserve {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Compiles a template. A construct outside the supported subset is InvalidArgument
  // naming `origin`, the line and the construct ("chat template (f.jinja) line 3:
  // unsupported filter 'wordwrap'").
  static absl::StatusOr<ChatTemplate> Compile(std::string_view source, std::string origin);

  // Renders with the variables in `context` (a JSON object). raise_exception(msg) and
  // runtime errors are InvalidArgument with the message and line. Thread-safe.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  // strftime_now's clock: formats the current local time (default); tests pin it.
  void set_strftime(std::function<std::string(const std::string& format)> f) {
    strftime_ = std::move(f);
  }

 private:
  std::shared_ptr<const std::vector<jinja::Node>> body_;
  std::string origin_;
  std::function<std::string(const std::string&)> strftime_;
};

// The template text in a parsed tokenizer_config.json: "chat_template" as a string, or a
// list of {"name", "template"} (the one named `name`). nullopt when absent;
// InvalidArgument naming the field when malformed.
absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const nlohmann::ordered_json& config, std::string_view name = "default");

// The variables apply_chat_template passes: messages, add_generation_prompt, tools and
// documents (None), and the special tokens' strings (bos_token, eos_token, ...).
nlohmann::ordered_json ChatTemplateContext(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const std::map<std::string, std::string>& special_tokens);

}  // namespace ptxserve
