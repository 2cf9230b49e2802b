// Per-request parameters shared by the server (proto conversion), the scheduler, the
// sampler and the stop checker. Plain structs: validation lives in sampler.h.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off; >= vocab size is also off
  float top_p = 1.0f;        // in (0, 1]; 1 = off
  float min_p = 0.0f;        // in [0, 1]; 0 = off
  // HF-style: divides positive / multiplies negative logits of prompt and generated tokens.
  float repetition_penalty = 1.0f;
  // OpenAI/vLLM-style: subtracted once (presence) / per occurrence (frequency), generated
  // tokens only.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // empty = the engine's per-sequence fallback seed
  // Top-N alternatives to report, 0 = none; the chosen token's logprob is also reported
  // when > 0.
  int32_t logprobs = 0;
};

struct StoppingCriteria {
  int32_t max_new_tokens = 16;
  std::vector<std::string> stop;  // stop strings, matched in the detokenized output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

enum class FinishReason { kNone, kLength, kStop, kEos, kCancelled, kError };

// The wire name of a finish reason ("none" for kNone).
inline std::string_view FinishReasonName(FinishReason r) {
  static constexpr std::string_view kNames[] = {"none", "length",    "stop",
                                                "eos",  "cancelled", "error"};
  static_assert(std::size(kNames) == static_cast<size_t>(FinishReason::kError) + 1);
  const auto i = static_cast<size_t>(r);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

}  // namespace ptxserve
