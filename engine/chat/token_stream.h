// A cursor over the token list for the parser, with jinja2's error wording.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/lexer.h"

namespace ptxserve::chat {

class TokenStream {
 public:
  explicit TokenStream(const std::vector<Token>& tokens) : tokens_(tokens) {}

  const Token& Peek(size_t ahead = 0) const {
    const size_t i = pos_ + ahead;
    return tokens_[i < tokens_.size() ? i : tokens_.size() - 1];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOperator && Peek(ahead).value == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).value == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  void ExpectOp(std::string_view op);
  std::string ExpectName();
  void ExpectType(TokenType type, std::string_view what);
  [[noreturn]] void Fail(const std::string& message) const;
  // "'x'" for error messages.
  std::string Describe(const Token& t) const;

 private:
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
};

}  // namespace ptxserve::chat
