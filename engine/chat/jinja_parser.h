// Parses the lexed template into statements. Anything outside the supported subset
// (macros, includes, unknown statements) is InvalidArgument naming the line and the
// construct, so a template is refused when the server loads it, not when a user calls.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"

namespace ptxserve::jinja {

absl::StatusOr<Body> Parse(const std::vector<Segment>& segments);

}  // namespace ptxserve::jinja
