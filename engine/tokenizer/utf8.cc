// UTF-8 validation and the streaming detokenizer, shared by every tokenizer type.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

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

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string bytes = tok_.TokenBytes(id, skip_special_);
  if (bytes.empty()) return {};
  if (at_start_) {
    at_start_ = false;
    if (tok_.StripsLeadingSpace() && bytes[0] == ' ') bytes.erase(0, 1);
  }
  pending_ += bytes;
  std::string out;
  while (true) {
    int64_t bad = -1;
    const size_t ok = Utf8ValidPrefix(pending_, &bad);
    out.append(pending_, 0, ok);
    pending_.erase(0, ok);
    if (bad < 0) break;
    // The byte at the front can never start a valid sequence: replace it and go on.
    out += kReplacement;
    pending_.erase(0, 1);
  }
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  if (!pending_.empty()) out += kReplacement;
  pending_.clear();
  return out;
}

}  // namespace ptxserve
