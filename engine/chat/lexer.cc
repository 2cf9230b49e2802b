#include "engine/chat/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>

#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

bool AllPySpace(std::string_view s) {
  for (char32_t c : DecodeUtf8(s)) {
    if (!PyIsSpace(c)) return false;
  }
  return true;
}

int CountNewlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
std::string Unescape(std::string_view raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out.push_back(raw[i]);
      continue;
    }
    const char c = raw[++i];
    auto hex = [&](int digits) {
      if (i + digits >= raw.size()) throw SyntaxError(line, "truncated escape in string literal");
      const std::string h(raw.substr(i + 1, digits));
      for (char d : h) {
        if (!std::isxdigit(static_cast<unsigned char>(d))) {
          throw SyntaxError(line, "truncated escape in string literal");
        }
      }
      i += digits;
      return static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16));
    };
    // Python's one-letter escapes: \a \b \f \n \r \t \v and the quoted \\ \' \".
    static constexpr std::string_view kFrom = "abfnrtv\\'\"", kTo = "\a\b\f\n\r\t\v\\'\"";
    if (const size_t k = kFrom.find(c); k != std::string_view::npos) {
      out.push_back(kTo[k]);
      continue;
    }
    switch (c) {
      case '\n':
        break;  // line continuation
      case 'x':
        AppendUtf8(hex(2), &out);
        break;
      case 'u':
        AppendUtf8(hex(4), &out);
        break;
      case 'U':
        AppendUtf8(hex(8), &out);
        break;
      default:
        if (c >= '0' && c <= '7') {
          char32_t v = 0;
          size_t n = 0;
          for (; n < 3 && i + n < raw.size() && raw[i + n] >= '0' && raw[i + n] <= '7'; ++n) {
            v = v * 8 + (raw[i + n] - '0');
          }
          i += n - 1;
          AppendUtf8(v, &out);
        } else if (c == 'N') {
          throw SyntaxError(line, "unsupported \\N{...} escape in string literal");
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos_), line_);
        break;
      }
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = PyStrip(text, std::nullopt, StripSide::kRight);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone on its line (after indentation)
        // takes that indentation with it.
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
            AllPySpace(std::string_view(text).substr(l_pos))) {
          text.resize(l_pos);
        }
      }
      Emit(TokenType::kData, std::move(text), line_);
      line_ += CountNewlines(std::string_view(src_).substr(pos_, tag - pos_));
      pos_ = p;
      if (kind == '#') {
        LexComment();
      } else {
        LexTag(kind == '%');
      }
    }
    tokens_.push_back({TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void Emit(TokenType type, std::string value, int line) {
    if (type == TokenType::kData && value.empty()) return;
    tokens_.push_back({type, std::move(value), line});
  }

  // After a closing marker: `-` eats all following whitespace, `+` nothing, and a plain
  // block/comment end eats one newline (trim_blocks).
  void AfterEnd(char sign, bool trim_newline) {
    if (sign == '-') {
      while (pos_ < src_.size() && IsAsciiSpace(src_[pos_])) line_ += src_[pos_++] == '\n';
    } else if (sign == 0 && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void LexComment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw SyntaxError(line_, "missing end of comment tag");
    char sign = 0;
    size_t body_end = end;
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[--body_end];
    line_ += CountNewlines(std::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + 2;
    AfterEnd(sign, /*trim_newline=*/true);
  }

  // Returns true (and consumes it) when an end marker starts at pos_.
  bool TryEnd(bool block) {
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const std::string_view close = block ? "%}" : "}}";
    char sign = 0;
    if (rest.size() >= 3 && (rest[0] == '-' || (block && rest[0] == '+')) &&
        rest.substr(1, 2) == close) {
      sign = rest[0];
    } else if (rest.substr(0, 2) != close) {
      return false;
    }
    tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", line_});
    pos_ += sign ? 3 : 2;
    AfterEnd(sign, block);
    return true;
  }

  void LexTag(bool block) {
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", line_});
    int depth = 0;  // open brackets: an end marker inside them is operators (`{{ {'a': {}} }}`)
    while (true) {
      while (pos_ < src_.size() && IsAsciiSpace(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) {
        throw SyntaxError(line_, std::string("unexpected end of template, expected '") +
                                     (block ? "%}" : "}}") + "'");
      }
      if (depth == 0 && TryEnd(block)) return;
      LexToken(&depth);
    }
  }

  void LexToken(int* depth) {
    const char c = src_[pos_];
    const size_t start = pos_;
    if (IsNameStart(c)) {
      while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
      Emit(TokenType::kName, src_.substr(start, pos_ - start), line_);
    } else if (IsDigit(c)) {
      LexNumber();
    } else if (c == '\'' || c == '"') {
      LexString(c);
    } else {
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      const std::string_view rest = std::string_view(src_).substr(pos_);
      for (std::string_view op : kTwo) {
        if (rest.substr(0, 2) == op) {
          pos_ += 2;
          Emit(TokenType::kOperator, std::string(op), line_);
          return;
        }
      }
      if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
        throw SyntaxError(line_, std::string("unexpected char '") + c + "'");
      }
      if (c == '(' || c == '[' || c == '{') ++*depth;
      if ((c == ')' || c == ']' || c == '}') && --*depth < 0) {
        throw SyntaxError(line_, std::string("unexpected '") + c + "'");
      }
      ++pos_;
      Emit(TokenType::kOperator, std::string(1, c), line_);
    }
  }

  void LexNumber() {
    auto digits = [&] {
      std::string out;
      while (pos_ < src_.size() && (IsDigit(src_[pos_]) || (src_[pos_] == '_' && !out.empty()))) {
        if (src_[pos_] != '_') out.push_back(src_[pos_]);
        ++pos_;
      }
      return out;
    };
    std::string text = digits();
    // jinja2's float rule does not fire right after a '.', so `a.0.1` is item access.
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kOperator &&
                           tokens_.back().value == ".";
    bool is_float = false;
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      ++pos_;
      text += "." + digits();
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t q = pos_ + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        text += "e" + src_.substr(pos_ + 1, q - pos_ - 1);
        pos_ = q;
        text += digits();
        is_float = true;
      }
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInteger, text, line_);
  }

  void LexString(char quote) {
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) throw SyntaxError(line_, "unterminated string literal");
    const std::string_view raw = std::string_view(src_).substr(pos_ + 1, i - pos_ - 1);
    Emit(TokenType::kString, Unescape(raw, line_), line_);
    line_ += CountNewlines(raw);
    pos_ = i + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// jinja2 reads \r\n and \r as \n, and drops one trailing newline (keep_trailing_newline
// is off in Hugging Face's environment).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(NormalizeNewlines(source)).Run(); }

}  // namespace ptxserve::chat
