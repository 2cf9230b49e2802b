// Malformed or unsupported tokenizer.json files are errors naming the field.
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json Minimal() {
  return Json::parse(R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3},
              "merges": ["a b"], "unk_token": "<unk>"},
    "normalizer": null, "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Fuse"}
  })");
}

absl::Status LoadStatus(const std::string& tokenizer_json, const std::string& config = "") {
  return Tokenizer::FromJson(tokenizer_json, config, "test").status();
}

void ExpectError(const Json& j, absl::StatusCode code, const std::string& field) {
  const absl::Status s = LoadStatus(j.dump());
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(s.message(), HasSubstr(field)) << s;
  EXPECT_THAT(s.message(), HasSubstr("test/tokenizer.json")) << s;
}

TEST(TokenizerErrorsTest, MinimalLoadsAndEncodes) {
  auto tok = Tokenizer::FromJson(Minimal().dump(), "", "test");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("abbxa");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ::testing::ElementsAre(2, 1, 3, 0));  // ab b <unk> a
  EXPECT_EQ((*tok)->Decode(*ids, false), "abb<unk>a");
}

TEST(TokenizerErrorsTest, BadJson) {
  const absl::Status s = LoadStatus("{\"model\": ");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("test/tokenizer.json: not valid JSON"));
  const absl::Status c = LoadStatus(Minimal().dump(), "[1, 2");
  EXPECT_EQ(c.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.message(), HasSubstr("tokenizer_config.json"));
}

TEST(TokenizerErrorsTest, MalformedModel) {
  Json j = Minimal();
  j["model"].erase("vocab");
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model.vocab");
  j = Minimal();
  j["model"]["merges"] = {"a c"};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model.merges[0]");
  j = Minimal();
  j["model"]["merges"] = {"b a"};  // "ba" is not in the vocabulary
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model.merges[0]");
  j = Minimal();
  j["model"]["merges"] = {"a b", "ab"};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model.merges[1]");
  j = Minimal();
  j["model"]["vocab"]["c"] = "three";
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model.vocab[\"c\"]");
  j = Minimal();
  j.erase("model");
  ExpectError(j, absl::StatusCode::kInvalidArgument, "model");
  j = Minimal();
  j["added_tokens"] = {{{"content", "<x>"}}};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "added_tokens[0].id");
  j = Minimal();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  ExpectError(j, absl::StatusCode::kInvalidArgument, "pre_tokenizer.pattern.Regex");
}

TEST(TokenizerErrorsTest, UnsupportedComponents) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    Json j = Minimal();
    j["model"]["type"] = type;
    ExpectError(j, absl::StatusCode::kUnimplemented, "model.type");
  }
  Json j = Minimal();
  j["normalizer"] = {{"type", "NFKC"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "normalizer.type");
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "normalizer.normalizers[1].type");
  j = Minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "pre_tokenizer.type");
  j = Minimal();
  j["decoder"] = {{"type", "CTC"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "decoder.type");
  j = Minimal();
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};  // no Fuse
  ExpectError(j, absl::StatusCode::kUnimplemented, "decoder");
  j = Minimal();
  j["post_processor"] = {{"type", "BertProcessing"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "post_processor.type");
  j = Minimal();
  j["model"]["dropout"] = 0.1;
  ExpectError(j, absl::StatusCode::kUnimplemented, "model.dropout");
}

TEST(TokenizerErrorsTest, NfcOutsideItsProvenRangeIsUnimplementedAtEncode) {
  Json j = Minimal();
  j["normalizer"] = {{"type", "NFC"}};
  auto tok = Tokenizer::FromJson(j.dump(), "", "test");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE((*tok)->Encode("ab").ok());
  auto s = (*tok)->Encode("ae\xCC\x81");  // e + combining acute: NFC would compose it
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.status().message(), HasSubstr("U+0301 at byte offset 2"));
}

TEST(TokenizerErrorsTest, NoUnkNoByteFallbackIsAnError) {
  Json j = Minimal();
  j["model"]["unk_token"] = nullptr;
  auto tok = Tokenizer::FromJson(j.dump(), "", "test");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto s = (*tok)->Encode("abz");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("byte offset 2"));
}

TEST(TokenizerErrorsTest, ConfigErrors) {
  const absl::Status s = LoadStatus(Minimal().dump(), R"({"add_bos_token": true})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer_config.json: bos_token"));
  const absl::Status t = LoadStatus(Minimal().dump(), R"({"add_bos_token": "yes"})");
  EXPECT_THAT(t.message(), HasSubstr("add_bos_token"));
}

TEST(TokenizerErrorsTest, MissingDirectory) {
  auto tok = Tokenizer::FromDir("/nonexistent/dir");
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("/nonexistent/dir/tokenizer.json"));
}

}  // namespace
}  // namespace ptxserve
