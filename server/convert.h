// Pure conversions between the public protos (ptxserve.v1) and the engine's structs,
// with the request validation that needs proto field names. No I/O, no globals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "ptxserve/v1/decode.pb.h"
#include "server/chat_renderer.h"

namespace ptxserve::server {

// What a request is checked against.
struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  int64_t kv_capacity_tokens = 0;
  int32_t default_max_new_tokens = 256;  // when stopping.max_new_tokens is absent
  int32_t max_batch_prompts = 256;       // prompts per GenerateBatch call
  size_t max_request_id_bytes = 256;
};

// The max_new_tokens of a request with a prompt of `n` tokens (which must leave room in the
// context, else InvalidArgument naming `prompt_field`): `requested` when the prompt and it fit the
// context and the KV cache, else InvalidArgument naming `max_field`; absent, `default_max` clipped
// to the room left (InvalidArgument naming `prompt_field` when none).
absl::StatusOr<int32_t> ResolveMaxNewTokens(int64_t n, std::optional<int64_t> requested,
                                            int64_t default_max, const RequestLimits& limits,
                                            absl::string_view prompt_field,
                                            absl::string_view max_field);

// Converts and validates one GenerateRequest. `prefix` is prepended to field names in
// errors ("requests[3]."); `assigned_id` is used when request_id is empty. The prompt
// text is tokenized with `tokenizer` (BOS as its config says). InvalidArgument naming
// the field on bad input.
absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& req,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, std::string_view prefix,
                                              std::string assigned_id,
                                              const ChatRenderer* render_chat = nullptr);

// Renders a chat input with the model's template (`render_chat` null or empty: the model
// has none). InvalidArgument naming chat.messages[i] or saying why the template refused.
absl::StatusOr<std::string> RenderChat(const v1::ChatMessages& chat,
                                       const ChatRenderer* render_chat);

// Converts one GenerateRequest into its n sequences (GenerateRequest.n; 0 means 1), each
// as ToEngineRequest converts it, with index `index` and sample i; when n > 1 sample i
// draws from the request's seed (or the one derived from its id) + i. InvalidArgument
// naming n when it is outside [0, 128] or above `max_sequences`.
absl::StatusOr<std::vector<EngineRequest>> ToEngineSamples(
    const v1::GenerateRequest& req, const Tokenizer& tokenizer, const RequestLimits& limits,
    std::string_view prefix, std::string assigned_id, int32_t index, int64_t max_sequences,
    const ChatRenderer* render_chat = nullptr);

// A token's text for log-probs: its bytes, ill-formed UTF-8 replaced by U+FFFD.
std::string TokenText(const Tokenizer& tokenizer, int32_t id);

// Converts a whole batch; request i gets index i (and its n samples) and id `id_base` +
// "-" + i when it has none. InvalidArgument for an empty batch, more prompts or sequences
// than limits.max_batch_prompts, or any bad request.
absl::StatusOr<std::vector<EngineRequest>> ToEngineRequests(
    const v1::GenerateBatchRequest& req, const Tokenizer& tokenizer, const RequestLimits& limits,
    const std::string& id_base, const ChatRenderer* render_chat = nullptr);

v1::FinishReason ToProto(FinishReason reason);
FinishReason FromProto(v1::FinishReason reason);

// Fills one stream message from an engine output (usage, timing, request_id and
// error_message only on a final one; the prompt's usage on sample 0's only);
// `tokenizer` gives the log-probs' token text.
void ToProto(const EngineOutput& out, const Tokenizer& tokenizer, v1::GenerateResponse* resp);

}  // namespace ptxserve::server
