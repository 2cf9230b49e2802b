// Helpers shared by the tokenizer tests (and by the stop-checker, engine and server tests
// that check streamed text against the batch decode).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve::testing {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

inline const std::string kTinyStoriesDir =
    std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The shared TinyStories tokenizer with <0x00>..<0xFF> added to the vocabulary (ids
// 2048..2303): the shipped vocabulary has no byte tokens, so byte fallback ends in <unk>.
// nullptr (with a test failure) when it does not load.
inline std::unique_ptr<Tokenizer> TinyStoriesWithByteTokens() {
  nlohmann::json j = nlohmann::json::parse(ReadFile(kTinyStoriesDir + "/tokenizer.json"));
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    j["model"]["vocab"][name] = 2048 + b;
  }
  auto tok = Tokenizer::FromJson(j.dump(), ReadFile(kTinyStoriesDir + "/tokenizer_config.json"),
                                 "tinystories+bytes");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

// The id of byte token <0xNN> in TinyStoriesWithByteTokens().
inline int32_t ByteToken(uint8_t b) { return 2048 + b; }

// Streams `ids` through an IncrementalDetokenizer as the continuation of `prompt`,
// checking that every chunk is complete UTF-8, and returns the concatenated chunks plus
// Flush().
inline std::string StreamDecode(const Tokenizer& tok, std::span<const int32_t> prompt,
                                std::span<const int32_t> ids, bool skip_special = true) {
  IncrementalDetokenizer detok(tok, prompt, skip_special);
  std::string out;
  for (const int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    int64_t bad = 0;
    EXPECT_EQ(Utf8ValidPrefix(chunk, &bad), chunk.size()) << "partial UTF-8 emitted for id " << id;
    EXPECT_EQ(bad, -1);
    out += chunk;
  }
  out += detok.Flush();
  return out;
}

// Whether the bytes `ids` stand for end inside a UTF-8 sequence that more bytes could
// still complete (Decode shows it as one U+FFFD).
inline bool EndsInsideACharacter(const Tokenizer& tok, std::span<const int32_t> ids,
                                 bool skip_special) {
  std::string bytes;
  for (const int32_t id : ids) bytes += tok.TokenBytes(id, skip_special);
  std::string_view rest = bytes;
  while (!rest.empty()) {
    int64_t bad = -1;
    rest.remove_prefix(Utf8ValidPrefix(rest, &bad));
    if (bad < 0) return !rest.empty();
    rest.remove_prefix(1);  // past the invalid byte; UTF-8 resynchronizes on a lead byte
  }
  return false;
}

// The text streaming `generated` after `prompt` must give: Decode(prompt + generated)
// minus Decode(prompt). When the prompt ends inside a character, Decode(prompt) ends with
// the U+FFFD for it and those bytes belong to the continuation (tokenizer.h): the text is
// then what follows Decode(prompt) without that U+FFFD.
inline std::string ExpectedContinuation(const Tokenizer& tok, std::span<const int32_t> prompt,
                                        std::span<const int32_t> generated,
                                        bool skip_special = true) {
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string whole = tok.Decode(all, skip_special);
  std::string head = tok.Decode(prompt, skip_special);
  if (EndsInsideACharacter(tok, prompt, skip_special)) {
    EXPECT_TRUE(head.ends_with(kReplacementChar)) << head;
    head.resize(head.size() - std::min(head.size(), kReplacementChar.size()));
  }
  EXPECT_TRUE(whole.starts_with(head))
      << "Decode(prompt) = \"" << head << "\" is not a prefix of \"" << whole << "\"";
  return whole.substr(std::min(head.size(), whole.size()));
}

// For every split of every prefix of `ids` into prompt + continuation, streaming the
// continuation gives ExpectedContinuation; with an empty prompt that is Decode's text.
inline void ExpectStreamingMatchesDecode(const Tokenizer& tok, std::span<const int32_t> ids) {
  for (size_t k = 0; k <= ids.size(); ++k) {
    const auto upto = ids.first(k);
    for (const bool skip : {true, false}) {
      ASSERT_EQ(StreamDecode(tok, {}, upto, skip), tok.Decode(upto, skip))
          << "prefix of " << k << " ids, skip_special=" << skip;
      for (size_t j = 1; j <= k; ++j) {
        ASSERT_EQ(StreamDecode(tok, upto.first(j), upto.subspan(j), skip),
                  ExpectedContinuation(tok, upto.first(j), upto.subspan(j), skip))
            << "ids [" << j << ", " << k << ") after a prompt of " << j
            << " ids, skip_special=" << skip;
      }
    }
  }
}

}  // namespace ptxserve::testing
