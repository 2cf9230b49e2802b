#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "engine/model/dtype.h"
#include "engine/model/model.h"
#include "engine/model/weight_files.h"
#include "tests/model/test_files.h"

namespace ptxserve {
namespace {

using test_files::F32Bytes;
using test_files::Ramp;
using test_files::RawSafetensors;
using test_files::RawTensor;
using test_files::TempDir;
using test_files::TinyModel;
using ::testing::HasSubstr;

std::vector<float> ToFloats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) ConvertToFloat(t.dtype, t.data, out.size(), out.data());
  return out;
}

// The float values the tiny model's writer encoded for tensor `name`.
std::vector<float> Expected(const TinyModel& m, const std::string& name) {
  int k = 0;
  for (const RawTensor& t : m.tensors) {
    if (t.name == name) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      return Ramp(n, static_cast<float>(k) - 10.0f);
    }
    ++k;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// Every tensor of the model, in TinyModel order, with its HF name.
std::vector<std::pair<std::string, const Tensor*>> Named(const Model& m) {
  std::vector<std::pair<std::string, const Tensor*>> out = {
      {"model.embed_tokens.weight", &m.tensors.embed}};
  for (size_t l = 0; l < m.tensors.layers.size(); ++l) {
    const LayerTensors& t = m.tensors.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.insert(out.end(), {{p + "input_layernorm.weight", &t.attn_norm},
                           {p + "self_attn.q_proj.weight", &t.wq},
                           {p + "self_attn.k_proj.weight", &t.wk},
                           {p + "self_attn.v_proj.weight", &t.wv},
                           {p + "self_attn.o_proj.weight", &t.wo},
                           {p + "post_attention_layernorm.weight", &t.mlp_norm},
                           {p + "mlp.gate_proj.weight", &t.w_gate},
                           {p + "mlp.up_proj.weight", &t.w_up},
                           {p + "mlp.down_proj.weight", &t.w_down}});
  }
  out.push_back({"model.norm.weight", &m.tensors.final_norm});
  out.push_back({"lm_head.weight", &m.tensors.lm_head});
  return out;
}

void ExpectTinyValues(const Model& model, const TinyModel& m) {
  for (const auto& [name, t] : Named(model)) {
    ASSERT_TRUE(t->present()) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % DTypeSize(t->dtype), 0u) << name;
    EXPECT_EQ(ToFloats(*t), Expected(m, name)) << name;
  }
}

TEST(TinyStoriesTest, LoadsSharedModel) {
  const std::string dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "shared test model absent: " << dir;
  }
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.intermediate_size, 384);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);

  const ModelTensors& t = model->tensors;
  ASSERT_EQ(t.layers.size(), 2u);
  EXPECT_EQ(t.embed.shape, (std::vector<int64_t>{2048, 128}));
  EXPECT_EQ(t.embed.dtype, DType::kF32);
  // Tied: the file holds lm_head.weight once and aliases embed_tokens to it.
  EXPECT_EQ(t.embed.data, t.lm_head.data);
  EXPECT_EQ(t.embed.nbytes, t.lm_head.nbytes);
  EXPECT_EQ(t.layers[1].wk.shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(t.layers[0].w_down.shape, (std::vector<int64_t>{128, 384}));
  EXPECT_FALSE(t.layers[0].bq.present());
  // Values read with python from the file's header offsets.
  const auto* norm = static_cast<const float*>(t.final_norm.data);
  EXPECT_EQ(norm[0], 0.640625f);
  EXPECT_EQ(norm[2], 0.68359375f);
  EXPECT_EQ(static_cast<const float*>(t.embed.data)[1], -0.02587890625f);
  EXPECT_EQ(static_cast<const float*>(t.layers[1].wk.data)[1], 0.4921875f);
  EXPECT_EQ(model->WeightBytes(), 2624000u);  // the whole data section: no tensor twice
}

TEST(LoadModelTest, LoadsEveryTensorWithItsValues) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->dir, dir.path());
  ExpectTinyValues(*model, m);
  EXPECT_NE(model->tensors.embed.data, model->tensors.lm_head.data);
  size_t total = 0;
  for (const RawTensor& t : m.tensors) total += t.bytes.size();
  EXPECT_EQ(model->WeightBytes(), total);
}

TEST(LoadModelTest, ViewsOutliveMovesAndCopiesOfTheModel) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.WriteTo(dir);
  Model kept;
  {
    auto model = LoadModel(dir.path());
    ASSERT_TRUE(model.ok()) << model.status();
    Model copy = *model;
    kept = std::move(copy);
  }
  ExpectTinyValues(kept, m);
}

class LoadModelDTypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoadModelDTypeTest, HalfTypesConvertToTheWrittenValues) {
  TempDir dir;
  TinyModel m = TinyModel::Make(GetParam());
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  const DType want = GetParam() == "F16" ? DType::kF16 : DType::kBF16;
  EXPECT_EQ(model->tensors.layers[1].w_up.dtype, want);
  EXPECT_EQ(model->tensors.layers[1].w_up.nbytes, 12u * 8u * 2u);
  ExpectTinyValues(*model, m);
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, LoadModelDTypeTest, ::testing::Values("F16", "BF16"));

TEST(LoadModelTest, MisalignedTensorsAreCopiedToAlignedMemory) {
  for (const char* dtype : {"F32", "F16"}) {
    SCOPED_TRACE(dtype);
    TempDir dir;
    TinyModel m = TinyModel::Make(dtype);
    m.WriteTo(dir, /*extra_spaces=*/1);  // data section starts at an odd file offset
    auto model = LoadModel(dir.path());
    ASSERT_TRUE(model.ok()) << model.status();
    ExpectTinyValues(*model, m);  // also checks every pointer's alignment
  }
}

TEST(LoadModelTest, TiedModelWithEmbeddingOnly) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.config["tie_word_embeddings"] = true;
  m.Remove("lm_head.weight");
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tensors.lm_head.data, model->tensors.embed.data);
  EXPECT_EQ(ToFloats(model->tensors.lm_head), Expected(m, "model.embed_tokens.weight"));
  size_t total = 0;
  for (const RawTensor& t : m.tensors) total += t.bytes.size();
  EXPECT_EQ(model->WeightBytes(), total);
}

TEST(LoadModelTest, TiedModelWithLmHeadOnly) {
  for (bool alias : {true, false}) {
    SCOPED_TRACE(alias ? "with __metadata__ alias" : "without alias");
    TempDir dir;
    TinyModel m = TinyModel::Make();
    m.config["tie_word_embeddings"] = true;
    const std::vector<float> head = Expected(m, "lm_head.weight");
    m.Remove("model.embed_tokens.weight");
    if (alias) m.metadata = {{"format", "pt"}, {"model.embed_tokens.weight", "lm_head.weight"}};
    m.WriteTo(dir);
    auto model = LoadModel(dir.path());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(model->tensors.embed.data, model->tensors.lm_head.data);
    EXPECT_EQ(ToFloats(model->tensors.embed), head);
  }
}

TEST(LoadModelTest, TiedModelIgnoresAStoredLmHead) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.config["tie_word_embeddings"] = true;
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tensors.lm_head.data, model->tensors.embed.data);
}

TEST(LoadModelTest, UnusedTensorOfUnsupportedDTypeIsAccepted) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.tensors.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", "I64", {2}, std::string(16, '\1')});
  m.tensors.push_back({"extra.fp8", "F8_E4M3", {3}, std::string(3, '\1')});
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectTinyValues(*model, m);
}

TEST(LoadModelTest, Qwen2LoadsAttentionBiases) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  m.config["architectures"] = {"Qwen2ForCausalLM"};
  m.config["model_type"] = "qwen2";
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    const auto seed = static_cast<float>(l);
    m.tensors.push_back({p + "q_proj.bias", "F32", {8}, F32Bytes(Ramp(8, 1.0f * seed))});
    m.tensors.push_back({p + "k_proj.bias", "F32", {4}, F32Bytes(Ramp(4, 2.0f * seed))});
    m.tensors.push_back({p + "v_proj.bias", "F32", {4}, F32Bytes(Ramp(4, 3.0f * seed))});
  }
  m.WriteTo(dir);
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->config.attention_bias);
  const LayerTensors& l1 = model->tensors.layers[1];
  EXPECT_EQ(ToFloats(l1.bq), Ramp(8, 1.0f));
  EXPECT_EQ(ToFloats(l1.bk), Ramp(4, 2.0f));
  EXPECT_EQ(ToFloats(l1.bv), Ramp(4, 3.0f));

  m.Remove("model.layers.1.self_attn.v_proj.bias");
  TempDir dir2;
  m.WriteTo(dir2);
  auto missing = LoadModel(dir2.path());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("model.layers.1.self_attn.v_proj.bias"));
}

// Writes the tiny model as shards (tensor i into shard_of(i)) plus config.json and the index.
void WriteShards(const TinyModel& m, const TempDir& dir,
                 const std::vector<std::string>& shard_names,
                 const std::function<size_t(size_t)>& shard_of) {
  std::vector<std::vector<RawTensor>> shards(shard_names.size());
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    shards[shard_of(i)].push_back(m.tensors[i]);
    weight_map[m.tensors[i].name] = shard_names[shard_of(i)];
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    dir.Write(shard_names[s], test_files::BuildSafetensors(shards[s]));
  }
  dir.Write("config.json", m.config.dump());
  dir.Write(
      "model.safetensors.index.json",
      nlohmann::json{{"metadata", {{"total_size", 1234}}}, {"weight_map", weight_map}}.dump(2));
}

const std::vector<std::string> kShards = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};

TEST(LoadModelTest, LoadsShardedModel) {
  TempDir dir;
  TinyModel m = TinyModel::Make();
  WriteShards(m, dir, kShards, [](size_t i) { return i % 2; });  // interleaved
  auto model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectTinyValues(*model, m);
  size_t total = 0;
  for (const RawTensor& t : m.tensors) total += t.bytes.size();
  EXPECT_EQ(model->WeightBytes(), total);

  auto files = WeightFiles::Open(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->source(), dir.path() + "/model.safetensors.index.json");
  EXPECT_EQ(files->PathOf("lm_head.weight"),
            dir.path() + "/" + kShards[(m.tensors.size() - 1) % 2]);
  EXPECT_EQ(files->TakeFiles().size(), 2u);  // each shard mapped once
}

// One malformed-input case: edits to the tiny model before it is written, then raw
// file edits after, and what the error must say. "$DIR" stands for the model directory.
struct BadCase {
  const char* name;
  std::function<void(TinyModel&)> edit = nullptr;
  std::function<void(const TinyModel&, const TempDir&)> overwrite = nullptr;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  std::vector<std::string> mentions;
};

void Patch(TinyModel& m, const std::string& tensor, nlohmann::json patch) {
  m.Find(tensor)->patch = std::move(patch);
}

void WriteWeights(const TempDir& dir, const std::string& bytes) {
  dir.Write("model.safetensors", bytes);
}

std::string LengthOnly(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

const std::string kST = "$DIR/model.safetensors";
const std::string kConfig = "$DIR/config.json";
const std::string kIndex = "$DIR/model.safetensors.index.json";
const std::string kNorm = "model.norm.weight";

std::vector<BadCase> BadCases() {
  using absl::StatusCode;
  return {
      // File structure.
      {.name = "empty_file",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, ""); },
       .mentions = {kST, "shorter than the 8-byte"}},
      {.name = "truncated_length_field",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, std::string("\x10\0\0\0\0", 5)); },
       .mentions = {kST, "file is 5 bytes"}},
      {.name = "truncated_header",
       .overwrite =
           [](auto& m, auto& d) {
             const std::string full = test_files::BuildSafetensors(m.tensors);
             WriteWeights(d, full.substr(0, 40));
           },
       .mentions = {kST, "runs past the end of the file (40 bytes)"}},
      {.name = "header_length_past_end",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, LengthOnly(~0ull) + "{}"); },
       .mentions = {kST, "header length 18446744073709551615 runs past the end"}},
      {.name = "empty_header",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, RawSafetensors("", "abcd")); },
       .mentions = {kST, "empty header"}},
      {.name = "header_bad_json",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, RawSafetensors("{\"a\": [1, 2", "")); },
       .mentions = {kST, "not valid JSON at header byte 12 (file offset 19)"}},
      {.name = "header_not_object",
       .overwrite = [](auto&, auto& d) { WriteWeights(d, RawSafetensors("[1, 2, 3]", "")); },
       .mentions = {kST, "header is a JSON array, not an object"}},
      {.name = "header_entry_not_object",
       .overwrite =
           [](auto&, auto& d) {
             WriteWeights(d, RawSafetensors("{\"model.norm.weight\": 3}", ""));
           },
       .mentions = {kST, kNorm, "entry is a number"}},
      // Tensor entries.
      {.name = "offsets_past_data",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"data_offsets", {0, 1000000}}});
           },
       .mentions = {kST, kNorm, "[0, 1000000] run past the end of the data section"}},
      {.name = "offsets_overlap",
       .edit =
           [](auto& m) {
             Patch(m, "lm_head.weight", {{"data_offsets", {256, 768}}});
           },
       .mentions = {kST, "lm_head.weight", "overlaps tensor 'model.embed_tokens.weight'"}},
      {.name = "offsets_begin_after_end",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"data_offsets", {64, 32}}});
           },
       .mentions = {kST, kNorm, "[64, 32]: begin is past end"}},
      {.name = "offsets_not_integers",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"data_offsets", {0.5, 32}}});
           },
       .mentions = {kST, kNorm, "'data_offsets' must be a list of two non-negative integers"}},
      {.name = "offsets_negative",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"data_offsets", {-32, 0}}});
           },
       .mentions = {kST, kNorm, "'data_offsets' must be"}},
      {.name = "offsets_one_entry",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"data_offsets", {32}}});
           },
       .mentions = {kST, kNorm, "'data_offsets' must be"}},
      {.name = "size_mismatch",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"shape", {7}}});
           },
       .mentions = {kST, kNorm, "hold 32 bytes but shape [7] of F32 needs 7 x 4 bytes"}},
      {.name = "shape_not_integer",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"shape", {"8"}}});
           },
       .mentions = {kST, kNorm, "shape entry \"8\" is not a non-negative integer"}},
      {.name = "shape_negative",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"shape", {-8}}});
           },
       .mentions = {kST, kNorm, "shape entry -8"}},
      {.name = "numel_overflow",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"shape", {1ull << 32, 1ull << 32}}});
           },
       .mentions = {kST, kNorm, "overflows int64"}},
      {.name = "dtype_missing",
       .edit =
           [](auto& m) {
             Patch(m, kNorm, {{"dtype", nullptr}});
           },  // merge patch: delete
       .mentions = {kST, kNorm, "'dtype' missing"}},
      // Tensors against config.json.
      {.name = "shape_disagrees_with_config",
       .edit =
           [](auto& m) {
             RawTensor* t = m.Find("model.layers.1.self_attn.k_proj.weight");
             t->shape = {8, 8};
             t->bytes = F32Bytes(Ramp(64, 0));
           },
       .mentions = {kST, "model.layers.1.self_attn.k_proj.weight", "has shape [8, 8]",
                    "expected [4, 8]", kConfig}},
      {.name = "missing_tensor",
       .edit = [](auto& m) { m.Remove("model.layers.1.mlp.up_proj.weight"); },
       .code = StatusCode::kNotFound,
       .mentions = {kST, "model.layers.1.mlp.up_proj.weight"}},
      {.name = "missing_lm_head_untied",
       .edit = [](auto& m) { m.Remove("lm_head.weight"); },
       .code = StatusCode::kNotFound,
       .mentions = {kST, "lm_head.weight", "tie_word_embeddings false"}},
      {.name = "missing_both_embeddings_tied",
       .edit =
           [](auto& m) {
             m.config["tie_word_embeddings"] = true;
             m.Remove("lm_head.weight");
             m.Remove("model.embed_tokens.weight");
           },
       .code = StatusCode::kNotFound,
       .mentions = {kST, "model.embed_tokens.weight", "nor 'lm_head.weight'"}},
      {.name = "unsupported_dtype_f64",
       .edit =
           [](auto& m) {
             RawTensor* t = m.Find(kNorm);
             t->dtype = "F64";
             t->bytes = std::string(64, '\0');
           },
       .code = StatusCode::kUnimplemented,
       .mentions = {kST, kNorm, "unsupported dtype F64"}},
      {.name = "unsupported_dtype_f8",
       .edit =
           [](auto& m) {
             RawTensor* t = m.Find("model.layers.0.mlp.up_proj.weight");
             t->dtype = "F8_E4M3";
             t->bytes = std::string(96, '\0');
           },
       .code = StatusCode::kUnimplemented,
       .mentions = {kST, "model.layers.0.mlp.up_proj.weight", "unsupported dtype F8_E4M3"}},
      {.name = "unknown_dtype_name",
       .edit = [](auto& m) { m.Find(kNorm)->dtype = "float32"; },
       .code = StatusCode::kUnimplemented,
       .mentions = {kST, kNorm, "unsupported dtype float32"}},
      // config.json.
      {.name = "unsupported_architecture",
       .edit = [](auto& m) { m.config["architectures"] = {"GPT2LMHeadModel"}; },
       .mentions = {kConfig, "'architectures'", "GPT2LMHeadModel"}},
      {.name = "missing_config_field",
       .edit = [](auto& m) { m.config.erase("hidden_size"); },
       .mentions = {kConfig, "'hidden_size'", "missing"}},
      {.name = "zero_layers",
       .edit = [](auto& m) { m.config["num_hidden_layers"] = 0; },
       .mentions = {kConfig, "'num_hidden_layers'", "must be positive, got 0"}},
      {.name = "absurd_layer_count",  // must fail on the tensors, not on allocation
       .edit = [](auto& m) { m.config["num_hidden_layers"] = 1 << 30; },
       .code = StatusCode::kNotFound,
       .mentions = {kST, "model.layers.2.input_layernorm.weight"}},
      {.name = "heads_not_divisible",
       .edit = [](auto& m) { m.config["num_key_value_heads"] = 3; },
       .mentions = {kConfig, "'num_key_value_heads'", "not divisible"}},
      {.name = "config_bad_json",
       .overwrite = [](auto&, auto& d) { d.Write("config.json", "{\"vocab_size\": }"); },
       .mentions = {kConfig, "invalid JSON at byte 16"}},
      {.name = "config_missing",
       .overwrite = [](auto&, auto& d) { std::filesystem::remove(d.path() + "/config.json"); },
       .code = StatusCode::kNotFound,
       .mentions = {kConfig}},
      {.name = "no_weight_files",
       .overwrite = [](auto&,
                       auto& d) { std::filesystem::remove(d.path() + "/model.safetensors"); },
       .code = StatusCode::kNotFound,
       .mentions = {"$DIR", "model.safetensors.index.json"}},
      // Sharded models.
      {.name = "index_bad_json",
       .overwrite =
           [](auto&, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             d.Write("model.safetensors.index.json", "{\"weight_map\": ");
           },
       .mentions = {kIndex, "invalid JSON at byte"}},
      {.name = "index_number_beyond_double",  // out_of_range, not parse_error: it escaped
       .overwrite =
           [](auto&, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             d.Write("model.safetensors.index.json", "{\"metadata\": {\"total_size\": 1e999}}");
           },
       .mentions = {kIndex, "invalid JSON", "1e999"}},
      {.name = "index_without_weight_map",
       .overwrite =
           [](auto&, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             d.Write("model.safetensors.index.json", "{\"metadata\": {}}");
           },
       .mentions = {kIndex, "'weight_map'"}},
      {.name = "index_shard_missing",
       .overwrite =
           [](auto& m, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             const size_t last = m.tensors.size() - 1;  // lm_head alone in shard 2
             WriteShards(m, d, kShards, [last](size_t i) { return i == last ? 1 : 0; });
             std::filesystem::remove(d.path() + "/" + kShards[1]);
           },
       .code = StatusCode::kNotFound,
       .mentions = {kIndex, "lm_head.weight", "$DIR/model-00002-of-00002.safetensors"}},
      {.name = "index_shard_malformed",
       .overwrite =
           [](auto& m, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             WriteShards(m, d, kShards, [](size_t i) { return i % 2; });
             d.Write(kShards[1], RawSafetensors("{\"x\": {\"dtype\": \"F32\"}}", ""));
           },
       .mentions = {kIndex, "$DIR/model-00002-of-00002.safetensors", "'x'", "'shape'"}},
      {.name = "index_tensor_not_in_shard",
       .overwrite =
           [](auto& m, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             WriteShards(m, d, kShards, [](size_t i) { return i % 2; });
             std::vector<RawTensor> odd;  // shard 2 as written, less model.norm.weight
             for (size_t i = 1; i < m.tensors.size(); i += 2) {
               if (m.tensors[i].name != kNorm) odd.push_back(m.tensors[i]);
             }
             d.Write(kShards[1], test_files::BuildSafetensors(odd));
           },
       .code = StatusCode::kNotFound,
       .mentions = {kIndex, kNorm, "has no tensor"}},
      {.name = "index_shard_outside_dir",
       .overwrite =
           [](auto&, auto& d) {
             std::filesystem::remove(d.path() + "/model.safetensors");
             d.Write("model.safetensors.index.json",
                     R"({"weight_map": {"model.embed_tokens.weight": "../model.safetensors"}})");
           },
       .mentions = {kIndex, "model.embed_tokens.weight", "../model.safetensors"}},
  };
}

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadModelTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadModelTest, FailsNamingTheFileAndTheTensorOrField) {
  const BadCase& c = GetParam();
  TempDir dir;
  TinyModel m = TinyModel::Make();
  if (c.edit) c.edit(m);
  m.WriteTo(dir);
  if (c.overwrite) c.overwrite(m, dir);
  auto model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok()) << "loaded a model it should have rejected";
  EXPECT_EQ(model.status().code(), c.code) << model.status();
  for (const std::string& mention : c.mentions) {
    EXPECT_THAT(std::string(model.status().message()),
                HasSubstr(absl::StrReplaceAll(mention, {{"$DIR", dir.path()}})));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadModelTest, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ptxserve
