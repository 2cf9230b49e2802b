// Stop-string semantics by brute force, what the stop matcher and the stop checker are
// compared with: std::string::find of every stop string over the whole text.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ptxserve {

// The earliest start of an occurrence of a stop string in `text` that ends after byte
// offset `ends_after`; std::string::npos when there is none.
inline size_t EarliestStopString(const std::vector<std::string>& stops, const std::string& text,
                                 size_t ends_after = 0) {
  size_t earliest = std::string::npos;
  for (const std::string& s : stops) {
    for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) {
      if (at + s.size() > ends_after) earliest = std::min(earliest, at);
    }
  }
  return earliest;
}

// The length of the longest tail of `text` that is a prefix of a stop string.
inline size_t LongestStopPrefixTail(const std::vector<std::string>& stops,
                                    const std::string& text) {
  size_t longest = 0;
  for (const std::string& s : stops) {
    for (size_t k = std::min(s.size(), text.size()); k > longest; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

}  // namespace ptxserve
