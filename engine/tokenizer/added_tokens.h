// Literal matching of added tokens (tokenizer.json "added_tokens"): leftmost match,
// longest at that position, honouring the lstrip / rstrip / single_word flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ptxserve::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  struct Piece {
    size_t begin;
    size_t end;
    int32_t id;  // -1: plain text to encode
  };

  // Adds a pattern (`text` as it appears in the input) for `token`. Empty text is ignored.
  void Add(std::string_view text, const AddedToken& token);
  bool empty() const { return patterns_.empty(); }

  // Cuts `text` into plain-text pieces and matched tokens, in order; empty text pieces
  // are dropped.
  void Split(std::string_view text, std::vector<Piece>* out) const;

 private:
  struct Pattern {
    AddedToken token;
    size_t length;
  };
  // The longest pattern starting at text[pos] (index into patterns_), or -1.
  int LongestAt(std::string_view text, size_t pos) const;

  std::vector<Pattern> patterns_;
  // Byte trie: node 0 is the root; key = node * 256 + byte.
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_{-1};  // per node: pattern index ending here, or -1
  bool first_byte_[256] = {};
};

}  // namespace ptxserve::tok
