// Aho-Corasick: a trie of the stop strings whose nodes are the prefixes of stop strings,
// each with a failure link to the node of its longest proper suffix that is also a prefix.
// The state after the text is the node of the longest tail of the text that is a prefix
// of a stop string, so it carries across pieces and tells what must be held back. Edges
// are kept sparse (sorted per node): a dense 256-wide table per node would cost a request
// at the limits (64 x 512 bytes) tens of megabytes.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <string_view>

namespace ptxserve {

StopMatcher::StopMatcher(std::span<const std::string> stops) {
  std::vector<std::string_view> sorted;
  for (const std::string& s : stops) {
    if (!s.empty()) sorted.emplace_back(s);
  }
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

  // The trie, inserted in sorted order: a string shares the previous one's path up to
  // their common prefix and branches off it on a larger byte, so every node gets its
  // children in ascending byte order.
  struct Edge {
    int32_t parent;
    uint8_t byte;
    int32_t child;
  };
  std::vector<Edge> edges;
  nodes_.emplace_back();
  std::vector<int32_t> path = {0};  // path[d]: the previous string's node at depth d
  std::string_view prev;
  for (std::string_view s : sorted) {
    const size_t common = static_cast<size_t>(
        std::mismatch(prev.begin(), prev.end(), s.begin(), s.end()).first - prev.begin());
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const auto child = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{.fail = 0, .depth = static_cast<uint32_t>(d + 1), .longest_hit = 0});
      edges.push_back(Edge{path[d], static_cast<uint8_t>(s[d]), child});
      path.push_back(child);
    }
    nodes_[path.back()].longest_hit = static_cast<uint32_t>(s.size());
    prev = s;
  }

  // Edges grouped by parent (a stable counting sort keeps each node's ascending order).
  edge_begin_.assign(nodes_.size() + 1, 0);
  for (const Edge& e : edges) ++edge_begin_[e.parent + 1];
  for (size_t u = 1; u < edge_begin_.size(); ++u) edge_begin_[u] += edge_begin_[u - 1];
  edge_byte_.resize(edges.size());
  edge_child_.resize(edges.size());
  std::vector<uint32_t> fill(edge_begin_.begin(), edge_begin_.end() - 1);
  for (const Edge& e : edges) {
    const uint32_t at = fill[e.parent]++;
    edge_byte_[at] = e.byte;
    edge_child_[at] = e.child;
  }
  for (uint32_t i = edge_begin_[0]; i < edge_begin_[1]; ++i)
    root_next_[edge_byte_[i]] = edge_child_[i];

  // Failure links breadth-first: a node's link is shallower than it, so is done before it.
  std::vector<int32_t> queue = {0};
  for (size_t head = 0; head < queue.size(); ++head) {
    const int32_t u = queue[head];
    for (uint32_t i = edge_begin_[u]; i < edge_begin_[u + 1]; ++i) {
      const int32_t v = edge_child_[i];
      Node& n = nodes_[v];
      n.fail = u == 0 ? 0 : Next(nodes_[u].fail, edge_byte_[i]);
      if (n.longest_hit == 0) n.longest_hit = nodes_[n.fail].longest_hit;
      queue.push_back(v);
    }
  }
}

int32_t StopMatcher::Child(int32_t node, uint8_t byte) const {
  const auto first = edge_byte_.begin() + edge_begin_[node];
  const auto last = edge_byte_.begin() + edge_begin_[node + 1];
  const auto it = std::lower_bound(first, last, byte);
  return it != last && *it == byte ? edge_child_[it - edge_byte_.begin()] : -1;
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
