// A compiled PCRE2 pattern (UTF + Unicode properties), shareable across threads: the
// code is compiled (and JIT-compiled when available) once; match data is per call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ptxserve::tok {

class Regex {
 public:
  // Compiles `pattern`; errors name `where` and the offset in the pattern.
  static absl::StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern,
                                                              std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-empty, non-overlapping match [begin, end) of `s` (valid UTF-8),
  // left to right.
  absl::Status FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  std::string where_;
};

}  // namespace ptxserve::tok
