// One completions or chat completions call in the engine: enqueues its sequences and turns
// their outputs into OpenAI's response, either server-sent events as tokens come
// (`stream: true`) or one JSON body when every choice has finished.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "server/decode_service.h"
#include "server/http/http_types.h"
#include "server/http/openai_request.h"

namespace ptxserve::server::http {

// The fields every response object of a call repeats.
struct ResponseIdentity {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  std::string model;
  int64_t created = 0;  // Unix seconds
};

class CompletionStream final : public ResponseStream {
 public:
  // Called with each sequence's final output (the request log), on the stream's thread.
  using OnFinished = std::function<void(const EngineOutput& final)>;
  // Enqueues the job's requests. Errors are the engine's refusal (queue full, draining,
  // invalid) as a Status.
  static absl::StatusOr<std::unique_ptr<CompletionStream>> Create(
      std::shared_ptr<ServedModel> model, CompletionJob job, ResponseIdentity identity,
      OnFinished on_finished);
  ~CompletionStream() override;

  void Start(std::function<void()> wake) override;
  Poll Next(std::string* out) override;
  void Cancel() override;
  bool incremental() const override { return job_.stream; }
  int status() const override { return status_; }
  std::string content_type() const override {
    return job_.stream ? "text/event-stream" : "application/json";
  }

 private:
  struct Choice {
    std::string text;                 // whole text so far (a body) or nothing (a stream)
    nlohmann::ordered_json logprobs;  // accumulated entries (a body)
    int64_t text_offset = 0;          // completions' logprobs.text_offset
    FinishReason finish = FinishReason::kNone;
    int32_t generated = 0;      // tokens so far
    int32_t cached_prompt = 0;  // prompt tokens the prefix cache held (final output)
  };

  CompletionStream(std::shared_ptr<ServedModel> model, CompletionJob job, ResponseIdentity identity,
                   OnFinished on_finished);
  // Adds one engine output to the choice; appends its event when streaming.
  void Apply(EngineOutput& out, std::string* events);
  // The log-probs of `out`'s tokens in the endpoint's shape (an object for completions, the
  // content array for chat).
  nlohmann::ordered_json Logprobs(const EngineOutput& out, Choice* choice) const;
  nlohmann::ordered_json ChunkFrame() const;
  std::string Preamble() const;
  std::string Epilogue() const;
  std::string Body() const;
  nlohmann::ordered_json Usage() const;
  void OnReady();

  std::shared_ptr<ServedModel> model_;
  CompletionJob job_;
  ResponseIdentity identity_;
  OnFinished on_finished_;
  std::shared_ptr<ResultStream> results_;
  std::vector<uint64_t> ids_;
  std::vector<Choice> choices_;
  int remaining_ = 0;
  bool preamble_sent_ = false;
  bool done_ = false;
  bool cancelled_ = false;
  absl::Status error_;  // the first failure the server decided
  int status_ = 200;
  std::vector<EngineOutput> popped_;

  absl::Mutex wake_mu_;
  std::function<void()> wake_ ABSL_GUARDED_BY(wake_mu_);
};

// The OpenAI finish_reason of a finished sequence.
const char* FinishReasonString(FinishReason reason);

}  // namespace ptxserve::server::http
