// UTF-8 validation and the streaming detokenizer, shared by every tokenizer type.
#include "engine/tokenizer/utf8.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

// Length of the UTF-8 sequence starting with lead byte c, 0 when c cannot lead.
int SequenceLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Whether byte b may follow lead byte `lead` at position i (1-based) of its sequence.
bool ValidContinuation(unsigned char lead, int i, unsigned char b) {
  if ((b & 0xC0) != 0x80) return false;
  if (i != 1) return true;
  // Second byte ranges exclude overlongs, surrogates and code points past U+10FFFF.
  if (lead == 0xE0) return b >= 0xA0;
  if (lead == 0xED) return b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90;
  if (lead == 0xF4) return b <= 0x8F;
  return true;
}

}  // namespace

size_t Utf8ValidPrefix(std::string_view s, int64_t* invalid_at) {
  *invalid_at = -1;
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    const int len = SequenceLength(lead);
    if (len == 0) {
      *invalid_at = static_cast<int64_t>(i);
      return i;
    }
    for (int k = 1; k < len; ++k) {
      if (i + k >= s.size()) return i;  // incomplete tail
      if (!ValidContinuation(lead, k, static_cast<unsigned char>(s[i + k]))) {
        *invalid_at = static_cast<int64_t>(i);
        return i;
      }
    }
    i += len;
  }
  return i;
}

size_t Utf8MaximalSubpart(std::string_view s, size_t at) {
  const auto lead = static_cast<unsigned char>(s[at]);
  const int len = SequenceLength(lead);
  if (len <= 1) return 1;
  size_t n = 1;
  while (n < static_cast<size_t>(len) && at + n < s.size() &&
         ValidContinuation(lead, static_cast<int>(n), static_cast<unsigned char>(s[at + n]))) {
    ++n;
  }
  return n;
}

void AppendRepairedUtf8(std::string_view s, std::string* out) {
  while (!s.empty()) {
    int64_t bad = -1;
    const size_t ok = Utf8ValidPrefix(s, &bad);
    out->append(s.data(), ok);
    s.remove_prefix(ok);
    if (s.empty()) break;
    // Either an invalid subpart at the front or a truncated tail: both become one U+FFFD.
    out->append(kUtf8Replacement);
    s.remove_prefix(bad < 0 ? s.size() : Utf8MaximalSubpart(s, 0));
  }
}

char32_t DecodeUtf8(std::string_view s, size_t* pos) {
  const auto c = static_cast<unsigned char>(s[*pos]);
  const size_t len = Utf8CharLength(c);
  char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < len && *pos + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + k]) & 0x3F);
  }
  *pos += len;
  return cp;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok,
                                               std::span<const int32_t> prompt,
                                               bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {
  // The prompt's text is the client's already; what it leaves behind is what matters:
  // whether the text has started (then the decoder's one leading-space strip is spent)
  // and an incomplete UTF-8 tail the continuation may complete. Pushing the prompt
  // through the same path as generated ids gets both exactly as Decode would.
  for (const int32_t id : prompt) Push(id);
}

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string bytes = tok_.TokenBytes(id, skip_special_);
  if (bytes.empty()) return {};
  if (at_start_) {
    at_start_ = false;
    if (tok_.StripsLeadingSpace() && bytes[0] == ' ') bytes.erase(0, 1);
  }
  pending_ += bytes;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    int64_t bad = -1;
    const std::string_view rest = std::string_view(pending_).substr(pos);
    const size_t ok = Utf8ValidPrefix(rest, &bad);
    out.append(rest.data(), ok);
    pos += ok;
    if (bad < 0) break;  // done, or an incomplete tail that later bytes may complete
    // The subpart at the front can never complete: one U+FFFD for it, as Decode does.
    out += kUtf8Replacement;
    pos += Utf8MaximalSubpart(pending_, pos);
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  // What is left is one truncated (but so far valid) sequence: one maximal subpart.
  std::string out;
  if (!pending_.empty()) out += kUtf8Replacement;
  pending_.clear();
  return out;
}

}  // namespace ptxserve
