// Finds a request's stop strings in its streamed text, fed a piece at a time (Aho-Corasick
// over the bytes). The engine thread feeds every new token's text to it, so its cost per
// byte must not depend on how many stop strings a request carries: one automaton step per
// byte (amortized), whatever their number and length.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve {

class StopMatcher {
 public:
  static constexpr size_t kNoMatch = static_cast<size_t>(-1);

  // Builds the automaton once (time and memory linear in the total bytes of `stops`).
  // Empty strings are ignored (ValidateStoppingCriteria refuses them); duplicates are fine.
  explicit StopMatcher(std::span<const std::string> stops);

  // True when there is no stop string to look for.
  bool empty() const { return nodes_.size() == 1; }

  // Feeds the next bytes of the text. When a stop string ends inside `bytes`, returns how
  // far before the end of the text fed so far the earliest-starting of those matches
  // begins (it may begin in bytes fed earlier); otherwise kNoMatch.
  size_t Feed(std::string_view bytes);

  // The length of the longest tail of the text fed so far that is a prefix of a stop
  // string: a proper prefix unless the last Feed found a match. No stop string can begin
  // before that tail.
  size_t PartialLength() const { return nodes_[state_].depth; }

  // Forgets the text fed so far: matches may only begin in what is fed next.
  void Reset() { state_ = 0; }

 private:
  // A trie node: the prefix of one or more stop strings spelled by the path to it.
  struct Node {
    int32_t fail = 0;          // the node of its longest proper suffix that is in the trie
    uint32_t depth = 0;        // its length
    uint32_t longest_hit = 0;  // the longest stop string that is a suffix of it; 0: none
  };

  // The node the text moves to from `node` on `byte`: its child on that byte, or its
  // failure chain's.
  int32_t Next(int32_t node, uint8_t byte) const;
  int32_t Child(int32_t node, uint8_t byte) const;

  // Nodes in breadth-first order, and within a depth in the order of their strings, so
  // that a node's children are consecutive: node u's children are
  // [child_begin_[u], child_begin_[u + 1]); byte_[v] is the byte on the edge into v.
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<int32_t> child_begin_;
  std::vector<uint8_t> byte_;
  std::array<int32_t, 256> root_next_{};  // Next(root, byte), the most frequent step
  int32_t state_ = 0;
};

}  // namespace ptxserve
