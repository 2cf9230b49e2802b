// Pure conversions between the public protos (ptxserve.v1) and the engine's structs,
// with the request validation that needs proto field names. No I/O, no globals.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "ptxserve/v1/decode.pb.h"

namespace ptxserve::server {

// What a request is checked against.
struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  int64_t kv_capacity_tokens = 0;
  int32_t default_max_new_tokens = 256;  // when stopping.max_new_tokens is absent
  int32_t max_batch_prompts = 256;       // prompts per GenerateBatch call
  int64_t max_request_bytes = 4 << 20;   // serialized size of one call's request
  size_t max_request_id_bytes = 256;
};

// Converts and validates one GenerateRequest. `prefix` is prepended to field names in
// errors ("requests[3]."); `assigned_id` is used when request_id is empty. The prompt
// text is tokenized with `tokenizer` (BOS as its config says). InvalidArgument naming
// the field on bad input.
absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& req,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, std::string_view prefix,
                                              std::string assigned_id);

// Checks the size of a serialized request (InvalidArgument when over the limit).
absl::Status CheckRequestSize(size_t bytes, const RequestLimits& limits);

// Converts a whole batch; request i gets index i and id `id_base` + "-" + i when it has
// none. InvalidArgument for an empty or too large batch or any bad request.
absl::StatusOr<std::vector<EngineRequest>> ToEngineRequests(const v1::GenerateBatchRequest& req,
                                                            const Tokenizer& tokenizer,
                                                            const RequestLimits& limits,
                                                            const std::string& id_base);

v1::FinishReason ToProto(FinishReason reason);
FinishReason FromProto(v1::FinishReason reason);

// Fills one stream message from an engine output (usage, timing, request_id and
// error_message only on a final one).
void ToProto(const EngineOutput& out, v1::GenerateResponse* resp);

}  // namespace ptxserve::server
