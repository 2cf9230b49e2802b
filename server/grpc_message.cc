#include "server/grpc_message.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <mutex>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/util/log.h"
#include "google/protobuf/stubs/logging.h"

namespace ptxserve::server {
namespace {

// Set while this thread parses a message: protobuf's complaint goes into the error.
thread_local std::string* t_parse_complaint = nullptr;

void OnProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                   const std::string& message) {
  if (t_parse_complaint != nullptr) {
    if (t_parse_complaint->empty()) {
      *t_parse_complaint = std::string(absl::StripAsciiWhitespace(message));
    }
    return;
  }
  static LogThrottle throttle(std::chrono::seconds(1));
  int64_t suppressed = 0;
  if (!throttle.Allow(&suppressed)) return;
  LogEvent(level >= google::protobuf::LOGLEVEL_ERROR ? LogLevel::kError : LogLevel::kWarning, file,
           line, absl::StrCat("libprotobuf: ", message), {{"suppressed", suppressed}});
}

}  // namespace

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, google::protobuf::Message* msg) {
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&copy);
  std::string complaint;
  t_parse_complaint = &complaint;
  const bool ok = msg->ParseFromZeroCopyStream(&reader);
  t_parse_complaint = nullptr;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the request is not a valid ", msg->GetTypeName(), " message (", bytes.Length(), " bytes)",
      complaint.empty() ? ": malformed protobuf encoding" : absl::StrCat(": ", complaint)));
}

grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& msg) {
  grpc::ByteBuffer out;
  bool own = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(msg, &out, &own);
  return out;
}

void RouteProtobufLogs() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&OnProtobufLog); });
}

}  // namespace ptxserve::server
