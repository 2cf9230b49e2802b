// The Tokenizer implementation for Hugging Face tokenizer.json files (internal; use
// Tokenizer::FromDir / FromJson).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/special_tokens.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve::tok {

class HfTokenizer final : public Tokenizer {
 public:
  // Parses tokenizer.json (`tok`) and tokenizer_config.json (`config`, may be null).
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(const Json& tok, const Json* config,
                                                             const std::string& tok_origin,
                                                             const std::string& config_origin);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string TokenBytes(int32_t id, bool skip_special_tokens) const override;
  bool StripsLeadingSpace() const override { return decoder_.strips_leading_space(); }
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t bos_id() const override { return specials_.bos_id; }
  int32_t eos_id() const override { return specials_.eos_id; }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size() && special_[id] != 0;
  }
  std::string IdToToken(int32_t id) const override;
  int32_t TokenToId(std::string_view token) const override;

 private:
  HfTokenizer(BpeModel model, Normalizer normalizer, PreTokenizer pre, TokenDecoder decoder)
      : model_(std::move(model)),
        normalizer_(std::move(normalizer)),
        pre_(std::move(pre)),
        decoder_(std::move(decoder)) {}
  absl::Status LoadAddedTokens(const Json& tok, const Json* config, const std::string& tok_origin,
                               const std::string& config_origin);
  // Encodes one piece of input that holds no raw-matched added token.
  absl::Status EncodeSegment(std::string_view text, size_t offset, std::vector<int32_t>* ids) const;

  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_;
  TokenDecoder decoder_;
  AddedTokenMatcher raw_matcher_;         // matched in the input before normalization
  AddedTokenMatcher normalized_matcher_;  // matched in normalized text ("normalized": true)
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  absl::flat_hash_map<int32_t, std::string> added_tokens_;
  SpecialTokens specials_;
  std::vector<std::string> token_bytes_;  // per id, what it decodes to
  std::vector<uint8_t> special_;          // per id
};

}  // namespace ptxserve::tok
