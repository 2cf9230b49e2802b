// Hugging Face tokenizer.json (+ tokenizer_config.json): BPE with byte fallback and the
// Llama SentencePiece-style normalizer, or byte-level BPE (GPT-2 / Llama 3 / Qwen2).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptxserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDir(const std::string& dir);
  // The tokenizer of what `--model` names: FromDir for a directory, else (a path ending
  // in ".gguf") the file's tokenizer.ggml.* metadata (engine/tokenizer/gguf_vocab.h).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelPath(const std::string& path);
  // Same from the two texts (config may be empty); `origin` names them in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view config_json,
                                                             const std::string& origin);

  // Encodes UTF-8 text. Added/special tokens written literally in the text are matched.
  // Prepends BOS when add_special_tokens and the config's add_bos_token say so.
  // Invalid UTF-8 is InvalidArgument naming the byte offset.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special_tokens = true) const = 0;

  // Decodes ids to text; special tokens are dropped when skip_special_tokens.
  // Invalid UTF-8 produced by byte-fallback tokens is replaced by U+FFFD.
  virtual std::string Decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;

  // The raw bytes token `id` stands for in a decoded stream, before the decoder's
  // one-time "strip the leading space" step (see IncrementalDetokenizer). Empty for
  // special tokens when skip_special, and for ids outside the vocabulary.
  virtual std::string TokenBytes(int32_t id, bool skip_special_tokens = true) const = 0;
  // True when the decoder strips one leading space from the start of the text (Llama).
  virtual bool StripsLeadingSpace() const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  virtual bool IsSpecial(int32_t id) const = 0;
  // The token's string in the vocabulary ("" outside it).
  virtual std::string IdToToken(int32_t id) const = 0;
  // -1 when absent.
  virtual int32_t TokenToId(std::string_view token) const = 0;
};

// Streaming detokenizer: feed ids one at a time, get the text they complete. Never emits
// a partial UTF-8 sequence; bytes that can never complete become U+FFFD once a following
// byte proves them invalid, or at Flush(). Holds back at most one incomplete UTF-8
// sequence (3 bytes).
//
// The text of a continuation is Decode(prompt + generated) minus Decode(prompt): only the
// text as a whole loses the decoder's leading space (Llama/Mistral "Strip"), so a
// continuation's first token keeps its space unless no prompt id stood for any byte (BOS
// alone, skipped as special). One exception, chosen so that no character is lost or
// split: trailing bytes of the prompt that form an incomplete UTF-8 sequence (byte-fallback
// tokens) are carried into the continuation, where Decode(prompt) shows one U+FFFD for
// them. The continuation starts with the whole character when its first bytes complete
// it, with U+FFFD when they prove it invalid or at Flush(): the text is
// Decode(prompt + generated) minus Decode(prompt) without that trailing U+FFFD.
class IncrementalDetokenizer {
 public:
  // `prompt`: the ids the streamed text continues; empty for a text of its own. Reads
  // every prompt id once (O(prompt length)); keeps no reference to `prompt`.
  IncrementalDetokenizer(const Tokenizer& tok, std::span<const int32_t> prompt,
                         bool skip_special_tokens = true);

  // Returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // Returns whatever is pending, with incomplete sequences replaced by U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool at_start_ = true;  // no id so far, the prompt's included, stood for any byte
  std::string pending_;   // an incomplete UTF-8 sequence that later bytes may complete
};

// Returns the length of the longest prefix of `s` that is complete, valid UTF-8, and
// sets *invalid_at to the offset of the first invalid byte (or -1 when only an
// incomplete tail remains / everything is valid).
size_t Utf8ValidPrefix(std::string_view s, int64_t* invalid_at);

}  // namespace ptxserve
