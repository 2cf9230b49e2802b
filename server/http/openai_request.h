// The OpenAI-compatible requests (`/v1/completions`, `/v1/chat/completions`) turned into
// engine requests: pure functions over parsed JSON, with errors that name the request's
// own parameter (`top_p`, `messages[1].content`) the way OpenAI's and vLLM's do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine_io.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/chat_renderer.h"
#include "server/convert.h"
#include "server/http/api_error.h"
#include "server/http/json_fields.h"

namespace ptxserve::server::http {

// What one call asks for, ready to enqueue.
struct CompletionJob {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM): per chunk
  bool echo = false;              // completions: the prompt's text precedes each choice's
  // Log-probs: completions' `logprobs` (top-N, 0 = the chosen token's only) or chat's
  // `top_logprobs` when `logprobs` is true; -1 = not asked for.
  int32_t logprobs = -1;
  int32_t n = 1;
  // Prompt i's choices are indices [i * n, (i + 1) * n): requests[k].index == k.
  std::vector<EngineRequest> requests;
  std::vector<std::string> prompt_texts;  // per prompt (for echo)
  std::vector<int32_t> prompt_tokens;     // per prompt (usage counts each once)
};

struct JobContext {
  const Tokenizer* tokenizer = nullptr;
  RequestLimits limits;
  std::string model_name;    // a request naming another model gets 404
  ChatRenderer render_chat;  // empty: the model has no chat template (chat gets 400)
  std::string id;            // the response id, "cmpl-..." / "chatcmpl-..."
};

// Parses `body` (the raw JSON) as a completions or chat completions request.
absl::StatusOr<CompletionJob> ParseCompletionJob(absl::string_view body, bool chat,
                                                 const JobContext& ctx);

// The messages of a chat request as the template sees them: role and content strings
// (text parts joined with "\n"). InvalidArgument naming messages[i].field.
absl::StatusOr<nlohmann::ordered_json> NormalizeChatMessages(
    const nlohmann::ordered_json& messages);

}  // namespace ptxserve::server::http
