// Model hyper-parameters read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/dtype.h"
#include "engine/model/hf_quant_config.h"

namespace ptxserve {

enum class RopeStyle : uint8_t {
  kRotateHalf,   // Llama/HF: pairs (i, i + head_dim/2)
  kInterleaved,  // GPT-J/Meta original: pairs (2i, 2i + 1)
};

struct RopeScaling {
  // kFactors: each frequency divided by its own factor (GGUF's rope_freqs.weight, how
  // llama.cpp stores Llama 3.1's scaling).
  enum class Type : uint8_t { kNone, kLinear, kLlama3, kFactors } type = Type::kNone;
  double factor = 1.0;
  std::vector<float> factors;  // kFactors: head_dim / 2 divisors
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"
  std::string model_type;    // "llama", "mistral", "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int64_t max_position_embeddings = 2048;  // capped at sliding_window when that is smaller
  // > 0: the model's attention window, which capped max_position_embeddings (config.cc).
  int64_t sliding_window = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeStyle rope_style = RopeStyle::kRotateHalf;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  int32_t bos_token_id = -1;
  int32_t eos_token_id = -1;
  DType torch_dtype = DType::kF32;  // as declared; the tensors' own dtypes are authoritative
  // quantization_config: how the linear weights are stored (hf_quant_source.h).
  HfQuantization quantization;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t gqa_group() const { return num_heads / num_kv_heads; }
};

// Parses config.json text; `file` is used in error messages. Rejects unsupported
// architectures and inconsistent shapes (heads not dividing, zero sizes).
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& file);

}  // namespace ptxserve
