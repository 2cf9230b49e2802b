// Byte-level BPE (GPT-2 / Llama 3 / Qwen2 style) on a small hand-written tokenizer.json:
// 256 byte tokens (id = byte value), eleven merges, the Llama 3 split regex. The
// expected ids are worked out by hand in the comments (and agree with HF tokenizers).
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte -> character map, written out independently of the library's table.
std::string ByteChar(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Merges in rank order; the merged tokens get ids 256.. in this order:
//   256 "Ġt"  257 "he"  258 "Ġthe"  259 "ll"  260 "llo"  261 "He"  262 "Hello"
//   263 "'s"  264 "12"  265 "Ġw"    266 "or"
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"Ġ", "t"},    {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"ll", "o"}, {"H", "e"},
    {"He", "llo"}, {"'", "s"}, {"1", "2"},   {"Ġ", "w"}, {"o", "r"}};

Json HandWritten(bool string_merges, Json pre_tokenizer) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  Json merges = Json::array();
  for (const auto& [a, b] : kMerges) {
    vocab[a + b] = static_cast<int>(vocab.size());
    merges.push_back(string_merges ? Json(a + " " + b) : Json::array({a, b}));
  }
  Json j;
  j["version"] = "1.0";
  j["added_tokens"] = Json::array({{{"id", 267},
                                    {"content", "<|endoftext|>"},
                                    {"special", true},
                                    {"normalized", false},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"single_word", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = std::move(pre_tokenizer);
  j["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  j["model"] = {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                {"merges", merges}};
  return j;
}

Json Llama3PreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers", Json::array({{{"type", "Split"},
                                          {"pattern", {{"Regex", kLlama3Pattern}}},
                                          {"behavior", "Isolated"},
                                          {"invert", false}},
                                         {{"type", "ByteLevel"},
                                          {"add_prefix_space", false},
                                          {"trim_offsets", true},
                                          {"use_regex", false}}})}};
}

std::unique_ptr<Tokenizer> Load(const Json& j, const std::string& config = "") {
  auto tok = Tokenizer::FromJson(j.dump(), config, "hand-written");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<int32_t> Enc(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ByteLevelTokenizerTest, HandWorkedIds) {
  for (const bool string_merges : {true, false}) {
    auto tok = Load(HandWritten(string_merges, Llama3PreTokenizer()));
    ASSERT_NE(tok, nullptr);
    // Split: "Hello" " the" " world" "'s" " " "123" "456" "!".
    // "Hello": l+l (rank 3) -> ll+o (4) -> H+e (5) -> He+llo (6) = 262.
    // " the": Ġ+t (0) -> h+e (1) -> Ġt+he (2) = 258.  " world": Ġw or l d.
    // "'s" = 263; " " = 32; "123" -> 12 3; "456" has no merges; "!" = 33.
    EXPECT_THAT(Enc(*tok, "Hello the world's 123456!"),
                ElementsAre(262, 258, 265, 266, 'l', 'd', 263, 32, 264, '3', '4', '5', '6', '!'));
    // Equal ranks merge leftmost first: "lll" is ll + l, not l + ll.
    EXPECT_THAT(Enc(*tok, "lll"), ElementsAre(259, 'l'));
    // (?i:'s) splits "'S" off, and no merge covers the upper case.
    EXPECT_THAT(Enc(*tok, "IT'S"), ElementsAre('I', 'T', '\'', 'S'));
    // The special token is matched in the text.
    EXPECT_THAT(Enc(*tok, "Hi<|endoftext|>"), ElementsAre('H', 'i', 267));
    // é = C3 A9, each byte one token.
    EXPECT_THAT(Enc(*tok, "\xC3\xA9"), ElementsAre(0xC3, 0xA9));
    // "  the\n\nthe  ": " " | " the" | "\n\n" | "the" | "  ".
    EXPECT_THAT(Enc(*tok, "  the\n\nthe  "), ElementsAre(32, 258, 10, 10, 't', 257, 32, 32));
  }
}

TEST(ByteLevelTokenizerTest, Metadata) {
  auto tok = Load(HandWritten(true, Llama3PreTokenizer()));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 268);
  EXPECT_EQ(tok->bos_id(), -1);  // no template BOS, no config
  EXPECT_FALSE(tok->StripsLeadingSpace());
  EXPECT_EQ(tok->TokenBytes(258), " the");   // "Ġthe"
  EXPECT_EQ(tok->TokenBytes(0xC3), "\xC3");  // one raw byte
  EXPECT_EQ(tok->TokenBytes(267), "");
  EXPECT_EQ(tok->TokenBytes(267, false), "<|endoftext|>");
  EXPECT_EQ(tok->IdToToken(258), "\xC4\xA0the");
  EXPECT_TRUE(tok->IsSpecial(267));
}

TEST(ByteLevelTokenizerTest, RoundTripsAndStreams) {
  auto tok = Load(HandWritten(false, Llama3PreTokenizer()));
  ASSERT_NE(tok, nullptr);
  for (const std::string text : {
           "Hello the world's 123456!",
           "Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
           "e\xCC\x81 tabs\tand\r\nnewlines   ",
           " leading space",
           "",
       }) {
    const std::vector<int32_t> ids = Enc(*tok, text);
    EXPECT_EQ(tok->Decode(ids), text);
    testing::ExpectStreamingMatchesDecode(*tok, ids);
  }
  const std::vector<int32_t> with_special = Enc(*tok, "Hi<|endoftext|>there");
  EXPECT_EQ(tok->Decode(with_special), "Hithere");
  EXPECT_EQ(tok->Decode(with_special, false), "Hi<|endoftext|>there");
}

TEST(ByteLevelTokenizerTest, Gpt2DefaultRegexViaByteLevel) {
  // GPT-2 keeps the regex inside ByteLevel (use_regex) and puts the space before words.
  auto tok = Load(
      HandWritten(true, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}));
  ASSERT_NE(tok, nullptr);
  // GPT-2's pattern differs from Llama 3's on digits: " 123456" is one piece.
  EXPECT_THAT(Enc(*tok, "Hello the 123456"), ElementsAre(262, 258, 32, 264, '3', '4', '5', '6'));
  EXPECT_EQ(tok->Decode(Enc(*tok, "it's 12 words")), "it's 12 words");
}

TEST(ByteLevelTokenizerTest, TemplateAndConfigAddBos) {
  Json j = HandWritten(true, Llama3PreTokenizer());
  j["added_tokens"].push_back({{"id", 268}, {"content", "<|begin_of_text|>"}, {"special", true}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {268}}}}}}};
  auto tok = Load(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), 268);
  EXPECT_THAT(Enc(*tok, "Hi"), ElementsAre(268, 'H', 'i'));
  EXPECT_THAT(*tok->Encode("Hi", /*add_special_tokens=*/false), ElementsAre('H', 'i'));

  // tokenizer_config.json overrides the template, with tokens as {"content": ...}.
  auto off = Load(j, R"({"add_bos_token": false, "eos_token": {"content": "<|endoftext|>"}})");
  ASSERT_NE(off, nullptr);
  EXPECT_THAT(Enc(*off, "Hi"), ElementsAre('H', 'i'));
  EXPECT_EQ(off->eos_id(), 267);
  auto eos = Load(j, R"({"add_eos_token": true, "eos_token": "<|endoftext|>"})");
  ASSERT_NE(eos, nullptr);
  EXPECT_THAT(Enc(*eos, "Hi"), ElementsAre(268, 'H', 'i', 267));
}

}  // namespace
}  // namespace ptxserve
