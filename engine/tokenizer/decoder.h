// tokenizer.json "decoder", reduced to what streaming needs: a per-token byte mapping
// plus whether the fused text loses one leading space. Supported: Sequence, Replace
// (string), ByteFallback, Fuse, Strip (one leading space after Fuse), ByteLevel,
// Metaspace, and no decoder (tokens joined by spaces). Others are Unimplemented.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {

class TokenDecoder {
 public:
  // `j` is the "decoder" value, or nullptr for none.
  static absl::StatusOr<TokenDecoder> FromJson(const Json* j, std::string_view origin);

  // The bytes one token contributes to the decoded stream.
  std::string TokenBytes(std::string_view token) const;
  // Whether the decoded text loses one leading space.
  bool strips_leading_space() const { return strip_leading_space_; }

 private:
  enum class Kind { kReplace, kByteFallback, kByteLevel, kPrefixSpace };
  struct Step {
    Kind kind;
    std::string from;
    std::string to;
  };
  absl::Status Parse(const Json& j, std::string_view origin, const std::string& path);

  std::vector<Step> steps_;
  bool fused_ = false;
  bool strip_leading_space_ = false;
};

}  // namespace ptxserve::tok
