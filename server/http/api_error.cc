#include "server/http/api_error.h"

#include "absl/strings/string_view.h"

namespace ptxserve::server::http {
namespace {

// Status codes, the HTTP status each maps to, and the OpenAI error type of that status.
struct HttpError {
  absl::StatusCode code;
  int status;
  const char* type;
};
constexpr HttpError kHttpErrors[] = {
    {absl::StatusCode::kInvalidArgument, 400, "invalid_request_error"},
    {absl::StatusCode::kNotFound, 404, "invalid_request_error"},
    {absl::StatusCode::kUnauthenticated, 401, "authentication_error"},
    {absl::StatusCode::kResourceExhausted, 429, "rate_limit_error"},
    {absl::StatusCode::kUnavailable, 503, "service_unavailable_error"},
    {absl::StatusCode::kInternal, 500, "internal_error"},
};

// Any other HTTP status counts as a request error.
const char* ErrorType(int status) {
  for (const HttpError& h : kHttpErrors) {
    if (h.status == status) return h.type;
  }
  return "invalid_request_error";
}

}  // namespace

ApiError ToApiError(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.status = 500;  // any code not listed
  for (const HttpError& h : kHttpErrors) {
    if (h.code == status.code()) e.status = h.status;
  }
  if (e.status == 400 || e.status == 404) {
    // Messages start with the parameter they are about ("top_p must be ...",
    // "messages[1].content must ...", "model: ...").
    const size_t end = e.message.find_first_of(" :");
    const absl::string_view head = absl::string_view(e.message).substr(0, end);
    const bool is_param =
        !head.empty() && head.find_first_not_of("abcdefghijklmnopqrstuvwxyz_0123456789.[]") ==
                             absl::string_view::npos;
    if (is_param) e.param = std::string(head);
  }
  return e;
}

nlohmann::ordered_json ErrorObject(const ApiError& e) {
  using json = nlohmann::ordered_json;
  return {{"error",
           {{"message", e.message},
            {"type", ErrorType(e.status)},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.status}}}};
}

std::string ErrorBody(const ApiError& error) {
  return ErrorObject(error).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ptxserve::server::http
