// The process metrics every Prometheus client library exports (unprefixed, standard names):
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds. Read from /proc/self at
// scrape time; Debian's prometheus-cpp has no process collector.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "prometheus/metric_family.h"

namespace ptxserve::server {

struct ProcessStats {
  double cpu_seconds = 0;  // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // Unix time
};

// Parses /proc/self/stat's text given the clock ticks per second, the page size and the
// boot time (Unix seconds, /proc/stat's btime). nullopt when malformed.
std::optional<ProcessStats> ParseProcStat(std::string_view stat, double ticks_per_second,
                                          double page_bytes, double boot_time_seconds);

// The families for this process now; those whose source cannot be read are left out.
std::vector<prometheus::MetricFamily> CollectProcessMetrics();

}  // namespace ptxserve::server
