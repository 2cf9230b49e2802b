// The built-ins a chat template can reach: jinja2's filters and tests, the str/dict/list
// methods templates call, and the globals Hugging Face installs (raise_exception,
// strftime_now) next to jinja2's own (namespace, range, dict).
#pragma once

#include <string>
#include <string_view>

#include "engine/chat/ast.h"
#include "engine/chat/evaluator.h"
#include "engine/chat/value.h"

namespace ptxserve::chat {

// Filters and tests by name; nullptr when outside the supported subset. The parser
// resolves names once, so an unsupported one is a compile error and rendering never
// searches.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);

// Whether `receiver.name` is a method we implement (str.strip, dict.items, ...).
bool IsMethod(const Value& receiver, std::string_view name);
Value CallMethod(Evaluator& ev, const Value& receiver, const std::string& name,
                 const CallArgs& args);
// Python methods (str.format, list.append, loop.cycle, ...) and jinja2 globals (joiner,
// cycler, ...) outside the subset; calling one is a compile error.
bool IsUnsupportedMethod(std::string_view name);
bool IsUnsupportedGlobal(std::string_view name);

// Defines the globals in `scope`; the render's own variables go in a child scope so a
// context key can shadow them, as jinja2's render(**kwargs) does.
void AddGlobals(Scope& scope);
Value CallGlobal(Evaluator& ev, const std::string& name, const CallArgs& args);

}  // namespace ptxserve::chat
