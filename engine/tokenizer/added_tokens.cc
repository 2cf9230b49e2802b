#include "engine/tokenizer/added_tokens.h"

namespace ptxserve::tok {
namespace {

bool IsSpace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
// Word characters for single_word: ASCII alphanumerics, '_' and any non-ASCII byte
// (letters of other scripts).
bool IsWordByte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c >= 0x80;
}

}  // namespace

void AddedTokenMatcher::Add(std::string_view text, const AddedToken& token) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char c : text) {
    const uint64_t key = static_cast<uint64_t>(node) * 256 + c;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      const auto child = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(-1);
      it = edges_.emplace(key, child).first;
    }
    node = it->second;
  }
  first_byte_[static_cast<unsigned char>(text[0])] = true;
  if (terminal_[node] >= 0) {
    patterns_[terminal_[node]].token = token;  // the same text again: the last one wins
    return;
  }
  terminal_[node] = static_cast<int32_t>(patterns_.size());
  patterns_.push_back(Pattern{token, text.size()});
}

int AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  int best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(static_cast<uint64_t>(node) * 256 + static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = terminal_[node];
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Piece>* out) const {
  size_t text_start = 0;  // start of the pending plain-text piece
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const int p = LongestAt(text, pos);
    if (p < 0) {
      ++pos;
      continue;
    }
    const Pattern& pat = patterns_[p];
    size_t begin = pos;
    size_t end = pos + pat.length;
    if (pat.token.single_word) {
      const bool word_before = begin > 0 && IsWordByte(static_cast<unsigned char>(text[begin - 1]));
      const bool word_after =
          end < text.size() && IsWordByte(static_cast<unsigned char>(text[end]));
      if (word_before || word_after) {
        pos = end;  // matches do not overlap, so the scan resumes after this one
        continue;
      }
    }
    if (pat.token.lstrip) {
      while (begin > text_start && IsSpace(static_cast<unsigned char>(text[begin - 1]))) --begin;
    }
    if (pat.token.rstrip) {
      while (end < text.size() && IsSpace(static_cast<unsigned char>(text[end]))) ++end;
    }
    if (begin > text_start) out->push_back(Piece{text_start, begin, -1});
    out->push_back(Piece{begin, end, pat.token.id});
    text_start = pos = end;
  }
  if (text_start < text.size()) out->push_back(Piece{text_start, text.size(), -1});
}

}  // namespace ptxserve::tok
