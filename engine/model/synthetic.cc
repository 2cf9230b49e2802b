#include "engine/model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/bpe_trainer.h"
#include "engine/model/safetensors_writer.h"

namespace ptxserve {
namespace {

ModelConfig LlamaConfig(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t layers,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_pos,
                        bool tied) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

struct Preset {
  const char* name;
  ModelConfig (*make)();
};

// Smallest first. The gqa presets differ only in how many query heads share a KV head;
// they and hd128 are untied so that lm_head is exercised as its own tensor.
const Preset kPresets[] = {
    {"tiny", [] { return LlamaConfig(512, 64, 176, 2, 4, 2, 16, 2048, true); }},
    {"gqa1", [] { return LlamaConfig(512, 512, 1376, 2, 8, 8, 64, 2048, false); }},
    {"gqa2", [] { return LlamaConfig(512, 512, 1376, 2, 8, 4, 64, 2048, false); }},
    {"gqa4", [] { return LlamaConfig(512, 512, 1376, 2, 8, 2, 64, 2048, false); }},
    {"gqa8", [] { return LlamaConfig(512, 512, 1376, 2, 8, 1, 64, 2048, false); }},
    {"hd128", [] { return LlamaConfig(512, 512, 1376, 2, 4, 2, 128, 2048, false); }},
    {"15m", [] { return LlamaConfig(32000, 288, 768, 6, 6, 6, 48, 1024, true); }},
    {"llama-3.2-1b",
     [] {
       ModelConfig c = LlamaConfig(128256, 2048, 8192, 16, 32, 8, 64, 131072, true);
       c.rope_theta = 500000.0;
       c.rope_scaling.type = RopeScaling::Type::kLlama3;
       c.rope_scaling.factor = 32.0;
       c.rope_scaling.low_freq_factor = 1.0;
       c.rope_scaling.high_freq_factor = 4.0;
       c.rope_scaling.original_max_position_embeddings = 8192;
       return c;
     }},
};

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t Mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// How a tensor is initialised: mean + std * (approximately standard normal).
struct Init {
  double mean = 0.0;
  double std = 0.0;
};

// Linears get std 1/sqrt(fan_in) so each output is O(1) for O(1) inputs. Embeddings get
// 1/sqrt(hidden) too (0.022 at Llama-1B's width, the usual 0.02): with tied weights the
// logits are then O(1), neither uniform nor saturated.
Init InitFor(std::string_view name, const ModelConfig& c) {
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  if (EndsWith(name, "norm.weight")) return {1.0, 0.1};
  if (EndsWith(name, "o_proj.weight")) return {0.0, inv_sqrt(c.q_dim())};
  if (EndsWith(name, "down_proj.weight")) return {0.0, inv_sqrt(c.intermediate_size)};
  return {0.0, inv_sqrt(c.hidden_size)};
}

// Four 16-bit uniforms summed (Irwin-Hall): bell-shaped, variance known exactly, and only
// integer arithmetic plus one multiply, so no libm differences between machines.
float Sample(uint64_t key, uint64_t index, const Init& init) {
  const uint64_t r = Mix64(key + (index + 1) * kGolden);
  int64_t centered = 0;  // sum of 2u - 65535 over the four parts: mean 0, var ~ 4 * 65536^2 / 3
  for (int i = 0; i < 4; ++i)
    centered += 2 * static_cast<int64_t>((r >> (16 * i)) & 0xffff) - 65535;
  const double scale = init.std * std::sqrt(3.0) / 131072.0;
  // Round the product to float before adding the mean so FMA contraction cannot change it.
  const float noise = static_cast<float>(static_cast<double>(centered) * scale);
  return static_cast<float>(init.mean) + noise;
}

uint64_t TensorKey(uint64_t seed, std::string_view name) {
  return Mix64(seed ^ Mix64(Fnv1a64(name)));
}

TensorToWrite SyntheticTensor(std::string name, std::vector<int64_t> shape, uint64_t seed,
                              DType dtype, const ModelConfig& config) {
  TensorToWrite t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.name = std::move(name);
  const Init init = InitFor(t.name, config);
  const uint64_t key = TensorKey(seed, t.name);
  t.fill = [key, init, dtype](std::span<uint8_t> out) {
    const size_t n = out.size() / DTypeSize(dtype);
    constexpr size_t kChunk = size_t{1} << 16;
    std::vector<float> chunk(std::min(n, kChunk));
    for (size_t begin = 0; begin < n; begin += kChunk) {
      const size_t len = std::min(kChunk, n - begin);
      for (size_t i = 0; i < len; ++i) chunk[i] = Sample(key, begin + i, init);
      ConvertFromFloat(dtype, chunk.data(), len, out.data() + begin * DTypeSize(dtype));
    }
    return absl::OkStatus();
  };
  return t;
}

std::vector<TensorToWrite> SyntheticTensors(const ModelConfig& c, uint64_t seed, DType dtype) {
  std::vector<TensorToWrite> ts;
  const int64_t h = c.hidden_size;
  ts.push_back(SyntheticTensor("model.embed_tokens.weight", {c.vocab_size, h}, seed, dtype, c));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    ts.push_back(SyntheticTensor(p + "input_layernorm.weight", {h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "post_attention_layernorm.weight", {h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "self_attn.q_proj.weight", {c.q_dim(), h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "self_attn.k_proj.weight", {c.kv_dim(), h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "self_attn.v_proj.weight", {c.kv_dim(), h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "self_attn.o_proj.weight", {h, c.q_dim()}, seed, dtype, c));
    const int64_t inter = c.intermediate_size;
    ts.push_back(SyntheticTensor(p + "mlp.gate_proj.weight", {inter, h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "mlp.up_proj.weight", {inter, h}, seed, dtype, c));
    ts.push_back(SyntheticTensor(p + "mlp.down_proj.weight", {h, inter}, seed, dtype, c));
  }
  ts.push_back(SyntheticTensor("model.norm.weight", {h}, seed, dtype, c));
  if (!c.tie_word_embeddings) {
    ts.push_back(SyntheticTensor("lm_head.weight", {c.vocab_size, h}, seed, dtype, c));
  }
  return ts;
}

// Keys sorted (nlohmann::json is a std::map), as transformers' save_pretrained writes them.
std::string ConfigJson(const ModelConfig& c, DType dtype) {
  nlohmann::json j;
  j["architectures"] = {c.architecture};
  j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["mlp_bias"] = false;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = c.rms_norm_eps;
  switch (c.rope_scaling.type) {
    case RopeScaling::Type::kNone:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScaling::Type::kLinear:
      j["rope_scaling"] = {
          {"factor", c.rope_scaling.factor}, {"rope_type", "linear"}, {"type", "linear"}};
      break;
    case RopeScaling::Type::kLlama3:
      j["rope_scaling"] = {
          {"factor", c.rope_scaling.factor},
          {"high_freq_factor", c.rope_scaling.high_freq_factor},
          {"low_freq_factor", c.rope_scaling.low_freq_factor},
          {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
          {"rope_type", "llama3"}};
      break;
    case RopeScaling::Type::kFactors:  // GGUF's form only: no preset uses it
      j["rope_scaling"] = {{"rope_type", "ptxserve_per_frequency_factors"}};
      break;
  }
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = SpellingOf(dtype).torch;
  j["transformers_version"] = "4.45.0";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

std::string GenerationConfigJson(const ModelConfig& c) {
  nlohmann::json j;
  j["_from_model_config"] = true;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["transformers_version"] = "4.45.0";
  return j.dump(2) + "\n";
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

absl::Status WriteTextFile(const std::filesystem::path& path, std::string_view text) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) return absl::InternalError(absl::StrCat(path.string(), ": cannot open for writing"));
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() ||
      std::fclose(f.release()) != 0) {
    return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  }
  return absl::OkStatus();
}

// Original text written for this file. Everyday English, so that the trained merges
// are recognisable ("▁the", "ing", "▁and") and English prompts encode to few tokens.
constexpr std::string_view kCorpus =
    R"(Once upon a time, in a small town by the sea, there lived an old baker named Tom. Every morning he woke up before the sun, lit the fire in his oven and made bread for the people of the town. The children liked to stand at the window and watch him work. He would smile at them and give each one a warm roll with butter.

One day a storm came in from the sea. The wind was strong and the rain did not stop for three days. The boats stayed in the harbour and the market was closed. Tom kept baking, because he knew that the people would need something to eat. When the storm was over, the whole town came to his shop to thank him.

The weather report for tomorrow says that it will be cold in the morning and warm in the afternoon. There is a small chance of rain in the evening, so take an umbrella if you are going out. Temperatures will range from 8 to 17 degrees. On Saturday and Sunday the sun should return.

To make a simple soup, cut two onions, three carrots and a few potatoes into small pieces. Cook the onions in a little oil until they are soft, then add the other vegetables and about one litre of water. Let it boil gently for twenty minutes. Add salt and pepper, and serve it hot with fresh bread.

Computers are machines that follow instructions. A program is a list of those instructions, written in a language that people can read and that the computer can translate. When you open a web page, send a message or play a game, thousands of small programs are working together. Learning to write programs is like learning to cook: you start with simple recipes and practice until you can invent your own.

She asked him: "What do you want to be when you grow up?" He thought about it for a long time and then said: "I want to be a teacher, because teachers help other people learn new things." She nodded. It was a good answer, and she told him that she believed he could do it.

The river flows from the mountains through the forest and into the valley, where farmers grow wheat, apples and grapes. In spring the water is high and cold; in summer it is warm enough to swim. Birds build their nests in the tall trees along the banks, and at night you can hear the frogs singing.
)";

}  // namespace

std::string_view SyntheticCorpus() { return kCorpus; }

int64_t SyntheticSpec::ParameterCount() const {
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size;
  const int64_t per_layer =
      2 * h + 2 * h * c.q_dim() + 2 * h * c.kv_dim() + 3 * h * c.intermediate_size;
  const int64_t embed = c.vocab_size * h;
  return embed * (c.tie_word_embeddings ? 1 : 2) + c.num_layers * per_layer + h;
}

absl::StatusOr<SyntheticSpec> SyntheticPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return SyntheticSpec{p.name, p.make()};
  }
  return absl::NotFoundError(
      absl::StrCat("unknown synthetic model preset '", std::string(name),
                   "'; known: ", absl::StrJoin(SyntheticPresetNames(), ", ")));
}

std::vector<std::string> SyntheticPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

float SyntheticWeight(uint64_t seed, std::string_view name, const ModelConfig& config,
                      uint64_t index) {
  return Sample(TensorKey(seed, name), index, InitFor(name, config));
}

absl::Status WriteSyntheticModel(const std::string& out_dir, const SyntheticSpec& spec,
                                 uint64_t seed, DType dtype) {
  const ModelConfig& c = spec.config;
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 ||
      c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic model '", spec.name, "': inconsistent shape"));
  }
  absl::StatusOr<std::string> tokenizer = LlamaTokenizerJson(SyntheticCorpus(), c.vocab_size);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic model '", spec.name, "': ", tokenizer.status().message()));
  }
  const std::filesystem::path dir(out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir, ": cannot create: ", ec.message()));

  const std::pair<const char*, std::string> texts[] = {
      {"config.json", ConfigJson(c, dtype)},
      {"generation_config.json", GenerationConfigJson(c)},
      {"tokenizer.json", *std::move(tokenizer) + "\n"},
      {"tokenizer_config.json", LlamaTokenizerConfigJson(c.max_position_embeddings) + "\n"},
      {"special_tokens_map.json", LlamaSpecialTokensMapJson() + "\n"},
  };
  for (const auto& [file, text] : texts) {
    if (absl::Status s = WriteTextFile(dir / file, text); !s.ok()) return s;
  }
  return WriteSafetensors((dir / "model.safetensors").string(), SyntheticTensors(c, seed, dtype),
                          {{"format", "pt"}});
}

}  // namespace ptxserve
