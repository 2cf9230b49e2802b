// The quantization_config of a Hugging Face config.json: which quantized checkpoint
// layout the weights use (FP8, AWQ or GPTQ) and its parameters. Only the variants the
// loader repacks parse (hf_quant_source.h); anything else is refused naming the field.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptxserve {

struct HfQuantization {
  enum class Method : uint8_t { kNone, kFp8, kAwq, kGptq } method = Method::kNone;
  // AWQ and GPTQ: 4 bits in groups of 128 input elements (the only ones accepted).
  int64_t bits = 0;
  int64_t group_size = 0;
  // GPTQ: each stored zero is the true zero minus one (AutoGPTQ's "gptq" checkpoint
  // format); false for "gptq_v2", which stores the zero itself.
  bool gptq_zero_minus_one = true;
  // FP8 with weight_block_size [rows, cols]: one scale (weight_scale_inv) per tile of the
  // weight; 0 for per-tensor or per-channel scales (weight_scale).
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
};

// "fp8", "awq", "gptq"; "none" for kNone.
std::string_view HfQuantMethodName(HfQuantization::Method m);

// Parses config.json's "quantization_config" value `q` (a non-null JSON value) read from
// `file`. Accepted:
//   fp8:  E4M3 weights with a per-tensor or per-output-channel weight_scale (vLLM's and
//         transformers' "fp8"; activation_scheme static or dynamic, activations stay f32);
//         block-wise scales (weight_block_size [rows, cols], transformers' fine-grained
//         FP8 of DeepSeek-V3 and Qwen3) with cols a multiple of 32;
//   awq:  bits 4, group_size 128, zero_point true, version "gemm";
//   gptq: bits 4, group_size 128, checkpoint_format "gptq" or "gptq_v2"; desc_act is
//         accepted only when g_idx is the identity order (checked per tensor at load).
// InvalidArgument "FILE: field 'quantization_config.X': ..." for anything else.
absl::StatusOr<HfQuantization> ParseHfQuantization(const nlohmann::json& q,
                                                   const std::string& file);

// The quantization_config object `quantize` writes for `q` (method fp8, awq or gptq).
nlohmann::json HfQuantizationJson(const HfQuantization& q);

}  // namespace ptxserve
