#include "engine/chat/pystr.h"

#include <locale.h>
#include <wctype.h>

#include <cstdio>

#include "engine/tokenizer/utf8.h"

namespace ptxserve::chat {
namespace {

constexpr char32_t kEscapeBase = 0xDC80;  // surrogateescape: byte b <-> U+DC80+(b-0x80)

// glibc's C.UTF-8 carries the full Unicode simple case tables; created once because
// newlocale is not free and the handle is immutable (safe to share across threads).
locale_t Utf8Locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

// Python's str.isprintable() is false for controls, separators other than space and
// format characters; repr() escapes those. Unassigned code points are not tracked.
bool PyIsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
  if ((c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || c == 0x1680) return false;
  if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff9 && c <= 0xfffb)) return false;
  return c <= 0x10ffff;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool IsCased(char32_t c) { return PyUpper(c) != c || PyLower(c) != c; }

}  // namespace

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + k]);
      ok = (cb & 0xc0) == 0x80;
      c = (c << 6) | (cb & 0x3f);
    }
    // Overlong forms and surrogates are invalid UTF-8; keep their bytes verbatim.
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && c >= kMin[len] && c <= 0x10ffff && !(c >= 0xd800 && c <= 0xdfff);
    if (!ok) {
      out.push_back(b < 0x80 ? b : kEscapeBase + (b - 0x80));
      ++i;
      continue;
    }
    out.push_back(c);
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c >= kEscapeBase && c < kEscapeBase + 0x80) {
    out->push_back(static_cast<char>(c - kEscapeBase + 0x80));
  } else {
    ::ptxserve::AppendUtf8(c, out);  // engine/tokenizer/utf8.h
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

size_t CodePointCount(std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  return ascii ? s.size() : DecodeUtf8(s).size();
}

bool PyIsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

char32_t PyUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  const locale_t loc = Utf8Locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t PyLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const locale_t loc = Utf8Locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, StripSide side) {
  const std::u32string u = DecodeUtf8(s);
  const std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : PyIsSpace(c);
  };
  size_t b = 0, e = u.size();
  if (side != StripSide::kRight) {
    while (b < e && strip(u[b])) ++b;
  }
  if (side != StripSide::kLeft) {
    while (e > b && strip(u[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(u).substr(b, e - b));
}

std::string PyUpperStr(std::string_view s) {
  std::u32string u = DecodeUtf8(s);
  for (char32_t& c : u) c = PyUpper(c);
  return EncodeUtf8(u);
}

std::string PyLowerStr(std::string_view s) {
  std::u32string u = DecodeUtf8(s);
  for (char32_t& c : u) c = PyLower(c);
  return EncodeUtf8(u);
}

std::string PyTitle(std::string_view s) {
  std::u32string u = DecodeUtf8(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    c = prev_cased ? PyLower(c) : PyUpper(c);
    prev_cased = IsCased(c);
  }
  return EncodeUtf8(u);
}

std::string PyCapitalize(std::string_view s) {
  std::u32string u = DecodeUtf8(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? PyUpper(u[i]) : PyLower(u[i]);
  return EncodeUtf8(u);
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string u = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && PyIsSpace(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = u.size();
      while (e > i && PyIsSpace(u[e - 1])) --e;
      out.push_back(EncodeUtf8(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !PyIsSpace(u[j])) ++j;
    out.push_back(EncodeUtf8(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (!IsLineBreak(u[i])) continue;
    out.push_back(EncodeUtf8(std::u32string_view(u).substr(start, i - start)));
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(EncodeUtf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    const std::u32string u = DecodeUtf8(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) out.append(repl), ++n;
      AppendUtf8(c, &out);
    }
    if (count < 0 || n < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos)).append(repl);
    pos = hit + old.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(CodePointCount(s.substr(0, hit)));
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos;
       pos = s.find(sub, pos + sub.size())) {
    ++n;
  }
  return n;
}

std::string PyRepr(std::string_view s) {
  const char quote =
      (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"'
                                                                                        : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == '\\' || c == static_cast<char32_t>(quote)) {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!PyIsPrintable(c)) {
      char buf[16];
      if (c >= kEscapeBase && c < kEscapeBase + 0x80) {
        std::snprintf(buf, sizeof(buf), "\\udc%02x", static_cast<unsigned>(c - 0xdc00));
      } else if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      AppendUtf8(c, &out);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace ptxserve::chat
