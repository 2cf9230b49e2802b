// Which special tokens Encode adds, and the BOS / EOS ids: from the tokenizer.json
// "post_processor" (TemplateProcessing, ByteLevel, Sequence) and tokenizer_config.json
// (add_bos_token, add_eos_token, bos_token, eos_token).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {

struct SpecialTokens {
  std::vector<int32_t> prefix;  // before the text when add_special_tokens
  std::vector<int32_t> suffix;  // after it
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// `post_processor` / `config` may be nullptr (absent). `sentencepiece_kind`: the Llama
// normalizer or Metaspace, whose BOS is added by default. `token_to_id` returns -1 for
// unknown tokens.
absl::StatusOr<SpecialTokens> ResolveSpecialTokens(
    const Json* post_processor, const Json* config, bool sentencepiece_kind,
    const std::function<int32_t(std::string_view)>& token_to_id, std::string_view tok_origin,
    std::string_view config_origin);

}  // namespace ptxserve::tok
