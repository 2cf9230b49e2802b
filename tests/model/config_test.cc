#include "engine/model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"
#include "tests/model/test_files.h"

namespace ptxserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kFile[] = "/models/x/config.json";

json BaseConfig() { return test_files::TinyModel::Make().config; }

absl::StatusOr<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump(), kFile); }

TEST(ModelConfigTest, ParsesTheTinyLlamaConfig) {
  auto c = Parse(BaseConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 16);
  EXPECT_EQ(c->hidden_size, 8);
  EXPECT_EQ(c->intermediate_size, 12);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 2);
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->q_dim(), 8);
  EXPECT_EQ(c->kv_dim(), 4);
  EXPECT_EQ(c->gqa_group(), 2);
  EXPECT_EQ(c->max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_EQ(c->torch_dtype, DType::kF32);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c->rope_style, RopeStyle::kRotateHalf);
}

TEST(ModelConfigTest, DefaultsAndVariants) {
  json j = BaseConfig();
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("max_position_embeddings");
  j["eos_token_id"] = {7, 2};
  j["bos_token_id"] = nullptr;
  j["torch_dtype"] = "bfloat16";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 2);  // defaults to the query heads
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(c->eos_token_id, 7);  // a list: the first
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->torch_dtype, DType::kBF16);

  j = BaseConfig();
  j["head_dim"] = 16;  // explicit head_dim need not be hidden / heads
  j["attention_bias"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->q_dim(), 32);
  EXPECT_TRUE(c->attention_bias);

  j = BaseConfig();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_bias);  // Qwen2 always has q/k/v biases

  j = BaseConfig();
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  j["attention_bias"] = true;  // not a Mistral field: ignored
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "MistralForCausalLM");
  EXPECT_FALSE(c->attention_bias);

  j = BaseConfig();
  j.erase("architectures");  // model_type decides
  j["model_type"] = "qwen2";
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
}

// A sliding window smaller than the context caps the served context at the window (the
// kernels attend to everything, which equals the window only while the context fits).
TEST(ModelConfigTest, SlidingWindowCapsTheContext) {
  json j = BaseConfig();
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->max_position_embeddings, 4096);

  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->max_position_embeddings, 32768);

  j["sliding_window"] = 65536;  // wider than the context: nothing to cap
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 32768);

  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["sliding_window"] = 4096;  // Qwen2 writes it but uses it only with use_sliding_window
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 32768);
  j["use_sliding_window"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 4096);
}

TEST(ModelConfigTest, RopeScaling) {
  json j = BaseConfig();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["rope_theta"] = 500000.0;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};  // older key, integer factor
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "default"}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);

  j.erase("rope_scaling");  // transformers 5 layout
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 1e6}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
}

// One rejected config: an edit of the tiny config and what the error must name.
struct BadConfig {
  const char* name;
  std::function<void(json&)> edit;
  std::string field;    // quoted in the message as 'field'
  std::string problem;  // a substring of the message
};

std::vector<BadConfig> BadConfigs() {
  return {
      {"unsupported_architecture", [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; },
       "architectures", "unsupported architecture 'GPT2LMHeadModel'"},
      {"architectures_not_list", [](json& j) { j["architectures"] = "LlamaForCausalLM"; },
       "architectures", "expected a list"},
      {"no_architecture_unknown_type",
       [](json& j) {
         j.erase("architectures");
         j["model_type"] = "gpt2";
       },
       "architectures", "model_type 'gpt2'"},
      {"missing_hidden_size", [](json& j) { j.erase("hidden_size"); }, "hidden_size", "missing"},
      {"sliding_window_string", [](json& j) { j["sliding_window"] = "4096"; }, "sliding_window",
       "expected an integer"},
      {"sliding_window_zero", [](json& j) { j["sliding_window"] = 0; }, "sliding_window",
       "must be positive, got 0"},
      {"use_sliding_window_not_bool",
       [](json& j) {
         j["sliding_window"] = 16;
         j["use_sliding_window"] = "yes";
       },
       "use_sliding_window", "expected a boolean"},
      {"null_vocab_size", [](json& j) { j["vocab_size"] = nullptr; }, "vocab_size", "missing"},
      {"zero_intermediate", [](json& j) { j["intermediate_size"] = 0; }, "intermediate_size",
       "must be positive, got 0"},
      {"negative_layers", [](json& j) { j["num_hidden_layers"] = -2; }, "num_hidden_layers",
       "must be positive, got -2"},
      {"float_heads", [](json& j) { j["num_attention_heads"] = 2.0; }, "num_attention_heads",
       "expected an integer"},
      {"string_vocab", [](json& j) { j["vocab_size"] = "16"; }, "vocab_size",
       "expected an integer, got \"16\""},
      {"huge_vocab", [](json& j) { j["vocab_size"] = 18446744073709551615ull; }, "vocab_size",
       "out of range"},
      {"absurd_head_dim", [](json& j) { j["head_dim"] = int64_t{1} << 40; }, "head_dim",
       "must be at most 1073741824"},
      {"zero_kv_heads", [](json& j) { j["num_key_value_heads"] = 0; }, "num_key_value_heads",
       "must be positive"},
      {"heads_not_divisible_by_kv",
       [](json& j) {
         j["num_attention_heads"] = 4;
         j["num_key_value_heads"] = 3;
       },
       "num_key_value_heads", "num_attention_heads 4 is not divisible by num_key_value_heads 3"},
      {"hidden_not_divisible_by_heads", [](json& j) { j["num_attention_heads"] = 3; },
       "num_attention_heads", "hidden_size 8 is not divisible"},
      {"odd_head_dim", [](json& j) { j["head_dim"] = 5; }, "head_dim", "must be even"},
      {"negative_eps", [](json& j) { j["rms_norm_eps"] = -1e-5; }, "rms_norm_eps",
       "must be a positive number"},
      {"string_theta", [](json& j) { j["rope_theta"] = "1e4"; }, "rope_theta", "expected a number"},
      {"tie_not_bool", [](json& j) { j["tie_word_embeddings"] = 1; }, "tie_word_embeddings",
       "expected a boolean"},
      {"negative_eos", [](json& j) { j["eos_token_id"] = -3; }, "eos_token_id", "out of range"},
      {"eos_list_of_strings", [](json& j) { j["eos_token_id"] = {"</s>"}; }, "eos_token_id",
       "expected a token id"},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act", "unsupported activation"},
      {"mlp_bias", [](json& j) { j["mlp_bias"] = true; }, "mlp_bias", "not supported"},
      {"awq_3_bits",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 3}, {"group_size", 128}};
       },
       "quantization_config.bits", "3 is not supported (only 4)"},
      {"awq_group_64",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 64}};
       },
       "quantization_config.group_size", "64 is not supported (only 128)"},
      {"awq_gemv",
       [](json& j) {
         j["quantization_config"] = {
             {"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}};
       },
       "quantization_config.version", "'gemv' is not supported"},
      {"awq_no_zero_point",
       [](json& j) {
         j["quantization_config"] = {
             {"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", false}};
       },
       "quantization_config.zero_point", "false is not supported"},
      {"gptq_8_bits",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 128}};
       },
       "quantization_config.bits", "8 is not supported"},
      {"gptq_no_groups",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}};
       },
       "quantization_config.group_size", "-1 is not supported"},
      {"gptq_marlin_format",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"},
                                     {"bits", 4},
                                     {"group_size", 128},
                                     {"checkpoint_format", "marlin"}};
       },
       "quantization_config.checkpoint_format", "'marlin' is not supported"},
      {"fp8_block_cols_not_whole_blocks",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 100}}};
       },
       "quantization_config.weight_block_size", "[128, 100] is not supported"},
      {"fp8_e5m2",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
       },
       "quantization_config.fmt", "'e5m2' is not supported"},
      {"bitsandbytes",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "bitsandbytes"}};
       },
       "quantization_config.quant_method", "'bitsandbytes' is not supported"},
      {"unnamed_quantization", [](json& j) { j["quantization_config"] = json::object(); },
       "quantization_config.quant_method", "missing is not supported"},
      {"quantization_not_object", [](json& j) { j["quantization_config"] = 4; },
       "quantization_config", "expected an object"},
      {"rope_yarn",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       "rope_scaling.rope_type", "unsupported rope scaling type 'yarn'"},
      {"rope_dynamic_old_key",
       [](json& j) {
         j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};
       },
       "rope_scaling.type", "'dynamic'"},
      {"rope_scaling_not_object", [](json& j) { j["rope_scaling"] = 2; }, "rope_scaling",
       "expected an object"},
      {"rope_linear_without_factor",
       [](json& j) {
         j["rope_scaling"] = {{"type", "linear"}};
       },
       "rope_scaling.factor", "missing"},
      {"rope_llama3_zero_factor",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 0}};
       },
       "rope_scaling.factor", "must be a positive number"},
      {"rope_llama3_low_above_high",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 8.0},
                              {"low_freq_factor", 4.0},
                              {"high_freq_factor", 1.0}};
       },
       "rope_scaling.high_freq_factor", "greater than low_freq_factor"},
      {"rope_parameters_bad_type",
       [](json& j) {
         j["rope_parameters"] = {{"rope_type", "longrope"}};
       },
       "rope_parameters.rope_type", "'longrope'"},
  };
}

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, IsRejectedNamingFileAndField) {
  json j = BaseConfig();
  GetParam().edit(j);
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(kFile));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("'" + GetParam().field + "'"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().problem));
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfigTest, ::testing::ValuesIn(BadConfigs()),
                         [](const auto& info) { return std::string(info.param.name); });

// The quantization_config variants the loader repacks, as their libraries write them.
TEST(ModelConfigTest, QuantizationConfigs) {
  json j = BaseConfig();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.method, HfQuantization::Method::kFp8);
  EXPECT_EQ(c->quantization.fp8_block_rows, 0);
  j["quantization_config"]["weight_block_size"] = {128, 128};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.fp8_block_rows, 128);
  EXPECT_EQ(c->quantization.fp8_block_cols, 128);
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},
                              {"group_size", 128},     {"zero_point", true},
                              {"version", "GEMM"},     {"modules_to_not_convert", nullptr}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.method, HfQuantization::Method::kAwq);
  EXPECT_EQ(c->quantization.group_size, 128);
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4},
                              {"group_size", 128},      {"sym", true},
                              {"desc_act", false},      {"damp_percent", 0.01}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.method, HfQuantization::Method::kGptq);
  EXPECT_TRUE(c->quantization.gptq_zero_minus_one);
  j["quantization_config"]["checkpoint_format"] = "gptq_v2";
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->quantization.gptq_zero_minus_one);
  // What quantize writes parses back to itself.
  for (auto m : {HfQuantization::Method::kFp8, HfQuantization::Method::kAwq,
                 HfQuantization::Method::kGptq}) {
    HfQuantization q;
    q.method = m;
    j["quantization_config"] = HfQuantizationJson(q);
    c = Parse(j);
    ASSERT_TRUE(c.ok()) << HfQuantMethodName(m) << ": " << c.status();
    EXPECT_EQ(c->quantization.method, m);
  }
}

TEST(ModelConfigTest, BadJsonNamesTheByteOffset) {
  auto c = ParseModelConfig("{\n  \"hidden_size\": 8,\n  oops\n}", kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(kFile));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("invalid JSON at byte 25"));

  c = ParseModelConfig("[1, 2]", kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("expected a JSON object"));

  c = ParseModelConfig("", kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("invalid JSON"));
}

TEST(ModelConfigTest, NumberBeyondDoubleIsAnErrorNotAnException) {
  // nlohmann throws out_of_range (not parse_error) for it; it used to escape (terminate).
  auto c = ParseModelConfig("{\"rope_theta\": 1e309}", kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("invalid JSON"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("1e309"));
}

TEST(ModelConfigTest, DeeplyNestedValueDoesNotBlowTheStack) {
  // A field holding 100k nested lists must produce an error, not a recursive dump.
  json j = BaseConfig();
  j["hidden_size"] = "HERE";
  std::string text = j.dump();
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  text.replace(text.find("\"HERE\""), 6, nested);
  auto c = ParseModelConfig(text, kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("'hidden_size': expected an integer, got array"));
}

}  // namespace
}  // namespace ptxserve
