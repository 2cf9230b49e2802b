// How much memory the host can still give: what a host-side KV cache is checked against
// before it is allocated (a too-large one would otherwise run the machine out of memory
// until the kernel kills the server).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ptxserve {

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<int64_t> AvailableHostMemoryBytes();
// The same, parsed from the text of a meminfo file (tests).
std::optional<int64_t> ParseMemAvailable(std::string_view meminfo);

}  // namespace ptxserve
