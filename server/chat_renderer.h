// How the fronts render chat messages into a prompt: the model's chat template behind a
// function, so that request conversion does not depend on the template engine.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptxserve::server {

// Renders `messages` (a JSON array of {role, content[, name]}) with the model's template;
// `extra` (a JSON object, possibly empty) adds template variables (chat_template_kwargs).
// InvalidArgument when the template refuses the conversation (raise_exception).
// Ordered JSON: a template's tojson writes keys in the order the client sent them.
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const nlohmann::ordered_json& extra)>;

}  // namespace ptxserve::server
