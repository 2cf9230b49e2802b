#include "engine/chat/jinja_lexer.h"

#include <cctype>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace ptxserve::jinja {
namespace {

constexpr const char* kSpace = " \t\n\r\f\v";

absl::Status Error(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's escapes; *pos is on the opening quote and ends
// past the closing one.
absl::StatusOr<std::string> ReadString(const std::string& src, size_t* pos, int* line) {
  const char quote = src[*pos];
  std::string out;
  size_t i = *pos + 1;
  for (; i < src.size() && src[i] != quote; ++i) {
    char c = src[i];
    if (c == '\n') ++*line;
    if (c != '\\' || i + 1 >= src.size()) {
      out += c;
      continue;
    }
    const char e = src[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case '\n':
        ++*line;
        break;
      case 'x':
      case 'u':
      case 'U': {
        const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          const int h = i + 1 + k < src.size() ? HexValue(src[i + 1 + k]) : -1;
          if (h < 0) return Error(*line, absl::StrCat("bad \\", std::string(1, e), " escape"));
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        i += n;
        AppendUtf8(cp, &out);
        break;
      }
      default:  // Python keeps unknown escapes as written
        out += '\\';
        out += e;
    }
  }
  if (i >= src.size()) return Error(*line, "unterminated string");
  *pos = i + 1;
  return out;
}

// Tokens of a tag's inside from *pos up to its closing marker (`close`, "}}" or "%}",
// optionally preceded by '-' or '+'); sets *strip_after / *keep_after from the marker.
absl::Status ReadTag(const std::string& src, const char* close, size_t* pos, int* line,
                     std::vector<Token>* tokens, bool* strip_after, bool* keep_after) {
  static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                               "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                               "]",  "{",  "}",  ".",  ",",  ":",  "|"};
  const size_t close_len = std::strlen(close);
  size_t i = *pos;
  while (true) {
    while (i < src.size() && std::strchr(kSpace, src[i]) && src[i] != '\0') {
      if (src[i] == '\n') ++*line;
      ++i;
    }
    if (i >= src.size()) return Error(*line, absl::StrCat("tag not closed by '", close, "'"));
    for (char marker : {'-', '+'}) {
      if (src[i] == marker && src.compare(i + 1, close_len, close) == 0) {
        *strip_after = marker == '-';
        *keep_after = marker == '+';
        *pos = i + 1 + close_len;
        tokens->push_back({Token::Kind::kEnd, "", *line});
        return absl::OkStatus();
      }
    }
    if (src.compare(i, close_len, close) == 0) {
      *pos = i + close_len;
      tokens->push_back({Token::Kind::kEnd, "", *line});
      return absl::OkStatus();
    }
    const char c = src[i];
    if (IsNameStart(c)) {
      size_t j = i;
      while (j < src.size() && IsNameChar(src[j])) ++j;
      tokens->push_back({Token::Kind::kName, src.substr(i, j - i), *line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      if (j + 1 < src.size() && src[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E')) {
        size_t k = j + 1;
        if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
        if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
          is_float = true;
          j = k;
          while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
        }
      }
      tokens->push_back(
          {is_float ? Token::Kind::kFloat : Token::Kind::kInt, src.substr(i, j - i), *line});
      i = j;
    } else if (c == '\'' || c == '"') {
      const int start_line = *line;
      auto s = ReadString(src, &i, line);
      if (!s.ok()) return s.status();
      tokens->push_back({Token::Kind::kString, *std::move(s), start_line});
    } else {
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (src.compare(i, n, op) == 0) {
          tokens->push_back({Token::Kind::kOp, op, *line});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched)
        return Error(*line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<Segment>> Lex(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // the previous tag ended with '-'
  bool trim_next = false;   // the previous tag was a block or comment (trim_blocks)
  while (pos <= src.size()) {
    size_t tag = src.find('{', pos);
    while (tag != std::string::npos && tag + 1 < src.size() && !std::strchr("{%#", src[tag + 1])) {
      tag = src.find('{', tag + 1);
    }
    if (tag != std::string::npos && tag + 1 >= src.size()) tag = std::string::npos;
    const size_t text_end = tag == std::string::npos ? src.size() : tag;
    std::string text = src.substr(pos, text_end - pos);
    if (strip_next) {
      text.erase(0, text.find_first_not_of(kSpace) == std::string::npos
                        ? text.size()
                        : text.find_first_not_of(kSpace));
    } else if (trim_next) {
      if (text.rfind("\r\n", 0) == 0) {
        text.erase(0, 2);
      } else if (!text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
    }
    const int text_line = line;
    for (char c : src.substr(pos, text_end - pos)) line += c == '\n';
    if (tag == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::kText, text, {}, text_line});
      break;
    }
    const char kind = src[tag + 1];
    const char modifier = tag + 2 < src.size() ? src[tag + 2] : '\0';
    if (modifier == '-') {
      const size_t keep = text.find_last_not_of(kSpace);
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (kind != '{' && modifier != '+') {
      // lstrip_blocks: a block or comment alone at the start of its line takes the
      // line's indentation with it.
      const size_t line_start =
          src.rfind('\n', tag) == std::string::npos ? 0 : src.rfind('\n', tag) + 1;
      const size_t indent = tag - line_start;
      if (src.find_first_not_of(" \t", line_start) >= tag) {
        size_t trailing = 0;
        while (
            trailing < text.size() && trailing < indent &&
            (text[text.size() - 1 - trailing] == ' ' || text[text.size() - 1 - trailing] == '\t')) {
          ++trailing;
        }
        text.erase(text.size() - trailing);
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::kText, text, {}, text_line});
    pos = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
    const int tag_line = line;
    bool strip_after = false, keep_after = false;
    if (kind == '#') {
      const size_t end = src.find("#}", pos);
      if (end == std::string::npos) return Error(tag_line, "comment not closed by '#}'");
      for (size_t k = pos; k < end; ++k) line += src[k] == '\n';
      strip_after = end > pos && src[end - 1] == '-';
      pos = end + 2;
    } else {
      Segment seg;
      seg.kind = kind == '{' ? Segment::Kind::kOutput : Segment::Kind::kStatement;
      seg.line = tag_line;
      absl::Status st = ReadTag(src, kind == '{' ? "}}" : "%}", &pos, &line, &seg.tokens,
                                &strip_after, &keep_after);
      if (!st.ok()) return st;
      out.push_back(std::move(seg));
    }
    strip_next = strip_after;
    trim_next = kind != '{' && !keep_after;
  }
  return out;
}

}  // namespace ptxserve::jinja
