#include "kernels/emu/lexer.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "kernels/emu/fp16.h"

namespace ptxserve::emu {
namespace {

bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

absl::Status LexError(int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("PTX line %d: %s", line, what));
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view s) {
  std::vector<Token> out;
  out.reserve(s.size() / 4);
  int32_t line = 1;
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      const int32_t start = line;
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i + 1 >= n) return LexError(start, "unterminated /* comment");
      i += 2;
      continue;
    }
    Token t;
    t.line = line;
    if (IsIdentStart(c)) {
      size_t j = i + 1;
      while (j < n && IsIdentChar(s[j])) ++j;
      t.kind = Tok::kIdent;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (c == '.' && i + 1 < n && (IsIdentChar(s[i + 1]))) {
      size_t j = i + 1;
      while (j < n && (IsIdentChar(s[j]) || s[j] == ':')) ++j;
      t.kind = Tok::kDot;
      t.text = s.substr(i + 1, j - i - 1);
      i = j;
    } else if (IsDigit(c)) {
      size_t j = i;
      if (c == '0' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
        j = i + 2;
        while (j < n && IsHex(s[j])) ++j;
        if (j == i + 2) return LexError(line, "hex literal without digits");
        t.kind = Tok::kInt;
        t.ival = std::strtoull(std::string(s.substr(i + 2, j - i - 2)).c_str(), nullptr, 16);
      } else if (c == '0' && i + 1 < n &&
                 (s[i + 1] == 'f' || s[i + 1] == 'F' || s[i + 1] == 'd' || s[i + 1] == 'D')) {
        const bool is_f = s[i + 1] == 'f' || s[i + 1] == 'F';
        j = i + 2;
        while (j < n && IsHex(s[j])) ++j;
        const size_t digits = j - i - 2;
        if (digits != (is_f ? 8u : 16u)) {
          return LexError(line, absl::StrFormat("float literal '%s' needs %d hex digits",
                                                s.substr(i, j - i), is_f ? 8 : 16));
        }
        t.kind = Tok::kFloat;
        t.fbits = std::strtoull(std::string(s.substr(i + 2, digits)).c_str(), nullptr, 16);
        t.f32_bits = is_f;
      } else {
        while (j < n && IsDigit(s[j])) ++j;
        bool is_float = false;
        if (j < n && s[j] == '.' && j + 1 < n && IsDigit(s[j + 1])) {
          is_float = true;
          ++j;
          while (j < n && IsDigit(s[j])) ++j;
        }
        if (j < n && (s[j] == 'e' || s[j] == 'E')) {
          size_t k = j + 1;
          if (k < n && (s[k] == '+' || s[k] == '-')) ++k;
          if (k < n && IsDigit(s[k])) {
            is_float = true;
            j = k;
            while (j < n && IsDigit(s[j])) ++j;
          }
        }
        const std::string lit(s.substr(i, j - i));
        if (is_float) {
          t.kind = Tok::kFloat;
          t.fbits = F64ToBits(std::strtod(lit.c_str(), nullptr));
        } else {
          t.kind = Tok::kInt;
          // A leading 0 means octal in PTX, as in C.
          t.ival = std::strtoull(lit.c_str(), nullptr, lit.size() > 1 && lit[0] == '0' ? 8 : 10);
        }
        if (j < n && (s[j] == 'U' || s[j] == 'u') && !is_float) ++j;
      }
      if (j < n && IsIdentChar(s[j])) {
        return LexError(line, absl::StrFormat("malformed number near '%s'",
                                              s.substr(i, std::min<size_t>(j - i + 1, 24))));
      }
      t.text = s.substr(i, j - i);
      i = j;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != '"' && s[j] != '\n') ++j;
      if (j >= n || s[j] != '"') return LexError(line, "unterminated string");
      t.kind = Tok::kString;
      t.text = s.substr(i + 1, j - i - 1);
      i = j + 1;
    } else if (std::string_view(",;:[]{}()+-@!|<>=_").find(c) != std::string_view::npos) {
      t.kind = Tok::kPunct;
      t.text = s.substr(i, 1);
      ++i;
    } else {
      return LexError(line, absl::StrFormat("unexpected character '%c'", c));
    }
    out.push_back(t);
  }
  Token end;
  end.kind = Tok::kEnd;
  end.line = line;
  out.push_back(end);
  return out;
}

}  // namespace ptxserve::emu
