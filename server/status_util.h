// The one place where absl::Status codes become gRPC status codes.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ptxserve::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
// "INVALID_ARGUMENT", "UNAVAILABLE", ...
const char* GrpcCodeName(grpc::StatusCode code);
// Same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ptxserve::server
