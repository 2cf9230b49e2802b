// tokenizer.json "normalizer": Sequence, Prepend, Replace (string or regex) and NFC
// (see nfc.cc for its scope). Any other normalizer is Unimplemented at load.
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

class Normalizer {
 public:
  // `j` is the "normalizer" value, or nullptr for none.
  static absl::StatusOr<Normalizer> FromJson(const Json* j, std::string_view origin);

  // Normalizes `s` in place; `offset` is where s starts in the caller's input (errors
  // name it). Fails only for NFC on text outside what nfc.cc can prove stable.
  absl::Status Apply(std::string* s, size_t offset) const;

  bool empty() const { return steps_.empty(); }
  // True for the Llama/SentencePiece normalizer (a Prepend of U+2581 "▁").
  bool PrependsMetaspace() const;

 private:
  enum class Kind { kPrepend, kReplace, kReplaceRegex, kNfc };
  struct Step {
    Kind kind;
    std::string a;  // Prepend: the text; Replace: the pattern
    std::string b;  // Replace: the content
    std::shared_ptr<const Regex> re;
  };
  absl::Status Parse(const Json& j, std::string_view origin, const std::string& path);

  std::vector<Step> steps_;
};

// True when code point c is certainly unchanged by NFC in any context that only holds
// such code points (NFC_Quick_Check=Yes, canonical combining class 0). Conservative:
// false for scripts with combining marks, whose NFC needs the Unicode tables.
bool NfcStable(char32_t c);

}  // namespace ptxserve::tok
