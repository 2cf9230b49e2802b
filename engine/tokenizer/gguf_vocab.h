// Tokenizers stored in GGUF metadata (tokenizer.ggml.*), read by turning them into the
// tokenizer.json / tokenizer_config.json structures HfTokenizer already builds from, and
// written from a Hugging Face directory by `ptxserve quantize`.
//   "llama": SentencePiece-style BPE — tokens, scores, token_type (1 normal, 2 unknown,
//            3 control, 4 user-defined, 5 unused, 6 byte <0xNN>), merges optional (else
//            derived from the scores), add_space_prefix (default true).
//   "gpt2":  byte-level BPE — tokens and merges, pre-tokenizer regex chosen by
//            tokenizer.ggml.pre ("default"/"gpt2", "llama-bpe"/"llama3", "qwen2").
// Added tokens (control, user-defined) are matched in the raw text, as llama.cpp does,
// except the ids listed in kNormalizedTokensKey: files written from a Hugging Face
// tokenizer whose added tokens are "normalized" (matched in normalized text) keep that.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/json_util.h"

namespace ptxserve::tok {

// token_type values (llama.cpp's llama_token_type).
enum GgufTokenType : int {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

// A ptxserve key (llama.cpp ignores it): u32 ids of added tokens matched after
// normalization, so a Hugging Face tokenizer round-trips exactly.
inline constexpr char kNormalizedTokensKey[] = "tokenizer.ptxserve.normalized_token_ids";

struct TokenizerJson {
  Json tokenizer;  // as tokenizer.json
  Json config;     // as tokenizer_config.json
};

// The tokenizer of `file`. Unimplemented naming an unsupported tokenizer.ggml.model or
// tokenizer.ggml.pre; InvalidArgument naming the file and key for malformed metadata.
absl::StatusOr<TokenizerJson> TokenizerJsonFromGguf(const GgufFile& file);

// Merges "a b" for a vocabulary without them, as Hugging Face converts SentencePiece
// models: every split of a normal token into two vocabulary tokens, ranked by the whole
// token's score (higher first; ties by token id, then by the split's position).
std::vector<std::string> MergesFromScores(const std::vector<std::string>& tokens,
                                          const std::vector<double>& scores,
                                          const std::vector<int>& types);

// Adds tokenizer.ggml.* (and tokenizer.chat_template) for the tokenizer of Hugging Face
// directory `dir` (tokenizer.json, optional tokenizer_config.json) to `w`. Scores are
// -rank of the merge that first produces each token, so merges derived from them rank
// as the written merges do. Unimplemented for tokenizers GGUF's llama/gpt2 kinds cannot
// express, naming what.
absl::Status AddTokenizerToGguf(const std::string& dir, GgufWriter* w);

}  // namespace ptxserve::tok
