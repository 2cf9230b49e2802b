// OpenAI's error object, {"error": {"message", "type", "param", "code"}}, and the HTTP
// status of each refusal.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace ptxserve::server::http {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty = null
};

// A refusal as an ApiError: InvalidArgument is 400 (the param taken from the message when
// it starts with one), ResourceExhausted 429, Unavailable 503, NotFound 404,
// Unauthenticated 401, anything else 500.
ApiError ToApiError(const absl::Status& status);

// {"error": {...}} as an object (an SSE error event) or as a body.
nlohmann::ordered_json ErrorObject(const ApiError& error);
std::string ErrorBody(const ApiError& error);

}  // namespace ptxserve::server::http
