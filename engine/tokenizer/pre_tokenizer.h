// tokenizer.json "pre_tokenizer": Sequence, Split (string or regex pattern, every split
// behavior, invert), ByteLevel, Metaspace and Digits. Others are Unimplemented at load.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/regex.h"

namespace ptxserve::tok {

// The GPT-2 split pattern ByteLevel uses when "use_regex" is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  // `j` is the "pre_tokenizer" value, or nullptr for none (the text is one word).
  static absl::StatusOr<PreTokenizer> FromJson(const Json* j, std::string_view origin);

  // Splits one normalized segment into the words the model encodes separately, already
  // mapped into vocabulary space (ByteLevel characters, Metaspace "▁").
  // `at_text_start`: the segment begins the input (Metaspace prepend_scheme "first").
  absl::Status Split(std::string_view segment, bool at_text_start,
                     std::vector<std::string>* words) const;

  bool byte_level() const { return byte_level_; }
  bool metaspace() const { return metaspace_; }

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> re;  // Split by regex; ByteLevel with use_regex
    std::string literal;              // Split by string
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;  // Metaspace
  };
  struct Word {
    std::string text;
    bool first;  // begins the input
  };
  absl::Status Parse(const Json& j, std::string_view origin, const std::string& path);
  absl::Status ApplySplit(const Step& step, const Word& w, std::vector<Word>* out) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool metaspace_ = false;
};

}  // namespace ptxserve::tok
