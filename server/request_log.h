// One log line per finished request (vLLM and TGI users grep for them): its id, the API
// and peer it came from, prompt and generated tokens, queue time, time to first token,
// total time and how it finished. Text or JSON as the log format says (engine/util/log.h).
#pragma once

#include <string_view>

#include "engine/engine_io.h"

namespace ptxserve::server {

class RequestLog {
 public:
  explicit RequestLog(bool enabled) : enabled_(enabled) {}
  // `final` is a request's final output; `api` "grpc" or "http"; `peer` the client's address.
  void Finished(const EngineOutput& final, std::string_view api, std::string_view peer) const;

 private:
  const bool enabled_;
};

}  // namespace ptxserve::server
