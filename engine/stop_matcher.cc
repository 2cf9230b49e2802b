// Aho-Corasick: a trie of the stop strings whose nodes are the prefixes of stop strings,
// each with a failure link to the node of its longest proper suffix that is also a prefix.
// The state after the text is the node of the longest tail of the text that is a prefix
// of a stop string, so it carries across pieces and tells what must be held back. Edges
// are kept sparse (each node's children side by side, found by a scan of their bytes): a
// dense 256-wide table per node would cost a request at the limits (64 x 512 bytes) tens
// of megabytes.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ptxserve {

StopMatcher::StopMatcher(std::span<const std::string> stops) {
  std::vector<std::string_view> sorted;
  size_t total = 0;
  for (const std::string& s : stops) {
    if (!s.empty()) sorted.emplace_back(s);
    total += s.size();
  }
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

  // The trie a depth at a time: the nodes of depth d + 1 are the distinct (d + 1)-byte
  // prefixes, met in sorted order, so a node's children are made one after the other.
  nodes_.reserve(total + 1);
  byte_.reserve(total + 1);
  child_begin_.reserve(total + 2);
  nodes_.emplace_back();
  byte_.push_back(0);
  child_begin_.push_back(-1);
  std::vector<size_t> active(sorted.size());  // the strings longer than d, in order
  for (size_t i = 0; i < active.size(); ++i) active[i] = i;
  std::vector<int32_t> at(sorted.size(), 0);  // each string's node at depth d
  for (uint32_t d = 0; !active.empty(); ++d) {
    int32_t parent = -1, child = 0;
    size_t kept = 0;
    for (const size_t i : active) {
      const auto byte = static_cast<uint8_t>(sorted[i][d]);
      if (at[i] != parent || byte != byte_[child]) {
        if (at[i] != parent) child_begin_[at[i]] = static_cast<int32_t>(nodes_.size());
        parent = at[i];
        child = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{.fail = 0, .depth = d + 1, .longest_hit = 0});
        byte_.push_back(byte);
        child_begin_.push_back(-1);
      }
      at[i] = child;
      if (sorted[i].size() == d + 1) {
        nodes_[child].longest_hit = d + 1;
      } else {
        active[kept++] = i;
      }
    }
    active.resize(kept);
  }
  // A childless node's (empty) range starts where the next node's children do.
  child_begin_.push_back(static_cast<int32_t>(nodes_.size()));
  for (size_t u = nodes_.size(); u-- > 0;) {
    if (child_begin_[u] < 0) child_begin_[u] = child_begin_[u + 1];
  }
  for (int32_t v = 1; v < child_begin_[1]; ++v) root_next_[byte_[v]] = v;

  // Failure links in node order: a node's link is shallower than it, so is done before it.
  for (int32_t u = 0; u < static_cast<int32_t>(nodes_.size()); ++u) {
    for (int32_t v = child_begin_[u]; v < child_begin_[u + 1]; ++v) {
      Node& n = nodes_[v];
      n.fail = u == 0 ? 0 : Next(nodes_[u].fail, byte_[v]);
      if (n.longest_hit == 0) n.longest_hit = nodes_[n.fail].longest_hit;
    }
  }
}

int32_t StopMatcher::Child(int32_t node, uint8_t byte) const {
  // A node has at most 256 children and most have one: a vectorized scan beats bisection.
  const uint8_t* first = byte_.data() + child_begin_[node];
  const auto* hit = static_cast<const uint8_t*>(
      std::memchr(first, byte, static_cast<size_t>(child_begin_[node + 1] - child_begin_[node])));
  return hit == nullptr ? -1 : static_cast<int32_t>(hit - byte_.data());
}

int32_t StopMatcher::Next(int32_t node, uint8_t byte) const {
  // Every failure step makes the state shallower and every byte deepens it by at most one,
  // so over a text the failure steps are at most its length.
  while (node != 0) {
    if (const int32_t child = Child(node, byte); child >= 0) return child;
    node = nodes_[node].fail;
  }
  return root_next_[byte];
}

size_t StopMatcher::Feed(std::string_view bytes) {
  size_t back = kNoMatch;
  for (size_t i = 0; i < bytes.size(); ++i) {
    state_ = Next(state_, static_cast<uint8_t>(bytes[i]));
    // The longest stop string ending here starts earliest of those ending here; a later
    // end may still start earlier, so every byte is looked at.
    if (const uint32_t hit = nodes_[state_].longest_hit; hit != 0) {
      const size_t from_end = bytes.size() - (i + 1) + hit;
      if (back == kNoMatch || from_end > back) back = from_end;
    }
  }
  return back;
}

}  // namespace ptxserve
