// Utf8ValidPrefix edge cases and the streaming detokenizer's replacement policy.
#include <map>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

struct PrefixCase {
  std::string bytes;
  size_t valid;
  int64_t invalid_at;
};

TEST(Utf8ValidPrefixTest, EdgeCases) {
  const std::vector<PrefixCase> cases = {
      {"", 0, -1},
      {"abc", 3, -1},
      {"\xC3\xA9", 2, -1},          // é
      {"\xE2\x82\xAC", 3, -1},      // €
      {"\xF0\x9F\x98\x80", 4, -1},  // U+1F600
      {"\xF4\x8F\xBF\xBF", 4, -1},  // U+10FFFF, the largest code point
      {"\xED\x9F\xBF", 3, -1},      // U+D7FF, just below the surrogates
      {"a\xC0\xAF", 1, 1},          // overlong '/' (2 bytes)
      {"\xC1\xBF", 0, 0},           // overlong (2 bytes)
      {"\xE0\x80\xAF", 0, 0},       // overlong (3 bytes)
      {"\xE0\x9F\xBF", 0, 0},       // overlong U+07FF
      {"\xF0\x80\x80\xAF", 0, 0},   // overlong (4 bytes)
      {"\xF0\x8F\xBF\xBF", 0, 0},   // overlong U+FFFF
      {"ab\xED\xA0\x80", 2, 2},     // U+D800, a surrogate
      {"\xED\xBF\xBF", 0, 0},       // U+DFFF
      {"\xF4\x90\x80\x80", 0, 0},   // U+110000
      {"\xF5\x80\x80\x80", 0, 0},   // lead byte past U+10FFFF
      {"\xFF", 0, 0},               // never valid
      {"x\x80", 1, 1},              // lone continuation byte
      {"a\xE2\x82", 1, -1},         // truncated 3-byte sequence
      {"a\xF0\x9F\x98", 1, -1},     // truncated 4-byte sequence
      {"\xC3", 0, -1},              // truncated 2-byte sequence
      {"\xE2\x82"
       "A",
       0, 0},  // truncated, then proven invalid
      {"ok\xF0\x9F\x98\x80\xE2\x82\xAC!", 10, -1},
  };
  for (const PrefixCase& c : cases) {
    int64_t invalid_at = 7;
    EXPECT_EQ(Utf8ValidPrefix(c.bytes, &invalid_at), c.valid) << ::testing::PrintToString(c.bytes);
    EXPECT_EQ(invalid_at, c.invalid_at) << ::testing::PrintToString(c.bytes);
  }
}

// A tokenizer whose ids stand for fixed byte strings, to drive the detokenizer directly.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::map<int32_t, std::string> bytes, bool strip = false)
      : bytes_(std::move(bytes)), strip_(strip) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override {
    return absl::UnimplementedError("fake");
  }
  std::string Decode(std::span<const int32_t>, bool) const override { return {}; }
  std::string TokenBytes(int32_t id, bool skip_special) const override {
    if (skip_special && id == 0) return {};
    auto it = bytes_.find(id);
    return it == bytes_.end() ? std::string() : it->second;
  }
  bool StripsLeadingSpace() const override { return strip_; }
  int32_t vocab_size() const override { return 100; }
  int32_t bos_id() const override { return 0; }
  int32_t eos_id() const override { return -1; }
  bool IsSpecial(int32_t id) const override { return id == 0; }
  std::string IdToToken(int32_t) const override { return {}; }
  int32_t TokenToId(std::string_view) const override { return -1; }

 private:
  std::map<int32_t, std::string> bytes_;
  bool strip_;
};

TEST(IncrementalDetokenizerTest, WaitsForCompleteSequences) {
  // U+1F600 split over four tokens, then 'A'.
  FakeTokenizer tok({{1, "\xF0"}, {2, "\x9F"}, {3, "\x98"}, {4, "\x80"}, {5, "A"}});
  IncrementalDetokenizer d(tok, {});
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.Push(2), "");
  EXPECT_EQ(d.Push(3), "");
  EXPECT_EQ(d.Push(4), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.Push(5), "A");
  EXPECT_EQ(d.Flush(), "");
}

TEST(IncrementalDetokenizerTest, ReplacesEachMaximalSubpartOnce) {
  // "\xE2\x82" can only be completed by a continuation byte: 'A' proves it invalid, and
  // the two bytes become one U+FFFD (as Python and Rust's lossy decoders do).
  FakeTokenizer tok({{1, "\xE2\x82"}, {2, "A"}, {3, "\xFF"}, {4, "\xC3"}});
  IncrementalDetokenizer d(tok, {});
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.Push(2),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(d.Push(3), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(d.Push(4), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // truncated tail at the end
  EXPECT_EQ(d.Flush(), "");
}

TEST(IncrementalDetokenizerTest, StripsOneLeadingSpaceAfterSkippedSpecials) {
  FakeTokenizer tok({{0, "<s>"}, {1, " "}, {2, " Hi"}}, /*strip=*/true);
  IncrementalDetokenizer skip(tok, {});
  EXPECT_EQ(skip.Push(0), "");  // special, skipped: the stream has not started
  EXPECT_EQ(skip.Push(2), "Hi");
  EXPECT_EQ(skip.Push(2), " Hi");
  IncrementalDetokenizer keep(tok, {}, /*skip_special_tokens=*/false);
  EXPECT_EQ(keep.Push(0), "<s>");
  EXPECT_EQ(keep.Push(1), " ");
}

TEST(IncrementalDetokenizerTest, AContinuationKeepsItsLeadingSpace) {
  // Decode(prompt + generated) minus Decode(prompt): the decoder strips the space of the
  // text's first token only, and that token is in the prompt.
  FakeTokenizer tok({{0, "<s>"}, {1, " The"}, {2, " cat"}, {3, " and"}}, /*strip=*/true);
  const std::vector<int32_t> prompt = {0, 1, 2};
  IncrementalDetokenizer d(tok, prompt);
  EXPECT_EQ(d.Push(3), " and");
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(testing::StreamDecode(tok, prompt, std::vector<int32_t>{3, 2}), " and cat");
  // The same ids without the prompt are a text of their own: the space goes.
  EXPECT_EQ(testing::StreamDecode(tok, {}, std::vector<int32_t>{3, 2}), "and cat");
}

TEST(IncrementalDetokenizerTest, APromptWithoutTextLeavesTheStripToTheContinuation) {
  FakeTokenizer tok({{0, "<s>"}, {1, " Once"}}, /*strip=*/true);
  const std::vector<int32_t> bos = {0};
  EXPECT_EQ(testing::StreamDecode(tok, bos, std::vector<int32_t>{1, 1}), "Once Once");
  // Kept as text, "<s>" starts the text: nothing is stripped after it.
  EXPECT_EQ(testing::StreamDecode(tok, bos, std::vector<int32_t>{1}, /*skip_special=*/false),
            " Once");
}

TEST(IncrementalDetokenizerTest, DecodersThatDoNotStripIgnoreThePromptsText) {
  FakeTokenizer tok({{1, " a"}, {2, "b"}});
  EXPECT_EQ(testing::StreamDecode(tok, {}, std::vector<int32_t>{1, 2}), " ab");
  EXPECT_EQ(testing::StreamDecode(tok, std::vector<int32_t>{2}, std::vector<int32_t>{1, 2}), " ab");
}

TEST(IncrementalDetokenizerTest, ACharacterSplitAcrossThePromptComesOutWhole) {
  // "€" is E2 82 AC. The prompt ends with E2 82: Decode(prompt) is "x" and U+FFFD, and
  // Decode(prompt + generated) "x€ and". The continuation gets the whole character rather
  // than the orphaned AC byte (which would be one more U+FFFD).
  FakeTokenizer tok({{1, "x"}, {2, "\xE2"}, {3, "\x82"}, {4, "\xAC"}, {5, " and"}, {6, "A"}},
                    /*strip=*/true);
  const std::vector<int32_t> prompt = {1, 2, 3};
  IncrementalDetokenizer d(tok, prompt);
  EXPECT_EQ(d.Push(4), "\xE2\x82\xAC");
  EXPECT_EQ(d.Push(5), " and");
  // Bytes that prove the prompt's tail invalid: its U+FFFD is the continuation's.
  EXPECT_EQ(testing::StreamDecode(tok, prompt, std::vector<int32_t>{6}),
            "\xEF\xBF\xBD"
            "A");
  // Nothing completes it: U+FFFD at Flush, as Decode(prompt + generated) ends.
  EXPECT_EQ(testing::StreamDecode(tok, prompt, std::vector<int32_t>{}), "\xEF\xBF\xBD");
  // Only the tail is carried: what the prompt completed stays the prompt's.
  EXPECT_EQ(testing::StreamDecode(tok, std::vector<int32_t>{2, 3, 4}, std::vector<int32_t>{5}),
            " and");
}

}  // namespace
}  // namespace ptxserve
