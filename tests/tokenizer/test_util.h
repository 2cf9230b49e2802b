// Helpers shared by the tokenizer tests.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace ptxserve::testing {

// Streams `ids` through an IncrementalDetokenizer, checking that every chunk is complete
// UTF-8, and returns the concatenated chunks plus Flush().
inline std::string StreamDecode(const Tokenizer& tok, std::span<const int32_t> ids,
                                bool skip_special = true) {
  IncrementalDetokenizer detok(tok, skip_special);
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

// For every prefix of `ids`, streaming gives exactly Decode's text.
inline void ExpectStreamingMatchesDecode(const Tokenizer& tok, std::span<const int32_t> ids) {
  for (size_t k = 0; k <= ids.size(); ++k) {
    const auto prefix = ids.first(k);
    for (const bool skip : {true, false}) {
      ASSERT_EQ(StreamDecode(tok, prefix, skip), tok.Decode(prefix, skip))
          << "prefix of " << k << " ids, skip_special=" << skip;
    }
  }
}

}  // namespace ptxserve::testing
