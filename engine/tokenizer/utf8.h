// UTF-8 helpers shared by the tokenizer implementation (internal to engine/tokenizer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ptxserve {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

// Length (>= 1) of the maximal subpart at s[at]: the longest prefix that could still
// begin a valid sequence. One U+FFFD replaces exactly this many bytes (Unicode 15, 3.9).
size_t Utf8MaximalSubpart(std::string_view s, size_t at);

// Appends `s` to *out with every ill-formed subpart (including a truncated tail)
// replaced by one U+FFFD.
void AppendRepairedUtf8(std::string_view s, std::string* out);

// Decodes the code point starting at s[*pos] (which must be valid UTF-8) and advances
// *pos past it.
char32_t DecodeUtf8(std::string_view s, size_t* pos);

// Appends the UTF-8 encoding of code point c.
void AppendUtf8(char32_t c, std::string* out);

// Byte length of the UTF-8 sequence led by c (1 for continuation/invalid bytes).
inline size_t Utf8CharLength(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

}  // namespace ptxserve
