// Offline generation: runs a set of prompts to completion on one Backend, all of them
// batched into each step (prefill first, then one decode token per sequence per step).
// The CLI's `generate` and the benchmarks use it; the server's Engine schedules instead.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/kv_block_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingParams sampling;
  StoppingCriteria stopping;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (a stop token is included, stop text is not)
  std::string text;
  std::vector<SampleResult> samples;  // per generated token (log-probs when asked)
  FinishReason finish = FinishReason::kNone;
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;  // steps that held prompt tokens
  double decode_seconds = 0;   // decode-only steps
};

class Generator {
 public:
  // All three must outlive the Generator. The tokenizer detokenizes and matches stops.
  Generator(Backend& backend, const Tokenizer& tokenizer, KvBlockManager& kv);

  // Runs every request to completion. on_text(i, delta) streams request i's text as
  // it is produced (may be empty). KV blocks are returned before this returns.
  absl::StatusOr<std::vector<GenerationResult>> Run(
      const std::vector<GenerationRequest>& requests,
      const std::function<void(size_t, std::string_view)>& on_text = nullptr,
      GenerationStats* stats = nullptr);

 private:
  Backend& backend_;
  const Tokenizer& tokenizer_;
  KvBlockManager& kv_;
};

}  // namespace ptxserve
