// Minimal leveled logging to stderr (Debian's Abseil predates absl/log).
// Usage: PTX_LOG(INFO) << "loaded " << n << " tensors";
#pragma once

#include <sstream>
#include <string_view>

namespace ptxserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Set once at start-up (flags), read everywhere.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line atomically
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace ptxserve

#define PTX_LOG_LEVEL_DEBUG ::ptxserve::LogLevel::kDebug
#define PTX_LOG_LEVEL_INFO ::ptxserve::LogLevel::kInfo
#define PTX_LOG_LEVEL_WARNING ::ptxserve::LogLevel::kWarning
#define PTX_LOG_LEVEL_ERROR ::ptxserve::LogLevel::kError
#define PTX_LOG(level)                                     \
  if (PTX_LOG_LEVEL_##level < ::ptxserve::MinLogLevel()) { \
  } else                                                   \
    ::ptxserve::LogMessage(PTX_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
