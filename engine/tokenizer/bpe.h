// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked
// merges, unk / byte fallback. Encodes one pre-tokenized word at a time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {

class BpeModel {
 public:
  // Parses the "model" object; `origin` names the file in errors.
  static absl::StatusOr<BpeModel> FromJson(const Json& model, std::string_view origin);

  // Appends the ids of `word` (valid UTF-8). A character without a vocabulary entry
  // becomes its <0xNN> byte tokens (byte_fallback), else unk; with neither it is an
  // InvalidArgument naming `offset` plus the character's position in the word.
  absl::Status EncodeWord(std::string_view word, size_t offset, std::vector<int32_t>* out) const;

  // -1 when absent.
  int32_t TokenToId(std::string_view token) const {
    auto it = vocab_.find(Sv(token));
    return it == vocab_.end() ? -1 : it->second;
  }
  // One past the largest id in the vocabulary.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The vocabulary string of `id` ("" for ids the vocabulary does not use).
  const std::string& IdToToken(int32_t id) const { return id_to_token_[id]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Applies the merges to `symbols` in rank order (ties: leftmost first).
  void MergeSymbols(std::vector<int32_t>* symbols) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids, -1 when absent
  bool all_bytes_ = false;               // every <0xNN> present
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace ptxserve::tok
