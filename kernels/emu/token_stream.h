// Internal to the emulator's front end: a cursor over lexed PTX tokens with the helpers
// the module parser (parser.cc) and the function-body parser (body_parser.cc) share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/emu/lexer.h"
#include "kernels/emu/parse_types.h"

namespace ptxserve::emu {

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> toks) : t_(std::move(toks)) {}

  const Token& Peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  const Token& Next() {
    const Token& tok = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return tok;
  }
  static bool IsPunct(const Token& t, char c) { return t.kind == Tok::kPunct && t.text[0] == c; }
  static bool IsDot(const Token& t, std::string_view s) {
    return t.kind == Tok::kDot && t.text == s;
  }
  static absl::Status Err(const Token& t, std::string_view what) {
    std::string near =
        t.kind == Tok::kEnd ? "end of input" : absl::StrCat("'", std::string(t.text), "'");
    if (t.kind == Tok::kDot) near = absl::StrCat("'.", std::string(t.text), "'");
    return absl::InvalidArgumentError(
        absl::StrFormat("PTX line %d: %s (near %s)", t.line, what, near));
  }
  absl::Status Expect(char c) {
    const Token& t = Next();
    if (!IsPunct(t, c)) return Err(t, absl::StrFormat("expected '%c'", c));
    return absl::OkStatus();
  }
  void SkipLine() {
    const int32_t line = Next().line;
    while (Peek().kind != Tok::kEnd && Peek().line == line) Next();
  }
  absl::Status SkipPast(char c) {
    while (Peek().kind != Tok::kEnd && !IsPunct(Peek(), c)) Next();
    return Expect(c);
  }
  absl::Status SkipSection() {
    Next();
    while (Peek().kind != Tok::kEnd && !IsPunct(Peek(), '{')) Next();
    if (auto s = Expect('{'); !s.ok()) return s;
    int depth = 1;
    while (depth > 0) {
      const Token& t = Next();
      if (t.kind == Tok::kEnd) return Err(t, "unterminated .section");
      if (IsPunct(t, '{')) ++depth;
      if (IsPunct(t, '}')) --depth;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ExpectInt(std::string_view what) {
    const Token& t = Next();
    if (t.kind != Tok::kInt) return Err(t, absl::StrCat("expected an integer ", std::string(what)));
    return t.ival;
  }

  // [.align N] .type name [ '[' N? ']' ] ;  (after .shared / .extern .shared)

  // [.align N] .type name [ '[' N? ']' ] ;  after .shared, .extern .shared or .local.
  absl::Status ParseVarDecl(bool is_extern, absl::flat_hash_map<std::string, SharedVar>* into);

 private:
  std::vector<Token> t_;
  size_t pos_ = 0;
};

// Parses a function body `{ ... }` into b.raw, b.labels and the register and variable
// declarations (register names resolve through the body's lexical scopes).
absl::Status ParseFunctionBody(TokenStream& ts, FnBuilder& b);

}  // namespace ptxserve::emu
