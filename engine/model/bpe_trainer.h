// A tiny deterministic byte-pair-encoding trainer, and the Llama-style (SentencePiece
// BPE with byte fallback) tokenizer.json it yields. Used to give synthetic models a real
// tokenizer; it is not meant for large corpora (each merge rescans all words).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ptxserve {

struct BpeTrainResult {
  // Tokens created by merges, in creation order; distinct, none equal to an input symbol.
  std::vector<std::string> new_tokens;
  // Merges in rank order. A merge whose result already existed is kept (the tokenizer
  // needs it to reach that token through another split) but adds no new token.
  std::vector<std::pair<std::string, std::string>> merges;
};

// Trains merges over `words` (each a sequence of initial symbols; repeated words count
// once per occurrence) until `max_new_tokens` new tokens exist or no adjacent pair is
// left. Each step merges the most frequent pair; ties go to the bytewise-smallest
// (left, right), so the result depends only on the input.
BpeTrainResult TrainBpe(const std::vector<std::vector<std::string>>& words, size_t max_new_tokens);

// The fixed part of a Llama-style vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>, "▁" and
// the printable ASCII characters '!'..'~', in id order.
std::vector<std::string> LlamaBaseVocab();

// Applies the Llama normalizer (prepend "▁", spaces become "▁") and splits the result
// into words that start at each "▁"; characters outside `alphabet` end a word and are
// dropped (the tokenizer reaches them through byte fallback). Symbols are UTF-8 chars.
std::vector<std::vector<std::string>> SplitLlamaWords(std::string_view text,
                                                      const std::vector<std::string>& alphabet);

// tokenizer.json text for a Llama-style BPE tokenizer (byte fallback, Prepend/Replace
// normalizer, no pre-tokenizer, Replace/ByteFallback/Fuse/Strip decoder) with exactly
// `vocab_size` entries: the base vocabulary, merges trained on `corpus`, then "<extra_N>"
// padding that no text encodes to. InvalidArgument when vocab_size is smaller than the
// base vocabulary.
absl::StatusOr<std::string> LlamaTokenizerJson(std::string_view corpus, int64_t vocab_size);

// tokenizer_config.json text matching LlamaTokenizerJson: BOS "<s>" added, EOS "</s>".
std::string LlamaTokenizerConfigJson(int64_t model_max_length);

// special_tokens_map.json text matching LlamaTokenizerJson.
std::string LlamaSpecialTokensMapJson();

}  // namespace ptxserve
