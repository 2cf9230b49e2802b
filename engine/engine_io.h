// What goes into and comes out of the engine: the request as the server hands it over,
// the pieces of its result, the thread-safe channel those pieces travel through, and the
// checks a request passes before it is queued.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace ptxserve {

// One decode request, as the server hands it over (already tokenized).
struct EngineRequest {
  std::string request_id;  // for logs; seeds the sampler when sampling.seed is empty
  int32_t index = 0;       // echoed in every output (the prompt's index in a batch call)
  // Which of the n samples of its prompt this is (parallel sampling), echoed in every
  // output. A sample after the first shares the first's prompt: the prompt's tokens count
  // once in the engine's prompt-token totals. (index, sample) is unique within a call.
  int32_t sample = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StoppingCriteria stopping;
  int32_t priority = 0;  // higher first
};

// A piece of a request's result. Consecutive outputs of one request that the consumer
// has not taken yet are merged into one.
struct EngineOutput {
  int32_t index = 0;
  int32_t sample = 0;
  std::vector<int32_t> token_ids;  // new tokens
  // The text they complete (whole UTF-8 characters). A request's texts add up to the
  // prompt's continuation: Decode(prompt + generated) minus Decode(prompt), see
  // IncrementalDetokenizer.
  std::string text;
  std::vector<SampleResult> logprobs;  // one per token when sampling.logprobs > 0
  FinishReason finish = FinishReason::kNone;
  // The rest is set on the final output (finish != kNone) only.
  std::string request_id;
  absl::Status error;  // why, for kError and for cancellations the engine decided
  int32_t prompt_tokens = 0;
  // Of prompt_tokens, those whose K/V the prefix cache held when the request was first
  // scheduled (not computed for it).
  int32_t cached_prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double queue_seconds = 0;
  double ttft_seconds = 0;  // 0 when no token was generated
  double total_seconds = 0;

  bool final() const { return finish != FinishReason::kNone; }
};

// The channel from the engine thread to one consumer (one RPC), for one or several
// requests. Thread-safe. The consumer takes everything pending with PopAll; when that
// finds nothing, the next Push calls `on_ready` once (on the engine thread: it must not
// block, and must not call back into this stream under its own locks' expectations —
// PopAll is allowed).
class ResultStream {
 public:
  explicit ResultStream(std::function<void()> on_ready = nullptr);

  // Consumer: moves the pending outputs (merged per (index, sample), in the order each
  // first appeared) into *out (cleared first). Returns false and arms the notification
  // when none is pending.
  bool PopAll(std::vector<EngineOutput>* out);
  // Consumer: stops notifications and drops future outputs. After it returns,
  // on_ready is not running and will never run again.
  void Close();
  // Blocks until an output is pending (or the stream is closed); then PopAll. For
  // callers without a callback (tests, offline tools).
  bool WaitPopAll(std::vector<EngineOutput>* out);

  // Producer (engine thread).
  void Push(EngineOutput output);

 private:
  absl::Mutex mu_;
  std::vector<EngineOutput> pending_ ABSL_GUARDED_BY(mu_);
  // (index, sample) -> pending_ slot
  absl::flat_hash_map<std::pair<int32_t, int32_t>, size_t> open_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = true;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int notifying_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_ready_;
};

// Checks a request against the model: prompt non-empty, ids in the vocabulary, prompt
// plus max_new_tokens within the context and the KV cache, sampling and stopping
// parameters valid. InvalidArgument naming the field.
absl::Status ValidateEngineRequest(const EngineRequest& r, int64_t vocab_size,
                                   int64_t context_length, int64_t kv_capacity_tokens);

// The failure a final output reports when the server (not the client) ended the request:
// the engine's error (kError), or a cancellation the server decided, such as the drain
// timeout (kCancelled with a non-CANCELLED error). OK otherwise.
absl::Status ServerFailure(const EngineOutput& out);

// The sampler's seed when a request gives none: a stable hash (FNV-1a) of its id.
uint64_t SeedFromRequestId(std::string_view request_id);

}  // namespace ptxserve
