// Renders a parsed template with Jinja2's scoping: a for loop's body is its own scope
// (a `set` inside it does not leak out, which is why templates use namespace()); if
// blocks share their enclosing scope.
#pragma once

#include <functional>
#include <string>

#include "engine/chat/jinja_ast.h"

namespace ptxserve::jinja {

struct RenderGlobals {
  // strftime_now(format): the local time formatted; replaceable for tests.
  std::function<std::string(const std::string& format)> strftime_now;
};

// Throws TemplateError (with the line) on raise_exception and on runtime errors.
std::string Render(const Body& body, const Value& variables, const RenderGlobals& globals);

}  // namespace ptxserve::jinja
