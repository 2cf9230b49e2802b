#include "server/http/api_error.h"

#include "absl/strings/string_view.h"

namespace ptxserve::server::http {
namespace {

const char* ErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 500:
      return "internal_error";
    default:
      return "invalid_request_error";
  }
}

}  // namespace

ApiError ToApiError(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = 429;
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      break;
    default:
      e.status = 500;
      break;
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
