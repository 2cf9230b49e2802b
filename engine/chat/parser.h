// Builds the statement tree from tokens with jinja2's grammar and operator precedence.
// Anything outside the supported subset (unknown tags, filters and tests, recursive
// loops, includes, ...) is a SyntaxError naming the construct and its line.
#pragma once

#include <vector>

#include "engine/chat/ast.h"
#include "engine/chat/lexer.h"

namespace ptxserve::chat {

Body Parse(const std::vector<Token>& tokens);

}  // namespace ptxserve::chat
