// Python str semantics over UTF-8 text: chat templates index, slice, strip and
// case-map message content the way CPython does, which counts code points, not bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve::chat {

// Code points of `s`. Invalid bytes decode to U+DC80+byte (Python's surrogateescape),
// so EncodeUtf8(DecodeUtf8(s)) == s for any input.
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
void AppendUtf8(char32_t c, std::string* out);
size_t CodePointCount(std::string_view s);

bool PyIsSpace(char32_t c);  // str.isspace for one code point
char32_t PyUpper(char32_t c);
char32_t PyLower(char32_t c);

enum class StripSide { kBoth, kLeft, kRight };
// str.strip/lstrip/rstrip; `chars` nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, StripSide side);
std::string PyUpperStr(std::string_view s);
std::string PyLowerStr(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()
// str.split: sep nullopt splits on whitespace runs; maxsplit < 0 means no limit.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PySplitLines(std::string_view s);  // str.splitlines()
std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count);
// str.find / str.count over code-point positions; -1 when absent.
int64_t PyFind(std::string_view s, std::string_view sub);
int64_t PyCount(std::string_view s, std::string_view sub);
// Python repr() of a str: quotes and escapes as CPython prints them inside lists and dicts.
std::string PyRepr(std::string_view s);

}  // namespace ptxserve::chat
