// Deterministic synthetic Llama models in the Hugging Face layout: test fixtures for
// shapes the shared test model lacks, and the model served when none is given. Weights
// are random but reproducible bit for bit from a seed; the tokenizer is a small real BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/dtype.h"

namespace ptxserve {

struct SyntheticSpec {
  std::string name;
  // A LlamaForCausalLM config as ParseModelConfig would return it for the written
  // config.json; torch_dtype is replaced by the dtype passed to WriteSyntheticModel.
  ModelConfig config;

  // Number of weights (distinct tensors: a tied lm_head is not counted twice).
  int64_t ParameterCount() const;
};

// Presets: "tiny" (the default model), "gqa1", "gqa2", "gqa4", "gqa8" (8 heads sharing
// each KV head 1/2/4/8 ways), "hd128", "15m" (llama2.c stories15M shape) and
// "llama-3.2-1b" (its real shape, ~2.5 GB in bf16). NotFound lists the known names.
absl::StatusOr<SyntheticSpec> SyntheticPreset(std::string_view name);

// All preset names, smallest first.
std::vector<std::string> SyntheticPresetNames();

// The ~English text the synthetic tokenizers are trained on (ASCII, no '<').
std::string_view SyntheticCorpus();

// Writes config.json, generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json and special_tokens_map.json into `out_dir` (created if needed).
// Every tensor's values are a pure function of (seed, tensor name, element index), so
// the same arguments give byte-identical files on every run and machine. Weights are
// scaled to keep activations O(1): linears and embeddings ~N(0, 1/fan_in), norms ~1.
absl::Status WriteSyntheticModel(const std::string& out_dir, const SyntheticSpec& spec,
                                 uint64_t seed, DType dtype);

// The value of element `index` of tensor `name` before conversion to the file dtype;
// exposed so tests and tools can check files against it.
float SyntheticWeight(uint64_t seed, std::string_view name, const ModelConfig& config,
                      uint64_t index);

}  // namespace ptxserve
