// The shared TinyStories model's tokenizer: Llama/SentencePiece-style BPE (Prepend "▁" +
// Replace " " -> "▁" normalizer, no pre-tokenizer, byte-fallback decoder). Expected ids
// were cross-checked against Hugging Face tokenizers 0.23.
#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kTinyStoriesDir;

class TinyStoriesTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(kTinyStoriesDir + "/tokenizer.json")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStoriesDir;
    }
    auto tok = Tokenizer::FromDir(kTinyStoriesDir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }

  std::unique_ptr<Tokenizer> WithByteTokens() { return testing::TinyStoriesWithByteTokens(); }

  std::vector<int32_t> Enc(const Tokenizer& t, const std::string& text, bool special = true) {
    auto ids = t.Encode(text, special);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TinyStoriesTokenizerTest, OnceUponATime) {
  EXPECT_THAT(Enc(*tok_, "Once upon a time"), ElementsAre(1, 80, 147, 201, 282, 57));
  EXPECT_THAT(Enc(*tok_, "Once upon a time", false), ElementsAre(80, 147, 201, 282, 57));
  EXPECT_EQ(tok_->IdToToken(282),
            "upon\xE2\x96\x81"
            "a\xE2\x96\x81tim");
  EXPECT_EQ(tok_->Decode(Enc(*tok_, "Once upon a time")), "Once upon a time");
}

TEST_F(TinyStoriesTokenizerTest, Metadata) {
  EXPECT_EQ(tok_->vocab_size(), 2048);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->IsSpecial(0));
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(80));
  EXPECT_EQ(tok_->TokenToId("<|end_story|>"), 2);
  EXPECT_EQ(tok_->TokenToId("\xE2\x96\x81"), 80);
  EXPECT_EQ(tok_->TokenToId("no such token"), -1);
  EXPECT_EQ(tok_->IdToToken(5000), "");
  EXPECT_TRUE(tok_->StripsLeadingSpace());
  EXPECT_EQ(tok_->TokenBytes(80), " ");  // "▁" is a space in the stream
  EXPECT_EQ(tok_->TokenBytes(1), "");    // special, skipped
  EXPECT_EQ(tok_->TokenBytes(1, false), "<|start_story|>");
  EXPECT_EQ(tok_->TokenBytes(-1), "");
}

TEST_F(TinyStoriesTokenizerTest, SpecialTokensInText) {
  // These added tokens are "normalized": they match in the normalized text, where a
  // preceding space (or the start of the text) became "▁" - as in the reference.
  EXPECT_THAT(Enc(*tok_, "Hello <|end_story|> world"),
              ElementsAre(1, 80, 1288, 67, 2, 80, 410, 555));
  EXPECT_THAT(Enc(*tok_, "<|start_story|>Once upon"), ElementsAre(1, 1, 147, 201, 189, 111));
  const std::vector<int32_t> ids = Enc(*tok_, "Hello <|end_story|> world");
  EXPECT_EQ(tok_->Decode(ids, /*skip_special_tokens=*/true), "Hello world");
  EXPECT_EQ(tok_->Decode(ids, /*skip_special_tokens=*/false),
            "<|start_story|> Hello<|end_story|> world");
}

TEST_F(TinyStoriesTokenizerTest, RoundTripsInVocabularyText) {
  for (const std::string text : {
           "Tom and Lily went to the park. They saw a big dog!\n\n\"Look,\" said Tom.",
           " leading space",
           "multiple   spaces  and trailing  ",
           "line one\nline two\n",
           "x",
           "",
       }) {
    EXPECT_EQ(tok_->Decode(Enc(*tok_, text)), text);
  }
}

TEST_F(TinyStoriesTokenizerTest, CharactersOutsideTheVocabularyBecomeOneUnk) {
  // No <0xNN> tokens in this vocabulary: byte fallback ends in <unk> (0), and fuse_unk
  // folds a run of unknown characters into one.
  EXPECT_THAT(Enc(*tok_, "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"),
              ElementsAre(1, 80, 295, 58, 0, 80, 0, 80, 0));
  EXPECT_THAT(Enc(*tok_, "b\tc", false), ElementsAre(80, 54, 0, 55));
}

TEST_F(TinyStoriesTokenizerTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  auto bad = tok_->Encode("abc\xC3(def");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("byte offset 3"));
  auto truncated = tok_->Encode("ab\xE2\x82");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr("byte offset 2"));
  auto surrogate = tok_->Encode("x\xED\xA0\x80");
  ASSERT_FALSE(surrogate.ok());
  EXPECT_THAT(surrogate.status().message(), HasSubstr("byte offset 1"));
}

TEST_F(TinyStoriesTokenizerTest, ByteFallbackRoundTripsMixedUnicode) {
  auto tok = WithByteTokens();
  ASSERT_NE(tok, nullptr);
  // Reference ids: "😀" is F0 9F 98 80 -> <0xF0><0x9F><0x98><0x80> = 2288 2207 2200 2176.
  EXPECT_THAT(Enc(*tok, "Emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD end"),
              ElementsAre(1, 80, 30, 605, 62, 2024, 2288, 2207, 2200, 2176, 2288, 2207, 2193, 2189,
                          2288, 2207, 2191, 2237, 80, 183));
  const std::vector<std::string> texts = {
      "Caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu, na\xC3\xAFve fa\xC3\xA7"
      "ade.",                                                           // accents
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE4\xB8\xAD\xE6\x96\x87",  // CJK
      "e\xCC\x81 combining a\xCC\x88",                                  // combining marks
      "Emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD end",     // 4-byte
      "tab\there\nnew line\r\n",
      "   three spaces",
      " leading",
      "trailing  ",
      "mixed: \xC3\x9Cn\xC3\xAF \xCE\x91\xCE\x92 \xD0\x9F\xD1\x80\xD0\xB8 \xF0\x9F\x98\x80\n\tend",
  };
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = Enc(*tok, text);
    EXPECT_EQ(tok->Decode(ids), text);
    testing::ExpectStreamingMatchesDecode(*tok, ids);
  }
}

TEST_F(TinyStoriesTokenizerTest, StreamingMatchesDecodeOnEveryPrefix) {
  std::vector<int32_t> ids = Enc(*tok_, "Once upon a time, there was a little girl named Lily.");
  ids.push_back(2);  // EOS
  ids.push_back(0);  // <unk>
  testing::ExpectStreamingMatchesDecode(*tok_, ids);
}

TEST_F(TinyStoriesTokenizerTest, AContinuationKeepsItsLeadingSpace) {
  // The decoder strips one leading space from the whole text ("▁The" -> "The"), not from
  // a continuation's first token.
  const std::vector<int32_t> prompt = Enc(*tok_, "The cat");
  const int32_t and_id = tok_->TokenToId("\u2581and\u2581");
  ASSERT_GE(and_id, 0);
  const std::vector<int32_t> generated = {and_id};
  EXPECT_EQ(testing::StreamDecode(*tok_, prompt, generated), " and ");
  std::vector<int32_t> all = prompt;
  all.push_back(and_id);
  EXPECT_EQ(tok_->Decode(all), "The cat and ");
  // Only BOS before it: the continuation is the start of the text.
  EXPECT_EQ(testing::StreamDecode(*tok_, std::vector<int32_t>{tok_->bos_id()}, generated), "and ");
}

TEST_F(TinyStoriesTokenizerTest, ACharacterSplitAcrossThePromptComesOutWhole) {
  auto tok = WithByteTokens();
  ASSERT_NE(tok, nullptr);
  // "日" is E6 97 A5: the prompt ends with <0xE6><0x97>, which Decode(prompt) shows as
  // one U+FFFD. The continuation starts with the whole character.
  std::vector<int32_t> prompt = Enc(*tok, "Hi");
  prompt.push_back(testing::ByteToken(0xE6));
  prompt.push_back(testing::ByteToken(0x97));
  EXPECT_EQ(tok->Decode(prompt), "Hi\xEF\xBF\xBD");
  const std::vector<int32_t> generated = {testing::ByteToken(0xA5), testing::ByteToken('!')};
  EXPECT_EQ(testing::StreamDecode(*tok, prompt, generated), "\xE6\x97\xA5!");
  EXPECT_EQ(testing::ExpectedContinuation(*tok, prompt, generated), "\xE6\x97\xA5!");
}

TEST_F(TinyStoriesTokenizerTest, InvalidByteTokensDecodeToReplacementCharacters) {
  auto tok = WithByteTokens();
  ASSERT_NE(tok, nullptr);
  // <0xE2><0x82> then "a": a truncated sequence, then an unpaired continuation byte.
  const std::vector<int32_t> ids = {2048 + 0xE2, 2048 + 0x82, 53, 2048 + 0x80, 2048 + 0xF0};
  EXPECT_EQ(tok->Decode(ids),
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD\xEF\xBF\xBD");
  testing::ExpectStreamingMatchesDecode(*tok, ids);
}

TEST_F(TinyStoriesTokenizerTest, LongWordIsFast) {
  // No pre-tokenizer: the whole text is one BPE word, so merging must not be quadratic.
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "the little dog ran to the park. ";
  const std::vector<int32_t> ids = Enc(*tok_, text);
  EXPECT_GT(ids.size(), 2000u);
  EXPECT_EQ(tok_->Decode(ids), text);
}

}  // namespace
}  // namespace ptxserve
