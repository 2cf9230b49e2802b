#include "server/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/util/file.h"

namespace ptxserve::server {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

std::optional<double> BootTimeSeconds() {
  auto text = ReadFileToString("/proc/stat");
  if (!text.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    double btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &btime)) return btime;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProcessStats> ParseProcStat(std::string_view stat, double ticks_per_second,
                                          double page_bytes, double boot_time_seconds) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields
  // start after the last ')'. Counting from state as field 3 (proc(5)): utime 14,
  // stime 15, starttime 22, vsize 23, rss 24.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(
      absl::string_view(stat.data() + close + 1, stat.size() - close - 1), ' ', absl::SkipEmpty());
  auto field = [&](size_t n, double* out) {  // n as numbered in proc(5)
    return n - 3 < f.size() && absl::SimpleAtod(f[n - 3], out);
  };
  double utime, stime, start, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start) || !field(23, &vsize) ||
      !field(24, &rss)) {
    return std::nullopt;
  }
  ProcessStats s;
  s.cpu_seconds = (utime + stime) / ticks_per_second;
  s.start_time_seconds = boot_time_seconds + start / ticks_per_second;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * page_bytes;
  return s;
}

std::vector<prometheus::MetricFamily> CollectProcessMetrics() {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  auto stat = ReadFileToString("/proc/self/stat");
  const std::optional<double> boot = BootTimeSeconds();
  if (stat.ok() && boot) {
    if (auto s = ParseProcStat(*stat, static_cast<double>(sysconf(_SC_CLK_TCK)),
                               static_cast<double>(sysconf(_SC_PAGESIZE)), *boot)) {
      out.push_back(Family("process_cpu_seconds_total",
                           "Total user and system CPU time spent in seconds.", MetricType::Counter,
                           s->cpu_seconds));
      out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                           MetricType::Gauge, s->resident_bytes));
      out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                           MetricType::Gauge, s->virtual_bytes));
      out.push_back(Family("process_start_time_seconds",
                           "Start time of the process since unix epoch in seconds.",
                           MetricType::Gauge, s->start_time_seconds));
    }
  }
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    out.push_back(
        Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, fds));
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                         MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return out;
}

}  // namespace ptxserve::server
