// Tokenizers through GGUF metadata: the shared TinyStories tokenizer.json written as
// tokenizer.ggml.* and read back encodes and decodes exactly as the original, with the
// written merges and with merges derived from the scores.
#include "engine/tokenizer/gguf_vocab.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;

const std::string kTinyStories = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";

const std::vector<std::string> kTexts = {
    "Once upon a time, there was a little girl named Lily.",
    "  two leading spaces and  double  spaces ",
    "lines\nwith\n\nnewlines\r\n and tabs\t.",
    "unicode: caf\xC3\xA9 \xE2\x82\xAC 100, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E, emoji "
    "\xF0\x9F\x98\x80!",
    "<|start_story|>Once there was a cat.<|end_story|>",
    "a <|end_story|> in the middle <unk> and <|start_story|>",
    "",
    " ",
    "x",
};

// Writes `edit`-ed tokenizer metadata for TinyStories to a GGUF and loads it.
template <typename Edit>
absl::StatusOr<std::unique_ptr<Tokenizer>> ThroughGguf(Edit edit) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  if (absl::Status s = tok::AddTokenizerToGguf(kTinyStories, &w); !s.ok()) return s;
  edit(w);
  const std::string path = ::testing::TempDir() + "/tokenizer-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".gguf";
  if (absl::Status s = w.Write(path); !s.ok()) return s;
  auto t = Tokenizer::FromModelPath(path);
  std::filesystem::remove(path);
  return t;
}

class GgufVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTinyStories + "/tokenizer.json")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStories;
    }
    auto hf = Tokenizer::FromDir(kTinyStories);
    ASSERT_TRUE(hf.ok()) << hf.status();
    hf_ = *std::move(hf);
  }

  void ExpectSameAsHf(const Tokenizer& g) {
    EXPECT_EQ(g.vocab_size(), hf_->vocab_size());
    EXPECT_EQ(g.bos_id(), hf_->bos_id());
    EXPECT_EQ(g.eos_id(), hf_->eos_id());
    for (const std::string& text : kTexts) {
      for (bool specials : {true, false}) {
        auto want = hf_->Encode(text, specials);
        auto got = g.Encode(text, specials);
        ASSERT_TRUE(want.ok() && got.ok()) << text;
        EXPECT_EQ(*got, *want) << "'" << text << "' specials " << specials;
        for (bool skip : {true, false}) {
          EXPECT_EQ(g.Decode(*want, skip), hf_->Decode(*want, skip)) << text;
        }
      }
    }
    for (int32_t id = 0; id < hf_->vocab_size(); ++id) {
      ASSERT_EQ(g.TokenBytes(id, false), hf_->TokenBytes(id, false)) << id;
      ASSERT_EQ(g.IsSpecial(id), hf_->IsSpecial(id)) << id;
    }
  }

  std::unique_ptr<Tokenizer> hf_;
};

TEST_F(GgufVocabTest, WrittenMergesReproduceTheTokenizer) {
  auto g = ThroughGguf([](GgufWriter&) {});
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectSameAsHf(**g);
}

TEST_F(GgufVocabTest, MergesDerivedFromScoresReproduceTheTokenizer) {
  auto derived = ThroughGguf([](GgufWriter& w) { w.Remove("tokenizer.ggml.merges"); });
  ASSERT_TRUE(derived.ok()) << derived.status();
  ExpectSameAsHf(**derived);
}

// A file without ptxserve's key (as llama.cpp writes them) matches control tokens in the
// raw text, wherever they stand.
TEST_F(GgufVocabTest, WithoutTheNormalizedKeySpecialsMatchInRawText) {
  auto g = ThroughGguf([](GgufWriter& w) { w.Remove(tok::kNormalizedTokensKey); });
  ASSERT_TRUE(g.ok()) << g.status();
  auto ids = (*g)->Encode("a cat.<|end_story|>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), 2);
  auto hf_ids = hf_->Encode("a cat.<|end_story|>", false);
  EXPECT_NE(hf_ids->back(), 2);  // tokenizer.json's "normalized": true tokens need a space
}

TEST_F(GgufVocabTest, UnknownTokenizerModelIsRefusedByName) {
  auto g =
      ThroughGguf([](GgufWriter& w) { w.Set("tokenizer.ggml.model", GgufValue::String("bert")); });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("tokenizer.ggml.model 'bert' is not supported"));
}

TEST_F(GgufVocabTest, UnknownPreTokenizerIsRefusedByName) {
  auto g = ThroughGguf([](GgufWriter& w) {
    w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
    w.Set("tokenizer.ggml.pre", GgufValue::String("deepseek-llm"));
  });
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("tokenizer.ggml.pre 'deepseek-llm'"));
}

TEST_F(GgufVocabTest, MismatchedScoresAreNamed) {
  auto g = ThroughGguf([](GgufWriter& w) {
    w.Set("tokenizer.ggml.scores", GgufValue::Array(GgufType::kF32, {GgufValue::F32(0)}));
  });
  EXPECT_THAT(g.status().message(),
              HasSubstr("metadata 'tokenizer.ggml.scores' has 1 entries for 2048 tokens"));
}

TEST(GgufVocabMergesTest, DerivedMergesRankByScore) {
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "bc", "abc", "<s>"};
  const std::vector<double> scores = {0, 0, 0, -1, -3, -2, 0};
  const std::vector<int> types = {1, 1, 1, 1, 1, 1, 3};
  EXPECT_EQ(tok::MergesFromScores(tokens, scores, types),
            (std::vector<std::string>{"a b", "a bc", "ab c", "b c"}));
}

}  // namespace
}  // namespace ptxserve
