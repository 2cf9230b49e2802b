// Synthetic models: presets, file layout (safetensors, config.json, tokenizer files),
// determinism, dtypes and value statistics; plus the safetensors writer and BPE trainer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/model/bpe_trainer.h"
#include "engine/model/safetensors_writer.h"
#include "engine/model/synthetic.h"

namespace ptxserve {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under the test temp dir, removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = fs::path(::testing::TempDir()) /
            (std::string("synthetic_") +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

struct Safetensors {
  nlohmann::json header;
  std::string file;
  size_t data_start = 0;
  size_t header_len = 0;

  const char* Data(const std::string& name) const {
    return file.data() + data_start + header[name]["data_offsets"][0].get<size_t>();
  }
};

// Parses a safetensors file independently of the engine's loader and checks the layout
// invariants: header length, offsets contiguous from 0 and covering the data exactly.
Safetensors ParseSafetensors(const fs::path& p) {
  Safetensors st;
  st.file = ReadFile(p);
  EXPECT_GE(st.file.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>(st.file[i])) << (8 * i);
  st.header_len = n;
  EXPECT_EQ(n % 8, 0u) << "header not padded to 8 bytes";
  EXPECT_LE(8 + n, st.file.size());
  st.header = nlohmann::json::parse(st.file.substr(8, n));
  st.data_start = 8 + n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : st.header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = t["dtype"];
    const size_t elt = dtype == "F32" ? 4 : 2;
    int64_t numel = 1;
    for (int64_t d : t["shape"]) numel *= d;
    const uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    EXPECT_EQ(end - begin, numel * elt) << name;
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t expect = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, expect) << "offsets not contiguous";
    expect = e;
  }
  EXPECT_EQ(st.data_start + expect, st.file.size());
  return st;
}

// Tensor name -> shape the HF Llama layout requires for `c`.
std::map<std::string, std::vector<int64_t>> ExpectedTensors(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> m;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  m["model.embed_tokens.weight"] = {c.vocab_size, h};
  m["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) m["lm_head.weight"] = {c.vocab_size, h};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m[p + "input_layernorm.weight"] = {h};
    m[p + "post_attention_layernorm.weight"] = {h};
    m[p + "self_attn.q_proj.weight"] = {c.num_heads * c.head_dim, h};
    m[p + "self_attn.k_proj.weight"] = {c.num_kv_heads * c.head_dim, h};
    m[p + "self_attn.v_proj.weight"] = {c.num_kv_heads * c.head_dim, h};
    m[p + "self_attn.o_proj.weight"] = {h, c.num_heads * c.head_dim};
    m[p + "mlp.gate_proj.weight"] = {inter, h};
    m[p + "mlp.up_proj.weight"] = {inter, h};
    m[p + "mlp.down_proj.weight"] = {h, inter};
  }
  return m;
}

void CheckTokenizerFiles(const fs::path& dir, int64_t vocab_size) {
  const nlohmann::json tok = nlohmann::json::parse(ReadFile(dir / "tokenizer.json"));
  const auto& model = tok["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["byte_fallback"], true);
  EXPECT_EQ(model["unk_token"], "<unk>");
  const auto& vocab = model["vocab"];
  ASSERT_EQ(static_cast<int64_t>(vocab.size()), vocab_size);
  std::set<int64_t> ids;
  for (const auto& [token, id] : vocab.items()) ids.insert(id.get<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(ids.size()), vocab_size) << "duplicate ids";
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), vocab_size - 1);
  EXPECT_EQ(vocab["<unk>"], 0);
  EXPECT_EQ(vocab["<s>"], 1);
  EXPECT_EQ(vocab["</s>"], 2);
  EXPECT_EQ(vocab["<0x00>"], 3);
  EXPECT_EQ(vocab["<0x0A>"], 13);  // Llama's newline byte token id
  EXPECT_EQ(vocab["<0xFF>"], 258);
  EXPECT_EQ(vocab["\xE2\x96\x81"], 259);
  EXPECT_EQ(vocab["!"], 260);
  EXPECT_EQ(vocab["~"], 353);
  ASSERT_GT(model["merges"].size(), 100u);
  for (const auto& m : model["merges"]) {
    const std::string merge = m;
    const size_t sp = merge.find(' ');
    ASSERT_NE(sp, std::string::npos) << merge;
    const std::string a = merge.substr(0, sp), b = merge.substr(sp + 1);
    EXPECT_TRUE(vocab.contains(a)) << merge;
    EXPECT_TRUE(vocab.contains(b)) << merge;
    EXPECT_TRUE(vocab.contains(a + b)) << merge;
    EXPECT_EQ(b.find("<"), std::string::npos) << merge;
  }
  ASSERT_EQ(tok["added_tokens"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tok["added_tokens"][i]["id"], i);
    EXPECT_EQ(tok["added_tokens"][i]["special"], true);
  }
  EXPECT_EQ(tok["normalizer"]["type"], "Sequence");
  EXPECT_EQ(tok["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_EQ(tok["normalizer"]["normalizers"][1]["pattern"]["String"], " ");
  EXPECT_TRUE(tok["pre_tokenizer"].is_null());
  ASSERT_EQ(tok["decoder"]["decoders"].size(), 4u);
  EXPECT_EQ(tok["decoder"]["decoders"][3]["type"], "Strip");
  EXPECT_EQ(tok["post_processor"]["special_tokens"]["<s>"]["ids"], nlohmann::json::array({1}));

  const nlohmann::json cfg = nlohmann::json::parse(ReadFile(dir / "tokenizer_config.json"));
  EXPECT_EQ(cfg["add_bos_token"], true);
  EXPECT_EQ(cfg["add_eos_token"], false);
  EXPECT_EQ(cfg["bos_token"], "<s>");
  EXPECT_EQ(cfg["eos_token"], "</s>");
  EXPECT_EQ(cfg["added_tokens_decoder"]["2"]["content"], "</s>");
}

TEST(SyntheticPresetTest, NamesAndLookup) {
  EXPECT_THAT(SyntheticPresetNames(),
              ElementsAre("tiny", "gqa1", "gqa2", "gqa4", "gqa8", "hd128", "15m", "llama-3.2-1b"));
  for (const std::string& name : SyntheticPresetNames()) {
    absl::StatusOr<SyntheticSpec> spec = SyntheticPreset(name);
    ASSERT_TRUE(spec.ok()) << name;
    EXPECT_EQ(spec->name, name);
    const ModelConfig& c = spec->config;
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.num_heads % c.num_kv_heads, 0) << name;
    EXPECT_EQ(c.bos_token_id, 1);
    EXPECT_EQ(c.eos_token_id, 2);
  }
  absl::StatusOr<SyntheticSpec> bad = SyntheticPreset("huge");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tiny"));
}

TEST(SyntheticPresetTest, ShapesOfNamedPresets) {
  const ModelConfig tiny = SyntheticPreset("tiny")->config;
  EXPECT_EQ(tiny.hidden_size, 64);
  EXPECT_EQ(tiny.num_layers, 2);
  EXPECT_EQ(tiny.num_heads, 4);
  EXPECT_EQ(tiny.num_kv_heads, 2);
  EXPECT_EQ(tiny.intermediate_size, 176);
  EXPECT_EQ(tiny.vocab_size, 512);
  EXPECT_EQ(tiny.max_position_embeddings, 2048);
  EXPECT_TRUE(tiny.tie_word_embeddings);

  const std::pair<const char*, int64_t> groups[] = {
      {"gqa1", 1}, {"gqa2", 2}, {"gqa4", 4}, {"gqa8", 8}};
  for (const auto& [name, group] : groups) {
    const ModelConfig c = SyntheticPreset(name)->config;
    EXPECT_EQ(c.head_dim, 64) << name;
    EXPECT_EQ(c.num_heads, 8) << name;
    EXPECT_EQ(c.gqa_group(), group) << name;
  }
  EXPECT_EQ(SyntheticPreset("hd128")->config.head_dim, 128);

  const SyntheticSpec m15 = *SyntheticPreset("15m");
  EXPECT_EQ(m15.config.hidden_size, 288);
  EXPECT_EQ(m15.config.num_layers, 6);
  EXPECT_EQ(m15.config.vocab_size, 32000);
  EXPECT_EQ(m15.ParameterCount(), 15191712);

  const SyntheticSpec l1b = *SyntheticPreset("llama-3.2-1b");
  const ModelConfig& c = l1b.config;
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  // Meta's published count for Llama 3.2 1B (tied embeddings): 1,235,814,400.
  EXPECT_EQ(l1b.ParameterCount(), 1235814400);
}

TEST(SyntheticModelTest, EverySmallPresetWritesAConsistentDirectory) {
  for (const std::string name : {"tiny", "gqa1", "gqa2", "gqa4", "gqa8", "hd128"}) {
    SCOPED_TRACE(name);
    const SyntheticSpec spec = *SyntheticPreset(name);
    const ModelConfig& c = spec.config;
    TempDir dir(name);
    ASSERT_TRUE(WriteSyntheticModel(dir.str(), spec, 1, DType::kBF16).ok());
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                          "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
      EXPECT_TRUE(fs::exists(dir.path() / f)) << f;
    }
    EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.tmp"));

    const Safetensors st = ParseSafetensors(dir.path() / "model.safetensors");
    const auto expected = ExpectedTensors(c);
    std::map<std::string, std::vector<int64_t>> got;
    int64_t params = 0;
    for (const auto& [tname, t] : st.header.items()) {
      if (tname == "__metadata__") continue;
      EXPECT_EQ(t["dtype"], "BF16") << tname;
      got[tname] = t["shape"].get<std::vector<int64_t>>();
      int64_t n = 1;
      for (int64_t d : got[tname]) n *= d;
      params += n;
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(params, spec.ParameterCount());
    EXPECT_EQ(st.header["__metadata__"]["format"], "pt");

    const nlohmann::json cfg = nlohmann::json::parse(ReadFile(dir.path() / "config.json"));
    EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(cfg["model_type"], "llama");
    EXPECT_EQ(cfg["hidden_size"], c.hidden_size);
    EXPECT_EQ(cfg["intermediate_size"], c.intermediate_size);
    EXPECT_EQ(cfg["num_hidden_layers"], c.num_layers);
    EXPECT_EQ(cfg["num_attention_heads"], c.num_heads);
    EXPECT_EQ(cfg["num_key_value_heads"], c.num_kv_heads);
    EXPECT_EQ(cfg["head_dim"], c.head_dim);
    EXPECT_EQ(cfg["vocab_size"], c.vocab_size);
    EXPECT_EQ(cfg["max_position_embeddings"], c.max_position_embeddings);
    EXPECT_EQ(cfg["rms_norm_eps"], c.rms_norm_eps);
    EXPECT_EQ(cfg["rope_theta"], c.rope_theta);
    EXPECT_TRUE(cfg["rope_scaling"].is_null());
    EXPECT_EQ(cfg["tie_word_embeddings"], c.tie_word_embeddings);
    EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
    EXPECT_EQ(cfg["bos_token_id"], 1);
    EXPECT_EQ(cfg["eos_token_id"], 2);
    EXPECT_EQ(cfg["hidden_act"], "silu");
    EXPECT_EQ(cfg["attention_bias"], false);

    CheckTokenizerFiles(dir.path(), c.vocab_size);
  }
}

TEST(SyntheticModelTest, SameSeedIsByteIdenticalOtherSeedChangesOnlyWeights) {
  const SyntheticSpec spec = *SyntheticPreset("tiny");
  TempDir a("a"), b("b"), other("other");
  ASSERT_TRUE(WriteSyntheticModel(a.str(), spec, 42, DType::kF32).ok());
  ASSERT_TRUE(WriteSyntheticModel(b.str(), spec, 42, DType::kF32).ok());
  ASSERT_TRUE(WriteSyntheticModel(other.str(), spec, 43, DType::kF32).ok());
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_EQ(ReadFile(a.path() / f), ReadFile(b.path() / f)) << f;
    if (std::string(f) != "model.safetensors") {
      EXPECT_EQ(ReadFile(a.path() / f), ReadFile(other.path() / f)) << f;
    }
  }
  const Safetensors sa = ParseSafetensors(a.path() / "model.safetensors");
  const Safetensors so = ParseSafetensors(other.path() / "model.safetensors");
  EXPECT_EQ(sa.header, so.header);
  for (const auto& [name, t] : sa.header.items()) {
    if (name == "__metadata__") continue;
    const size_t n = t["data_offsets"][1].get<size_t>() - t["data_offsets"][0].get<size_t>();
    EXPECT_NE(std::memcmp(sa.Data(name), so.Data(name), n), 0) << name;
  }
}

// Pins the generator: a change to it silently changes every synthetic model, so it must be
// deliberate. Also checks the file holds exactly SyntheticWeight's values.
TEST(SyntheticModelTest, ValuesMatchTheGeneratorAndArePinned) {
  const SyntheticSpec spec = *SyntheticPreset("tiny");
  TempDir dir("f32");
  ASSERT_TRUE(WriteSyntheticModel(dir.str(), spec, 5, DType::kF32).ok());
  const Safetensors st = ParseSafetensors(dir.path() / "model.safetensors");
  for (const auto& [name, t] : st.header.items()) {
    if (name == "__metadata__") continue;
    const size_t n = t["data_offsets"][1].get<size_t>() - t["data_offsets"][0].get<size_t>();
    for (size_t i = 0; i < n / 4; i += 37) {
      float v;
      std::memcpy(&v, st.Data(name) + 4 * i, 4);
      ASSERT_EQ(v, SyntheticWeight(5, name, spec.config, i)) << name << "[" << i << "]";
    }
  }
  const float w0 = SyntheticWeight(5, "model.embed_tokens.weight", spec.config, 0);
  const float w1 = SyntheticWeight(5, "model.layers.1.mlp.down_proj.weight", spec.config, 1000);
  uint32_t b0, b1;
  std::memcpy(&b0, &w0, 4);
  std::memcpy(&b1, &w1, 4);
  EXPECT_EQ(b0, 0x3d3629bcu) << std::hex << b0;
  EXPECT_EQ(b1, 0x3c76b8f2u) << std::hex << b1;
}

double Mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / v.size();
}

double StdDev(const std::vector<float>& v) {
  const double m = Mean(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / v.size());
}

TEST(SyntheticModelTest, WeightScalesKeepActivationsSane) {
  const ModelConfig c = SyntheticPreset("gqa2")->config;
  auto sample = [&](const std::string& name, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = SyntheticWeight(9, name, c, i);
    return v;
  };
  const auto q = sample("model.layers.0.self_attn.q_proj.weight", 200000);
  EXPECT_NEAR(Mean(q), 0.0, 0.002);
  EXPECT_NEAR(StdDev(q), 1.0 / std::sqrt(512.0), 0.02 / std::sqrt(512.0));
  const auto down = sample("model.layers.1.mlp.down_proj.weight", 200000);
  EXPECT_NEAR(StdDev(down), 1.0 / std::sqrt(1376.0), 0.02 / std::sqrt(1376.0));
  const auto norm = sample("model.layers.0.input_layernorm.weight", 512);
  EXPECT_NEAR(Mean(norm), 1.0, 0.03);
  for (float x : norm) {
    EXPECT_GT(x, 0.5f);
    EXPECT_LT(x, 1.5f);
  }
  // Distinct tensors draw distinct streams.
  EXPECT_NE(sample("model.layers.0.self_attn.k_proj.weight", 8),
            sample("model.layers.0.self_attn.v_proj.weight", 8));
}

TEST(SyntheticModelTest, HalfDTypesHaveHalfTheBytesAndRoundedValues) {
  const SyntheticSpec spec = *SyntheticPreset("tiny");
  TempDir d32("f32"), d16("f16"), dbf("bf16");
  ASSERT_TRUE(WriteSyntheticModel(d32.str(), spec, 3, DType::kF32).ok());
  ASSERT_TRUE(WriteSyntheticModel(d16.str(), spec, 3, DType::kF16).ok());
  ASSERT_TRUE(WriteSyntheticModel(dbf.str(), spec, 3, DType::kBF16).ok());
  const Safetensors s32 = ParseSafetensors(d32.path() / "model.safetensors");
  const Safetensors s16 = ParseSafetensors(d16.path() / "model.safetensors");
  const Safetensors sbf = ParseSafetensors(dbf.path() / "model.safetensors");
  const size_t data32 = s32.file.size() - s32.data_start;
  EXPECT_EQ(s16.file.size() - s16.data_start, data32 / 2);
  EXPECT_EQ(sbf.file.size() - sbf.data_start, data32 / 2);
  EXPECT_EQ(nlohmann::json::parse(ReadFile(d16.path() / "config.json"))["torch_dtype"], "float16");
  EXPECT_EQ(nlohmann::json::parse(ReadFile(d32.path() / "config.json"))["torch_dtype"], "float32");

  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(s16.header[name]["dtype"], "F16");
  EXPECT_EQ(sbf.header[name]["dtype"], "BF16");
  for (size_t i = 0; i < 64 * 64; ++i) {
    float f;
    uint16_t h, b;
    std::memcpy(&f, s32.Data(name) + 4 * i, 4);
    std::memcpy(&h, s16.Data(name) + 2 * i, 2);
    std::memcpy(&b, sbf.Data(name) + 2 * i, 2);
    ASSERT_EQ(h, FloatToHalf(f)) << i;
    ASSERT_EQ(b, FloatToBF16(f)) << i;
  }
}

TEST(SyntheticModelTest, LargeVocabIsPaddedWithUnreachableExtras) {
  const SyntheticSpec spec = *SyntheticPreset("15m");
  TempDir dir("15m");
  ASSERT_TRUE(WriteSyntheticModel(dir.str(), spec, 1, DType::kBF16).ok());
  CheckTokenizerFiles(dir.path(), 32000);
  const nlohmann::json tok = nlohmann::json::parse(ReadFile(dir.path() / "tokenizer.json"));
  const auto& vocab = tok["model"]["vocab"];
  // The corpus runs out of merges long before 32000; the rest is padding.
  ASSERT_TRUE(vocab.contains("<extra_0>"));
  const int64_t first_extra = vocab["<extra_0>"];
  EXPECT_GT(first_extra, 354 + 500);
  EXPECT_LE(first_extra, 354 + static_cast<int64_t>(tok["model"]["merges"].size()));
  const std::string last = "<extra_" + std::to_string(31999 - first_extra) + ">";
  ASSERT_TRUE(vocab.contains(last)) << last;
  EXPECT_EQ(vocab[last], 31999);
  for (const auto& m : tok["model"]["merges"]) {
    EXPECT_EQ(m.get<std::string>().find('<'), std::string::npos) << m;
  }
  const Safetensors st = ParseSafetensors(dir.path() / "model.safetensors");
  EXPECT_EQ(st.header["model.embed_tokens.weight"]["shape"], nlohmann::json::array({32000, 288}));
  EXPECT_FALSE(st.header.contains("lm_head.weight"));
}

TEST(SyntheticModelTest, TokenizerLearnsEnglishMerges) {
  absl::StatusOr<std::string> text = LlamaTokenizerJson(SyntheticCorpus(), 512);
  ASSERT_TRUE(text.ok());
  const nlohmann::json tok = nlohmann::json::parse(*text);
  const auto& vocab = tok["model"]["vocab"];
  for (const char* t : {"\xE2\x96\x81"
                        "the",
                        "\xE2\x96\x81"
                        "and",
                        "ing"}) {
    EXPECT_TRUE(vocab.contains(t)) << t;
  }
  EXPECT_FALSE(vocab.contains("<extra_0>"));  // the corpus fills 512 with merges
  EXPECT_EQ(LlamaTokenizerJson(SyntheticCorpus(), 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticCorpus().find('<'), std::string_view::npos);
}

TEST(BpeTrainerTest, ClassicExampleMergesMostFrequentPairsWithLexicalTies) {
  std::vector<std::vector<std::string>> words;
  auto add = [&](std::vector<std::string> w, int n) {
    for (int i = 0; i < n; ++i) words.push_back(w);
  };
  add({"l", "o", "w"}, 5);
  add({"l", "o", "w", "e", "r"}, 2);
  add({"n", "e", "w", "e", "s", "t"}, 6);
  add({"w", "i", "d", "e", "s", "t"}, 3);
  const BpeTrainResult r = TrainBpe(words, 5);
  EXPECT_THAT(r.merges, ElementsAre(Pair("e", "s"), Pair("es", "t"), Pair("l", "o"),
                                    Pair("lo", "w"), Pair("e", "w")));
  EXPECT_THAT(r.new_tokens, ElementsAre("es", "est", "lo", "low", "ew"));
  // Run to exhaustion: every word ends as one token.
  const BpeTrainResult all = TrainBpe(words, 1000);
  for (const char* w : {"low", "lower", "newest", "widest"}) {
    EXPECT_NE(std::find(all.new_tokens.begin(), all.new_tokens.end(), w), all.new_tokens.end())
        << w;
  }
}

TEST(BpeTrainerTest, MergeReachingAnExistingTokenAddsNoToken) {
  std::vector<std::vector<std::string>> words = {
      {"ab", "c"}, {"ab", "c"}, {"ab", "c"}, {"a", "bc"}, {"a", "bc"}};
  const BpeTrainResult r = TrainBpe(words, 10);
  EXPECT_THAT(r.merges, ElementsAre(Pair("ab", "c"), Pair("a", "bc")));
  EXPECT_THAT(r.new_tokens, ElementsAre("abc"));
}

TEST(BpeTrainerTest, SplitLlamaWordsStartsWordsAtSpacesAndDropsUnknownChars) {
  const std::vector<std::string> alphabet = {"\xE2\x96\x81", "a", "b", "c"};
  const std::string sp = "\xE2\x96\x81";
  EXPECT_THAT(SplitLlamaWords("ab c\nba", alphabet),
              ElementsAre(ElementsAre(sp, "a", "b"), ElementsAre(sp, "c"), ElementsAre("b", "a")));
  EXPECT_THAT(SplitLlamaWords("a  b", alphabet),
              ElementsAre(ElementsAre(sp, "a"), ElementsAre(sp), ElementsAre(sp, "b")));
}

TEST(SafetensorsWriterTest, WritesSortedPaddedHeaderAndBytes) {
  TempDir dir("st");
  const fs::path p = dir.path() / "x.safetensors";
  std::vector<TensorToWrite> ts(2);
  ts[0].name = "zeta";
  ts[0].dtype = DType::kF16;
  ts[0].shape = {3};
  ts[0].bytes = {1, 2, 3, 4, 5, 6};
  ts[1].name = "alpha";
  ts[1].dtype = DType::kF32;
  ts[1].shape = {1, 2};
  ts[1].fill = [](std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(100 + i);
    return absl::OkStatus();
  };
  ASSERT_TRUE(WriteSafetensors(p.string(), ts, {{"format", "pt"}}).ok());
  const Safetensors st = ParseSafetensors(p);
  const std::string header = st.file.substr(8, st.header_len);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"format":"pt"},)"
            R"("alpha":{"data_offsets":[0,8],"dtype":"F32","shape":[1,2]},)"
            R"("zeta":{"data_offsets":[8,14],"dtype":"F16","shape":[3]}})");
  EXPECT_EQ(st.file.substr(st.data_start),
            std::string("\x64\x65\x66\x67\x68\x69\x6a\x6b\x01\x02\x03\x04\x05\x06", 14));

  // No metadata: no "__metadata__" key.
  ASSERT_TRUE(WriteSafetensors(p.string(), {ts[0]}, {}).ok());
  EXPECT_FALSE(ParseSafetensors(p).header.contains("__metadata__"));
}

TEST(SafetensorsWriterTest, RejectsBadInputAndLeavesNoFileOnFillError) {
  TempDir dir("bad");
  const std::string p = (dir.path() / "x.safetensors").string();
  TensorToWrite t;
  t.name = "w";
  t.shape = {2};
  t.bytes = {1, 2, 3};  // 8 needed
  absl::Status s = WriteSafetensors(p, {t}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w'"));
  t.bytes.resize(8);
  s = WriteSafetensors(p, {t, t}, {});
  EXPECT_THAT(std::string(s.message()), HasSubstr("twice"));
  t.fill = [](std::span<uint8_t>) { return absl::DataLossError("generator broke"); };
  s = WriteSafetensors(p, {t}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("generator broke"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w'"));
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  EXPECT_FALSE(WriteSafetensors((dir.path() / "no/such/dir/x").string(), {}, {}).ok());
}

}  // namespace
}  // namespace ptxserve
