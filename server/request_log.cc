#include "server/request_log.h"

#include <string>

#include "engine/util/log.h"

namespace ptxserve::server {

void RequestLog::Finished(const EngineOutput& final, std::string_view api,
                          std::string_view peer) const {
  if (!enabled_) return;
  std::vector<LogField> fields = {
      {"id", final.request_id},
      {"api", std::string(api)},
      {"peer", std::string(peer)},
      {"prompt_tokens", int64_t{final.prompt_tokens}},
      {"generated_tokens", int64_t{final.generated_tokens}},
      {"queue_ms", final.queue_seconds * 1e3},
      {"ttft_ms", final.ttft_seconds * 1e3},
      {"total_ms", final.total_seconds * 1e3},
      {"finish", std::string(FinishReasonName(final.finish))},
  };
  if (!final.error.ok()) fields.push_back({"error", std::string(final.error.message())});
  LogEvent(LogLevel::kInfo, __FILE__, __LINE__, "request finished", fields);
}

}  // namespace ptxserve::server
