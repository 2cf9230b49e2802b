// Splits template source into Jinja2 tokens, applying the whitespace control that
// Hugging Face's environment uses (trim_blocks, lstrip_blocks, `-`/`+` markers) exactly
// as jinja2's lexer does, so rendered text matches byte for byte.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve::chat {

// A template that does not parse, or uses a construct outside the supported subset.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(int line, const std::string& message) : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

enum class TokenType {
  kData,           // literal template text (whitespace control already applied)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // value is the unescaped literal
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;  // 1-based line of the token's start
};

// Throws SyntaxError (unterminated tags, comments and strings; stray characters).
std::vector<Token> Lex(std::string_view source);

}  // namespace ptxserve::chat
