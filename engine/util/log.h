// Minimal leveled logging to stderr (Debian's Abseil predates absl/log).
// Usage: PTX_LOG(INFO) << "loaded " << n << " tensors";
// Lines are text ("I 12:00:00.000000 file.cc:12] message") or, with SetLogFormat(kJson),
// one JSON object per line for log collectors.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ptxserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// Messages below this level are dropped. Set once at start-up (flags), read everywhere.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();
// "debug", "info", "warning" or "error"; false for anything else.
bool ParseLogLevel(std::string_view name, LogLevel* level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line atomically
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// One event with named fields: text "message key=value ...", JSON {"msg": message,
// "key": value, ...} (numbers stay numbers). Below MinLogLevel it is dropped.
struct LogField {
  std::string key;
  std::variant<std::string, int64_t, double> value;
};
void LogEvent(LogLevel level, const char* file, int line, std::string_view message,
              const std::vector<LogField>& fields);

// Lets one message through per period and counts what it held back, for logs a client
// could otherwise flood (malformed requests). Thread-safe.
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration period) : period_(period) {}
  // True when a message may be written now; *suppressed is how many were dropped since
  // the last one written.
  bool Allow(int64_t* suppressed);

 private:
  const std::chrono::steady_clock::duration period_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_{};
  int64_t suppressed_ = 0;
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
