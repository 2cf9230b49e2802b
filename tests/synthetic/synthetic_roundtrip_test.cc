// Synthetic models loaded back through the engine's own readers: LoadModel must see the
// preset's config and shapes, and Tokenizer::FromDir must round-trip English text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
namespace {

namespace fs = std::filesystem;

class ScopedDir {
 public:
  // The process id in the name: ctest runs each test case as its own process, in
  // parallel, and several checkouts may test on one machine.
  explicit ScopedDir(const std::string& name)
      : path_(fs::path(::testing::TempDir()) /
              ("synthetic_roundtrip_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
  }
  ~ScopedDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void ExpectShape(const Tensor& t, std::vector<int64_t> shape, DType dtype) {
  EXPECT_TRUE(t.present()) << t.name;
  EXPECT_EQ(t.shape, shape) << t.name;
  EXPECT_EQ(t.dtype, dtype) << t.name;
}

float ElementAsFloat(const Tensor& t, size_t i) {
  float f = 0;
  const auto* p = static_cast<const uint8_t*>(t.data) + i * DTypeSize(t.dtype);
  ConvertToFloat(t.dtype, p, 1, &f);
  return f;
}

float Rounded(float v, DType dtype) {
  uint8_t buf[4];
  float out;
  ConvertFromFloat(dtype, &v, 1, buf);
  ConvertToFloat(dtype, buf, 1, &out);
  return out;
}

void CheckLoads(const std::string& preset, DType dtype) {
  SCOPED_TRACE(preset + " " + std::string(DTypeName(dtype)));
  const SyntheticSpec spec = *SyntheticPreset(preset);
  const ModelConfig& want = spec.config;
  ScopedDir dir(preset + "_" + std::string(DTypeName(dtype)));
  ASSERT_TRUE(WriteSyntheticModel(dir.str(), spec, 11, dtype).ok());
  absl::StatusOr<Model> model = LoadModel(dir.str());
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.architecture, want.architecture);
  EXPECT_EQ(c.model_type, want.model_type);
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.hidden_size, want.hidden_size);
  EXPECT_EQ(c.intermediate_size, want.intermediate_size);
  EXPECT_EQ(c.num_layers, want.num_layers);
  EXPECT_EQ(c.num_heads, want.num_heads);
  EXPECT_EQ(c.num_kv_heads, want.num_kv_heads);
  EXPECT_EQ(c.head_dim, want.head_dim);
  EXPECT_EQ(c.max_position_embeddings, want.max_position_embeddings);
  EXPECT_EQ(c.rms_norm_eps, want.rms_norm_eps);
  EXPECT_EQ(c.rope_theta, want.rope_theta);
  EXPECT_EQ(c.rope_scaling.type, want.rope_scaling.type);
  EXPECT_EQ(c.tie_word_embeddings, want.tie_word_embeddings);
  EXPECT_EQ(c.attention_bias, false);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.torch_dtype, dtype);

  const ModelTensors& t = model->tensors;
  const int64_t h = want.hidden_size, inter = want.intermediate_size;
  ExpectShape(t.embed, {want.vocab_size, h}, dtype);
  ExpectShape(t.final_norm, {h}, dtype);
  ExpectShape(t.lm_head, {want.vocab_size, h}, dtype);
  EXPECT_EQ(t.lm_head.data == t.embed.data, want.tie_word_embeddings);
  ASSERT_EQ(static_cast<int64_t>(t.layers.size()), want.num_layers);
  for (const LayerTensors& l : t.layers) {
    ExpectShape(l.attn_norm, {h}, dtype);
    ExpectShape(l.mlp_norm, {h}, dtype);
    ExpectShape(l.wq, {want.q_dim(), h}, dtype);
    ExpectShape(l.wk, {want.kv_dim(), h}, dtype);
    ExpectShape(l.wv, {want.kv_dim(), h}, dtype);
    ExpectShape(l.wo, {h, want.q_dim()}, dtype);
    ExpectShape(l.w_gate, {inter, h}, dtype);
    ExpectShape(l.w_up, {inter, h}, dtype);
    ExpectShape(l.w_down, {h, inter}, dtype);
    EXPECT_FALSE(l.bq.present());
  }
  EXPECT_EQ(model->WeightBytes(), static_cast<size_t>(spec.ParameterCount()) * DTypeSize(dtype));
  // The loader hands out the generator's values (rounded to the file dtype).
  for (size_t i : {size_t{0}, size_t{1}, size_t{777}}) {
    EXPECT_EQ(ElementAsFloat(t.embed, i),
              Rounded(SyntheticWeight(11, "model.embed_tokens.weight", want, i), dtype));
    EXPECT_EQ(ElementAsFloat(t.layers.back().w_down, i),
              Rounded(SyntheticWeight(11,
                                      "model.layers." + std::to_string(want.num_layers - 1) +
                                          ".mlp.down_proj.weight",
                                      want, i),
                      dtype));
  }
}

TEST(SyntheticRoundTripTest, LoadModelSeesEveryPresetsShapes) {
  // The other gqa presets differ only in the KV head count; synthetic_model_test covers
  // their files.
  for (const char* preset : {"gqa2", "gqa8", "hd128"}) {
    CheckLoads(preset, DType::kBF16);
  }
  CheckLoads("tiny", DType::kF32);
  CheckLoads("tiny", DType::kF16);
  CheckLoads("tiny", DType::kBF16);
}

class SyntheticTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScopedDir("tokenizer");
    ASSERT_TRUE(WriteSyntheticModel(dir_->str(), *SyntheticPreset("tiny"), 1, DType::kF32).ok());
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromDir(dir_->str());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete dir_;
  }
  static ScopedDir* dir_;
  static Tokenizer* tok_;
};
ScopedDir* SyntheticTokenizerTest::dir_ = nullptr;
Tokenizer* SyntheticTokenizerTest::tok_ = nullptr;

TEST_F(SyntheticTokenizerTest, Specials) {
  ASSERT_NE(tok_, nullptr);
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->IsSpecial(0));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(300));
  EXPECT_TRUE(tok_->StripsLeadingSpace());
}

TEST_F(SyntheticTokenizerTest, EnglishRoundTripsAndUsesMerges) {
  ASSERT_NE(tok_, nullptr);
  for (const std::string text :
       {"Once upon a time, the baker made bread.", "Hello world", "  two  spaces ",
        "Line one\nLine two\n", "Numbers: 8 to 17, 2024!",
        "caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x99\x82"}) {
    absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_FALSE(ids->empty());
    EXPECT_EQ(ids->front(), 1) << text;
    for (int32_t id : *ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 512);
    }
    EXPECT_EQ(tok_->Decode(*ids), text);
  }
  // A special token written in the text is matched as that token, and dropped on decode.
  absl::StatusOr<std::vector<int32_t>> special = tok_->Encode("<s> is written literally");
  ASSERT_TRUE(special.ok());
  ASSERT_GE(special->size(), 3u);
  EXPECT_EQ((*special)[1], 1);
  EXPECT_EQ(tok_->Decode(*special), "is written literally");

  const int32_t the = tok_->TokenToId("\xE2\x96\x81the");
  ASSERT_GE(the, 354);
  absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode("the", /*add_special_tokens=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ::testing::ElementsAre(the));
  // Text the corpus covers is compressed well below one token per character.
  const std::string sentence = "the people of the town came to thank him";
  ids = tok_->Encode(sentence, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), sentence.size() / 2);
  // A newline has no character token: it goes through byte fallback to <0x0A>.
  ids = tok_->Encode("\n", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ::testing::Contains(tok_->TokenToId("<0x0A>")));
}

}  // namespace
}  // namespace ptxserve
