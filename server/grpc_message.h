// Request and response messages of the calls the server handles as raw bytes (the gRPC
// generic API, see decode_service.h): parsing with an error that says what is wrong,
// and serializing.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace ptxserve::server {

// Parses `bytes` into *msg. InvalidArgument naming the message type and, when protobuf
// says it, the reason (e.g. "String field 'ptxserve.v1.GenerateRequest.text' contains
// invalid UTF-8 data"). protobuf's own ERROR line for it is not written.
absl::Status ParseMessage(const grpc::ByteBuffer& bytes, google::protobuf::Message* msg);

// The serialized message.
grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& msg);

// Routes libprotobuf's log lines (written to stderr by default, one per malformed
// message a client sends) to the server's log, at most one line per second. Idempotent.
void RouteProtobufLogs();

}  // namespace ptxserve::server
