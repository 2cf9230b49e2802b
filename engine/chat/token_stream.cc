#include "engine/chat/token_stream.h"

namespace ptxserve::chat {

void TokenStream::ExpectOp(std::string_view op) {
  if (!SkipOp(op)) Fail("expected '" + std::string(op) + "', got " + Describe(Peek()));
}

std::string TokenStream::ExpectName() {
  if (Peek().type != TokenType::kName) Fail("expected a name, got " + Describe(Peek()));
  return Next().value;
}

void TokenStream::ExpectType(TokenType type, std::string_view what) {
  if (Peek().type != type) Fail("expected " + std::string(what) + ", got " + Describe(Peek()));
  Next();
}

void TokenStream::Fail(const std::string& message) const {
  throw SyntaxError(Peek().line, message);
}

std::string TokenStream::Describe(const Token& t) const {
  switch (t.type) {
    case TokenType::kEof:
      return "end of template";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kData:
      return "template data";
    default:
      return "'" + t.value + "'";
  }
}

}  // namespace ptxserve::chat
