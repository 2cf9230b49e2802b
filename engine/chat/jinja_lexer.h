// Splits a template into text and tags, applying Jinja2's whitespace control as Hugging
// Face configures it (trim_blocks and lstrip_blocks on; `-` and `+` markers), and each
// tag's inside into tokens.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ptxserve::jinja {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // the name, the unescaped string, the number's digits, the operator
  int line = 0;
};

struct Segment {
  enum class Kind { kText, kOutput, kStatement };  // text, {{ ... }}, {% ... %}
  Kind kind = Kind::kText;
  std::string text;           // kText
  std::vector<Token> tokens;  // kOutput / kStatement, ending with a kEnd token
  int line = 0;
};

// InvalidArgument naming the line for an unterminated tag or string, or a character no
// token starts with.
absl::StatusOr<std::vector<Segment>> Lex(const std::string& source);

}  // namespace ptxserve::jinja
