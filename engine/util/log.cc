#include "engine/util/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace ptxserve {
namespace {
std::atomic<LogLevel> g_min_level{LogLevel::kInfo};
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(level); }
LogLevel MinLogLevel() { return g_min_level.load(std::memory_order_relaxed); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%06lld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros));
  std::string_view path(file);
  if (auto slash = path.rfind('/'); slash != std::string_view::npos) path.remove_prefix(slash + 1);
  stream_ << kLetters[static_cast<int>(level_)] << ' ' << stamp << ' ' << path << ':' << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string s = stream_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace ptxserve
