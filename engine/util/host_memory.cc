#include "engine/util/host_memory.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/util/file.h"

namespace ptxserve {

std::optional<int64_t> ParseMemAvailable(std::string_view meminfo) {
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(meminfo.data(), meminfo.size()), '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return std::nullopt;
    int64_t kib = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) || kib < 0) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> AvailableHostMemoryBytes() {
  auto text = ReadFileToString("/proc/meminfo");
  if (!text.ok()) return std::nullopt;
  return ParseMemAvailable(*text);
}

}  // namespace ptxserve
