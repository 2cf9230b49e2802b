#include "engine/util/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <string>

#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

std::atomic<LogLevel> g_min_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

constexpr const char* kLevelNames[] = {"debug", "info", "warning", "error"};

// "12:00:00.000000" (text) or "2026-11-23T12:00:00.000000Z" (JSON), UTC.
std::string Timestamp(bool with_date) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[48];
  if (with_date) {
    std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(micros));
  } else {
    std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%06lld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(micros));
  }
  return stamp;
}

std::string_view BaseName(const char* file) {
  std::string_view path(file);
  if (auto slash = path.rfind('/'); slash != std::string_view::npos) path.remove_prefix(slash + 1);
  return path;
}

// One write per line, so lines from different threads never interleave.
void WriteLine(std::string line) {
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string TextPrefix(LogLevel level, const char* file, int line) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  std::string s(1, kLetters[static_cast<int>(level)]);
  s += ' ';
  s += Timestamp(false);
  s += ' ';
  s += BaseName(file);
  s += ':';
  s += std::to_string(line);
  s += "] ";
  return s;
}

nlohmann::ordered_json JsonHead(LogLevel level, const char* file, int line,
                                std::string_view message) {
  nlohmann::ordered_json j;
  j["time"] = Timestamp(true);
  j["level"] = kLevelNames[static_cast<int>(level)];
  j["source"] = std::string(BaseName(file)) + ":" + std::to_string(line);
  j["msg"] = message;
  return j;
}

std::string Dump(const nlohmann::ordered_json& j) {
  // Replace, never throw, on ill-formed UTF-8 in a message.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(level); }
LogLevel MinLogLevel() { return g_min_level.load(std::memory_order_relaxed); }
void SetLogFormat(LogFormat format) { g_format.store(format); }
LogFormat GetLogFormat() { return g_format.load(std::memory_order_relaxed); }

bool ParseLogLevel(std::string_view name, LogLevel* level) {
  for (int i = 0; i < 4; ++i) {
    if (name == kLevelNames[i]) {
      *level = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level), file_(file), line_(line) {}

LogMessage::~LogMessage() {
  if (GetLogFormat() == LogFormat::kJson) {
    WriteLine(Dump(JsonHead(level_, file_, line_, stream_.str())));
  } else {
    WriteLine(TextPrefix(level_, file_, line_) + stream_.str());
  }
}

void LogEvent(LogLevel level, const char* file, int line, std::string_view message,
              const std::vector<LogField>& fields) {
  if (level < MinLogLevel()) return;
  if (GetLogFormat() == LogFormat::kJson) {
    nlohmann::ordered_json j = JsonHead(level, file, line, message);
    for (const LogField& f : fields) {
      std::visit([&](const auto& v) { j[f.key] = v; }, f.value);
    }
    WriteLine(Dump(j));
    return;
  }
  std::string s = TextPrefix(level, file, line);
  s += message;
  for (const LogField& f : fields) {
    s += ' ';
    s += f.key;
    s += '=';
    if (const auto* str = std::get_if<std::string>(&f.value)) {
      // Quoted when it could be misread (spaces, quotes, empty).
      const bool plain = !str->empty() && str->find_first_of(" \"=\t\n") == std::string::npos;
      s += plain ? *str : Dump(nlohmann::ordered_json(*str));
    } else if (const auto* i = std::get_if<int64_t>(&f.value)) {
      s += std::to_string(*i);
    } else {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.6g", std::get<double>(f.value));
      s += buf;
    }
  }
  WriteLine(std::move(s));
}

bool LogThrottle::Allow(int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) {
    ++suppressed_;
    return false;
  }
  next_ = now + period_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace ptxserve
