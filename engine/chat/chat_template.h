// Hugging Face chat templates: compiles the Jinja2 `chat_template` of a tokenizer config
// and renders a conversation to the prompt text, byte-identical to transformers'
// apply_chat_template (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
// loopcontrols; globals raise_exception and strftime_now; tojson as json.dumps with
// ensure_ascii=False).
//
// Debian packages no C++ Jinja engine, so engine/chat is our own interpreter for the
// subset chat templates use; see the tests in tests/chat for what is covered. Anything
// outside it fails at Compile, not at Render.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptxserve {

namespace chat {
struct Program;
}  // namespace chat

class ChatTemplate {
 public:
  struct RenderOptions {
    // The clock behind strftime_now() (local time, like Python's datetime.now());
    // unset means the system clock. Tests pin it.
    std::function<std::chrono::system_clock::time_point()> now;
  };

  // Compiles a template. A construct outside the supported subset is InvalidArgument
  // naming `origin`, the template line (1-based) and the construct, e.g.
  // "chat template (tokenizer_config.json) line 3: unsupported filter 'wordwrap'".
  static absl::StatusOr<ChatTemplate> Compile(std::string_view source, std::string origin);

  // Renders with the variables in `context` (a JSON object: messages,
  // add_generation_prompt, bos_token, eos_token, tools, ...). raise_exception(msg) in the
  // template and runtime errors (undefined attribute call, type errors) are
  // InvalidArgument with the message. Const and thread-safe.
  //
  // Key order matters to templates (`tojson`, `dict.items()`): Python keeps the request's
  // order, so pass an ordered_json parsed from the request to match it; a plain
  // nlohmann::json has its object keys sorted.
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options) const;

  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate(std::shared_ptr<const chat::Program> program, std::string origin)
      : program_(std::move(program)), origin_(std::move(origin)) {}

  std::shared_ptr<const chat::Program> program_;  // immutable; copies share it
  std::string origin_;
};

// The template text from a parsed tokenizer_config.json: "chat_template" as a string, or
// a list of {"name","template"} (the one named `name`, default "default"). nullopt when
// absent. InvalidArgument naming the field when malformed; NotFound when the list has no
// template of that name.
absl::StatusOr<std::optional<std::string>> ChatTemplateFromTokenizerConfig(
    const nlohmann::json& config, std::string_view name = "default");

// The context Hugging Face's apply_chat_template builds: messages,
// add_generation_prompt, tools and documents (None unless the caller sets them), and the
// special-token strings (bos_token, eos_token, unk_token, pad_token when given).
nlohmann::json ChatTemplateContext(const nlohmann::json& messages, bool add_generation_prompt,
                                   const std::map<std::string, std::string>& special_tokens);
nlohmann::ordered_json ChatTemplateContext(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const std::map<std::string, std::string>& special_tokens);

}  // namespace ptxserve
